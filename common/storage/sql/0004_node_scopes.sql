-- Visibility scopes of nodes (docs/explanation/knowledge-model.md): a copy of the vertex's
-- props.scopes in the registry, so read paths filter hidden nodes (and facts touching them) with one
-- indexed join instead of reading vertex properties. Written by GraphStore.upsert_node with the vertex.
ALTER TABLE {graph_nodes} ADD COLUMN IF NOT EXISTS scopes text[] NOT NULL DEFAULT '{{}}';
-- Backfill from the vertices written before this column existed (only those with scopes).
UPDATE {graph_nodes} g SET scopes = ARRAY(SELECT jsonb_array_elements_text(v.doc -> 'props' -> 'scopes'))
FROM (SELECT (ag_catalog.agtype_out(properties)::text)::jsonb AS doc FROM {graph}._ag_label_vertex) AS v
WHERE jsonb_typeof(v.doc -> 'props' -> 'scopes') = 'array' AND v.doc -> 'props' -> 'scopes' <> '[]'::jsonb
  AND g.namespace = v.doc ->> 'namespace' AND g.natural_key = v.doc ->> 'natural_key';
