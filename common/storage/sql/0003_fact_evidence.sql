-- Evidence lifecycle (docs/explanation/knowledge-model.md).
-- agent_asserted: the fact was asserted directly through FactService.AssertFacts (origin "agent", no
-- observation). Such evidence cannot be redacted or purged, so a fact with agent_asserted never becomes
-- evidence_lost when its observation_ids run empty.
ALTER TABLE {facts} ADD COLUMN IF NOT EXISTS agent_asserted boolean NOT NULL DEFAULT false;
-- Redact/Purge find the facts an observation proved with `observation_ids @> ARRAY[id]`.
CREATE INDEX IF NOT EXISTS {facts_observation_ids_idx} ON {facts} USING gin (observation_ids);
