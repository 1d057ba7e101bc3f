-- Relational index of audit events: one row per audit_event vertex, the same properties, written in the
-- vertex's transaction (common/storage/audit_store.py). AuditService.ListAuditEvents filters and pages it
-- with B-tree indexes (by time, principal, action) instead of scanning vertex properties. Events are
-- immutable, so the copy never goes stale.
CREATE TABLE IF NOT EXISTS {audit_events} (
    namespace    text NOT NULL,
    event_id     text NOT NULL,
    action       text NOT NULL,
    principal    text NOT NULL,
    target_key   text NOT NULL DEFAULT '',
    trace_id     text NOT NULL,
    recorded_at  timestamptz NOT NULL,
    scopes       text[] NOT NULL DEFAULT '{{}}',
    props        jsonb NOT NULL,
    PRIMARY KEY (namespace, event_id)
);
CREATE INDEX IF NOT EXISTS {audit_events_time_idx} ON {audit_events} (namespace, recorded_at, event_id);
CREATE INDEX IF NOT EXISTS {audit_events_principal_idx}
    ON {audit_events} (namespace, principal, recorded_at, event_id);
-- Backfill from the events recorded before this table existed.
INSERT INTO {audit_events} (namespace, event_id, action, principal, target_key, trace_id, recorded_at, scopes, props)
SELECT g.namespace, v.doc -> 'props' ->> 'event_id', coalesce(v.doc -> 'props' ->> 'action', ''),
       coalesce(v.doc -> 'props' ->> 'principal', ''), coalesce(v.doc -> 'props' ->> 'target_key', ''),
       coalesce(v.doc -> 'props' ->> 'trace_id', ''), coalesce((v.doc -> 'props' ->> 'recorded_at')::timestamptz, g.created_at),
       g.scopes, v.doc -> 'props'
FROM (SELECT (ag_catalog.agtype_out(properties)::text)::jsonb AS doc FROM {graph}._ag_label_vertex) AS v
JOIN {graph_nodes} g ON g.namespace = v.doc ->> 'namespace' AND g.natural_key = v.doc ->> 'natural_key'
WHERE g.node_type = 'audit_event' AND v.doc -> 'props' ->> 'event_id' IS NOT NULL
ON CONFLICT DO NOTHING;
