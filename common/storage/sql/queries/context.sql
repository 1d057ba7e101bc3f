-- Static SQL of the read side's provenance and context journal (common/storage/context_store.py). Loaded
-- by common/storage/named_queries.py; see there for the placeholders ({context_traces}, ...) and
-- parameters. The vertex read of node summaries (over the label tables found) and the reads that take a caller's
-- visibility predicate are composed in Python.

-- name: registered_vertices_of_keys
-- Key, label, node type and AGE vertex id (NULL before its first use after migration 0006) of the
-- registered keys among a list (parameters: namespace, keys).
SELECT natural_key, label, node_type, vertex_id::text FROM {graph_nodes} WHERE namespace = %s AND natural_key = ANY(%s)

-- name: keys_with_facts
-- The keys among %(keys)s that are the subject or object of at least one fact of %(namespace)s, sorted,
-- at most %(limit)s (index probes of facts_subject_idx and facts_object_idx).
SELECT k.key FROM unnest(%(keys)s::text[]) AS k(key)
WHERE EXISTS (SELECT 1 FROM {facts} f WHERE f.namespace = %(namespace)s AND f.subject_key = k.key)
    OR EXISTS (SELECT 1 FROM {facts} f WHERE f.namespace = %(namespace)s AND f.object_key = k.key)
ORDER BY k.key LIMIT %(limit)s

-- name: record_context_trace
-- Appends one context compilation (parameters: namespace, trace id, request, decisions, scopes); returns
-- its row id.
INSERT INTO {context_traces} (namespace, trace_id, request, decisions, scopes) VALUES (%s, %s, %s, %s, %s)
RETURNING id
