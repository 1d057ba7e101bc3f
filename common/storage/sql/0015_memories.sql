-- Memory records (docs/explanation/memory-records.md). A memory is a graph node of type
-- `memory` (its semantic fields in the vertex's props) with its text as one chunk of {chunks}; this
-- narrow table holds what recall, lists, tiers, expiry and the enrichment queue filter and sort on,
-- with B-tree indexes (AGE property look-ups in WHERE use no index, docs/explanation/architecture.md). One row per memory
-- node, written in the node's transaction.
--   namespace        org_<organization>_env_<environment>[_proj_<project>] (common/domain/memory_scope.py)
--   user_scope       the owner's visibility scope, also on the node and the chunk (principal:memory-user/...)
--   hidden           covered by a lossy summary (summary_id): left out of recall and lists
--   last_used_at     created_at, then the last recall: what the tier policy ages
--   version          1 on add, +1 on every change of text or semantic fields
--   enriched_version the version the enrichment fields describe; a row with enriched_version < version is
--                    due for enrichment (the add/update transaction makes it due, so a job lost between
--                    commit and enqueue is found again by memories_enrichment_due_idx)
CREATE TABLE IF NOT EXISTS {memories} (
    namespace         text NOT NULL,
    memory_id         text NOT NULL,
    organization_id   text NOT NULL,
    environment       text NOT NULL,
    project_id        text NOT NULL DEFAULT '',
    user_id           text NOT NULL,
    user_scope        text NOT NULL,
    idempotency_key   text NOT NULL DEFAULT '',
    source            text NOT NULL DEFAULT '',
    event_type        text NOT NULL DEFAULT '',
    tags              text[] NOT NULL DEFAULT '{{}}',
    importance        real NOT NULL DEFAULT 0.5,
    quality_score     real,
    memory_type       text NOT NULL DEFAULT '',
    tier              text NOT NULL DEFAULT 'hot' CHECK (tier IN ('hot', 'warm', 'cold')),
    is_summary        boolean NOT NULL DEFAULT false,
    lossless          boolean NOT NULL DEFAULT false,
    parent_id         text NOT NULL DEFAULT '',
    summary_id        text NOT NULL DEFAULT '',
    hidden            boolean NOT NULL DEFAULT false,
    expires_at        timestamptz,
    created_at        timestamptz NOT NULL,
    updated_at        timestamptz NOT NULL,
    last_used_at      timestamptz NOT NULL,
    last_recalled_at  timestamptz,
    recall_count      bigint NOT NULL DEFAULT 0,
    version           bigint NOT NULL DEFAULT 1,
    enriched_version  bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (namespace, memory_id)
);
-- Lists and recall: one owner's memories, newest first (keyset paging on (created_at, memory_id)).
CREATE INDEX IF NOT EXISTS {memories_owner_idx}
    ON {memories} (namespace, user_id, created_at DESC, memory_id DESC);
-- The tier policy: memories of a tier by last use.
CREATE INDEX IF NOT EXISTS {memories_tier_idx} ON {memories} (tier, last_used_at) WHERE tier <> 'cold';
-- The expiry sweep.
CREATE INDEX IF NOT EXISTS {memories_expiry_idx} ON {memories} (expires_at) WHERE expires_at IS NOT NULL;
-- The enrichment queue's safety net: rows whose current version is not enriched yet.
CREATE INDEX IF NOT EXISTS {memories_enrichment_due_idx}
    ON {memories} (updated_at) WHERE enriched_version < version;
-- Originals of a summary.
CREATE INDEX IF NOT EXISTS {memories_summary_idx}
    ON {memories} (namespace, summary_id) WHERE summary_id <> '';
