"""One PostgreSQL connection pool per process, versioned migrations, readiness.

The pool's configure hook loads AGE, sets ``search_path`` (``"$user", public, ag_catalog``: our tables
live in the first writable schema, never in AGE's own; ag_catalog last so agtype operators resolve) and
registers pgvector types (STYLE.md convention 5). psycopg errors that mean "the database is not reachable" become
`common.errors.Unavailable` at this boundary, so no psycopg type leaks into servicers.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib import resources
from typing import Any, TypeVar

import psycopg
from psycopg import sql
from psycopg_pool import ConnectionPool, PoolTimeout

from common.config import Settings
from common.errors import FailedPrecondition, Unavailable

log = logging.getLogger(__name__)
T = TypeVar("T")

MIGRATION_LOCK_KEY = 0x6D656D6F  # "memo": pg_advisory_lock key serialising migrations of every process
_MIGRATIONS = (
    "0001_initial.sql",
    "0002_episode_chunks.sql",
    "0003_fact_evidence.sql",
    "0004_node_scopes.sql",
    "0005_fact_snapshots.sql",
    "0006_bulk_graph_writes.sql",
    "0007_snapshot_fact_lookup.sql",
    "0008_context_trace_scopes.sql",
)

# SQLSTATE classes that mean the server or connection went away (retryable as a whole).
_UNAVAILABLE_SQLSTATES = {"57P01", "57P02", "57P03", "08000", "08003", "08006", "08001", "08004", "53300"}


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
    }
    identifiers: dict[str, sql.Composable] = {key: sql.Identifier(value) for key, value in names.items()}
    index_suffixes = {
        "observations_namespace_time_idx": ("observations", "namespace_time_idx"),
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
        "context_traces_trace_idx": ("context_traces", "trace_idx"),
        "facts_snapshot_idx": ("facts", "snapshot_idx"),
        "snapshots_latest_idx": ("snapshots", "latest_idx"),
    }
    for key, (table, suffix) in index_suffixes.items():
        identifiers[key] = sql.Identifier(f"{names[table]}_{suffix}")
    return identifiers


def is_unavailable_error(error: BaseException) -> bool:
    """True when ``error`` means the database cannot be reached (retry later), not a bad statement."""
    if isinstance(error, (psycopg.OperationalError, PoolTimeout)):
        sqlstate = getattr(error, "sqlstate", None)
        return sqlstate is None or sqlstate in _UNAVAILABLE_SQLSTATES or sqlstate.startswith("08")
    return False


class Database:
    """The process's database access: a lazily opened pool plus schema management.

    The pool is opened without waiting, so a service starts while PostgreSQL is down; `ensure_ready`
    (called by the health monitor) creates the schema on first contact.
    """

    def __init__(self, settings: Settings, *, embedding_model: str | None = None) -> None:
        """``embedding_model``: the model id the chunks table must have been built for (None: don't check)."""
        self.settings = settings
        self.embedding_model = embedding_model
        self._ready = False
        self._lock = threading.Lock()
        self._pool = ConnectionPool(
            settings.database_url,
            min_size=settings.pool_min_size,
            max_size=settings.pool_max_size,
            configure=self._configure,
            check=ConnectionPool.check_connection,
            open=False,
            timeout=10.0,
            reconnect_timeout=0,
            name="memory",
        )
        self._pool_opened = False

    # -- connections -------------------------------------------------------------------------------

    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        conn.autocommit = True
        try:
            conn.execute("LOAD 'age'")
        except psycopg.Error:
            # Non-superusers cannot LOAD; the server then must have age in shared_preload_libraries.
            pass
        conn.execute("SET search_path = \"$user\", public, ag_catalog")
        if self.settings.statement_timeout_ms:
            conn.execute(sql.SQL("SET statement_timeout = {}").format(sql.Literal(self.settings.statement_timeout_ms)))
        conn.execute(sql.SQL("SET hnsw.ef_search = {}").format(sql.Literal(self.settings.hnsw_ef_search)))
        try:
            conn.execute("SET hnsw.iterative_scan = relaxed_order")
            conn.execute(
                sql.SQL("SET hnsw.max_scan_tuples = {}").format(sql.Literal(self.settings.hnsw_max_scan_tuples))
            )
        except psycopg.Error:
            pass  # pgvector < 0.8 (or vector not created yet); retrieval then over-fetches instead
        try:
            from pgvector.psycopg import register_vector

            register_vector(conn)
        except psycopg.ProgrammingError:
            pass  # the extension does not exist before the first migration
        conn.autocommit = False

    def _open_pool(self) -> None:
        if not self._pool_opened:
            with self._lock:
                if not self._pool_opened:
                    self._pool.open(wait=False)
                    self._pool_opened = True

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection inside one transaction (committed on success, rolled back on error).

        Creates the schema on first contact.

        Raises:
            Unavailable: the database cannot be reached (nothing was committed).
            FailedPrecondition: the schema does not fit this service's settings.
        """
        self._ensure_schema()
        try:
            with self._pool.connection() as conn:
                with conn.transaction():
                    yield conn
        except BaseException as error:
            if is_unavailable_error(error):
                self._ready = False
                raise Unavailable("database unavailable; retry later") from error
            raise

    def run_transaction(self, work: Callable[[psycopg.Connection[Any]], T], *, attempts: int = 8) -> T:
        """Runs ``work(conn)`` in one transaction, retrying the whole transaction on deadlock (40P01) or
        serialization failure (40001), which concurrent writers of overlapping keys can cause.

        ``work`` must be safe to re-run from the start (it sees nothing of a rolled-back attempt).

        Raises:
            Unavailable: the database cannot be reached.
        """
        for attempt in range(1, attempts + 1):
            try:
                with self.connection() as conn:
                    return work(conn)
            except (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure):
                if attempt == attempts:
                    raise
                log.info("transaction retry %d after a deadlock/serialization failure", attempt)
                time.sleep(random.uniform(0.01, 0.05) * attempt)
        raise AssertionError("unreachable")

    def _ensure_schema(self) -> None:
        if self._ready:
            return
        try:
            self.migrate()
        except (psycopg.Error, OSError) as error:
            if isinstance(error, psycopg.Error) and not is_unavailable_error(error):
                raise
            raise Unavailable("database unavailable; retry later") from error
        self._open_pool()
        self._ready = True

    # -- readiness and migrations -----------------------------------------------------------------

    def ensure_ready(self) -> bool:
        """Connects (and migrates on first contact); False while unreachable or misconfigured. Never raises."""
        try:
            if not self._ready:
                self._ensure_schema()
                return True
            with psycopg.connect(self.settings.database_url, connect_timeout=3) as conn:
                conn.execute("SELECT 1")
            return True
        except FailedPrecondition:
            log.exception("database schema does not fit this service")
            return False
        except Exception as error:  # noqa: BLE001 - readiness must never raise
            log.warning("database not ready: %s", error)
            self._ready = False
            return False

    def migrate(self) -> list[str]:
        """Creates extensions, the graph and the tables, idempotently, under an advisory lock.

        Returns the names of migrations applied now (empty when the schema was current).

        Raises:
            psycopg.Error: the database is unreachable or refuses a statement.
            FailedPrecondition: the chunks table was built for another embedding dimension or model.
        """
        applied: list[str] = []
        with psycopg.connect(self.settings.database_url, autocommit=True, connect_timeout=5) as conn:
            conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK_KEY,))
            try:
                for extension in ("age", "vector", "pg_trgm"):
                    conn.execute(sql.SQL("CREATE EXTENSION IF NOT EXISTS {}").format(sql.Identifier(extension)))
                try:
                    conn.execute("LOAD 'age'")
                except psycopg.Error:
                    pass
                conn.execute("SET search_path = \"$user\", public, ag_catalog")
                exists = conn.execute(
                    "SELECT 1 FROM ag_catalog.ag_graph WHERE name = %s", (self.settings.graph_name,)
                ).fetchone()
                if not exists:
                    conn.execute("SELECT ag_catalog.create_graph(%s)", (self.settings.graph_name,))
                conn.execute(
                    "CREATE TABLE IF NOT EXISTS memory_schema_migrations ("
                    " name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
                )
                done = {row[0] for row in conn.execute("SELECT name FROM memory_schema_migrations").fetchall()}
                identifiers = table_identifiers(self.settings)
                literals = {
                    "embedding_dim": sql.Literal(self.settings.embedding_dim),
                    "text_search_config": sql.Literal(self.settings.text_search_config),
                    "graph": sql.Identifier(self.settings.graph_name),
                }
                for name in _MIGRATIONS:
                    if name in done:
                        continue
                    text = resources.files("common.storage").joinpath("sql", name).read_text("utf-8")
                    statement = sql.SQL(text).format(**identifiers, **literals)  # type: ignore[arg-type]
                    with conn.transaction():
                        conn.execute(statement)
                        conn.execute("INSERT INTO memory_schema_migrations (name) VALUES (%s)", (name,))
                    applied.append(name)
                self._check_index_settings(conn)
            finally:
                conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK_KEY,))
        from common.storage.graph_store import GraphStore

        GraphStore.ensure_base_labels(self)
        return applied

    def _check_index_settings(self, conn: psycopg.Connection[Any]) -> None:
        chunks = self.settings.chunks_table
        row = conn.execute(
            "SELECT format_type(a.atttypid, a.atttypmod) FROM pg_attribute a"
            " WHERE a.attrelid = to_regclass(%s) AND a.attname = 'embedding'",
            (chunks,),
        ).fetchone()
        expected = f"vector({self.settings.embedding_dim})"
        if row and row[0] != expected:
            raise FailedPrecondition(
                f"table {chunks}.embedding is {row[0]} but CB_EMBEDDING_DIM={self.settings.embedding_dim}: "
                f"set CB_EMBEDDING_DIM to the table's dimension, or reindex into a new table (CB_CHUNKS_TABLE)"
            )
        if self.embedding_model is None:
            return
        conn.execute(
            "INSERT INTO memory_index_settings (table_name, embedding_model, embedding_dim, text_search_config)"
            " VALUES (%s, %s, %s, %s) ON CONFLICT (table_name) DO NOTHING",
            (chunks, self.embedding_model, self.settings.embedding_dim, self.settings.text_search_config),
        )
        recorded = conn.execute(
            "SELECT embedding_model, text_search_config FROM memory_index_settings WHERE table_name = %s", (chunks,)
        ).fetchone()
        assert recorded is not None
        if recorded[0] != self.embedding_model:
            raise FailedPrecondition(
                f"table {chunks} holds embeddings of model {recorded[0]!r}, this service embeds with "
                f"{self.embedding_model!r}: set CB_EMBEDDING_PROVIDER back, or reindex into a new table (CB_CHUNKS_TABLE)"
            )

    def close(self) -> None:
        """Closes the pool (idempotent)."""
        if self._pool_opened:
            self._pool.close()
            self._pool_opened = False
