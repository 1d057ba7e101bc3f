-- Static SQL and Cypher of audit events (common/storage/audit_store.py). Loaded by
-- common/storage/named_queries.py; see there for the placeholders ({graph_nodes}, {graph_name}, ...) and
-- parameters. The event and anchor vertices themselves are written through GraphStore.

-- name: node_type_of_key
-- The node type of a registered key (parameters: namespace, natural key); no row when unregistered.
SELECT node_type FROM {graph_nodes} WHERE namespace = %s AND natural_key = %s

-- name: audit_events_of_trace
-- Cypher: [natural_key, props] of every audit event vertex of a namespace linked by IN_TRACE to the trace
-- anchor $anchor (parameter: the agtype map {namespace, anchor}). The labels are those of
-- common/storage/audit_store.py (AUDIT_EVENT_LABEL, TRACE_EDGE_LABEL, TRACE_LABEL).
SELECT * FROM ag_catalog.cypher({graph_name}, $$
    MATCH (e:n_audit_event)-[:i_IN_TRACE]->(t:n_pc_trace {{namespace: $namespace, natural_key: $anchor}})
    WHERE e.namespace = $namespace
    RETURN [e.natural_key, e.props]
$$, %s) AS (v ag_catalog.agtype)

-- name: insert_audit_event_row
-- The relational index row of a new audit event (sql/0031_audit_event_index.sql), in the vertex's
-- transaction (parameters: namespace, event_id, action, principal, target_key, trace_id, recorded_at,
-- scopes, props as jsonb).
INSERT INTO {audit_events} (namespace, event_id, action, principal, target_key, trace_id, recorded_at, scopes, props)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (namespace, event_id) DO NOTHING

-- name: audit_events_recorded_before
-- Retention: [event_id, trace_id] of at most N audit events of a namespace recorded before an instant,
-- oldest first (parameters: namespace, instant, N); the time index serves it.
SELECT event_id, trace_id FROM {audit_events}
WHERE namespace = %s AND recorded_at < %s
ORDER BY recorded_at, event_id
LIMIT %s

-- name: count_audit_events_recorded_before
-- Retention: how many audit events of a namespace were recorded before an instant (parameters:
-- namespace, instant).
SELECT count(*) FROM {audit_events} WHERE namespace = %s AND recorded_at < %s

-- name: delete_audit_event_rows
-- Retention: the index rows of audit events whose vertices were deleted (parameters: namespace, event ids).
DELETE FROM {audit_events} WHERE namespace = %s AND event_id = ANY(%s)

-- name: traces_without_events
-- Retention: the trace ids among the given ones that no audit event of the namespace names any more
-- (parameters: namespace, trace ids), so their anchor vertices can go too.
SELECT t.trace_id FROM unnest(%s::text[]) AS t(trace_id)
WHERE NOT EXISTS (SELECT 1 FROM {audit_events} a WHERE a.namespace = %s AND a.trace_id = t.trace_id)
