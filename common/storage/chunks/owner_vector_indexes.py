"""Per-owner vector indexes: an HNSW index partial to one user's memory chunks in a namespace.

Why: RecallMemories' approximate stage (`common.storage.memories.recall`) walks an HNSW index with the
owner filter inside the scan; on the namespace's index a user holding 5% of it makes the walk visit about
20 rows per row kept (16-17 ms of database CPU per recall at 100k memories, 5,000 per user). An index
holding only that user's memory chunks keeps nearly every row it visits
(docs/decisions/0039-memory-owner-vector-indexes.md has the figures).

The rule (`wanted_owners`): an owner (namespace, user_id) with at least ``memory_owner_index_min_rows``
memories and less than half of the namespace's embedded chunks gets ``CREATE INDEX CONCURRENTLY ... USING
hnsw (<owner_index_expression> halfvec_cosine_ops) WHERE namespace = '<namespace>' AND node_type =
'memory' AND chunk_order = 0 AND (meta -> 'scopes' ->> 0) = '<user scope>'`` (the owner's scope is a
memory chunk's only scope, `ingest_service.memories.writer.chunk_of`; literals, as an index predicate
cannot take a parameter). At most ``memory_owner_indexes_max`` owners, the largest first: each partial
index costs every insert into the table a predicate check and every plan on it a predicate proof. An
index is kept while its owner holds at least half the threshold (no flapping near it). Each built index
is recorded in ``{chunks}_owner_vector_indexes`` (migration 0039) after its build succeeded;
`OwnerIndexRegistry` is the read side's cached copy.

`OwnerVectorIndexes.synchronise` runs inside `TenantVectorIndexes.synchronise` (``cb index-tenants`` and
the ingest service's worker), on its connection and under its advisory lock: the builds are concurrent
(writes go on) and never on a request's path.
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
from common.storage.chunks.vector_expression import OWNER_INDEX_OPERATOR_CLASS
from common.storage.chunks.vector_expression import build_partial_hnsw_index
from common.storage.chunks.vector_expression import owner_index_expression
from common.storage.named_queries import Queries
from common.storage.tables import table_identifiers

log = logging.getLogger(__name__)

REGISTRY_CACHE_SECONDS = 30.0
"""How long the read side trusts its copy of the registry; a stale copy costs speed, never correctness
(a recall without the owner's index walks the namespace's index, or scores exactly)."""


@dataclass(frozen=True)
class Owner:
    """One owner of memories and their count.

    Attributes:
        namespace: the owner's namespace.
        user_id: the owner.
        user_scope: the owner's scope (a memory chunk's only scope).
        rows: the owner's memories.
    """

    namespace: str
    user_id: str
    user_scope: str
    rows: int


@dataclass(frozen=True)
class OwnerIndexChange:
    """One owner index built or dropped by `OwnerVectorIndexes.synchronise`.

    Attributes:
        namespace: the owner's namespace.
        user_id: the owner.
        index_name: the partial index.
        action: ``"built"`` or ``"dropped"``.
        rows: the owner's memories when it was decided.
        seconds: how long the build or drop took.
    """

    namespace: str
    user_id: str
    index_name: str
    action: str
    rows: int
    seconds: float


def owner_index_name(chunks_table: str, namespace: str, user_id: str) -> str:
    """The partial index's name: ``<table>_owner_<16 hex digits of sha256(namespace NUL user_id)>``, at
    most 63 bytes (the table part is cut when needed)."""
    digest = hashlib.sha256(f"{namespace}\0{user_id}".encode()).hexdigest()[:16]
    suffix = f"_owner_{digest}"
    return chunks_table.encode("utf-8")[: 63 - len(suffix)].decode("utf-8", "ignore") + suffix


def wanted_owners(
    owners: list[Owner],
    namespace_rows: dict[str, int],
    registered: set[tuple[str, str]],
    min_rows: int,
    most: int,
) -> list[Owner]:
    """The owners that should have an index: at least ``min_rows`` memories (``min_rows // 2`` for one
    already ``registered``), less than half of their namespace's embedded chunks (``namespace_rows``; a
    larger share is served well by the namespace's index), the ``most`` largest; none when ``min_rows`` or
    ``most`` is 0."""
    if min_rows <= 0 or most <= 0:
        return []
    kept = [
        owner
        for owner in owners
        if owner.rows >= (min_rows // 2 if (owner.namespace, owner.user_id) in registered else min_rows)
        and 2 * owner.rows < namespace_rows.get(owner.namespace, 0)
    ]
    kept.sort(key=lambda owner: (-owner.rows, owner.namespace, owner.user_id))
    return kept[:most]


class OwnerIndexRegistry:
    """The registry of owner indexes as the read side sees it, re-read at most every
    `REGISTRY_CACHE_SECONDS` (one statement); safe to share between threads."""

    def __init__(self, settings: Settings, *, cache_seconds: float = REGISTRY_CACHE_SECONDS) -> None:
        self.queries = Queries.for_settings("owner_indexes.sql", settings)
        self.cache_seconds = cache_seconds
        self._scopes: dict[tuple[str, str], str] = {}
        self._read_at = float("-inf")
        self._lock = threading.Lock()

    def scope_of(self, conn: psycopg.Connection[Any], namespace: str, user_id: str) -> str | None:
        """The owner's scope when (``namespace``, ``user_id``) has an index of its own, else None, as of
        the last read of the registry (re-read on ``conn`` when the copy is older than ``cache_seconds``)."""
        now = time.monotonic()
        if now - self._read_at >= self.cache_seconds:
            rows = conn.execute(self.queries["indexed_owners"]).fetchall()
            with self._lock:
                self._scopes = {(row[0], row[1]): row[2] for row in rows}
                self._read_at = now
        return self._scopes.get((namespace, user_id))


class OwnerVectorIndexes:
    """Builds and drops the owner indexes of the chunks table (module doc)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.table = settings.chunks_table
        self.identifiers = table_identifiers(settings)
        self.queries = Queries.for_settings("owner_indexes.sql", settings)
        self.tenant_queries = Queries.for_settings("tenant_indexes.sql", settings)

    def synchronise(
        self, conn: psycopg.Connection[Any], namespace_rows: dict[str, int], min_rows: int | None = None
    ) -> list[OwnerIndexChange]:
        """Builds the missing owner indexes and drops those no longer wanted (see `wanted_owners`).

        Args:
            conn: an autocommit connection without a statement timeout, holding the synchronisation's
                advisory lock (`TenantVectorIndexes.synchronise`).
            namespace_rows: embedded chunks per namespace.
            min_rows: the threshold (None: ``settings.memory_owner_index_min_rows``).

        Returns:
            The changes made, builds first.

        Raises:
            psycopg.Error: the database refused a statement (an index whose build failed is left invalid
                and rebuilt by the next run).
        """
        threshold = self.settings.memory_owner_index_min_rows if min_rows is None else min_rows
        registered = {(row[0], row[1]): row[2] for row in conn.execute(self.queries["registered"]).fetchall()}
        owners = [
            Owner(namespace, user_id, user_scope, int(rows))
            for namespace, user_id, user_scope, rows in conn.execute(
                self.queries["owner_rows"], {"min_rows": max(threshold // 2, 1)}
            ).fetchall()
        ]
        wanted = wanted_owners(
            owners, namespace_rows, set(registered), threshold, self.settings.memory_owner_indexes_max
        )
        wanted_keys = {(owner.namespace, owner.user_id) for owner in wanted}
        counts = {(owner.namespace, owner.user_id): owner.rows for owner in owners}
        changes = [
            self._build(conn, owner) for owner in wanted if (owner.namespace, owner.user_id) not in registered
        ]
        for (namespace, user_id), name in sorted(registered.items()):
            if (namespace, user_id) not in wanted_keys:
                changes.append(
                    self._drop(conn, namespace, user_id, name, counts.get((namespace, user_id), 0))
                )
        return changes

    def _build(self, conn: psycopg.Connection[Any], owner: Owner) -> OwnerIndexChange:
        started = time.perf_counter()
        name = owner_index_name(self.table, owner.namespace, owner.user_id)
        build_partial_hnsw_index(
            conn,
            name=name,
            chunks=self.identifiers["chunks"],
            expression=owner_index_expression(self.settings.embedding_dim),
            operator_class=OWNER_INDEX_OPERATOR_CLASS,
            predicate=owner_index_predicate(owner.namespace, owner.user_scope),
            invalid_index=self.tenant_queries["invalid_index"],
        )
        conn.execute(
            self.queries["register"],
            {
                "namespace": owner.namespace,
                "user_id": owner.user_id,
                "user_scope": owner.user_scope,
                "index_name": name,
                "rows": owner.rows,
            },
        )
        seconds = round(time.perf_counter() - started, 2)
        log.info(
            "owner vector index %s built for %r in namespace %r (%d memories) in %.1f s",
            name,
            owner.user_id,
            owner.namespace,
            owner.rows,
            seconds,
        )
        return OwnerIndexChange(owner.namespace, owner.user_id, name, "built", owner.rows, seconds)

    def _drop(
        self, conn: psycopg.Connection[Any], namespace: str, user_id: str, name: str, rows: int
    ) -> OwnerIndexChange:
        started = time.perf_counter()
        # The registry row goes first: readers stop asking for the index before it disappears.
        conn.execute(self.queries["unregister"], (namespace, user_id))
        conn.execute(sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS {}").format(sql.Identifier(name)))
        seconds = round(time.perf_counter() - started, 2)
        log.info("owner vector index %s of %r in namespace %r dropped", name, user_id, namespace)
        return OwnerIndexChange(namespace, user_id, name, "dropped", rows, seconds)


def owner_index_predicate(namespace: str, user_scope: str) -> sql.Composed:
    """The rows of an owner index: the owner's memory chunks (chunk 0) in the namespace. The recall's
    candidate statement states the same conditions (bound, planned as a custom plan) so the planner can
    prove the predicate."""
    return sql.SQL(
        "namespace = {namespace} AND node_type = 'memory' AND chunk_order = 0"
        " AND (meta -> 'scopes' ->> 0) = {scope}"
    ).format(namespace=sql.Literal(namespace), scope=sql.Literal(user_scope))


__all__ = [
    "OwnerIndexChange",
    "OwnerIndexRegistry",
    "OwnerVectorIndexes",
    "owner_index_name",
    "owner_index_predicate",
    "wanted_owners",
]
