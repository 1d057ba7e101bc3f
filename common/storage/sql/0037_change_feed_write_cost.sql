-- The change feed's write cost (docs/how-to/change-feed.md, "What the feed costs"). The events of
-- migration 0034 stay the same (types, keys, order, scopes, payloads, cursors numbered at commit under the
-- namespace's row of change_feed_heads); how they are written changes in three ways.
--
-- 1. fact.conflict_flagged looks up the other facts of the new fact's subject and predicate. plpgsql plans
--    a trigger's statements on their first call in a session and keeps the plans; on the empty tables of a
--    new database 0034's look-up was planned through facts_predicate_idx and then walked every fact of the
--    namespace with that predicate for every inserted fact, mentions included (quadratic in the
--    namespace's size). Here it reads the subject's facts: (namespace, subject_key) are the leading
--    columns of facts_subject_idx only, so that index wins on any estimate (OFFSET 0 keeps the predicate
--    test out of the index choice), and a CASE runs it only for facts that can conflict.
-- 2. An UPDATE's events join the statement's old and new rows. Planned on a first call that updated no row
--    (a statement trigger fires for every statement), the join stayed a nested loop over the two
--    transition tables, quadratic in the statement's rows. The trigger functions plan without nested
--    loops (SET enable_nestloop = off), so the join is hashed whatever the first call saw; the lateral
--    lists of event types, which only a nested loop can run, stay nested loops. Their plans' costs then
--    carry the planner's penalty for a disabled node, which would make PostgreSQL JIT-compile every
--    trigger statement (jit_above_cost): SET jit = off (a trigger statement's work is far too small).
--    The fact events' payload function is STABLE (what jsonb_build_object is): declared IMMUTABLE, it was
--    not inlined and ran as a function call per event.
-- 3. 0034 inserted every event with cursor NULL and updated it when numbering (a second heap tuple, its
--    index entries and a dead row per event). Now the events of a transaction wait in a temporary table
--    of the session (change_feed_staged: no WAL, no index, emptied at every commit) and the numbering at
--    commit inserts them into change_events once, numbered, in the order they were staged. A rolled-back
--    statement or savepoint takes its staged events with it, as before. A writing session creates the
--    table on its first event (the TEMPORARY privilege on the database, which PUBLIC holds by default).

-- Creates this session's staging table when it has none (temporary tables live per session).
CREATE OR REPLACE FUNCTION change_feed_stage() RETURNS void LANGUAGE plpgsql AS $body$
BEGIN
    IF to_regclass('pg_temp.change_feed_staged') IS NULL THEN
        CREATE TEMPORARY TABLE change_feed_staged (
            ordinal      bigint GENERATED ALWAYS AS IDENTITY,
            namespace    text NOT NULL,
            event_type   text NOT NULL,
            item_key     text NOT NULL,
            subject_key  text,
            predicate    text,
            object_key   text,
            scopes       text[] NOT NULL DEFAULT ARRAY[]::text[],
            payload      jsonb NOT NULL DEFAULT jsonb_build_object()
        ) ON COMMIT DELETE ROWS;
    END IF;
END
$body$;

-- The numbering at commit (0034's rule): per namespace in sorted order, take the transaction's count of
-- cursors from change_feed_heads (the row stays locked to the end of the commit) and insert the staged
-- events with them, in the order they were staged. The commit then empties the staging table.
CREATE OR REPLACE FUNCTION change_feed_number() RETURNS trigger LANGUAGE plpgsql AS $body$
DECLARE
    ns text;
    n bigint;
    top bigint;
BEGIN
    IF to_regclass('pg_temp.change_feed_staged') IS NOT NULL THEN
        FOR ns, n IN
            SELECT namespace, count(*) FROM pg_temp.change_feed_staged GROUP BY namespace ORDER BY namespace
        LOOP
            INSERT INTO change_feed_heads AS h (namespace, last_cursor) VALUES (ns, n)
            ON CONFLICT (namespace) DO UPDATE SET last_cursor = h.last_cursor + excluded.last_cursor
            RETURNING last_cursor INTO top;
            INSERT INTO change_events (namespace, cursor, event_type, item_key, subject_key, predicate,
                object_key, scopes, payload, committed_at)
            SELECT s.namespace, top - n + row_number() OVER (ORDER BY s.ordinal), s.event_type, s.item_key,
                s.subject_key, s.predicate, s.object_key, s.scopes, s.payload, clock_timestamp()
            FROM pg_temp.change_feed_staged AS s WHERE s.namespace = ns ORDER BY s.ordinal;
            PERFORM pg_notify('memory_change_feed', ns);
        END LOOP;
        -- Numbered: a second numbering in this transaction (SET CONSTRAINTS ALL IMMEDIATE) finds none.
        DELETE FROM pg_temp.change_feed_staged;
    END IF;
    DELETE FROM change_feed_pending WHERE txid = NEW.txid;
    RETURN NULL;
END
$body$;

-- No event is inserted with cursor NULL any more.
DROP INDEX IF EXISTS change_events_pending_idx;

-- observations: recorded (insert), redacted (status becomes 'redacted'), purged (delete).
CREATE OR REPLACE FUNCTION change_feed_observations() RETURNS trigger LANGUAGE plpgsql
    SET enable_nestloop = off SET jit = off AS $body$
DECLARE
    written bigint;
BEGIN
    IF NOT change_feed_enabled() THEN
        RETURN NULL;
    END IF;
    PERFORM change_feed_stage();
    IF TG_OP = 'INSERT' THEN
        INSERT INTO pg_temp.change_feed_staged (namespace, event_type, item_key, subject_key, scopes, payload)
        SELECT n.namespace, 'observation.recorded', n.observation_id, (n.subject ->> 'type') || ':' || (n.subject ->> 'id'), n.scopes,
            jsonb_build_object('kind', n.kind, 'occurred_at', n.occurred_at, 'source_system', n.source_system,
                'source_stream', n.source_stream, 'actor', n.actor, 'subject', n.subject,
                'content', n.content, 'data', n.data, 'status', n.status)
        FROM new_rows AS n ORDER BY n.recorded_order;
    ELSIF TG_OP = 'UPDATE' THEN
        INSERT INTO pg_temp.change_feed_staged (namespace, event_type, item_key, subject_key, scopes, payload)
        SELECT n.namespace, 'observation.redacted', n.observation_id, (n.subject ->> 'type') || ':' || (n.subject ->> 'id'), n.scopes,
            jsonb_build_object('kind', n.kind, 'reason', n.status_detail -> 'reason')
        FROM old_rows AS o JOIN new_rows AS n USING (observation_id)
        WHERE n.status = 'redacted' AND o.status IS DISTINCT FROM 'redacted'
        ORDER BY n.observation_id;
    ELSE
        INSERT INTO pg_temp.change_feed_staged (namespace, event_type, item_key, subject_key, scopes, payload)
        SELECT o.namespace, 'observation.purged', o.observation_id, (o.subject ->> 'type') || ':' || (o.subject ->> 'id'), o.scopes,
            jsonb_build_object('kind', o.kind)
        FROM old_rows AS o ORDER BY o.observation_id;
    END IF;
    GET DIAGNOSTICS written = ROW_COUNT;
    IF written > 0 THEN
        PERFORM change_feed_mark();
    END IF;
    RETURN NULL;
END
$body$;

-- The payload of a fact event (0034's), STABLE so that the planner inlines it into the statements.
CREATE OR REPLACE FUNCTION change_feed_fact_payload(f {facts}) RETURNS jsonb LANGUAGE sql STABLE AS $body$
    SELECT jsonb_build_object('fact_id', f.fact_id, 'subject', f.subject_key, 'predicate', f.predicate,
        'object', f.object_key, 'valid_from', f.valid_from, 'valid_to', f.valid_to,
        'evidence', f.evidence, 'confidence', f.confidence, 'observation_ids', to_jsonb(f.observation_ids),
        'supersedes', f.supersedes, 'superseded_by', f.superseded_by, 'evidence_lost', f.evidence_lost,
        'origin', f.origin, 'attributes', f.attributes)
$body$;

-- facts: created (insert; conflict_flagged too when it overlaps another live fact of its subject and
-- predicate with another object, the rule of FactStore.conflicting_ids, its own predecessor or successor
-- left aside), superseded, evidence_lost,
-- closed, strengthened (update, in that order of precedence), deleted (DeleteNode).
CREATE OR REPLACE FUNCTION change_feed_facts() RETURNS trigger LANGUAGE plpgsql
    SET enable_nestloop = off SET jit = off AS $body$
DECLARE
    written bigint;
BEGIN
    IF NOT change_feed_enabled() THEN
        RETURN NULL;
    END IF;
    PERFORM change_feed_stage();
    IF TG_OP = 'INSERT' THEN
        INSERT INTO pg_temp.change_feed_staged (namespace, event_type, item_key, subject_key, predicate, object_key, scopes, payload)
        SELECT n.namespace, e.event_type, n.fact_id, n.subject_key, n.predicate, n.object_key, n.scopes,
            change_feed_fact_payload(n)
        FROM new_rows AS n,
            LATERAL (
                SELECT 'fact.created' AS event_type, 0 AS step
                UNION ALL
                -- The rule of FactStore.conflicting_ids, read from the subject's facts (see the top of this
                -- file); a mention or a fact without evidence never conflicts.
                SELECT 'fact.conflict_flagged', 1
                WHERE CASE WHEN n.predicate = 'MENTIONS' OR n.evidence_lost THEN false ELSE EXISTS (
                    SELECT 1
                    FROM (
                        SELECT b.fact_id, b.predicate, b.object_key, b.evidence_lost, b.supersedes, b.valid_from,
                            b.valid_to
                        FROM {facts} AS b
                        WHERE b.namespace = n.namespace AND b.subject_key = n.subject_key
                        OFFSET 0
                    ) AS b
                    WHERE b.predicate = n.predicate AND b.fact_id <> n.fact_id
                        AND b.object_key <> n.object_key AND NOT b.evidence_lost
                        -- its predecessor or successor: closed by the supersession right after
                        AND b.fact_id IS DISTINCT FROM n.supersedes AND b.supersedes IS DISTINCT FROM n.fact_id
                        AND b.valid_from < coalesce(n.valid_to, 'infinity')
                        AND n.valid_from < coalesce(b.valid_to, 'infinity')) END
            ) AS e
        ORDER BY n.fact_id, e.step;
    ELSIF TG_OP = 'UPDATE' THEN
        INSERT INTO pg_temp.change_feed_staged (namespace, event_type, item_key, subject_key, predicate, object_key, scopes, payload)
        SELECT n.namespace, c.event_type, n.fact_id, n.subject_key, n.predicate, n.object_key, n.scopes,
            change_feed_fact_payload(n)
        FROM old_rows AS o JOIN new_rows AS n USING (fact_id),
            LATERAL (SELECT CASE
                WHEN o.superseded_by IS NULL AND n.superseded_by IS NOT NULL THEN 'fact.superseded'
                WHEN n.evidence_lost AND NOT o.evidence_lost THEN 'fact.evidence_lost'
                WHEN n.valid_to IS NOT NULL AND n.valid_to IS DISTINCT FROM o.valid_to THEN 'fact.closed'
                WHEN NOT (n.observation_ids <@ o.observation_ids) OR n.confidence > o.confidence
                    THEN 'fact.strengthened'
            END AS event_type) AS c
        WHERE c.event_type IS NOT NULL
        ORDER BY n.fact_id;
    ELSE
        INSERT INTO pg_temp.change_feed_staged (namespace, event_type, item_key, subject_key, predicate, object_key, scopes, payload)
        SELECT o.namespace, 'fact.deleted', o.fact_id, o.subject_key, o.predicate, o.object_key, o.scopes,
            change_feed_fact_payload(o)
        FROM old_rows AS o ORDER BY o.fact_id;
    END IF;
    GET DIAGNOSTICS written = ROW_COUNT;
    IF written > 0 THEN
        PERFORM change_feed_mark();
    END IF;
    RETURN NULL;
END
$body$;

-- graph_nodes: upserted (insert, or an update of what the node holds: properties, scopes, type,
-- placeholder state; not the last_seen of a mention), deleted. Memory nodes have their own events.
CREATE OR REPLACE FUNCTION change_feed_nodes() RETURNS trigger LANGUAGE plpgsql
    SET enable_nestloop = off SET jit = off AS $body$
DECLARE
    written bigint;
BEGIN
    IF NOT change_feed_enabled() THEN
        RETURN NULL;
    END IF;
    PERFORM change_feed_stage();
    IF TG_OP = 'INSERT' THEN
        INSERT INTO pg_temp.change_feed_staged (namespace, event_type, item_key, subject_key, scopes, payload)
        SELECT n.namespace, 'node.upserted', n.natural_key, n.natural_key, n.scopes,
            jsonb_build_object('node_type', n.node_type, 'label', n.label, 'placeholder', n.placeholder,
                'origin', n.origin, 'created', true)
        FROM new_rows AS n WHERE n.node_type <> 'memory' ORDER BY n.natural_key;
    ELSIF TG_OP = 'UPDATE' THEN
        INSERT INTO pg_temp.change_feed_staged (namespace, event_type, item_key, subject_key, scopes, payload)
        SELECT n.namespace, 'node.upserted', n.natural_key, n.natural_key, n.scopes,
            jsonb_build_object('node_type', n.node_type, 'label', n.label, 'placeholder', n.placeholder,
                'origin', n.origin, 'created', false)
        FROM old_rows AS o JOIN new_rows AS n USING (namespace, natural_key)
        WHERE n.node_type <> 'memory'
            AND (o.props_hash, o.scopes, o.node_type, o.label, o.placeholder, o.origin)
                IS DISTINCT FROM (n.props_hash, n.scopes, n.node_type, n.label, n.placeholder, n.origin)
        ORDER BY n.natural_key;
    ELSE
        INSERT INTO pg_temp.change_feed_staged (namespace, event_type, item_key, subject_key, scopes, payload)
        SELECT o.namespace, 'node.deleted', o.natural_key, o.natural_key, o.scopes,
            jsonb_build_object('node_type', o.node_type, 'label', o.label, 'origin', o.origin)
        FROM old_rows AS o WHERE o.node_type <> 'memory' ORDER BY o.natural_key;
    END IF;
    GET DIAGNOSTICS written = ROW_COUNT;
    IF written > 0 THEN
        PERFORM change_feed_mark();
    END IF;
    RETURN NULL;
END
$body$;

-- vault_documents: a row deleted is a document the vault swept (its node's deletion has its own event).
CREATE OR REPLACE FUNCTION change_feed_vault_documents() RETURNS trigger LANGUAGE plpgsql AS $body$
DECLARE
    written bigint;
BEGIN
    IF NOT change_feed_enabled() THEN
        RETURN NULL;
    END IF;
    PERFORM change_feed_stage();
    INSERT INTO pg_temp.change_feed_staged (namespace, event_type, item_key, subject_key, scopes, payload)
    SELECT o.namespace, 'document.swept', o.natural_key, o.natural_key,
        coalesce((SELECT g.scopes FROM {graph_nodes} AS g
                  WHERE g.namespace = o.namespace AND g.natural_key = o.natural_key), ARRAY[]::text[]),
        jsonb_build_object('source_path', o.source_path, 'seen_run', o.seen_run)
    FROM old_rows AS o ORDER BY o.natural_key;
    GET DIAGNOSTICS written = ROW_COUNT;
    IF written > 0 THEN
        PERFORM change_feed_mark();
    END IF;
    RETURN NULL;
END
$body$;

-- vault_runs: a run left 'running' (completed, interrupted, failed).
CREATE OR REPLACE FUNCTION change_feed_vault_runs() RETURNS trigger LANGUAGE plpgsql
    SET enable_nestloop = off SET jit = off AS $body$
DECLARE
    written bigint;
BEGIN
    IF NOT change_feed_enabled() THEN
        RETURN NULL;
    END IF;
    PERFORM change_feed_stage();
    INSERT INTO pg_temp.change_feed_staged (namespace, event_type, item_key, scopes, payload)
    SELECT n.namespace, 'vault.run_finished', n.run_id, ARRAY[]::text[],
        jsonb_build_object('status', n.status, 'source', n.source, 'branch', n.branch,
            'commit_sha', n.commit_sha, 'started_at', n.started_at, 'finished_at', n.finished_at,
            'report', n.report)
    FROM old_rows AS o JOIN new_rows AS n USING (run_id)
    WHERE o.status = 'running' AND n.status <> 'running'
    ORDER BY n.run_id;
    GET DIAGNOSTICS written = ROW_COUNT;
    IF written > 0 THEN
        PERFORM change_feed_mark();
    END IF;
    RETURN NULL;
END
$body$;

-- snapshots: a reconciliation ends by writing the snapshot's counts.
CREATE OR REPLACE FUNCTION change_feed_snapshots() RETURNS trigger LANGUAGE plpgsql
    SET enable_nestloop = off SET jit = off AS $body$
DECLARE
    written bigint;
BEGIN
    IF NOT change_feed_enabled() THEN
        RETURN NULL;
    END IF;
    PERFORM change_feed_stage();
    INSERT INTO pg_temp.change_feed_staged (namespace, event_type, item_key, scopes, payload)
    SELECT n.namespace, 'snapshot.reconciled', n.source || '/' || n.scope || '/' || n.snapshot_id,
        ARRAY[n.scope],
        jsonb_build_object('source', n.source, 'scope', n.scope, 'snapshot_id', n.snapshot_id,
            'snapshot_time', n.snapshot_time, 'counts', n.counts)
    FROM old_rows AS o JOIN new_rows AS n USING (id)
    WHERE n.counts IS DISTINCT FROM o.counts
    ORDER BY n.id;
    GET DIAGNOSTICS written = ROW_COUNT;
    IF written > 0 THEN
        PERFORM change_feed_mark();
    END IF;
    RETURN NULL;
END
$body$;

-- memories: added, updated (text or semantic fields: version; hidden by a summary), enriched, tier
-- changed, expired (deleted past expires_at), deleted. Recall bookkeeping (last_used_at) is no event.
CREATE OR REPLACE FUNCTION change_feed_memories() RETURNS trigger LANGUAGE plpgsql
    SET enable_nestloop = off SET jit = off AS $body$
DECLARE
    written bigint;
BEGIN
    IF NOT change_feed_enabled() THEN
        RETURN NULL;
    END IF;
    PERFORM change_feed_stage();
    IF TG_OP = 'INSERT' THEN
        INSERT INTO pg_temp.change_feed_staged (namespace, event_type, item_key, scopes, payload)
        SELECT n.namespace, 'memory.added', n.memory_id, ARRAY[n.user_scope],
            jsonb_build_object('user_id', n.user_id, 'project_id', n.project_id, 'tier', n.tier,
                'version', n.version, 'memory_type', n.memory_type, 'tags', to_jsonb(n.tags),
                'importance', n.importance, 'expires_at', n.expires_at, 'is_summary', n.is_summary)
        FROM new_rows AS n ORDER BY n.memory_id;
    ELSIF TG_OP = 'UPDATE' THEN
        INSERT INTO pg_temp.change_feed_staged (namespace, event_type, item_key, scopes, payload)
        SELECT n.namespace, c.event_type, n.memory_id, ARRAY[n.user_scope],
            jsonb_build_object('user_id', n.user_id, 'project_id', n.project_id, 'tier', n.tier,
                'previous_tier', o.tier, 'version', n.version, 'enriched_version', n.enriched_version,
                'hidden', n.hidden, 'memory_type', n.memory_type, 'tags', to_jsonb(n.tags),
                'importance', n.importance, 'quality_score', n.quality_score, 'expires_at', n.expires_at)
        FROM old_rows AS o JOIN new_rows AS n USING (namespace, memory_id),
            LATERAL (
                SELECT 'memory.updated' AS event_type, 0 AS step
                WHERE n.version <> o.version OR n.hidden <> o.hidden OR n.summary_id <> o.summary_id
                    OR n.expires_at IS DISTINCT FROM o.expires_at
                UNION ALL SELECT 'memory.enriched', 1 WHERE n.enriched_version > o.enriched_version
                UNION ALL SELECT 'memory.tier_changed', 2 WHERE n.tier <> o.tier
            ) AS c
        ORDER BY n.memory_id, c.step;
    ELSE
        INSERT INTO pg_temp.change_feed_staged (namespace, event_type, item_key, scopes, payload)
        SELECT o.namespace,
            CASE WHEN o.expires_at IS NOT NULL AND o.expires_at <= now() THEN 'memory.expired'
                ELSE 'memory.deleted' END,
            o.memory_id, ARRAY[o.user_scope],
            jsonb_build_object('user_id', o.user_id, 'project_id', o.project_id, 'tier', o.tier,
                'expires_at', o.expires_at)
        FROM old_rows AS o ORDER BY o.memory_id;
    END IF;
    GET DIAGNOSTICS written = ROW_COUNT;
    IF written > 0 THEN
        PERFORM change_feed_mark();
    END IF;
    RETURN NULL;
END
$body$;
