"""Where a Search's database time goes at one size of bench/bench_scale.py: each ranking arm of
`query_service.retrieval.hybrid_search` in-process, and the plans of its statements.

Each arm is called as `HybridSearch.search` calls it by default (``limit`` 50; trigram with the whole
query matched from 8 words and up to 1,000 characters) on one connection set up like the service's pool
(``jit`` off, the HNSW settings of `common.storage.database`), the three arms of one query one after another
(order rotating with the query). The code is `common.storage.chunks.rankings` of the checkout of this file
(the query vectors are computed beforehand, so no model time). For each arm the statements of the query at
its median and of the slowest are recorded (a cursor class that logs what it executes) and run again under
``EXPLAIN (ANALYZE, BUFFERS)`` in one transaction, ``SET``/``RESET`` statements as they were (the
``enable_sort`` of a tenant index's statement), so the plan is the one the arm ran.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from typing import Any
from typing import ClassVar

import numpy as np
import psycopg
from psycopg import sql

from bench.run_bench import percentiles
from common.kernel.config import Settings
from common.storage.chunks.rows import ChunkFilter
from common.storage.chunks.store import ChunkStore

LIMIT = 50
VECTOR_LITERAL = re.compile(r"'\[[-0-9.e,]+\]'")
TRIGRAM_WHOLE_QUERY_CHARS = 1000
TRIGRAM_WHOLE_QUERY_MIN_WORDS = 8


class RecordingCursor(psycopg.Cursor[Any]):
    """A cursor that appends every ``(statement, params)`` it executes to `log`."""

    log: ClassVar[list[tuple[Any, Any]]] = []

    def execute(self, query: Any, params: Any = None, **options: Any) -> RecordingCursor:  # type: ignore[override]
        RecordingCursor.log.append((query, params))
        return super().execute(query, params, **options)  # type: ignore[return-value]


def explained(conn: psycopg.Connection[Any], statements: list[tuple[Any, Any]]) -> list[str]:
    """The ``EXPLAIN (ANALYZE, BUFFERS)`` text of each recorded statement (``SET``/``RESET`` run as they
    were, in one transaction rolled back at the end)."""
    plans: list[str] = []
    with conn.transaction(force_rollback=True):
        for statement, params in statements:
            text = statement if isinstance(statement, str) else statement.as_string(conn)
            if text.lstrip().upper().startswith(("SET ", "RESET ")):
                conn.execute(statement, params)
                continue
            composed = sql.SQL("EXPLAIN (ANALYZE, BUFFERS) ") + (
                statement if isinstance(statement, sql.Composable) else sql.SQL(statement)
            )
            rows = conn.execute(composed, params).fetchall()
            plans.append(VECTOR_LITERAL.sub("'[query vector]'", "\n".join(row[0] for row in rows)))
    return plans


def arm_breakdown(
    conn: psycopg.Connection[Any],
    settings: Settings,
    q: str,
    queries: list[str],
    vectors: list[np.ndarray],
) -> dict[str, Any]:
    """Per arm (``vector``, ``text``, ``trigram``): p50/p95 ms over ``queries`` and the plans (module doc).

    Args:
        conn: an autocommit connection to the benchmark's database with pgvector registered.
        settings: the benchmark's settings (table, text search configuration, HNSW settings).
        q: the queried namespace.
        queries, vectors: the queries and their embeddings (same order).

    Returns:
        ``{arm: {"p50_ms", "p95_ms", ..., "rows_p50", "median_query", "slowest_query", "plans_median",
        "plans_slowest"}}``.
    """
    store = ChunkStore(settings)
    where = ChunkFilter(namespace=q)
    arms: dict[str, Callable[[int], list[Any]]] = {
        "vector": lambda i: store.vector_candidates(conn, where, vectors[i], LIMIT),
        "text": lambda i: store.text_candidates(conn, where, queries[i], LIMIT),
        "trigram": lambda i: store.trigram_candidates(
            conn,
            where,
            queries[i],
            LIMIT,
            whole_query_chars=TRIGRAM_WHOLE_QUERY_CHARS,
            whole_query_min_words=TRIGRAM_WHOLE_QUERY_MIN_WORDS,
        ),
    }
    previous = conn.cursor_factory
    conn.execute("SET jit = off")
    conn.cursor_factory = RecordingCursor
    names = list(arms)
    samples: dict[str, list[float]] = {name: [] for name in names}
    rows: dict[str, list[int]] = {name: [] for name in names}
    logs: dict[str, list[list[tuple[Any, Any]]]] = {name: [] for name in names}
    try:
        for index in range(len(queries)):
            shift = index % len(names)
            for name in names[shift:] + names[:shift]:
                RecordingCursor.log = []
                started = time.perf_counter()
                found = arms[name](index)
                samples[name].append((time.perf_counter() - started) * 1000)
                rows[name].append(len(found))
                logs[name].append(RecordingCursor.log)
    finally:
        conn.cursor_factory = previous
        RecordingCursor.log = []
    results: dict[str, Any] = {}
    for name in names:
        order = sorted(range(len(queries)), key=lambda i, n=name: samples[n][i])
        median, slowest = order[len(order) // 2], order[-1]
        results[name] = {
            **percentiles(samples[name]),
            **dict(
                zip(("load_1m", "load_5m", "load_15m"), (round(x, 2) for x in os.getloadavg()), strict=True)
            ),
            "rows_p50": int(np.median(rows[name])),
            "median_query": queries[median],
            "median_ms": round(samples[name][median], 2),
            "slowest_query": queries[slowest],
            "slowest_ms": round(samples[name][slowest], 2),
            "plans_median": explained(conn, logs[name][median]),
            "plans_slowest": explained(conn, logs[name][slowest]),
        }
    return results
