"""Versioned schema migrations: extensions, the AGE graph, the tables (``sql/NNNN_*.sql``), base labels.

Most migrations are SQL scripts; ``0009_namespace_safe_labels`` is a Python step
(`common.storage.schema.label_migration.migrate_labels`: it derives labels with `graph_label`, which SQL alone
would have to duplicate), run and recorded the same way, and so is ``0016_enrichment_queue``
(`common.storage.schema.queue_migration.apply_queue_schema`: the schema procrastinate ships, unless present).

`apply` runs every migration not yet recorded in ``memory_schema_migrations``, each in its own
transaction, under one advisory lock shared by every process (docs/explanation/architecture.md: idempotent, at start-up or on
first use), then checks that the chunks table fits the configured embedding dimension and model.

The runner's own statements (lock, graph, journal, index settings) are named queries
(``sql/queries/migrations.sql``); each migration is one script formatted with `query_placeholders` and the
validated literals ``{embedding_dim}`` and ``{text_search_config}``.
"""

from __future__ import annotations

from importlib import resources
from typing import TYPE_CHECKING
from typing import Any

import psycopg
from psycopg import sql

from common.kernel.errors import FailedPrecondition
from common.storage.graph.age import AgeGraph
from common.storage.named_queries import Queries
from common.storage.schema.label_migration import MIGRATION_NAME as LABEL_MIGRATION
from common.storage.schema.label_migration import migrate_labels
from common.storage.schema.queue_migration import MIGRATION_NAME as QUEUE_MIGRATION
from common.storage.schema.queue_migration import apply_queue_schema
from common.storage.session import prepare_age_session
from common.storage.tables import query_placeholders

if TYPE_CHECKING:
    from common.storage.database import Database

MIGRATION_LOCK_KEY = 0x6D656D6F  # "memo": pg_advisory_lock key serialising migrations of every process
MIGRATIONS = (
    "0001_initial.sql",
    "0002_episode_chunks.sql",
    "0003_fact_evidence.sql",
    "0004_node_scopes.sql",
    "0005_fact_snapshots.sql",
    "0006_bulk_graph_writes.sql",
    "0007_snapshot_fact_lookup.sql",
    "0008_context_trace_scopes.sql",
    LABEL_MIGRATION,
    "0010_episode_embeddings.sql",
    "0011_lexeme_statistics.sql",
    "0012_namespace_vector_index.sql",
    "0013_vault_runs.sql",
    "0014_observation_order.sql",
    "0015_memories.sql",
    QUEUE_MIGRATION,
    "0017_tenant_vector_indexes.sql",
    "0026_namespace_lexical_indexes.sql",
    "0027_lexical_index_pending_lists.sql",
    "0028_identifier_trigram_index.sql",
    "0031_audit_event_index.sql",
    "0034_change_feed.sql",
    "0035_webhooks.sql",
    "0032_document_originals.sql",
    "0036_data_protection.sql",
    "0037_change_feed_write_cost.sql",
    "0038_memory_recall_peers.sql",
    "0039_memory_owner_vector_indexes.sql",
)


def apply(database: Database) -> list[str]:
    """Creates extensions, the graph and the tables, idempotently, under an advisory lock.

    Returns the names of migrations applied now (empty when the schema was current).

    Raises:
        psycopg.Error: the database is unreachable or refuses a statement.
        FailedPrecondition: the chunks table was built for another embedding dimension or model.
    """
    applied: list[str] = []
    queries = Queries.for_settings("migrations.sql", database.settings)
    with psycopg.connect(database.settings.database_url, autocommit=True, connect_timeout=5) as conn:
        conn.execute(queries["lock_migrations"], (MIGRATION_LOCK_KEY,))
        try:
            for extension in ("age", "vector", "pg_trgm", "btree_gin"):
                conn.execute(sql.SQL("CREATE EXTENSION IF NOT EXISTS {}").format(sql.Identifier(extension)))
            prepare_age_session(conn)
            if not conn.execute(queries["graph_exists"], (database.settings.graph_name,)).fetchone():
                conn.execute(queries["create_graph"], (database.settings.graph_name,))
            conn.execute(queries["create_migrations_journal"])
            done = {row[0] for row in conn.execute(queries["applied_migrations"]).fetchall()}
            placeholders = {
                **query_placeholders(database.settings),
                "embedding_dim": sql.Literal(database.settings.embedding_dim),
                "text_search_config": sql.Literal(database.settings.text_search_config),
            }
            for name in MIGRATIONS:
                if name in done:
                    continue
                with conn.transaction():
                    if name == LABEL_MIGRATION:
                        migrate_labels(database, conn)
                    elif name == QUEUE_MIGRATION:
                        apply_queue_schema(conn, queries)
                    else:
                        text = resources.files("common.storage").joinpath("sql", name).read_text("utf-8")
                        conn.execute(sql.SQL(text).format(**placeholders))  # type: ignore[arg-type]
                    conn.execute(queries["record_migration"], (name,))
                applied.append(name)
            _check_index_settings(database, conn, queries)
        finally:
            conn.execute(queries["unlock_migrations"], (MIGRATION_LOCK_KEY,))
    AgeGraph.ensure_base_labels(database)
    return applied


def _check_index_settings(database: Database, conn: psycopg.Connection[Any], queries: Queries) -> None:
    chunks = database.settings.chunks_table
    row = conn.execute(queries["embedding_column_type"], (chunks,)).fetchone()
    expected = f"vector({database.settings.embedding_dim})"
    if row and row[0] != expected:
        raise FailedPrecondition(
            f"table {chunks}.embedding is {row[0]} but CB_EMBEDDING_DIM={database.settings.embedding_dim}: "
            f"set CB_EMBEDDING_DIM to the table's dimension, or reindex into a new table (CB_CHUNKS_TABLE)"
        )
    if database.embedding_model is None:
        return
    conn.execute(
        queries["record_index_settings"],
        (
            chunks,
            database.embedding_model,
            database.settings.embedding_dim,
            database.settings.text_search_config,
        ),
    )
    recorded = conn.execute(queries["index_settings"], (chunks,)).fetchone()
    assert recorded is not None
    if recorded[0] != database.embedding_model:
        raise FailedPrecondition(
            f"table {chunks} holds embeddings of model {recorded[0]!r}, this service embeds with "
            f"{database.embedding_model!r}: set CB_EMBEDDING_PROVIDER back, or reindex into a new table (CB_CHUNKS_TABLE)"
        )
