-- Static SQL of the node-key advisory locks (common/storage/key_locks.py). Loaded by
-- common/storage/named_queries.py.

-- name: lock_node_key_ids
-- Takes the transaction-scoped advisory locks of the ids %s (a bigint array, sorted), in array order:
-- unnest keeps the order, and each call takes its lock before the next row is produced.
SELECT count(pg_advisory_xact_lock(id)) FROM unnest(%s::bigint[]) AS id
