-- Static SQL of the chunks table (common/storage/chunk_store.py, chunk_rankings.py). Loaded by
-- common/storage/named_queries.py; see there for the placeholders ({chunks}, ...) and parameters. Reads
-- that take a caller's visibility predicate and the three rankings (optional filters) are composed in
-- Python.

-- name: chunk_embeddings_of_node
-- Title, heading, text and stored embedding (NULL: stored without one) of every chunk of a node
-- (parameters: namespace, node key).
SELECT title, heading, text, embedding FROM {chunks} WHERE namespace = %s AND node_key = %s

-- name: upsert_chunk
-- Inserts one chunk or updates the stored one of (namespace, node_key, chunk_order); a row whose columns
-- and embedding are already equal is left untouched (no new row version), so its row count is 0.
INSERT INTO {chunks} AS c (
    namespace, node_key, chunk_order, node_type, source_path, title, heading, text, embedding, meta, seen_run
) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (namespace, node_key, chunk_order) DO UPDATE SET
    node_type = excluded.node_type, source_path = excluded.source_path, title = excluded.title,
    heading = excluded.heading, text = excluded.text, embedding = excluded.embedding, meta = excluded.meta,
    seen_run = excluded.seen_run
WHERE (c.node_type, c.source_path, c.title, c.heading, c.text, c.meta, c.seen_run)
    IS DISTINCT FROM (excluded.node_type, excluded.source_path, excluded.title, excluded.heading,
        excluded.text, excluded.meta, excluded.seen_run)
    OR c.embedding IS DISTINCT FROM excluded.embedding

-- name: delete_chunks_from_order
-- Deletes the chunks of a node whose order is at least the given one (parameters: namespace, node key,
-- first order to delete).
DELETE FROM {chunks} WHERE namespace = %s AND node_key = %s AND chunk_order >= %s

-- name: delete_chunks_of_node
-- Deletes every chunk of a node (parameters: namespace, node key).
DELETE FROM {chunks} WHERE namespace = %s AND node_key = %s

-- name: lexeme_statistics
-- BM25 statistics of a query in a namespace (common/storage/lexical_scoring.py; tables of
-- sql/0011_lexeme_statistics.sql): each distinct lexeme of the query under the configuration, and the
-- namespace totals row (lexeme ''), with the number of chunks holding it and (totals row) their summed
-- lengths; folded rows and not yet folded deltas added up (parameters: config, query, namespace).
WITH query AS MATERIALIZED (
    SELECT DISTINCT lexeme FROM unnest(to_tsvector(%(config)s::regconfig, %(query)s)) UNION SELECT ''
)
SELECT query.lexeme, coalesce(sum(counted.documents), 0)::bigint AS documents,
    coalesce(sum(counted.lengths), 0)::bigint AS lengths
FROM query LEFT JOIN (
    SELECT lexeme, documents, lengths FROM {chunk_terms}
    WHERE namespace = %(namespace)s AND lexeme = ANY(ARRAY(SELECT lexeme FROM query))
    UNION ALL
    SELECT lexeme, documents, lengths FROM {chunk_term_deltas}
    WHERE namespace = %(namespace)s AND lexeme = ANY(ARRAY(SELECT lexeme FROM query))
) AS counted USING (lexeme)
GROUP BY query.lexeme
