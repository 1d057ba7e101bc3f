-- Static SQL of vault runs (common/storage/vault_store.py). Loaded by
-- common/storage/named_queries.py.

-- name: try_lock_vault_namespace
-- Tries the session-level advisory lock that serialises the vault runs of one namespace (parameter: the
-- lock id); true when taken. Held on a connection of its own for the whole run.
SELECT pg_try_advisory_lock(%s)

-- name: unlock_vault_namespace
-- Releases the lock of try_lock_vault_namespace (parameter: the lock id).
SELECT pg_advisory_unlock(%s)

-- name: insert_vault_run
-- Journals a run as running (parameters: run id, namespace, source, branch, commit sha, start).
INSERT INTO {vault_runs} (run_id, namespace, source, branch, commit_sha, status, started_at)
VALUES (%s, %s, %s, %s, %s, 'running', %s)

-- name: close_abandoned_vault_runs
-- Journals as interrupted the runs of a namespace still marked running when a new run holds the
-- namespace's vault lock: their process ended without journaling their end (parameters: end, the new
-- run's id, namespace). Returns their run ids.
UPDATE {vault_runs} SET status = 'interrupted', finished_at = %s,
    report = report || jsonb_build_object('abandoned', true, 'closed_by_run', %s::text)
WHERE namespace = %s AND status = 'running'
RETURNING run_id

-- name: finish_vault_run
-- Records how a run ended (parameters: status, end, report as JSON, run id).
UPDATE {vault_runs} SET status = %s, finished_at = %s, report = %s WHERE run_id = %s

-- name: vault_run_by_id
-- One run of the journal (parameter: run id).
SELECT run_id, namespace, status, started_at, finished_at, report FROM {vault_runs} WHERE run_id = %s

-- name: vault_documents_of_namespace
-- Every document of a namespace's vault with the registry's current props hash, placeholder flag, origin
-- and scopes of its node (NULL when the node is gone) (parameter: namespace).
SELECT d.natural_key, d.source_path, d.fingerprint, d.indexed_at, d.node_hash, d.seen_run, d.links,
    d.resolved, g.props_hash, g.placeholder, g.origin, g.scopes
FROM {vault_documents} d
LEFT JOIN {graph_nodes} g ON g.namespace = d.namespace AND g.natural_key = d.natural_key
WHERE d.namespace = %s

-- name: upsert_vault_document
-- Records a projected document (parameters: namespace, key, path, fingerprint, indexed_at, run, links as
-- JSON); node_hash is the registry's props hash as written in the same transaction.
INSERT INTO {vault_documents} AS d (
    namespace, natural_key, source_path, fingerprint, indexed_at, node_hash, seen_run, links
)
SELECT %(namespace)s, %(key)s, %(path)s, %(fingerprint)s, %(indexed_at)s,
    (SELECT props_hash FROM {graph_nodes} WHERE namespace = %(namespace)s AND natural_key = %(key)s),
    %(run)s, %(links)s
ON CONFLICT (namespace, natural_key) DO UPDATE SET source_path = excluded.source_path,
    fingerprint = excluded.fingerprint, indexed_at = excluded.indexed_at, node_hash = excluded.node_hash,
    seen_run = excluded.seen_run, links = excluded.links

-- name: mark_vault_documents_seen
-- Marks unchanged documents seen by a run (parameters: run, namespace, keys).
UPDATE {vault_documents} SET seen_run = %s WHERE namespace = %s AND natural_key = ANY(%s)

-- name: set_vault_resolved
-- What a document's links and relations resolved to (parameters: resolved as JSON, namespace, key).
UPDATE {vault_documents} SET resolved = %s WHERE namespace = %s AND natural_key = %s

-- name: delete_vault_document
-- Forgets a swept document (parameters: namespace, key).
DELETE FROM {vault_documents} WHERE namespace = %s AND natural_key = %s

-- name: claim_vault_origin
-- The vault completed a placeholder: it owns the node from now on (parameters: namespace, key).
UPDATE {graph_nodes} SET origin = 'vault' WHERE namespace = %s AND natural_key = %s

-- name: agent_facts_touching
-- Facts of another origin than the vault whose subject or object is a node (parameters: namespace, key,
-- key).
SELECT count(*) FROM {facts}
WHERE namespace = %s AND (subject_key = %s OR object_key = %s) AND origin <> 'vault'

-- name: placeholder_registry_row
-- A swept node kept for the agent data on it becomes a placeholder again (parameters: namespace, key).
UPDATE {graph_nodes} SET placeholder = true, props_hash = NULL WHERE namespace = %s AND natural_key = %s

-- name: node_owner
-- Origin and placeholder flag of a key's node, no lock (parameters: namespace, key).
SELECT origin, placeholder FROM {graph_nodes} WHERE namespace = %s AND natural_key = %s

-- name: record_agent_retain
-- Journals an agent's Retain of a vault document: the order and digest of each chunk it wrote, in the
-- document's journal (links.agent_retain; upsert_vault_document replaces it) (parameters: the list as
-- JSON, namespace, key).
UPDATE {vault_documents} SET links = jsonb_set(links, '{{agent_retain}}', %s::jsonb)
WHERE namespace = %s AND natural_key = %s

-- name: delete_agent_retained_chunks
-- Deletes the chunks of a vault document that an agent's Retain wrote (record_agent_retain) and that
-- are still as it wrote them: seen_run NULL, same order, digest = sha256 hex of heading, newline, text
-- (common/storage/vault_store.py: chunk_digest) (parameters: namespace, key).
DELETE FROM {chunks} AS c
USING {vault_documents} AS d, jsonb_to_recordset(d.links -> 'agent_retain') AS x(chunk_order int, digest text)
WHERE d.namespace = %s AND d.natural_key = %s AND c.namespace = d.namespace AND c.node_key = d.natural_key
    AND c.seen_run IS NULL AND c.chunk_order = x.chunk_order
    AND encode(sha256(convert_to(c.heading || chr(10) || c.text, 'UTF8')), 'hex') = x.digest
