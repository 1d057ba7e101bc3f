-- The change feed's outbox (docs/decisions/0041-change-feed-cursor.md): one row per change, written in the
-- transaction of the change by statement-level triggers of the tables below (set-based: one INSERT per
-- statement, whatever the write path) and by `common/storage/change_feed/outbox.py` for the changes no
-- table row states (a document retained).
--
-- Cursors are commit-ordered per namespace: an event is inserted with cursor NULL; at COMMIT a deferred
-- constraint trigger (one per transaction, on change_feed_pending) numbers the transaction's events from
-- the namespace's row of change_feed_heads. That row stays locked from the numbering to the end of the
-- commit, so the next transaction of the namespace numbers its events only after this one is visible:
-- a reader that saw cursor N never later sees a smaller one commit. NULL cursors are never visible to
-- other sessions (the numbering runs before the commit).
--
-- SET memory.change_feed = 'off' (session, database or role) turns recording off (the ingest benchmark's
-- switch); events are then lost for good, so production keeps it on.
CREATE TABLE IF NOT EXISTS change_events (
    id            bigserial PRIMARY KEY,
    namespace     text NOT NULL,
    cursor        bigint,
    txid          xid8 NOT NULL DEFAULT pg_current_xact_id(),
    event_type    text NOT NULL,
    item_key      text NOT NULL,
    subject_key   text,
    predicate     text,
    object_key    text,
    scopes        text[] NOT NULL DEFAULT ARRAY[]::text[],
    payload       jsonb NOT NULL DEFAULT jsonb_build_object(),
    recorded_at   timestamptz NOT NULL DEFAULT now(),
    committed_at  timestamptz
);
-- Reads (namespace, cursor > n ORDER BY cursor) and pruning by size walk this index.
CREATE UNIQUE INDEX IF NOT EXISTS change_events_cursor_idx ON change_events (namespace, cursor);
-- The numbering at commit finds its transaction's events here (the index stays tiny: numbered rows leave it).
CREATE INDEX IF NOT EXISTS change_events_pending_idx ON change_events (txid) WHERE cursor IS NULL;
-- Pruning by age.
CREATE INDEX IF NOT EXISTS change_events_age_idx ON change_events (committed_at);

-- Per namespace: the last cursor handed out and the last cursor pruned (a resume before it fails).
CREATE TABLE IF NOT EXISTS change_feed_heads (
    namespace       text PRIMARY KEY,
    last_cursor     bigint NOT NULL DEFAULT 0,
    pruned_through  bigint NOT NULL DEFAULT 0
);

-- One row per transaction that recorded events; its deferred trigger numbers them at commit.
CREATE TABLE IF NOT EXISTS change_feed_pending (
    txid  xid8 PRIMARY KEY
);

CREATE OR REPLACE FUNCTION change_feed_enabled() RETURNS boolean LANGUAGE sql STABLE AS $body$
    SELECT current_setting('memory.change_feed', true) IS DISTINCT FROM 'off'
$body$;

-- Called after events were inserted: makes sure the transaction's numbering runs at commit (once).
CREATE OR REPLACE FUNCTION change_feed_mark() RETURNS void LANGUAGE plpgsql AS $body$
DECLARE
    me text := pg_current_xact_id()::text;
BEGIN
    -- A subtransaction that rolls back also undoes this setting, so the mark is made again.
    IF current_setting('memory.change_feed_txid', true) IS DISTINCT FROM me THEN
        INSERT INTO change_feed_pending (txid) VALUES (me::xid8) ON CONFLICT DO NOTHING;
        PERFORM set_config('memory.change_feed_txid', me, true);
    END IF;
END
$body$;

-- The numbering at commit (see the top of this file). Namespaces in sorted order, so two transactions
-- of the same namespaces never wait for each other crosswise.
CREATE OR REPLACE FUNCTION change_feed_number() RETURNS trigger LANGUAGE plpgsql AS $body$
DECLARE
    ns text;
    n bigint;
    top bigint;
BEGIN
    FOR ns, n IN
        SELECT namespace, count(*) FROM change_events WHERE txid = NEW.txid AND cursor IS NULL
        GROUP BY namespace ORDER BY namespace
    LOOP
        INSERT INTO change_feed_heads AS h (namespace, last_cursor) VALUES (ns, n)
        ON CONFLICT (namespace) DO UPDATE SET last_cursor = h.last_cursor + excluded.last_cursor
        RETURNING last_cursor INTO top;
        UPDATE change_events AS e SET cursor = top - n + r.ordinal, committed_at = clock_timestamp()
        FROM (
            SELECT id, row_number() OVER (ORDER BY id) AS ordinal
            FROM change_events WHERE txid = NEW.txid AND cursor IS NULL AND namespace = ns
        ) AS r
        WHERE e.id = r.id;
        PERFORM pg_notify('memory_change_feed', ns);
    END LOOP;
    DELETE FROM change_feed_pending WHERE txid = NEW.txid;
    RETURN NULL;
END
$body$;

DROP TRIGGER IF EXISTS change_feed_number_trigger ON change_feed_pending;
CREATE CONSTRAINT TRIGGER change_feed_number_trigger AFTER INSERT ON change_feed_pending
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION change_feed_number();

-- observations: recorded (insert), redacted (status becomes 'redacted'), purged (delete).
CREATE OR REPLACE FUNCTION change_feed_observations() RETURNS trigger LANGUAGE plpgsql AS $body$
DECLARE
    written bigint;
BEGIN
    IF NOT change_feed_enabled() THEN
        RETURN NULL;
    END IF;
    IF TG_OP = 'INSERT' THEN
        INSERT INTO change_events (namespace, event_type, item_key, subject_key, scopes, payload)
        SELECT n.namespace, 'observation.recorded', n.observation_id, (n.subject ->> 'type') || ':' || (n.subject ->> 'id'), n.scopes,
            jsonb_build_object('kind', n.kind, 'occurred_at', n.occurred_at, 'source_system', n.source_system,
                'source_stream', n.source_stream, 'actor', n.actor, 'subject', n.subject,
                'content', n.content, 'data', n.data, 'status', n.status)
        FROM new_rows AS n ORDER BY n.recorded_order;
    ELSIF TG_OP = 'UPDATE' THEN
        INSERT INTO change_events (namespace, event_type, item_key, subject_key, scopes, payload)
        SELECT n.namespace, 'observation.redacted', n.observation_id, (n.subject ->> 'type') || ':' || (n.subject ->> 'id'), n.scopes,
            jsonb_build_object('kind', n.kind, 'reason', n.status_detail -> 'reason')
        FROM old_rows AS o JOIN new_rows AS n USING (observation_id)
        WHERE n.status = 'redacted' AND o.status IS DISTINCT FROM 'redacted'
        ORDER BY n.observation_id;
    ELSE
        INSERT INTO change_events (namespace, event_type, item_key, subject_key, scopes, payload)
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

-- The payload of a fact event: what a subscriber needs to act on it.
CREATE OR REPLACE FUNCTION change_feed_fact_payload(f {facts}) RETURNS jsonb LANGUAGE sql IMMUTABLE AS $body$
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
CREATE OR REPLACE FUNCTION change_feed_facts() RETURNS trigger LANGUAGE plpgsql AS $body$
DECLARE
    written bigint;
BEGIN
    IF NOT change_feed_enabled() THEN
        RETURN NULL;
    END IF;
    IF TG_OP = 'INSERT' THEN
        INSERT INTO change_events (namespace, event_type, item_key, subject_key, predicate, object_key, scopes, payload)
        SELECT n.namespace, e.event_type, n.fact_id, n.subject_key, n.predicate, n.object_key, n.scopes,
            change_feed_fact_payload(n)
        FROM new_rows AS n,
            LATERAL (
                SELECT 'fact.created' AS event_type, 0 AS step
                UNION ALL
                SELECT 'fact.conflict_flagged', 1 WHERE n.predicate <> 'MENTIONS' AND NOT n.evidence_lost
                    AND EXISTS (
                        SELECT 1 FROM {facts} AS b
                        WHERE b.namespace = n.namespace AND b.subject_key = n.subject_key
                            AND b.predicate = n.predicate AND b.fact_id <> n.fact_id
                            AND b.object_key <> n.object_key AND NOT b.evidence_lost
                            -- its predecessor or successor: closed by the supersession right after
                            AND b.fact_id IS DISTINCT FROM n.supersedes AND b.supersedes IS DISTINCT FROM n.fact_id
                            AND b.valid_from < coalesce(n.valid_to, 'infinity')
                            AND n.valid_from < coalesce(b.valid_to, 'infinity'))
            ) AS e
        ORDER BY n.fact_id, e.step;
    ELSIF TG_OP = 'UPDATE' THEN
        INSERT INTO change_events (namespace, event_type, item_key, subject_key, predicate, object_key, scopes, payload)
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
        INSERT INTO change_events (namespace, event_type, item_key, subject_key, predicate, object_key, scopes, payload)
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
CREATE OR REPLACE FUNCTION change_feed_nodes() RETURNS trigger LANGUAGE plpgsql AS $body$
DECLARE
    written bigint;
BEGIN
    IF NOT change_feed_enabled() THEN
        RETURN NULL;
    END IF;
    IF TG_OP = 'INSERT' THEN
        INSERT INTO change_events (namespace, event_type, item_key, subject_key, scopes, payload)
        SELECT n.namespace, 'node.upserted', n.natural_key, n.natural_key, n.scopes,
            jsonb_build_object('node_type', n.node_type, 'label', n.label, 'placeholder', n.placeholder,
                'origin', n.origin, 'created', true)
        FROM new_rows AS n WHERE n.node_type <> 'memory' ORDER BY n.natural_key;
    ELSIF TG_OP = 'UPDATE' THEN
        INSERT INTO change_events (namespace, event_type, item_key, subject_key, scopes, payload)
        SELECT n.namespace, 'node.upserted', n.natural_key, n.natural_key, n.scopes,
            jsonb_build_object('node_type', n.node_type, 'label', n.label, 'placeholder', n.placeholder,
                'origin', n.origin, 'created', false)
        FROM old_rows AS o JOIN new_rows AS n USING (namespace, natural_key)
        WHERE n.node_type <> 'memory'
            AND (o.props_hash, o.scopes, o.node_type, o.label, o.placeholder, o.origin)
                IS DISTINCT FROM (n.props_hash, n.scopes, n.node_type, n.label, n.placeholder, n.origin)
        ORDER BY n.natural_key;
    ELSE
        INSERT INTO change_events (namespace, event_type, item_key, subject_key, scopes, payload)
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
    INSERT INTO change_events (namespace, event_type, item_key, subject_key, scopes, payload)
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
CREATE OR REPLACE FUNCTION change_feed_vault_runs() RETURNS trigger LANGUAGE plpgsql AS $body$
DECLARE
    written bigint;
BEGIN
    IF NOT change_feed_enabled() THEN
        RETURN NULL;
    END IF;
    INSERT INTO change_events (namespace, event_type, item_key, scopes, payload)
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
CREATE OR REPLACE FUNCTION change_feed_snapshots() RETURNS trigger LANGUAGE plpgsql AS $body$
DECLARE
    written bigint;
BEGIN
    IF NOT change_feed_enabled() THEN
        RETURN NULL;
    END IF;
    INSERT INTO change_events (namespace, event_type, item_key, scopes, payload)
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
CREATE OR REPLACE FUNCTION change_feed_memories() RETURNS trigger LANGUAGE plpgsql AS $body$
DECLARE
    written bigint;
BEGIN
    IF NOT change_feed_enabled() THEN
        RETURN NULL;
    END IF;
    IF TG_OP = 'INSERT' THEN
        INSERT INTO change_events (namespace, event_type, item_key, scopes, payload)
        SELECT n.namespace, 'memory.added', n.memory_id, ARRAY[n.user_scope],
            jsonb_build_object('user_id', n.user_id, 'project_id', n.project_id, 'tier', n.tier,
                'version', n.version, 'memory_type', n.memory_type, 'tags', to_jsonb(n.tags),
                'importance', n.importance, 'expires_at', n.expires_at, 'is_summary', n.is_summary)
        FROM new_rows AS n ORDER BY n.memory_id;
    ELSIF TG_OP = 'UPDATE' THEN
        INSERT INTO change_events (namespace, event_type, item_key, scopes, payload)
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
        INSERT INTO change_events (namespace, event_type, item_key, scopes, payload)
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

DROP TRIGGER IF EXISTS change_feed_insert ON {observations};
CREATE TRIGGER change_feed_insert AFTER INSERT ON {observations}
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION change_feed_observations();
DROP TRIGGER IF EXISTS change_feed_update ON {observations};
CREATE TRIGGER change_feed_update AFTER UPDATE ON {observations}
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT
    EXECUTE FUNCTION change_feed_observations();
DROP TRIGGER IF EXISTS change_feed_delete ON {observations};
CREATE TRIGGER change_feed_delete AFTER DELETE ON {observations}
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION change_feed_observations();

DROP TRIGGER IF EXISTS change_feed_insert ON {facts};
CREATE TRIGGER change_feed_insert AFTER INSERT ON {facts}
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION change_feed_facts();
DROP TRIGGER IF EXISTS change_feed_update ON {facts};
CREATE TRIGGER change_feed_update AFTER UPDATE ON {facts}
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT
    EXECUTE FUNCTION change_feed_facts();
DROP TRIGGER IF EXISTS change_feed_delete ON {facts};
CREATE TRIGGER change_feed_delete AFTER DELETE ON {facts}
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION change_feed_facts();

DROP TRIGGER IF EXISTS change_feed_insert ON {graph_nodes};
CREATE TRIGGER change_feed_insert AFTER INSERT ON {graph_nodes}
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION change_feed_nodes();
DROP TRIGGER IF EXISTS change_feed_update ON {graph_nodes};
CREATE TRIGGER change_feed_update AFTER UPDATE ON {graph_nodes}
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT
    EXECUTE FUNCTION change_feed_nodes();
DROP TRIGGER IF EXISTS change_feed_delete ON {graph_nodes};
CREATE TRIGGER change_feed_delete AFTER DELETE ON {graph_nodes}
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION change_feed_nodes();

DROP TRIGGER IF EXISTS change_feed_delete ON {vault_documents};
CREATE TRIGGER change_feed_delete AFTER DELETE ON {vault_documents}
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION change_feed_vault_documents();

DROP TRIGGER IF EXISTS change_feed_update ON {vault_runs};
CREATE TRIGGER change_feed_update AFTER UPDATE ON {vault_runs}
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT
    EXECUTE FUNCTION change_feed_vault_runs();

DROP TRIGGER IF EXISTS change_feed_update ON {snapshots};
CREATE TRIGGER change_feed_update AFTER UPDATE ON {snapshots}
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT
    EXECUTE FUNCTION change_feed_snapshots();

DROP TRIGGER IF EXISTS change_feed_insert ON {memories};
CREATE TRIGGER change_feed_insert AFTER INSERT ON {memories}
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION change_feed_memories();
DROP TRIGGER IF EXISTS change_feed_update ON {memories};
CREATE TRIGGER change_feed_update AFTER UPDATE ON {memories}
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT
    EXECUTE FUNCTION change_feed_memories();
DROP TRIGGER IF EXISTS change_feed_delete ON {memories};
CREATE TRIGGER change_feed_delete AFTER DELETE ON {memories}
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION change_feed_memories();
