-- Static SQL of snapshot reconciliation (common/storage/snapshot_store.py): the journal ({snapshots},
-- {snapshot_items}) and the snapshot columns of {facts}. Loaded by common/storage/named_queries.py; see
-- there for the placeholders and parameters.

-- name: create_snapshot_run
-- Journals a new run (parameters: namespace, source, scope, snapshot id, snapshot time); no row returned
-- when (namespace, source, scope, snapshot_id) was reconciled before.
INSERT INTO {snapshots} (namespace, source, scope, snapshot_id, snapshot_time) VALUES (%s, %s, %s, %s, %s)
ON CONFLICT (namespace, source, scope, snapshot_id) DO NOTHING RETURNING id

-- name: snapshot_run
-- The journaled run of (namespace, source, scope, snapshot id).
SELECT id, snapshot_id, snapshot_time, counts FROM {snapshots}
WHERE namespace = %s AND source = %s AND scope = %s AND snapshot_id = %s

-- name: previous_snapshot_run
-- The last run of (namespace, source, scope) other than the run of row id %s (the fourth parameter), by
-- snapshot time, then row id.
SELECT id, snapshot_id, snapshot_time, counts FROM {snapshots}
WHERE namespace = %s AND source = %s AND scope = %s AND id <> %s
ORDER BY snapshot_time DESC, id DESC LIMIT 1

-- name: set_snapshot_counts
-- Records the counts of a run (parameters: counts, row id).
UPDATE {snapshots} SET counts = %s WHERE id = %s

-- name: forget_node_in_journals
-- Deletes, from every journal of %(namespace)s, the entity item of %(key)s and the fact items with it as
-- subject or object (a fact's item_key is subject, predicate and object joined by %(separator)s).
DELETE FROM {snapshot_items} i USING {snapshots} s
WHERE s.id = i.snapshot_row AND s.namespace = %(namespace)s
    AND ((i.item_kind = 'entity' AND i.item_key = %(key)s)
        OR (i.item_kind = 'fact' AND (split_part(i.item_key, %(separator)s, 1) = %(key)s
            OR split_part(i.item_key, %(separator)s, 3) = %(key)s)))

-- name: lock_snapshot_scope
-- Transaction-scoped advisory lock of one (namespace, source, scope) (parameter: its lock id).
SELECT pg_advisory_xact_lock(%s)

-- name: plan_per_execution
-- Makes the planner plan each statement per execution for the rest of the transaction (no generic plans).
SET LOCAL plan_cache_mode = force_custom_plan

-- name: journal_items
-- Journals items of one kind for run %(row)s; returns the positions of the items whose key was new to
-- the run (a repeated key is left out).
INSERT INTO {snapshot_items} (snapshot_row, item_kind, item_key, item_hash, item_position, cardinality_key)
SELECT %(row)s, %(kind)s, x.item_key, x.item_hash, x.item_position, x.cardinality_key
FROM unnest(%(keys)b::text[], %(hashes)b::text[], %(positions)b::int[], %(cardinality)b::text[])
    AS x(item_key, item_hash, item_position, cardinality_key)
ORDER BY x.item_position
ON CONFLICT (snapshot_row, item_kind, item_key) DO NOTHING RETURNING item_position

-- name: journaled_item_positions
-- Key and position of the journaled items of a run and kind among a list of keys (parameters: row id,
-- kind, keys).
SELECT item_key, item_position FROM {snapshot_items}
WHERE snapshot_row = %s AND item_kind = %s AND item_key = ANY(%s)

-- name: cardinality_repeats
-- Cardinality keys journaled more than once in a run (parameters: row id, limit), each with the
-- positions of its facts in stream order, first repeated first.
SELECT cardinality_key, array_agg(item_position ORDER BY item_position) FROM {snapshot_items}
WHERE snapshot_row = %s AND item_kind = 'fact' AND cardinality_key IS NOT NULL
GROUP BY cardinality_key HAVING count(*) > 1 ORDER BY min(item_position) LIMIT %s

-- name: dropped_open_facts
-- One page of the fact items of run %(previous)s that run %(current)s lacks (item_key order, after
-- %(after)s, at most %(limit)s), each with the open facts of (source, scope) it names that are valid from
-- no later than %(snapshot_time)s (a fenced lateral look-up per item; fact_id NULL when none).
WITH dropped AS (
    SELECT p.item_key FROM {snapshot_items} p
    WHERE p.snapshot_row = %(previous)s AND p.item_kind = 'fact' AND p.item_key > %(after)s
        AND NOT EXISTS (
            SELECT 1 FROM {snapshot_items} c
            WHERE c.snapshot_row = %(current)s AND c.item_kind = 'fact' AND c.item_key = p.item_key
        )
    ORDER BY p.item_key LIMIT %(limit)s
)
SELECT d.item_key, f.fact_id FROM dropped d LEFT JOIN LATERAL (
    SELECT fact_id FROM {facts}
    WHERE namespace = %(namespace)s AND snapshot_source = %(source)s AND snapshot_scope = %(scope)s
        AND subject_key = split_part(d.item_key, %(separator)s, 1)
        AND predicate = split_part(d.item_key, %(separator)s, 2)
        AND object_key = split_part(d.item_key, %(separator)s, 3)
        AND valid_to IS NULL AND valid_from <= %(snapshot_time)s
    OFFSET 0
) AS f ON true
ORDER BY d.item_key, f.fact_id

-- name: open_scope_fact_count
-- How many facts of (%(source)s, %(scope)s) in %(namespace)s are open and valid from no later than
-- %(snapshot_time)s: the set the mass-deletion guard measures a snapshot's closing step against.
SELECT count(*) FROM {facts}
WHERE namespace = %(namespace)s AND snapshot_source = %(source)s AND snapshot_scope = %(scope)s
    AND valid_to IS NULL AND valid_from <= %(snapshot_time)s

-- name: journaled_item_hashes
-- Key and hash of the journaled items of a run and kind among a list of keys (parameters: row id, kind,
-- keys).
SELECT item_key, item_hash FROM {snapshot_items}
WHERE snapshot_row = %s AND item_kind = %s AND item_key = ANY(%s)

-- name: open_snapshot_facts
-- Open facts owned by (%(source)s, %(scope)s) with one of the (subject, predicate, object) triples, by
-- fact_id: one fenced look-up per triple (facts_subject_idx).
SELECT f.fact_id, f.subject_key, f.predicate, f.object_key, f.attributes, f.snapshot_id, f.scopes
FROM unnest(%(subjects)b::text[], %(predicates)b::text[], %(objects)b::text[])
    AS x(subject_key, predicate, object_key)
CROSS JOIN LATERAL (
    SELECT * FROM {facts}
    WHERE namespace = %(namespace)s AND subject_key = x.subject_key AND predicate = x.predicate
        AND object_key = x.object_key AND snapshot_source = %(source)s AND snapshot_scope = %(scope)s
        AND valid_to IS NULL
    OFFSET 0
) AS f
ORDER BY f.fact_id

-- name: adopt_snapshot_facts
-- Marks facts as owned by (%(source)s, %(scope)s) and written by %(snapshot_id)s, setting the attributes
-- given (NULL keeps them).
UPDATE {facts} f SET snapshot_source = %(source)s, snapshot_scope = %(scope)s, snapshot_id = %(snapshot_id)s,
    attributes = coalesce(x.attributes::jsonb, f.attributes)
FROM unnest(%(fact_ids)b::text[], %(attributes)b::text[]) AS x(fact_id, attributes)
WHERE f.fact_id = x.fact_id
