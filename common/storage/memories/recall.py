"""RecallMemories at scale: an approximate nearest-neighbour stage, then the exact score of its candidates
(docs/how-to/memory-records.md, "How recall scales"; docs/decisions/0038-memory-recall-candidates.md,
0039-memory-owner-vector-indexes.md).

Scoring every row of an owner (`MemoryStore.recall` without candidates) reads each row's chunk and
its 2 KB vector: about 50 ms of database CPU for 5,000 memories per owner, growing with the owner's
count. For an
owner with at least ``memory_recall_exact_below`` memories in a namespace a vector index serves,
`MemoryRecall.recall` instead

1. asks an HNSW index of the chunks table for the ``memory_recall_candidates`` (at least 5 x
   ``limit``; through an owner's own index at least ``OWNER_CANDIDATES_PER_RESULT`` x ``limit``) memory
   chunks nearest to the query, with every condition of the recall inside that
   statement: the namespace, the owner, chunk 0 of a memory, not expired, not hidden by a lossy summary,
   and the request's filters (tiers, tags, ...), so the iterative index scan (``hnsw.iterative_scan``,
   pgvector >= 0.8) keeps walking until that many rows pass them: nothing of another owner or namespace,
   nor any expired or hidden memory, can become a candidate. The first batch of the scan
   (``hnsw.ef_search``) is ``EF_SEARCH_PER_CANDIDATE`` rows per candidate asked for. The index: the
   owner's own (half precision, `common.storage.chunks.owner_vector_indexes`: a large owner holding a
   small share of the namespace, where the namespace's index would visit about ``candidates / share``
   rows; ``OWNER_EF_SEARCH_PER_CANDIDATE``), else the one that serves the namespace (its own partial
   index or the table's, `common.storage.chunks.tenant_vector_indexes`).
   The same statement adds the owner's other live memories whose chunk has the text of a candidate
   (at most ``PEERS_PER_CANDIDATE`` per candidate asked for, through migration 0038's index): the HNSW
   graph cannot enumerate many identical vectors (their neighbours are one another), so copies of one text
   that score best by recency or importance were missed (recall@10 0.935 -> 0.9855 at 100k memories).
   Each candidate comes with its similarity (the expression of `MemoryStore.recall`);
2. scores those candidates exactly with the unchanged score (`MemoryStore.recall` with ``candidates``),
   without reading their chunks again.

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

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import psycopg
from psycopg import sql

from common.kernel.config import Settings
from common.storage.chunks.owner_vector_indexes import OwnerIndexRegistry
from common.storage.chunks.tenant_vector_indexes import OWN_INDEX
from common.storage.chunks.tenant_vector_indexes import TenantIndexRegistry
from common.storage.chunks.tenant_vector_indexes import tenant_index_expression
from common.storage.chunks.vector_expression import owner_index_expression
from common.storage.chunks.vector_expression import owner_query_expression
from common.storage.memories.store import MemoryQuery
from common.storage.memories.store import MemoryStore
from common.storage.memories.store import RecallWeights
from common.storage.memories.store import StoredMemory
from common.storage.row_count import fetch_count
from common.storage.tables import table_identifiers

EXACT = "exact"
"""`RecallOutcome.path`: every row of the owner was scored."""
APPROXIMATE = "approximate"
"""`RecallOutcome.path`: the candidates of the index scan were scored."""
CANDIDATES_PER_RESULT = 5
"""The approximate stage asks for at least this many candidates per requested result."""
EF_SEARCH_PER_CANDIDATE = 12
"""The first batch of the scan of a namespace's index (``hnsw.ef_search``) holds this many rows per
candidate asked for."""
OWNER_CANDIDATES_PER_RESULT = 15
"""Through an owner's own index the approximate stage asks for at least this many candidates per requested
result: each costs little there (nearly every row visited passes the filters), and at 50,000 memories per
user 50 candidates gave recall@10 0.954 against exact scoring, 150 gave 0.98 (decision 0039)."""
OWNER_EF_SEARCH_PER_CANDIDATE = 2
"""The same for the scan of an owner's own index, where nearly every row visited passes the filters."""
PEERS_PER_CANDIDATE = 10
"""At most this many of the owner's copies of the candidates' texts are added per candidate asked for."""
LARGE_OWNER_SECONDS = 60.0
"""How long an owner found at or above ``memory_recall_exact_below`` is taken as large without a count."""
LARGE_OWNERS_KEPT = 10_000
"""The large owners remembered at most (the memo starts over when full)."""


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


@dataclass(frozen=True)
class CandidateStatement:
    """The candidate statement of one recall (`MemoryRecall.candidate_statement`).

    Attributes:
        statement: the statement.
        params: its parameters.
        wanted: the nearest candidates it asks for.
        ef_search: the ``hnsw.ef_search`` it runs with.
    """

    statement: sql.Composed
    params: dict[str, Any]
    wanted: int
    ef_search: int


class MemoryRecall:
    """The two-stage recall (module doc). Stateless apart from the table names and the registry's
    cached copy; safe to share between threads.

    Args:
        settings: table names, the thresholds (``memory_recall_exact_below``,
            ``memory_recall_candidates``), ``hnsw_ef_search`` and ``embedding_dim``.
        owner_indexes: ask for an owner's own index when there is one (False: always the namespace's, what
            the benchmark compares against).
    """

    def __init__(self, settings: Settings, *, owner_indexes: bool = True) -> None:
        self.settings = settings
        self.store = MemoryStore(settings)
        self.registry = TenantIndexRegistry(settings)
        self.owner_registry = OwnerIndexRegistry(settings)
        self.owner_indexes = owner_indexes
        names = table_identifiers(settings)
        self.chunks = names["chunks"]
        self.memories = names["memories"]
        self.tenant_vector = tenant_index_expression(settings.embedding_dim)
        self.owner_vector = owner_index_expression(settings.embedding_dim)
        self.owner_query = owner_query_expression(settings.embedding_dim)
        self._large: dict[tuple[str, str], float] = {}

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
            conn: a connection (the approximate stage sets planner settings in a savepoint that it rolls
                back before the scoring statement).
            query: the owner's scope and the request's filters.
            vector: the query's embedding.
            weights: the preset.
            limit: how many records.
            exact: score every row (what the approximate path is measured against).
        """
        if not exact:
            found = self.candidates(conn, query, vector, limit)
            if found is not None:
                scored = self.store.recall(conn, query, vector, weights, limit=limit, candidates=found)
                return RecallOutcome(scored, APPROXIMATE, len(found))
        return RecallOutcome(self.store.recall(conn, query, vector, weights, limit=limit), EXACT)

    def candidates(
        self, conn: psycopg.Connection[Any], query: MemoryQuery, vector: np.ndarray, limit: int
    ) -> dict[str, float] | None:
        """The memories of ``query`` nearest to ``vector`` and the owner's other live memories with the
        same text as one of them (module doc, step 1), id -> similarity (the expression of
        `MemoryStore.recall`), or None when the exact path must run (no index serves the namespace, a small
        owner, or too few candidates)."""
        planned = self.candidate_statement(conn, query, vector, limit)
        if planned is None:
            return None
        # One round trip; the settings live in a savepoint that is rolled back after the rows are read.
        with conn.pipeline(), conn.transaction():
            conn.execute(
                "SELECT set_config('enable_sort', 'off', true), set_config('hnsw.ef_search', %s, true)",
                (str(planned.ef_search),),
            )
            # Custom plan (no prepare): a partial index matches only the literal namespace (and owner scope).
            rows = conn.execute(planned.statement, planned.params, prepare=False).fetchall()
            raise psycopg.Rollback()
        if sum(1 for *_, near in rows if near) < planned.wanted:
            return None
        return {str(memory): float(similarity) for memory, similarity, _ in rows}

    def candidate_statement(
        self, conn: psycopg.Connection[Any], query: MemoryQuery, vector: np.ndarray, limit: int
    ) -> CandidateStatement | None:
        """The statement of `candidates` (None when the exact path must run): through the owner's own
        index when the owner index registry lists one (`common.storage.chunks.owner_vector_indexes`),
        else through the namespace's (its own partial index or the table's)."""
        owner_scope = (
            self.owner_registry.scope_of(conn, query.namespace, query.user_id) if self.owner_indexes else None
        )
        index = self.registry.index_of(conn, query.namespace) if owner_scope is None else OWN_INDEX
        if index is None or not self._large_owner(conn, query):
            return None
        wanted = max(self.settings.memory_recall_candidates, CANDIDATES_PER_RESULT * limit)
        if owner_scope is not None:
            wanted = max(wanted, OWNER_CANDIDATES_PER_RESULT * limit)
        params: dict[str, Any] = {
            "vector": np.asarray(vector, dtype=np.float32),
            "wanted": wanted,
            "peers": PEERS_PER_CANDIDATE * wanted,
        }
        where = self.store.where(query, params)
        ordered = self.tenant_vector if index == OWN_INDEX else sql.SQL("c.embedding")
        query_vector: sql.Composable = sql.SQL("%(vector)s")
        if owner_scope is not None:
            # The conditions of the owner index's predicate (`owner_index_predicate`), bound: the custom
            # plan sees them as constants and proves the predicate.
            params["owner_scope"] = owner_scope
            scope = sql.SQL("%(owner_scope)s")
            owner_rows = sql.SQL("(c.meta -> 'scopes' ->> 0) = %(owner_scope)s")
            ordered, query_vector = self.owner_vector, self.owner_query
            per_candidate = OWNER_EF_SEARCH_PER_CANDIDATE
        else:
            scope = sql.SQL("(SELECT user_scope FROM owner)")
            owner_rows = sql.SQL("c.meta -> 'scopes' ? (SELECT user_scope FROM owner)")
            per_candidate = EF_SEARCH_PER_CANDIDATE
        statement = sql.SQL(
            "WITH owner AS MATERIALIZED (SELECT o.user_scope FROM {memories} o"
            " WHERE o.namespace = %(namespace)s AND o.user_id = %(user_id)s"
            " ORDER BY o.created_at DESC LIMIT 1),"
            " near AS MATERIALIZED (SELECT m.memory_id, md5(c.text) AS text_md5, {similarity} AS similarity"
            " FROM {chunks} c"
            " JOIN {memories} m ON m.namespace = c.namespace AND m.memory_id = c.node_key"
            " WHERE c.namespace = %(namespace)s AND c.node_type = 'memory' AND c.chunk_order = 0"
            " AND c.embedding IS NOT NULL AND {owner_rows} AND {where}"
            " ORDER BY {ordered} <=> {query_vector} LIMIT %(wanted)s)"
            " SELECT memory_id, similarity, true FROM near"
            " UNION ALL (SELECT m.memory_id, {similarity}, false FROM {chunks} c"
            " JOIN {memories} m ON m.namespace = c.namespace AND m.memory_id = c.node_key"
            " WHERE c.namespace = %(namespace)s AND c.node_type = 'memory' AND c.chunk_order = 0"
            " AND (c.meta -> 'scopes' ->> 0) = {scope}"
            " AND md5(c.text) IN (SELECT text_md5 FROM near)"
            " AND c.node_key NOT IN (SELECT memory_id FROM near) AND {where} LIMIT %(peers)s)"
        ).format(
            chunks=self.chunks,
            memories=self.memories,
            where=where,
            ordered=ordered,
            query_vector=query_vector,
            owner_rows=owner_rows,
            scope=scope,
            similarity=sql.SQL("coalesce(1 - (c.embedding <=> %(vector)s), 0)"),
        )
        # The owner's scope on the chunk (`ingest_service.memories.writer.chunk_of`; read once) rejects
        # another owner's chunk on the heap row the index scan fetches anyway, before the join looks up
        # its memories row; the join's owner condition stays the authority.
        # The peers: the HNSW graph cannot enumerate many identical vectors (their neighbours are one
        # another), so the owner's other copies of a candidate's text are looked up by the text's md5
        # (migration 0038's index); each is scored exactly like the rest.
        # The planner's cost model prefers sorting the owner's rows exactly (it does not count the
        # detoasting of each vector, `common.storage.chunks.tenant_vector_indexes`): sorting is turned off
        # for this statement only. ef_search: the scan's first batch per candidate asked for
        # (docs/decisions/0038-memory-recall-candidates.md, 0039-memory-owner-vector-indexes.md).
        ef_search = min(max(self.settings.hnsw_ef_search, per_candidate * wanted), 1000)
        return CandidateStatement(statement, params, wanted, ef_search)

    def _large_owner(self, conn: psycopg.Connection[Any], query: MemoryQuery) -> bool:
        """True when the owner has at least ``memory_recall_exact_below`` memories (counted up to that
        bound on the owner index, so the count costs the same for any owner; a large owner is remembered
        for `LARGE_OWNER_SECONDS`: the count reads up to the bound's heap rows whose pages recalls touch)."""
        threshold = self.settings.memory_recall_exact_below
        if threshold <= 0:
            return True
        key = (query.namespace, query.user_id)
        now = time.monotonic()
        if self._large.get(key, 0.0) > now:
            return True
        count = fetch_count(
            conn,
            sql.SQL(
                "SELECT count(*) FROM (SELECT 1 FROM {} WHERE namespace = %s AND user_id = %s LIMIT %s) AS owned"
            ).format(self.memories),
            (query.namespace, query.user_id, threshold),
        )
        if count < threshold:
            return False
        if len(self._large) >= LARGE_OWNERS_KEPT:
            self._large.clear()
        self._large[key] = now + LARGE_OWNER_SECONDS
        return True


__all__ = [
    "APPROXIMATE",
    "CANDIDATES_PER_RESULT",
    "EXACT",
    "CandidateStatement",
    "MemoryRecall",
    "RecallOutcome",
]
