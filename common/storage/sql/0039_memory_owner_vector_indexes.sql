-- The per-owner vector indexes of memory chunks (`common/storage/chunks/owner_vector_indexes.py`,
-- docs/decisions/0039-memory-owner-vector-indexes.md): a user with many memories who holds a small share
-- of a namespace gets an HNSW index partial to their memory chunks (`CREATE INDEX ... WHERE namespace =
-- '<namespace>' AND node_type = 'memory' AND chunk_order = 0 AND (meta -> 'scopes' ->> 0) = '<scope>'`),
-- built off the request path by `cb index-tenants` or the ingest service's worker, at most
-- memory_owner_indexes_max of them. This table records the built ones, so RecallMemories' approximate
-- stage knows when to ask the planner for one; a row is written only after its index was built.
CREATE TABLE IF NOT EXISTS {chunk_owner_indexes} (
    namespace     text NOT NULL,
    user_id       text NOT NULL,
    user_scope    text NOT NULL,
    index_name    text NOT NULL UNIQUE,
    rows_at_build bigint NOT NULL,
    built_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace, user_id)
);
