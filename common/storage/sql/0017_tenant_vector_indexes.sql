-- The per-tenant vector indexes: a namespace with many chunks in a table shared by many
-- namespaces gets an HNSW index partial to it (`CREATE INDEX ... WHERE namespace = '<namespace>'`, built
-- by `common/storage/chunks/tenant_vector_indexes.py`: `cb index-tenants` or the ingest service's worker).
-- This table records which namespaces have one, so the vector ranking knows when to ask the planner for
-- that index (`ChunkRankings.vector_candidates`); a row is written only after its index was built.
-- index_name NULL: a large namespace holding most of the table, ranked by the table's own HNSW index.
CREATE TABLE IF NOT EXISTS {chunk_tenant_indexes} (
    namespace     text PRIMARY KEY,
    index_name    text UNIQUE,
    rows_at_build bigint NOT NULL,
    built_at      timestamptz NOT NULL DEFAULT now()
);
