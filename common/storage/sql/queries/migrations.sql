-- Static SQL of the migration runner (common/storage/schema/migrations.py): its lock, the graph, the journal of
-- applied migrations and the index settings check. The migrations themselves are common/storage/sql/NNNN_*.sql.
-- Loaded by common/storage/named_queries.py; see there for the placeholders and parameters.

-- name: lock_migrations
-- Session advisory lock serialising the migrations of every process (parameter: the lock key).
SELECT pg_advisory_lock(%s)

-- name: unlock_migrations
-- Releases lock_migrations (parameter: the lock key).
SELECT pg_advisory_unlock(%s)

-- name: graph_exists
-- One row when the AGE graph exists (parameter: graph name).
SELECT 1 FROM ag_catalog.ag_graph WHERE name = %s

-- name: create_graph
-- Creates the AGE graph (parameter: graph name).
SELECT ag_catalog.create_graph(%s)

-- name: create_migrations_journal
-- The journal of applied migrations, created on first use.
CREATE TABLE IF NOT EXISTS memory_schema_migrations (
    name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now()
)

-- name: applied_migrations
-- The names of the migrations applied so far.
SELECT name FROM memory_schema_migrations

-- name: record_migration
-- Records a migration as applied (parameter: its file name), in the migration's own transaction.
INSERT INTO memory_schema_migrations (name) VALUES (%s)

-- name: embedding_column_type
-- The SQL type of the embedding column of a chunks table, e.g. vector(384) (parameter: the table's
-- name); no row when the table does not exist.
SELECT format_type(a.atttypid, a.atttypmod) FROM pg_attribute a
WHERE a.attrelid = to_regclass(%s) AND a.attname = 'embedding'

-- name: record_index_settings
-- Records the embedding model, dimension and text search configuration a chunks table is built for
-- (parameters: table name, model, dimension, config), unless recorded before.
INSERT INTO memory_index_settings (table_name, embedding_model, embedding_dim, text_search_config)
VALUES (%s, %s, %s, %s) ON CONFLICT (table_name) DO NOTHING

-- name: index_settings
-- The recorded embedding model and text search configuration of a chunks table (parameter: its name).
SELECT embedding_model, text_search_config FROM memory_index_settings WHERE table_name = %s

-- name: queue_schema_exists
-- True when procrastinate's jobs table exists (migration 0016, common/storage/schema/queue_migration.py).
SELECT to_regclass('procrastinate_jobs') IS NOT NULL

-- name: create_enrichment_job_index
-- The enrichment sweep's look-up of a memory's jobs by queueing lock, whatever their status (migration
-- 0016; procrastinate's own index on queueing_lock covers only jobs waiting).
CREATE INDEX IF NOT EXISTS procrastinate_jobs_enrichment_lock_idx
    ON procrastinate_jobs (queueing_lock) WHERE task_name = 'memory.enrich'
