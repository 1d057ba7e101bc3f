"""Names of the configurable tables, of their indexes and of the graph, as `psycopg.sql` identifiers.

Every store, its named queries (`common.storage.named_queries`) and the migration runner format their SQL
with these, so a deployment that renames a table (`CB_CHUNKS_TABLE`, ...) renames it everywhere at once.
"""

from __future__ import annotations

from psycopg import sql

from common.kernel.config import Settings


def table_identifiers(settings: Settings) -> dict[str, sql.Composable]:
    """Identifiers of the configurable tables and their index names, for `psycopg.sql.SQL.format`."""
    names = {
        "observations": settings.observations_table,
        "graph_nodes": "graph_nodes",
        "facts": "facts",
        "chunks": settings.chunks_table,
        "context_traces": settings.context_traces_table,
        "domain_packs": settings.domain_packs_table,
        "namespace_settings": settings.namespace_settings_table,
        "snapshots": settings.snapshots_table,
        "snapshot_items": settings.snapshots_table + "_items",
        "vault_runs": "vault_runs",
        "vault_documents": "vault_documents",
        "memories": "memories",
        "audit_events": "audit_events",
        "change_events": "change_events",
        "webhook_deliveries": "webhook_deliveries",
        "document_originals": "document_originals",
        "document_files": "document_files",
    }
    identifiers: dict[str, sql.Composable] = {key: sql.Identifier(value) for key, value in names.items()}
    index_suffixes = {
        "observations_namespace_time_idx": ("observations", "namespace_time_idx"),
        "observations_stream_order_idx": ("observations", "stream_order_idx"),
        "graph_nodes_type_idx": ("graph_nodes", "type_idx"),
        "facts_subject_idx": ("facts", "subject_idx"),
        "facts_object_idx": ("facts", "object_idx"),
        "facts_predicate_idx": ("facts", "predicate_idx"),
        "facts_supersedes_idx": ("facts", "supersedes_idx"),
        "facts_observation_ids_idx": ("facts", "observation_ids_idx"),
        "chunks_embedding_idx": ("chunks", "embedding_idx"),
        "chunks_search_idx": ("chunks", "search_idx"),
        "chunks_meta_idx": ("chunks", "meta_idx"),
        "chunks_namespace_idx": ("chunks", "namespace_idx"),
        "chunks_trigram_idx": ("chunks", "trigram_idx"),
        "chunks_namespace_search_idx": ("chunks", "namespace_search_idx"),
        "chunks_namespace_trigram_idx": ("chunks", "namespace_trigram_idx"),
        "chunks_namespace_identifier_idx": ("chunks", "namespace_identifier_idx"),
        "chunks_namespace_vector_idx": ("chunks", "namespace_vector_idx"),
        "chunks_embedding_pending_idx": ("chunks", "embedding_pending_idx"),
        "chunks_memory_text_idx": ("chunks", "memory_text_idx"),
        "context_traces_trace_idx": ("context_traces", "trace_idx"),
        "facts_snapshot_idx": ("facts", "snapshot_idx"),
        "snapshots_latest_idx": ("snapshots", "latest_idx"),
        "vault_runs_namespace_idx": ("vault_runs", "namespace_idx"),
        "vault_documents_seen_idx": ("vault_documents", "seen_idx"),
        "memories_owner_idx": ("memories", "owner_idx"),
        "memories_tier_idx": ("memories", "tier_idx"),
        "memories_expiry_idx": ("memories", "expiry_idx"),
        "memories_enrichment_due_idx": ("memories", "enrichment_due_idx"),
        "memories_summary_idx": ("memories", "summary_idx"),
        "audit_events_time_idx": ("audit_events", "time_idx"),
        "audit_events_principal_idx": ("audit_events", "principal_idx"),
        "document_files_sha256_idx": ("document_files", "sha256_idx"),
    }
    for key, (table, suffix) in index_suffixes.items():
        identifiers[key] = sql.Identifier(f"{names[table]}_{suffix}")
    # Lexeme statistics of the chunks table (sql/0011_lexeme_statistics.sql): tables, function, triggers.
    for key, suffix in {
        "chunk_terms": "terms",
        "chunk_term_deltas": "term_deltas",
        "chunk_term_deltas_idx": "term_deltas_idx",
        "chunk_terms_record": "record_terms",
        "chunk_terms_function": "count_terms",
        "chunk_terms_insert_trigger": "terms_insert",
        "chunk_terms_update_trigger": "terms_update",
        "chunk_terms_delete_trigger": "terms_delete",
        # The function behind the generated column identifier_text (sql/0028_identifier_trigram_index.sql).
        "chunk_identifier_text": "identifier_text",
        # The per-tenant vector indexes of the chunks table (sql/0017_tenant_vector_indexes.sql).
        "chunk_tenant_indexes": "tenant_vector_indexes",
        # The per-owner vector indexes of memory chunks (sql/0039_memory_owner_vector_indexes.sql).
        "chunk_owner_indexes": "owner_vector_indexes",
    }.items():
        identifiers[key] = sql.Identifier(f"{names['chunks']}_{suffix}")
    return identifiers


def query_placeholders(settings: Settings) -> dict[str, sql.Composable]:
    """What the SQL templates of the stores and migrations may name: `table_identifiers`, plus ``{graph}``
    (the AGE graph's schema, an identifier, for label tables ``{graph}.label``) and ``{graph_name}`` (the
    graph's name as a literal: ``ag_catalog.cypher`` takes it as a constant, never as a parameter)."""
    return {
        **table_identifiers(settings),
        "graph": sql.Identifier(settings.graph_name),
        "graph_name": sql.Literal(settings.graph_name),
    }


class ComposingStore:
    """The base of a store that composes its statements with `psycopg.sql` at run time: its settings,
    the configured table identifiers (``t``, `table_identifiers`) and the graph name (``graph``)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.t = table_identifiers(settings)
        self.graph = settings.graph_name
