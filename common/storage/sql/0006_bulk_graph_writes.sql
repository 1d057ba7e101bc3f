-- Bulk graph writes and streamed snapshots.
-- graph_nodes.vertex_id: the AGE id of the key's vertex, recorded when the vertex is inserted, so edges
-- are created by set-based joins on the registry's primary key (GraphStore.create_edges) instead of a GIN
-- look-up of both ends per edge. Rows written before this migration get theirs on first use.
ALTER TABLE {graph_nodes} ADD COLUMN IF NOT EXISTS vertex_id ag_catalog.graphid;
-- The journal of a run is written as items arrive: item_position is the item's position among the
-- run's entities (or facts), so a duplicate names both positions; cardinality_key is "subject<US>predicate"
-- for an open fact of a relation with cardinality one in strict mode (NULL otherwise), so a second one
-- for a subject is found in SQL at the end of the run.
ALTER TABLE {snapshot_items} ADD COLUMN IF NOT EXISTS item_position integer;
ALTER TABLE {snapshot_items} ADD COLUMN IF NOT EXISTS cardinality_key text;
