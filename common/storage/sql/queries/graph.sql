-- Static SQL of the graph modules: labels (common/storage/graph/age.py), the graph_nodes registry
-- (node_registry.py) and vertices (graph_store.py). Loaded by common/storage/named_queries.py; see there
-- for the placeholders ({graph_nodes}, ...) and parameters. Statements naming a label table are composed
-- in Python.

-- name: lock_label_creation
-- Session advisory lock serialising the creation of one label (its key derived from the label name).
SELECT pg_advisory_lock(%s)

-- name: unlock_label_creation
-- Releases lock_label_creation.
SELECT pg_advisory_unlock(%s)

-- name: label_kind
-- The kind ('v' or 'e') of a label (parameters: graph name, label name); no row when it does not exist.
SELECT l.kind FROM ag_catalog.ag_label l JOIN ag_catalog.ag_graph g ON l.graph = g.graphid
WHERE g.name = %s AND l.name = %s

-- name: label_tables
-- The names of the label tables of one kind ('v' or 'e') by name, AGE's default labels excluded
-- (parameters: graph name, kind).
SELECT l.name FROM ag_catalog.ag_label l JOIN ag_catalog.ag_graph g ON l.graph = g.graphid
WHERE g.name = %s AND l.kind = %s AND l.name NOT IN ('_ag_label_vertex', '_ag_label_edge') ORDER BY l.name

-- name: create_vertex_label
-- Creates a vertex label (parameters: graph name, label name).
SELECT ag_catalog.create_vlabel(%s, %s)

-- name: create_edge_label
-- Creates an edge label (parameters: graph name, label name).
SELECT ag_catalog.create_elabel(%s, %s)

-- name: graph_index_exists
-- One row when an index exists in the graph's schema (parameters: schema name, index name).
SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %s AND c.relname = %s

-- name: label_id_and_sequence
-- The AGE id of a label and the qualified name of its id sequence (graph name, label name).
SELECT l.id, format('%%I.%%I', n.nspname, l.seq_name) FROM ag_catalog.ag_label l
JOIN ag_catalog.ag_graph g ON l.graph = g.graphid JOIN pg_namespace n ON n.oid = g.namespace
WHERE g.name = %s AND l.name = %s

-- name: registered_nodes
-- Label of each registered key among %(keys)s and whether its vertex id is still unrecorded (a row from
-- before migration 0006); rows locked FOR KEY SHARE. One fenced primary-key look-up per key
-- (NodeRegistry._registered says why not a join).
SELECT g.natural_key, g.label, g.vertex_id IS NULL FROM unnest(%(keys)b::text[]) AS x(natural_key)
CROSS JOIN LATERAL (
    SELECT natural_key, label, vertex_id FROM {graph_nodes}
    WHERE namespace = %(namespace)s AND natural_key = x.natural_key OFFSET 0 FOR KEY SHARE
) AS g

-- name: upsert_registry_rows
-- Inserts the registry row of each node (xmax = 0) or locks the existing one (DO UPDATE of last_seen), in
-- key order; a new row gets its vertex id from its label's sequence, as AGE's column default does.
-- Returns the stored row of every node.
INSERT INTO {graph_nodes} AS g (
    namespace, natural_key, node_type, label, placeholder, origin, asserted_at, props_hash, created_at,
    last_seen, scopes, vertex_id
)
SELECT x.namespace, x.natural_key, x.node_type, x.label, false, x.origin, x.asserted_at, x.props_hash,
    %(now)s, %(now)s, ARRAY(SELECT jsonb_array_elements_text(x.scopes::jsonb)),
    ag_catalog._graphid(x.label_id, nextval(x.label_sequence::regclass))
FROM unnest(
    %(namespaces)b::text[], %(keys)b::text[], %(types)b::text[], %(labels)b::text[], %(origins)b::text[],
    %(asserted)b::timestamptz[], %(hashes)b::text[], %(scopes)b::text[], %(label_ids)b::int4[],
    %(label_sequences)b::text[]
) AS x(namespace, natural_key, node_type, label, origin, asserted_at, props_hash, scopes, label_id, label_sequence)
ORDER BY x.namespace, x.natural_key
ON CONFLICT (namespace, natural_key) DO UPDATE SET last_seen = greatest(g.last_seen, excluded.last_seen)
RETURNING g.namespace, g.natural_key, (xmax = 0) AS inserted, label, placeholder, asserted_at, props_hash,
    vertex_id::text

-- name: update_registry_row
-- Records a rewritten vertex on its registry row: type, no longer a placeholder, hash, last seen, the
-- newest assertion time (a NULL assertion time keeps the stored one) and the scopes.
UPDATE {graph_nodes} SET node_type = %s, placeholder = false, props_hash = %s, last_seen = %s,
    asserted_at = CASE WHEN %s::timestamptz IS NULL THEN asserted_at ELSE greatest(asserted_at, %s::timestamptz) END,
    scopes = %s
WHERE namespace = %s AND natural_key = %s

-- name: follow_placeholder_scopes
-- Placeholders among %(keys)s that carry scopes follow the facts naming them: the union
-- with the key's scopes (%(scopes)s: a JSON array per key, in the order of the keys), or none when it is
-- empty (a visible fact names it). A primary-key look-up per key (= ANY), not a join the planner could
-- turn into a scan of the namespace (NodeRegistry._registered says why).
UPDATE {graph_nodes} AS g SET scopes = (
    SELECT CASE WHEN x.scopes = '[]' THEN '{{}}'::text[]
        ELSE ARRAY(SELECT DISTINCT s FROM unnest(g.scopes || ARRAY(SELECT jsonb_array_elements_text(x.scopes::jsonb))) AS u(s) ORDER BY 1) END
    FROM unnest(%(keys)b::text[], %(scopes)b::text[]) AS x(natural_key, scopes)
    WHERE x.natural_key = g.natural_key LIMIT 1
)
WHERE g.namespace = %(namespace)s AND g.natural_key = ANY(%(keys)b::text[]) AND g.placeholder
    AND g.scopes <> '{{}}'::text[]

-- name: insert_registry_row_once
-- Inserts the registry row of an immutable node; no row returned when the key exists (a concurrent
-- inserter of the same key is waited for).
INSERT INTO {graph_nodes} (
    namespace, natural_key, node_type, label, placeholder, origin, props_hash, created_at, last_seen, scopes
) VALUES (%s, %s, %s, %s, false, %s, %s, %s, %s, %s)
ON CONFLICT (namespace, natural_key) DO NOTHING RETURNING label

-- name: insert_placeholder_registry_rows
-- Inserts placeholder registry rows for the missing keys %(keys)s (key order), each with a vertex id
-- from its label's sequence and the scopes of the facts naming it (a JSON array per key);
-- keys a concurrent writer inserted meanwhile are left out of the result.
INSERT INTO {graph_nodes} (
    namespace, natural_key, node_type, label, placeholder, created_at, last_seen, vertex_id, scopes
)
SELECT %(namespace)s, x.natural_key, x.node_type, x.label, true, %(now)s, %(now)s,
    ag_catalog._graphid(x.label_id, nextval(x.label_sequence::regclass)),
    ARRAY(SELECT jsonb_array_elements_text(x.scopes::jsonb))
FROM unnest(
    %(keys)b::text[], %(types)b::text[], %(labels)b::text[], %(label_ids)b::int4[], %(label_sequences)b::text[],
    %(scopes)b::text[]
) AS x(natural_key, node_type, label, label_id, label_sequence, scopes)
ORDER BY x.natural_key
ON CONFLICT (namespace, natural_key) DO NOTHING
RETURNING natural_key, label, vertex_id::text

-- name: lock_registry_rows_to_delete
-- The registry rows (key, label) of the existing keys among a list (parameters: namespace, sorted
-- keys), locked FOR UPDATE in key order.
SELECT natural_key, label FROM {graph_nodes} WHERE namespace = %s AND natural_key = ANY(%s)
ORDER BY natural_key FOR UPDATE

-- name: delete_registry_rows
-- Deletes registry rows (parameters: namespace, keys).
DELETE FROM {graph_nodes} WHERE namespace = %s AND natural_key = ANY(%s)
