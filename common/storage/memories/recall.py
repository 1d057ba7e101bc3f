"""RecallMemories at scale: an approximate nearest-neighbour stage, then the exact score of its candidates
(docs/how-to/memory-records.md, "How recall scales"; docs/decisions/0038-memory-recall-candidates.md).

Scoring every row of an owner (`MemoryStore.recall` without candidates) reads each row's chunk and
its 2 KB vector: 76/84 ms p50/p95 for 5,000 memories per owner, growing with the owner's count. For an
owner with at least ``memory_recall_exact_below`` memories in a namespace a vector index serves,
`MemoryRecall.recall` instead

1. asks the HNSW index of the chunks table that serves the namespace (its own partial index or the table's,
   `common.storage.chunks.tenant_vector_indexes`) for the ``memory_recall_candidates`` (at least 10 x
   ``limit``) memory chunks nearest to the query, with every condition of the recall inside that
   statement: the namespace, the owner, chunk 0 of a memory, not expired, not hidden by a lossy summary,
   and the request's filters (tiers, tags, ...), so the iterative index scan (``hnsw.iterative_scan``,
   pgvector >= 0.8) keeps walking until that many rows pass them: nothing of another owner or namespace,
   nor any expired or hidden memory, can become a candidate;
2. scores those candidates exactly with the unchanged score (`MemoryStore.recall` with ``candidates``).

The candidates are nearest by similarity alone; the score multiplies similarity by at most
``(w_sim + w_rec + w_imp) / w_sim``, so a memory outside them could in principle outrank one inside:
recall@10 against exact scoring is measured by bench/bench_memories.py.

Falls back to exact scoring of every row when no index serves the namespace (a namespace that is not in
the tenant index registry: small, or not yet synchronised), when the owner has fewer memories than
the threshold (their results stay identical to exact scoring), and when the index scan returns fewer
candidates than asked (the filters keep too few of the rows it visits before ``hnsw.max_scan_tuples``):
then the exact path returns the same as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import psycopg
from psycopg import sql

from common.kernel.config import Settings
from common.storage.chunks.tenant_vector_indexes import OWN_INDEX
from common.storage.chunks.tenant_vector_indexes import TenantIndexRegistry
from common.storage.chunks.tenant_vector_indexes import tenant_index_expression
from common.storage.memories.store import MemoryQuery
from common.storage.memories.store import MemoryStore
from common.storage.memories.store import RecallWeights
from common.storage.memories.store import StoredMemory
from common.storage.tables import table_identifiers

EXACT = "exact"
"""`RecallOutcome.path`: every row of the owner was scored."""
APPROXIMATE = "approximate"
"""`RecallOutcome.path`: the candidates of the index scan were scored."""
CANDIDATES_PER_RESULT = 10
"""The approximate stage asks for at least this many candidates per requested result."""


@dataclass(frozen=True)
class RecallOutcome:
    """What `MemoryRecall.recall` returned and how.

    Attributes:
        memories: the best records, best first.
        path: `EXACT` or `APPROXIMATE`.
        candidates: the candidates scored on the approximate path (0 on the exact one).
    """

    memories: list[StoredMemory]
    path: str
    candidates: int = 0


class MemoryRecall:
    """The two-stage recall (module doc). Stateless apart from the table names and the registry's
    cached copy; safe to share between threads.

    Args:
        settings: table names, the thresholds (``memory_recall_exact_below``,
            ``memory_recall_candidates``), ``hnsw_ef_search`` and ``embedding_dim``.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.store = MemoryStore(settings)
        self.registry = TenantIndexRegistry(settings)
        names = table_identifiers(settings)
        self.chunks = names["chunks"]
        self.memories = names["memories"]
        self.tenant_vector = tenant_index_expression(settings.embedding_dim)

    def recall(
        self,
        conn: psycopg.Connection[Any],
        query: MemoryQuery,
        vector: np.ndarray,
        weights: RecallWeights,
        *,
        limit: int,
        exact: bool = False,
    ) -> RecallOutcome:
        """The best ``limit`` records of ``query`` by the score of `MemoryStore.recall`.

        Args:
            conn: a connection inside a transaction (the approximate stage sets planner settings with
                ``SET LOCAL``, restored before the scoring statement).
            query: the owner's scope and the request's filters.
            vector: the query's embedding.
            weights: the preset.
            limit: how many records.
            exact: score every row (what the approximate path is measured against).
        """
        if not exact:
            ids = self.candidates(conn, query, vector, limit)
            if ids is not None:
                scored = self.store.recall(conn, query, vector, weights, limit=limit, candidates=ids)
                return RecallOutcome(scored, APPROXIMATE, len(ids))
        return RecallOutcome(self.store.recall(conn, query, vector, weights, limit=limit), EXACT)

    def candidates(
        self, conn: psycopg.Connection[Any], query: MemoryQuery, vector: np.ndarray, limit: int
    ) -> list[str] | None:
        """The ids of the memories of ``query`` nearest to ``vector`` (module doc, step 1), or None when
        the exact path must run (no index serves the namespace, a small owner, or too few candidates)."""
        index = self.registry.index_of(conn, query.namespace)
        if index is None or not self._large_owner(conn, query):
            return None
        wanted = max(self.settings.memory_recall_candidates, CANDIDATES_PER_RESULT * limit)
        params: dict[str, Any] = {"vector": np.asarray(vector, dtype=np.float32), "wanted": wanted}
        where = self.store.where(query, params)
        ordered = self.tenant_vector if index == OWN_INDEX else sql.SQL("c.embedding")
        statement = sql.SQL(
            "SELECT m.memory_id FROM {chunks} c"
            " JOIN {memories} m ON m.namespace = c.namespace AND m.memory_id = c.node_key"
            " WHERE c.namespace = %(namespace)s AND c.node_type = 'memory' AND c.chunk_order = 0"
            " AND c.embedding IS NOT NULL AND c.meta -> 'scopes' ? ("
            "SELECT o.user_scope FROM {memories} o WHERE o.namespace = %(namespace)s AND o.user_id = %(user_id)s"
            " ORDER BY o.created_at DESC LIMIT 1) AND {where}"
            " ORDER BY {ordered} <=> %(vector)s LIMIT %(wanted)s"
        ).format(chunks=self.chunks, memories=self.memories, where=where, ordered=ordered)
        # The owner's scope on the chunk (`ingest_service.memories.writer.chunk_of`; read once) rejects
        # another owner's chunk on the heap row the index scan fetches anyway, before the join looks up
        # its memories row; the join's owner condition stays the authority.
        # The planner's cost model prefers sorting the owner's rows exactly (it does not count the
        # detoasting of each vector, `common.storage.chunks.tenant_vector_indexes`): sorting is turned off
        # for this statement only. ef_search: the scan's first batch holds the candidates asked for.
        ef_search = min(max(self.settings.hnsw_ef_search, wanted), 1000)
        # One round trip; inside a savepoint, so a failing statement takes the settings back with it.
        with conn.pipeline(), conn.transaction():
            conn.execute("SET LOCAL enable_sort = off")
            conn.execute(sql.SQL("SET LOCAL hnsw.ef_search = {}").format(sql.Literal(ef_search)))
            # Custom plan (no prepare): a tenant's partial index matches only the literal namespace.
            cursor = conn.execute(statement, params, prepare=False)
            conn.execute("SET LOCAL enable_sort = on")
            conn.execute(
                sql.SQL("SET LOCAL hnsw.ef_search = {}").format(sql.Literal(self.settings.hnsw_ef_search))
            )
        rows = cursor.fetchall()
        if len(rows) < wanted:
            return None
        return [str(row[0]) for row in rows]

    def _large_owner(self, conn: psycopg.Connection[Any], query: MemoryQuery) -> bool:
        """True when the owner has at least ``memory_recall_exact_below`` memories (counted up to that
        bound on the owner index, so the count costs the same for any owner)."""
        threshold = self.settings.memory_recall_exact_below
        if threshold <= 0:
            return True
        row = conn.execute(
            sql.SQL(
                "SELECT count(*) FROM (SELECT 1 FROM {} WHERE namespace = %s AND user_id = %s LIMIT %s) AS owned"
            ).format(self.memories),
            (query.namespace, query.user_id, threshold),
        ).fetchone()
        return row is not None and int(row[0]) >= threshold


__all__ = ["APPROXIMATE", "CANDIDATES_PER_RESULT", "EXACT", "MemoryRecall", "RecallOutcome"]
