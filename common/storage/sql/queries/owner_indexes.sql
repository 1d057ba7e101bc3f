-- Queries of the per-owner vector indexes of memory chunks (`common/storage/chunks/owner_vector_indexes.py`,
-- migration 0039).

-- name: indexed_owners
-- The owners with an index of their own: namespace, user_id, user_scope (the read side's registry copy).
SELECT namespace, user_id, user_scope FROM {chunk_owner_indexes}

-- name: registered
-- Every registered owner index: namespace, user_id, index name.
SELECT namespace, user_id, index_name FROM {chunk_owner_indexes}

-- name: owner_rows
-- Memories per owner with at least %(min_rows)s of them: namespace, user_id, user_scope, count.
SELECT namespace, user_id, user_scope, count(*) FROM {memories}
GROUP BY namespace, user_id, user_scope HAVING count(*) >= %(min_rows)s

-- name: register
-- Records a built owner index (again after a rebuild).
INSERT INTO {chunk_owner_indexes} (namespace, user_id, user_scope, index_name, rows_at_build)
VALUES (%(namespace)s, %(user_id)s, %(user_scope)s, %(index_name)s, %(rows)s)
ON CONFLICT (namespace, user_id) DO UPDATE SET user_scope = EXCLUDED.user_scope,
    index_name = EXCLUDED.index_name, rows_at_build = EXCLUDED.rows_at_build, built_at = now()

-- name: unregister
-- Forgets the owner index of an owner.
DELETE FROM {chunk_owner_indexes} WHERE namespace = %s AND user_id = %s
