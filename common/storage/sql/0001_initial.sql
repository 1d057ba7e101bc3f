-- memory-service schema, version 1 (docs/explanation/knowledge-model.md, docs/explanation/architecture.md).
-- Identifiers in braces are configurable table names (CB_*_TABLE) filled in with psycopg.sql.Identifier;
-- {text_search_config} and {embedding_dim} are validated literals. The graph is created in Python.

CREATE TABLE IF NOT EXISTS {observations} (
    observation_id     text PRIMARY KEY,
    namespace          text NOT NULL,
    source_system      text NOT NULL,
    source_stream      text NOT NULL,
    source_external_id text,
    kind               text NOT NULL,
    occurred_at        timestamptz NOT NULL,
    received_at        timestamptz NOT NULL DEFAULT now(),
    actor              jsonb,
    subject            jsonb,
    scopes             text[] NOT NULL DEFAULT ARRAY[]::text[],
    content            text NOT NULL DEFAULT '',
    data               jsonb NOT NULL DEFAULT jsonb_build_object(),
    assertions         jsonb NOT NULL DEFAULT jsonb_build_array(),
    provenance         jsonb NOT NULL DEFAULT jsonb_build_object(),
    status             text NOT NULL,
    status_detail      jsonb NOT NULL DEFAULT jsonb_build_object()
);
CREATE INDEX IF NOT EXISTS {observations_namespace_time_idx} ON {observations} (namespace, occurred_at);

-- Registry of graph vertices: one row per (namespace, natural_key). Its primary key is what serialises
-- concurrent writers (AGE has no unique property constraints, docs/explanation/architecture.md); vertex properties live in
-- AGE.
CREATE TABLE IF NOT EXISTS {graph_nodes} (
    namespace    text NOT NULL,
    natural_key  text NOT NULL,
    node_type    text NOT NULL,
    label        text NOT NULL,
    placeholder  boolean NOT NULL DEFAULT false,
    origin       text NOT NULL DEFAULT 'agent',
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_seen    timestamptz NOT NULL DEFAULT now(),
    -- occurred_at of the assertion whose title/attributes the vertex holds (later evidence wins)
    asserted_at  timestamptz,
    -- sha256 of the vertex properties last written, so an unchanged upsert skips the Cypher SET
    props_hash   text,
    PRIMARY KEY (namespace, natural_key)
);
CREATE INDEX IF NOT EXISTS {graph_nodes_type_idx} ON {graph_nodes} (namespace, node_type);

-- Relational index of fact edges: one row per fact_id, the same properties as the AGE edge, written in
-- the same transaction. It guarantees one edge per fact_id and serves as-of queries with B-tree indexes.
CREATE TABLE IF NOT EXISTS {facts} (
    fact_id         text PRIMARY KEY,
    namespace       text NOT NULL,
    subject_key     text NOT NULL,
    predicate       text NOT NULL,
    object_key      text NOT NULL,
    valid_from      timestamptz NOT NULL,
    valid_to        timestamptz,
    observed_at     timestamptz NOT NULL,
    evidence        text NOT NULL,
    confidence      double precision NOT NULL,
    observation_ids text[] NOT NULL DEFAULT ARRAY[]::text[],
    supersedes      text,
    superseded_by   text,
    origin          text NOT NULL DEFAULT 'agent',
    scopes          text[] NOT NULL DEFAULT ARRAY[]::text[],
    attributes      jsonb NOT NULL DEFAULT jsonb_build_object(),
    source_path     text NOT NULL DEFAULT '',
    evidence_lost   boolean NOT NULL DEFAULT false,
    CHECK (valid_to IS NULL OR valid_to >= valid_from)
);
CREATE INDEX IF NOT EXISTS {facts_subject_idx} ON {facts} (namespace, subject_key, predicate, valid_from);
CREATE INDEX IF NOT EXISTS {facts_object_idx} ON {facts} (namespace, object_key, predicate, valid_from);
CREATE INDEX IF NOT EXISTS {facts_predicate_idx} ON {facts} (namespace, predicate, valid_from);
CREATE INDEX IF NOT EXISTS {facts_supersedes_idx} ON {facts} (namespace, supersedes) WHERE supersedes IS NOT NULL;

CREATE TABLE IF NOT EXISTS {chunks} (
    id           bigserial PRIMARY KEY,
    namespace    text NOT NULL,
    node_key     text NOT NULL,
    chunk_order  integer NOT NULL,
    node_type    text NOT NULL DEFAULT 'document',
    source_path  text NOT NULL DEFAULT '',
    title        text NOT NULL DEFAULT '',
    heading      text NOT NULL DEFAULT '',
    text         text NOT NULL,
    embedding    vector({embedding_dim}) NOT NULL,
    meta         jsonb NOT NULL DEFAULT jsonb_build_object(),
    seen_run     text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    search_document tsvector GENERATED ALWAYS AS (
        to_tsvector({text_search_config}::regconfig, title || ' ' || heading || ' ' || text)
    ) STORED,
    UNIQUE (namespace, node_key, chunk_order)
);
CREATE INDEX IF NOT EXISTS {chunks_embedding_idx} ON {chunks} USING hnsw (embedding vector_cosine_ops);
CREATE INDEX IF NOT EXISTS {chunks_search_idx} ON {chunks} USING gin (search_document);
CREATE INDEX IF NOT EXISTS {chunks_meta_idx} ON {chunks} USING gin (meta);
CREATE INDEX IF NOT EXISTS {chunks_namespace_idx} ON {chunks} (namespace);
CREATE INDEX IF NOT EXISTS {chunks_trigram_idx} ON {chunks} USING gin (text gin_trgm_ops);

CREATE TABLE IF NOT EXISTS {context_traces} (
    id           bigserial PRIMARY KEY,
    namespace    text NOT NULL,
    trace_id     text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    request      jsonb NOT NULL,
    decisions    jsonb NOT NULL
);
CREATE INDEX IF NOT EXISTS {context_traces_trace_idx} ON {context_traces} (namespace, trace_id);

CREATE TABLE IF NOT EXISTS {domain_packs} (
    name        text NOT NULL,
    version     text NOT NULL,
    content     jsonb NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (name, version)
);

CREATE TABLE IF NOT EXISTS {namespace_settings} (
    namespace   text PRIMARY KEY,
    packages    jsonb NOT NULL DEFAULT jsonb_build_array(),
    strict      boolean NOT NULL DEFAULT false,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS {snapshots} (
    id            bigserial PRIMARY KEY,
    namespace     text NOT NULL,
    source        text NOT NULL,
    scope         text NOT NULL,
    snapshot_id   text NOT NULL,
    snapshot_time timestamptz NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    counts        jsonb NOT NULL DEFAULT jsonb_build_object(),
    UNIQUE (namespace, source, scope, snapshot_id)
);

CREATE TABLE IF NOT EXISTS {snapshot_items} (
    snapshot_row  bigint NOT NULL REFERENCES {snapshots} (id) ON DELETE CASCADE,
    item_kind     text NOT NULL,
    item_key      text NOT NULL,
    item_hash     text NOT NULL,
    PRIMARY KEY (snapshot_row, item_kind, item_key)
);

-- What the chunks table was built for: a different embedding model or text search config is refused.
CREATE TABLE IF NOT EXISTS memory_index_settings (
    table_name         text PRIMARY KEY,
    embedding_model    text NOT NULL,
    embedding_dim      integer NOT NULL,
    text_search_config text NOT NULL
);
