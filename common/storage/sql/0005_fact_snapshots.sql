-- Snapshot reconciliation (docs/explanation/knowledge-model.md). A fact written by
-- SnapshotService.Reconcile carries the (source, scope) whose snapshots own it and the snapshot that last
-- confirmed it; a later snapshot of the same (source, scope) that no longer lists it closes it. Facts of
-- other origins keep NULL and are never closed by a snapshot.
ALTER TABLE {facts} ADD COLUMN IF NOT EXISTS snapshot_source text;
ALTER TABLE {facts} ADD COLUMN IF NOT EXISTS snapshot_scope text;
ALTER TABLE {facts} ADD COLUMN IF NOT EXISTS snapshot_id text;
CREATE INDEX IF NOT EXISTS {facts_snapshot_idx} ON {facts} (namespace, snapshot_source, snapshot_scope)
    WHERE snapshot_source IS NOT NULL AND valid_to IS NULL;
CREATE INDEX IF NOT EXISTS {snapshots_latest_idx} ON {snapshots} (namespace, source, scope, snapshot_time);
