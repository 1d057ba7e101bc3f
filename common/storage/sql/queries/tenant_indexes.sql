-- Queries of the per-tenant vector indexes (`common/storage/chunks/tenant_vector_indexes.py`, migration 0017).

-- name: indexed_namespaces
-- The registered namespaces and whether each has an index of its own (the read side's registry copy).
SELECT namespace, index_name IS NOT NULL FROM {chunk_tenant_indexes}

-- name: registered
-- Every registered namespace: namespace, index name (NULL: the table's index serves it).
SELECT namespace, index_name FROM {chunk_tenant_indexes}

-- name: namespace_rows
-- Embedded chunks per namespace.
SELECT namespace, count(*) FROM {chunks} WHERE embedding IS NOT NULL GROUP BY namespace

-- name: invalid_index
-- A row when the index of that name exists but is invalid (a concurrent build that failed).
SELECT 1 FROM pg_index WHERE indexrelid = to_regclass(quote_ident(%s)) AND NOT indisvalid

-- name: register
-- Records a built tenant index (again after a rebuild).
INSERT INTO {chunk_tenant_indexes} (namespace, index_name, rows_at_build)
VALUES (%(namespace)s, %(index_name)s, %(rows)s)
ON CONFLICT (namespace) DO UPDATE SET index_name = EXCLUDED.index_name,
    rows_at_build = EXCLUDED.rows_at_build, built_at = now()

-- name: unregister
-- Forgets the tenant index of a namespace.
DELETE FROM {chunk_tenant_indexes} WHERE namespace = %s

-- name: try_lock
-- The session lock of one synchronisation at a time (true when taken).
SELECT pg_try_advisory_lock(%s)

-- name: unlock
-- Releases it.
SELECT pg_advisory_unlock(%s)
