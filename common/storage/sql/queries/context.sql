-- Static SQL of the read side's provenance and context journal (common/storage/context_store.py). Loaded
-- by common/storage/named_queries.py; see there for the placeholders ({context_traces}, ...) and
-- parameters. The vertex read of node summaries (over the label tables found) and the reads that take a caller's
-- visibility predicate are composed in Python.

-- name: registered_vertices_of_keys
-- Key, label, node type and AGE vertex id (NULL before its first use after migration 0006) of the
-- registered keys among a list (parameters: namespace, keys).
SELECT natural_key, label, node_type, vertex_id::text FROM {graph_nodes} WHERE namespace = %s AND natural_key = ANY(%s)

-- name: record_context_trace
-- Appends one context compilation (parameters: namespace, trace id, request, decisions, scopes); returns
-- its row id. Committed asynchronously (set_config(..., true): this transaction only): the row is visible
-- at once, but its COMMIT does not wait for the WAL flush (a disk flush per compile was the slowest part of
-- a CompileContext on a busy disk); a crash may lose the last fraction of a second of journal
-- rows, never a pack's data. The audit events (graph) are committed as before.
INSERT INTO {context_traces} (namespace, trace_id, request, decisions, scopes)
SELECT %s, %s, %s, %s, %s FROM (SELECT set_config('synchronous_commit', 'off', true)) AS asynchronous_commit
RETURNING id
