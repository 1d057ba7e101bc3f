-- Static SQL of migration 0009 (common/storage/schema/label_migration.py): the graph's labels, their renaming
-- and dropping, the id map of moved vertices. Statements naming a label table are composed in Python.
-- Loaded by common/storage/named_queries.py; see there for the placeholders and parameters.

-- name: graph_labels
-- Every label of the graph but AGE's two parents: name, kind ('v' or 'e'), AGE id and qualified id
-- sequence (parameter: graph name), vertex labels first.
SELECT l.name, l.kind, l.id, format('%%I.%%I', n.nspname, l.seq_name) FROM ag_catalog.ag_label l
JOIN ag_catalog.ag_graph g ON l.graph = g.graphid JOIN pg_namespace n ON n.oid = g.namespace
WHERE g.name = %s AND l.name NOT IN ('_ag_label_vertex', '_ag_label_edge')
ORDER BY l.kind DESC, l.name

-- name: rename_label_entry
-- Renames a label in AGE's catalogue after its table was renamed (parameters: new name, graph name, old name).
UPDATE ag_catalog.ag_label SET name = %s
WHERE graph = (SELECT graphid FROM ag_catalog.ag_graph WHERE name = %s) AND name = %s

-- name: label_sequence
-- The id sequence of a label (parameters: graph name, label name).
SELECT l.seq_name FROM ag_catalog.ag_label l JOIN ag_catalog.ag_graph g ON l.graph = g.graphid
WHERE g.name = %s AND l.name = %s

-- name: rename_label_sequence_entry
-- Records a label's renamed id sequence in AGE's catalogue (parameters: new sequence name, graph name,
-- label name). The id column's default refers to the sequence by oid and keeps working.
UPDATE ag_catalog.ag_label SET seq_name = %s
WHERE graph = (SELECT graphid FROM ag_catalog.ag_graph WHERE name = %s) AND name = %s

-- name: label_indexes
-- The indexes of a label table (parameters: graph schema name, label name).
SELECT indexname FROM pg_indexes WHERE schemaname = %s AND tablename = %s

-- name: drop_label
-- Drops an (empty) label with its table (parameters: graph name, label name).
SELECT ag_catalog.drop_label(%s, %s)

-- name: create_moved_ids
-- The old -> new vertex ids of this run, with the new label (dropped at commit). The statements that
-- read it are in label_migration.py: a named query must prepare without it.
CREATE TEMPORARY TABLE relabel_moved_ids (
    old_id ag_catalog.graphid PRIMARY KEY, new_id ag_catalog.graphid NOT NULL, label text NOT NULL
) ON COMMIT DROP

-- name: record_unrecorded_vertex_ids
-- Registry rows written before migration 0006 get their vertex id (the vertex of their key in their label).
UPDATE {graph_nodes} g SET vertex_id = v.id FROM {graph}._ag_label_vertex v
WHERE g.vertex_id IS NULL
AND (ag_catalog.agtype_out(v.properties)::text)::jsonb ->> 'namespace' = g.namespace
AND (ag_catalog.agtype_out(v.properties)::text)::jsonb ->> 'natural_key' = g.natural_key
