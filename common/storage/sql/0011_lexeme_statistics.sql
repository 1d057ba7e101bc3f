-- Lexeme statistics of the chunks table for BM25 ranking (common/storage/chunks/lexical_scoring.py): per namespace,
-- for every lexeme of search_document, the number of chunks holding it; and per namespace (lexeme '', which
-- no tsvector holds) the number of chunks and the sum of their lengths (distinct lexemes, length(tsvector)).
--
-- Kept by statement-level triggers on the chunks table, so every write path (Retain, PutChunks, episode
-- chunks, deletes, set-based writers) maintains them without code of its own. A writer never updates a
-- shared row: it only appends its statement's changes to {chunk_term_deltas} (no conflicts, no lock waits
-- between concurrent writers of one namespace, no lock-order deadlocks). Now and then (one statement in
-- 16) a writer folds the committed deltas of its namespaces into {chunk_terms}, only when it gets the
-- namespace's advisory lock at once (pg_try_advisory_xact_lock, never waiting); a reader sums both tables.
CREATE TABLE IF NOT EXISTS {chunk_terms} (
    namespace  text NOT NULL,
    lexeme     text NOT NULL,
    documents  bigint NOT NULL,
    lengths    bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (namespace, lexeme)
);
CREATE TABLE IF NOT EXISTS {chunk_term_deltas} (
    namespace  text NOT NULL,
    lexeme     text NOT NULL,
    documents  bigint NOT NULL,
    lengths    bigint NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS {chunk_term_deltas_idx} ON {chunk_term_deltas} (namespace, lexeme);

-- Appends the changes of one statement (each changed row's namespace, search_document and +1 for a new
-- row or -1 for a removed one) to {chunk_term_deltas}; with probability 1/16 then folds the committed
-- deltas of those namespaces whose advisory lock it gets at once.
CREATE OR REPLACE FUNCTION {chunk_terms_record}(changed_namespaces text[], changed_documents tsvector[], changed_signs integer[])
RETURNS void LANGUAGE plpgsql AS $body$
DECLARE
    folded text;
BEGIN
    INSERT INTO {chunk_term_deltas} (namespace, lexeme, documents, lengths)
    SELECT namespace, lexeme, sum(documents), sum(lengths)
    FROM (
        SELECT c.namespace, t.lexeme, c.sign AS documents, 0 AS lengths
        FROM unnest(changed_namespaces, changed_documents, changed_signs) AS c(namespace, search_document, sign),
            unnest(tsvector_to_array(c.search_document)) AS t(lexeme)
        UNION ALL
        SELECT c.namespace, '', c.sign, c.sign * length(c.search_document)
        FROM unnest(changed_namespaces, changed_documents, changed_signs) AS c(namespace, search_document, sign)
    ) AS change
    GROUP BY namespace, lexeme
    HAVING sum(documents) <> 0 OR sum(lengths) <> 0;
    IF random() >= 0.0625 THEN
        RETURN;
    END IF;
    FOR folded IN SELECT DISTINCT n FROM unnest(changed_namespaces) AS n ORDER BY 1 LOOP
        IF pg_try_advisory_xact_lock(1952805748, hashtext(folded)) THEN
            WITH moved AS (
                DELETE FROM {chunk_term_deltas} WHERE namespace = folded RETURNING lexeme, documents, lengths
            )
            INSERT INTO {chunk_terms} AS s (namespace, lexeme, documents, lengths)
            SELECT folded, lexeme, sum(documents), sum(lengths) FROM moved GROUP BY lexeme ORDER BY lexeme
            ON CONFLICT (namespace, lexeme) DO UPDATE
            SET documents = s.documents + excluded.documents, lengths = s.lengths + excluded.lengths;
            DELETE FROM {chunk_terms} WHERE namespace = folded AND documents = 0 AND lengths = 0;
        END IF;
    END LOOP;
END
$body$;

-- The trigger function of the three statement-level triggers below (transition tables new_rows/old_rows;
-- an update counts only rows whose namespace or search_document changed).
CREATE OR REPLACE FUNCTION {chunk_terms_function}() RETURNS trigger LANGUAGE plpgsql AS $body$
BEGIN
    IF TG_OP = 'INSERT' THEN
        PERFORM {chunk_terms_record}(array_agg(namespace), array_agg(search_document), array_agg(1))
        FROM new_rows HAVING count(*) > 0;
    ELSIF TG_OP = 'DELETE' THEN
        PERFORM {chunk_terms_record}(array_agg(namespace), array_agg(search_document), array_agg(-1))
        FROM old_rows HAVING count(*) > 0;
    ELSE
        PERFORM {chunk_terms_record}(array_agg(c.namespace), array_agg(c.search_document), array_agg(c.sign))
        FROM old_rows AS o JOIN new_rows AS n ON n.id = o.id,
            LATERAL (VALUES (o.namespace, o.search_document, -1), (n.namespace, n.search_document, 1))
                AS c(namespace, search_document, sign)
        WHERE (o.namespace, o.search_document) IS DISTINCT FROM (n.namespace, n.search_document)
        HAVING count(*) > 0;
    END IF;
    RETURN NULL;
END
$body$;

-- Triggers with transition tables take one event each. Creating them locks out writers until this
-- migration commits, so the backfill below sees every row no trigger counts.
DROP TRIGGER IF EXISTS {chunk_terms_insert_trigger} ON {chunks};
CREATE TRIGGER {chunk_terms_insert_trigger} AFTER INSERT ON {chunks}
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION {chunk_terms_function}();
DROP TRIGGER IF EXISTS {chunk_terms_update_trigger} ON {chunks};
CREATE TRIGGER {chunk_terms_update_trigger} AFTER UPDATE ON {chunks}
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT
    EXECUTE FUNCTION {chunk_terms_function}();
DROP TRIGGER IF EXISTS {chunk_terms_delete_trigger} ON {chunks};
CREATE TRIGGER {chunk_terms_delete_trigger} AFTER DELETE ON {chunks}
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION {chunk_terms_function}();

DELETE FROM {chunk_terms};
DELETE FROM {chunk_term_deltas};
INSERT INTO {chunk_terms} (namespace, lexeme, documents, lengths)
SELECT namespace, lexeme, count(*), 0
FROM {chunks}, unnest(tsvector_to_array(search_document)) AS t(lexeme)
GROUP BY namespace, lexeme;
INSERT INTO {chunk_terms} (namespace, lexeme, documents, lengths)
SELECT namespace, '', count(*), coalesce(sum(length(search_document)), 0) FROM {chunks} GROUP BY namespace;
