-- Static SQL of the change feed's outbox (common/storage/change_feed/outbox.py; the table, its triggers
-- and the numbering at commit are migrations 0034 and 0037). The page read with the caller's visibility predicate
-- and filters is composed in Python.

-- name: append_events
-- Appends events given as parallel arrays (namespace, event_type, item_key, subject_key, predicate,
-- object_key, scopes as JSON arrays, payload) in one statement, in array order, to the transaction's staged
-- events (stage_transaction first); the numbering at commit inserts them into change_events.
INSERT INTO pg_temp.change_feed_staged (namespace, event_type, item_key, subject_key, predicate, object_key, scopes, payload)
SELECT x.namespace, x.event_type, x.item_key, x.subject_key, x.predicate, x.object_key,
    ARRAY(SELECT jsonb_array_elements_text(x.scopes)), x.payload
FROM unnest(%(namespaces)s::text[], %(event_types)s::text[], %(item_keys)s::text[], %(subject_keys)s::text[],
    %(predicates)s::text[], %(object_keys)s::text[], %(scopes)s::jsonb[], %(payloads)s::jsonb[])
    WITH ORDINALITY AS x(namespace, event_type, item_key, subject_key, predicate, object_key, scopes, payload, ordinal)
WHERE change_feed_enabled()
ORDER BY x.ordinal

-- name: stage_transaction
-- Makes sure this session has its staging table (migration 0037).
SELECT change_feed_stage()

-- name: mark_transaction
-- Makes the numbering of this transaction's events run at its commit.
SELECT change_feed_mark()

-- name: head
-- The namespace's last cursor handed out and last cursor pruned (no row: nothing recorded yet).
SELECT last_cursor, pruned_through FROM change_feed_heads WHERE namespace = %(namespace)s

-- name: pruned_through
-- The namespace's highest pruned cursor (0: nothing pruned).
SELECT coalesce((SELECT pruned_through FROM change_feed_heads WHERE namespace = %(namespace)s), 0)

-- name: heads
-- Every namespace with its last cursor (for pruning by size).
SELECT namespace, last_cursor FROM change_feed_heads ORDER BY namespace

-- name: prune_older
-- Deletes up to %(batch)s changes committed before %(before)s and records per namespace the highest cursor
-- deleted; returns how many were deleted.
WITH doomed AS (
    DELETE FROM change_events WHERE id IN (
        SELECT id FROM change_events WHERE committed_at < %(before)s ORDER BY committed_at LIMIT %(batch)s
    )
    RETURNING namespace, cursor
), tops AS (
    SELECT namespace, max(cursor) AS top, count(*) AS n FROM doomed GROUP BY namespace
), moved AS (
    UPDATE change_feed_heads AS h SET pruned_through = greatest(h.pruned_through, t.top)
    FROM tops AS t WHERE h.namespace = t.namespace
)
SELECT coalesce(sum(n), 0)::bigint FROM tops

-- name: prune_through
-- Deletes up to %(batch)s changes of %(namespace)s with a cursor at or below %(through)s and records the
-- highest cursor deleted; returns how many were deleted.
WITH doomed AS (
    DELETE FROM change_events WHERE id IN (
        SELECT id FROM change_events
        WHERE namespace = %(namespace)s AND cursor <= %(through)s ORDER BY cursor LIMIT %(batch)s
    )
    RETURNING cursor
), moved AS (
    UPDATE change_feed_heads AS h SET pruned_through = greatest(h.pruned_through, (SELECT max(cursor) FROM doomed))
    WHERE h.namespace = %(namespace)s AND EXISTS (SELECT 1 FROM doomed)
)
SELECT count(*) FROM doomed
