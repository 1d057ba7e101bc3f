-- The enrichment queue's reads of procrastinate's jobs table (common/storage/enrichment_jobs_store.py;
-- migration 0016 created the table and the index procrastinate_jobs_enrichment_lock_idx).
-- A memory's jobs carry the queueing lock 'memory:<namespace>/<memory_id>'
-- (ingest_service/memories/enrichment/queue.py: memory_lock).

-- name: due_without_job
-- Memories whose current version is not enriched (memories_enrichment_due_idx) and that have no job
-- waiting or running, nor a failed job for that version, oldest change first: (namespace, memory_id,
-- version). Parameters: task (the enrichment task's name), limit.
SELECT m.namespace, m.memory_id, m.version
FROM {memories} m
WHERE m.enriched_version < m.version
  AND NOT EXISTS (
      SELECT 1 FROM procrastinate_jobs j
      WHERE j.task_name = %(task)s
        AND j.queueing_lock = 'memory:' || m.namespace || '/' || m.memory_id
        AND (j.status IN ('todo', 'doing')
             OR (j.status = 'failed' AND (j.args ->> 'version')::bigint = m.version))
  )
ORDER BY m.updated_at
LIMIT %(limit)s

-- name: failed_jobs
-- The enrichment jobs that exhausted their tries: (namespace, memory_id, version, attempts), newest
-- first. Parameters: task, limit.
SELECT j.args ->> 'namespace', j.args ->> 'memory_id', (j.args ->> 'version')::bigint, j.attempts
FROM procrastinate_jobs j
WHERE j.task_name = %(task)s AND j.status = 'failed'
ORDER BY j.id DESC
LIMIT %(limit)s
