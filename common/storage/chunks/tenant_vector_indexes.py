"""Per-tenant vector indexes: an HNSW index partial to one large namespace of a shared table.

Why: for one namespace among many, the table's HNSW index visits mostly other tenants' rows (its
iterative scan starves past ``hnsw.max_scan_tuples``), so the planner sorts the tenant's rows exactly
instead: 136-158 ms for a 10k-chunk namespace in a 100k-chunk table under load, where an HNSW index
holding only that namespace answered in 4.0 ms with overlap@10 0.921 against the exact top-10
(bench/RESULTS.md (git history), 20261202T002855Z). Chosen over list partitioning by namespace, which gives each
partition the same index (same scan) but needs the namespace in the primary key and in every unique
key, a table rewrite, and a partition (or the default partition) per tenant.

The rule (`wanted`): a namespace with at least ``min_rows`` embedded chunks and less than half of the
table's gets ``CREATE INDEX CONCURRENTLY ... USING hnsw (embedding vector_cosine_ops) WHERE namespace =
'<namespace>'`` on ``l2_normalize(embedding)`` (`tenant_index_expression`; the namespace as a literal: an index
predicate cannot take a parameter); a namespace
holding most of the table is served by the table's own index. An index is dropped when its namespace
falls below half of ``min_rows`` (so a tenant near the threshold does not flap). A large namespace
holding half of the table or more (`majority`) is registered without an index of its own: the
ranking then asks for the table's HNSW index, which the planner would not pick either. Each built index is
recorded in ``{chunks}_tenant_vector_indexes`` (migration 0017) after its build succeeded; the vector
ranking reads that registry (`TenantIndexRegistry`, cached) to know when the planner should use the
index: PostgreSQL's cost model ranks the exact sort of a few thousand rows below an HNSW scan (it does
not count the detoasting of each 2 KB vector: 19 ms exact against 2.5 ms HNSW for 5k rows, measured),
so `common.storage.chunks.rankings` runs that statement with ``enable_sort`` off and custom plans (the
predicate must see the literal namespace to match the partial index).

`synchronise` is what `cb index-tenants` and the ingest service's `TenantIndexWorker`
(`ingest_service/embedding/tenant_indexes.py`) run: builds and drops under one advisory lock, so two
processes never build the same index at once.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from common.kernel.config import Settings
from common.storage.chunks.owner_vector_indexes import OwnerVectorIndexes
from common.storage.chunks.vector_expression import build_partial_hnsw_index
from common.storage.chunks.vector_expression import tenant_index_expression
from common.storage.named_queries import Queries
from common.storage.tables import table_identifiers

log = logging.getLogger(__name__)

SYNCHRONISE_LOCK_KEY = 0x74766978  # "tvix": pg_try_advisory_lock key of one synchronisation at a time
REGISTRY_CACHE_SECONDS = 30.0
"""How long the read side trusts its copy of the registry; a stale copy costs speed, never correctness
(without the index the statement falls back to the exact ranking, see `chunk_rankings`)."""


@dataclass(frozen=True)
class TenantIndexChange:
    """One index built or dropped by `synchronise`.

    Attributes:
        namespace: the tenant.
        index_name: the partial index ("" for a namespace served by the table's index).
        action: ``"built"``, ``"dropped"``, or for a namespace holding most of the table ``"registered"``
            / ``"unregistered"`` (no index of its own).
        rows: the namespace's embedded chunks when it was decided.
        seconds: how long the build or drop took.
        user_id: for an owner's index (`common.storage.chunks.owner_vector_indexes`), the owner; rows are
            then the owner's memories.
    """

    namespace: str
    index_name: str
    action: str
    rows: int
    seconds: float
    user_id: str = ""


def tenant_index_name(chunks_table: str, namespace: str) -> str:
    """The partial index's name: ``<table>_tenant_<16 hex digits of sha256(namespace)>``, at most 63
    bytes (PostgreSQL's identifier limit; the table part is cut when needed)."""
    digest = hashlib.sha256(namespace.encode("utf-8")).hexdigest()[:16]
    suffix = f"_tenant_{digest}"
    return chunks_table.encode("utf-8")[: 63 - len(suffix)].decode("utf-8", "ignore") + suffix


def wanted(counts: dict[str, int], min_rows: int) -> set[str]:
    """The namespaces that should have a tenant index: at least ``min_rows`` embedded chunks and less
    than half of all (``counts``: embedded chunks per namespace); none when ``min_rows`` is 0."""
    if min_rows <= 0:
        return set()
    total = sum(counts.values())
    return {namespace for namespace, rows in counts.items() if rows >= min_rows and 2 * rows < total}


def majority(counts: dict[str, int], min_rows: int) -> set[str]:
    """The namespace (if any) with at least ``min_rows`` embedded chunks that holds half of them or more:
    it is registered without an index of its own, and ranked by the table's HNSW index (the planner
    would sort it exactly: 103-140 ms at 10k rows against 16.5 ms for the HNSW scan, overlap@10 0.998,
    bench/RESULTS.md (git history) 20261202T034330Z)."""
    if min_rows <= 0:
        return set()
    total = sum(counts.values())
    return {namespace for namespace, rows in counts.items() if rows >= min_rows and 2 * rows >= total}


OWN_INDEX = "own"
"""`TenantIndexRegistry.index_of`: the namespace has an HNSW index partial to it."""
TABLE_INDEX = "table"
"""`TenantIndexRegistry.index_of`: the namespace holds most of the table, whose HNSW index serves it."""


class TenantIndexRegistry:
    """The registry of tenant indexes as the read side sees it, re-read at most every
    `REGISTRY_CACHE_SECONDS` (one statement); safe to share between threads."""

    def __init__(self, settings: Settings, *, cache_seconds: float = REGISTRY_CACHE_SECONDS) -> None:
        self.queries = Queries.for_settings("tenant_indexes.sql", settings)
        self.cache_seconds = cache_seconds
        self._kinds: dict[str, str] = {}
        self._read_at = float("-inf")
        self._lock = threading.Lock()

    def index_of(self, conn: psycopg.Connection[Any], namespace: str) -> str | None:
        """`OWN_INDEX`, `TABLE_INDEX` or None (not registered: the planner decides) for ``namespace``, as
        of the last read of the registry (re-read on ``conn`` when the copy is older than
        ``cache_seconds``)."""
        now = time.monotonic()
        if now - self._read_at >= self.cache_seconds:
            rows = conn.execute(self.queries["indexed_namespaces"]).fetchall()
            with self._lock:
                self._kinds = {row[0]: OWN_INDEX if row[1] else TABLE_INDEX for row in rows}
                self._read_at = now
        return self._kinds.get(namespace)

    def has_index(self, conn: psycopg.Connection[Any], namespace: str) -> bool:
        """True when ``namespace`` has an index of its own (see `index_of`)."""
        return self.index_of(conn, namespace) == OWN_INDEX

    def forget(self) -> None:
        """Drops the cached copy: the next `has_index` reads the registry."""
        with self._lock:
            self._read_at = float("-inf")


class TenantVectorIndexes:
    """Builds and drops the tenant indexes of the chunks table (module doc)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.table = settings.chunks_table
        self.identifiers = table_identifiers(settings)
        self.queries = Queries.for_settings("tenant_indexes.sql", settings)

    def synchronise(self, min_rows: int | None = None) -> list[TenantIndexChange]:
        """Builds the missing tenant indexes and drops those no longer wanted (see `wanted`).

        Runs on a connection of its own in autocommit (``CREATE INDEX CONCURRENTLY`` cannot run in a
        transaction; writes to the table go on meanwhile), without a statement timeout, under an
        advisory lock: when another process is synchronising, returns ``[]`` at once.

        Args:
            min_rows: the threshold (None: ``settings.tenant_vector_index_min_rows``).

        Then, on the same connection and lock, the owner indexes of memory chunks
        (`OwnerVectorIndexes.synchronise`, its own threshold ``memory_owner_index_min_rows``).

        Returns:
            The changes made, builds first (the owner indexes' last).

        Raises:
            psycopg.Error: the database is unreachable or refused a statement (an index whose build
                failed is left invalid and rebuilt by the next run).
        """
        threshold = self.settings.tenant_vector_index_min_rows if min_rows is None else min_rows
        changes: list[TenantIndexChange] = []
        with psycopg.connect(self.settings.database_url, autocommit=True, connect_timeout=5) as conn:
            if not conn.execute(self.queries["try_lock"], (SYNCHRONISE_LOCK_KEY,)).fetchone()[0]:  # type: ignore[index]
                return []
            try:
                conn.execute("SET statement_timeout = 0")
                counts = {
                    namespace: int(rows)
                    for namespace, rows in conn.execute(self.queries["namespace_rows"]).fetchall()
                }
                registered = dict(conn.execute(self.queries["registered"]).fetchall())
                own = {namespace for namespace, name in registered.items() if name is not None}
                for namespace in sorted(wanted(counts, threshold) - own):
                    changes.append(self._build(conn, namespace, counts[namespace]))
                for namespace in sorted(majority(counts, threshold) - set(registered)):
                    rows = counts[namespace]
                    conn.execute(
                        self.queries["register"], {"namespace": namespace, "index_name": None, "rows": rows}
                    )
                    changes.append(TenantIndexChange(namespace, "", "registered", rows, 0.0))
                for namespace, index_name in sorted(registered.items()):
                    if threshold <= 0 or counts.get(namespace, 0) < threshold // 2:
                        changes.append(self._drop(conn, namespace, index_name, counts.get(namespace, 0)))
                changes += [
                    TenantIndexChange(
                        c.namespace, c.index_name, c.action, c.rows, c.seconds, user_id=c.user_id
                    )
                    for c in OwnerVectorIndexes(self.settings).synchronise(conn, counts)
                ]
            finally:
                conn.execute(self.queries["unlock"], (SYNCHRONISE_LOCK_KEY,))
        return changes

    def _build(self, conn: psycopg.Connection[Any], namespace: str, rows: int) -> TenantIndexChange:
        started = time.perf_counter()
        name = tenant_index_name(self.table, namespace)
        build_partial_hnsw_index(
            conn,
            name=name,
            chunks=self.identifiers["chunks"],
            expression=tenant_index_expression(self.settings.embedding_dim),
            operator_class="vector_cosine_ops",
            predicate=sql.SQL("namespace = {}").format(sql.Literal(namespace)),
            invalid_index=self.queries["invalid_index"],
        )
        conn.execute(self.queries["register"], {"namespace": namespace, "index_name": name, "rows": rows})
        seconds = round(time.perf_counter() - started, 2)
        log.info(
            "tenant vector index %s built for namespace %r (%d chunks) in %.1f s",
            name,
            namespace,
            rows,
            seconds,
        )
        return TenantIndexChange(namespace, name, "built", rows, seconds)

    def _drop(
        self, conn: psycopg.Connection[Any], namespace: str, name: str | None, rows: int
    ) -> TenantIndexChange:
        started = time.perf_counter()
        # The registry row goes first: readers stop asking for the index before it disappears.
        conn.execute(self.queries["unregister"], (namespace,))
        if name is None:  # served by the table's own index, which stays
            return TenantIndexChange(namespace, "", "unregistered", rows, 0.0)
        conn.execute(sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS {}").format(sql.Identifier(name)))
        seconds = round(time.perf_counter() - started, 2)
        log.info("tenant vector index %s of namespace %r (%d chunks) dropped", name, namespace, rows)
        return TenantIndexChange(namespace, name, "dropped", rows, seconds)
