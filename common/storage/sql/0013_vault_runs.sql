-- Vault ingest (docs/explanation/knowledge-model.md): the journal of vault runs and the
-- documents each namespace's vault holds, for mark-and-sweep and incremental re-runs.
-- vault_runs: one row per run (VaultService.IngestVault), status running | completed | interrupted |
-- failed; report is the run's counts. A dry run writes no row.
CREATE TABLE IF NOT EXISTS {vault_runs} (
    run_id       text PRIMARY KEY,
    namespace    text NOT NULL,
    source       text NOT NULL DEFAULT '',
    branch       text NOT NULL DEFAULT '',
    commit_sha   text NOT NULL DEFAULT '',
    status       text NOT NULL,
    started_at   timestamptz NOT NULL,
    finished_at  timestamptz,
    report       jsonb NOT NULL DEFAULT jsonb_build_object()
);
CREATE INDEX IF NOT EXISTS {vault_runs_namespace_idx} ON {vault_runs} (namespace, started_at);
-- vault_documents: one row per document the vault projected into a namespace (its node is owned by
-- the vault). fingerprint: sha256 of path, text and provenance (indexed_at left out), compared by the
-- next run; node_hash: graph_nodes.props_hash right after the projection, so a node rewritten through
-- the API since is projected again; seen_run: the last run that saw the document (the sweep deletes
-- the rows of other runs); links: the link and relation targets as written; resolved: what they
-- resolved to (LINKS_TO: the target keys; relations: predicate, object and fact_id of each).
CREATE TABLE IF NOT EXISTS {vault_documents} (
    namespace    text NOT NULL,
    natural_key  text NOT NULL,
    source_path  text NOT NULL,
    fingerprint  text NOT NULL,
    indexed_at   timestamptz NOT NULL,
    node_hash    text,
    seen_run     text NOT NULL,
    links        jsonb NOT NULL DEFAULT jsonb_build_object(),
    resolved     jsonb NOT NULL DEFAULT jsonb_build_object(),
    PRIMARY KEY (namespace, natural_key)
);
CREATE INDEX IF NOT EXISTS {vault_documents_seen_idx} ON {vault_documents} (namespace, seen_run);
