-- Static SQL of the observations table (common/storage/observation_store.py). Loaded by
-- common/storage/named_queries.py; see there for the placeholders ({observations}, ...) and parameters.
-- Reading one observation (the caller's visibility predicate, an optional lock) is composed in Python.

-- name: insert_observations
-- Inserts new observations in one statement, in the order given (recorded_order follows it); the
-- parameter is a jsonb array of objects, one per observation, with the columns listed below (occurred_at
-- as an ISO-8601 instant, scopes as a JSON array). A duplicate (an existing observation_id, or one
-- earlier in the array) is skipped; returns the observation_ids inserted.
INSERT INTO {observations} (
    observation_id, namespace, source_system, source_stream, source_external_id, kind, occurred_at, actor,
    subject, scopes, content, data, assertions, provenance, status
)
SELECT x.observation_id, x.namespace, x.source_system, x.source_stream, x.source_external_id, x.kind,
    x.occurred_at, x.actor, x.subject, ARRAY(SELECT jsonb_array_elements_text(x.scopes)), x.content, x.data,
    x.assertions, x.provenance, x.status
FROM ROWS FROM (jsonb_to_recordset(%s::jsonb) AS (
    observation_id text, namespace text, source_system text, source_stream text, source_external_id text,
    kind text, occurred_at timestamptz, actor jsonb, subject jsonb, scopes jsonb, content text, data jsonb,
    assertions jsonb, provenance jsonb, status text
)) WITH ORDINALITY AS x(
    observation_id, namespace, source_system, source_stream, source_external_id, kind, occurred_at, actor,
    subject, scopes, content, data, assertions, provenance, status, position
)
ORDER BY x.position
ON CONFLICT (observation_id) DO NOTHING RETURNING observation_id

-- name: set_observation_status
-- Records the processing status and its detail (parameters: status, detail, observation id).
UPDATE {observations} SET status = %s, status_detail = %s WHERE observation_id = %s

-- name: observation_statuses
-- observation_id and status of the existing observations among a list (parameter: the ids).
SELECT observation_id, status FROM {observations} WHERE observation_id = ANY(%s)

-- name: redact_observation
-- Replaces content (parameter 1), empties data and assertions, sets status 'redacted' with a detail
-- (parameter 2) of the observation (parameters 3, 4: namespace, observation id); returns the row after
-- the update.
UPDATE {observations} SET content = %s, data = jsonb_build_object(), assertions = jsonb_build_array(),
    status = 'redacted', status_detail = %s
WHERE namespace = %s AND observation_id = %s RETURNING *

-- name: delete_observation
-- Deletes one observation (parameters: namespace, observation id).
DELETE FROM {observations} WHERE namespace = %s AND observation_id = %s

-- name: observation_received_at
-- When an observation was received (parameter: observation id).
SELECT received_at FROM {observations} WHERE observation_id = %s
