"""The read-side measurements of one size of bench/bench_scale.py: the vector arm (the baseline's statement,
`ChunkRankings.vector_candidates` and HNSW forced at several ``hnsw.ef_search``, each against the exact
top-10), the floor statements, interleaved A/B requests, the concurrency runs with the CPU they used, and the
query embedding alone. Every figure is stored with the load average when it was taken."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import psycopg
from psycopg import sql

from bench.client_threads import run_in_threads
from bench.run_bench import percentiles
from common.kernel.config import Settings
from common.storage.chunks.rows import ChunkFilter
from common.storage.chunks.store import ChunkStore
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2_grpc

EF_SEARCH = (40, 100, 200)


TOP_K = 10


# The baseline's vector statement, for the A/B of the arm.
BASELINE_VECTOR = (
    "WITH nearest AS MATERIALIZED ("
    " SELECT node_key, chunk_order, node_type, source_path, title, heading, text, meta,"
    " embedding <=> %(embedding)s AS score FROM {table}"
    " WHERE namespace = %(namespace)s AND embedding IS NOT NULL"
    " ORDER BY embedding <=> %(embedding)s LIMIT %(limit)s)"
    " SELECT * FROM nearest ORDER BY score, node_key, chunk_order"
)


def load() -> dict[str, float]:
    one, five, fifteen = os.getloadavg()
    return {"load_1m": round(one, 2), "load_5m": round(five, 2), "load_15m": round(fifteen, 2)}


def measured(samples: list[float]) -> dict[str, Any]:
    return {**percentiles(samples), **load()}


@contextmanager
def statement_settings(conn: psycopg.Connection[Any], **settings: str) -> Iterator[None]:
    """Session settings for the block, restored to their values before it (not to the defaults: the
    session's ``hnsw.ef_search`` is the service's)."""
    before = {name: conn.execute("SELECT current_setting(%s)", (name,)).fetchone()[0] for name in settings}  # type: ignore[index]
    for name, value in settings.items():
        conn.execute("SELECT set_config(%s, %s, false)", (name, value))
    try:
        yield
    finally:
        for name, value in before.items():
            conn.execute("SELECT set_config(%s, %s, false)", (name, value))


FORCE_HNSW = {
    "enable_seqscan": "off",
    "enable_bitmapscan": "off",
    "enable_indexonlyscan": "off",
    "enable_sort": "off",
}


def timed_rows(call: Callable[[], list[Any]]) -> tuple[float, list[Any]]:
    started = time.perf_counter()
    rows = call()
    return (time.perf_counter() - started) * 1000, rows


def vector_arm(
    conn: psycopg.Connection[Any],
    settings: Settings,
    q: str,
    vectors: list[np.ndarray],
    layout: str,
    size: str,
) -> dict[str, Any]:
    """Latency and overlap@10 with the exact top-10 of the vector arm's variants (see the module doc)."""
    table = settings.chunks_table
    store = ChunkStore(settings)
    where = ChunkFilter(namespace=q)
    ident = sql.Identifier(table)

    def keys_of(rows: list[Any]) -> list[tuple[str, int]]:
        return [(r[0], r[1]) for r in rows[:TOP_K]]

    def statement(vector: np.ndarray) -> list[Any]:
        return conn.execute(
            sql.SQL(
                "SELECT node_key, chunk_order FROM {} WHERE namespace = %(namespace)s AND embedding IS NOT NULL"
                " ORDER BY embedding <=> %(embedding)s LIMIT %(limit)s"
            ).format(ident),
            {"namespace": q, "embedding": vector, "limit": 50},
        ).fetchall()

    with statement_settings(conn, enable_indexscan="off"):
        exact = [keys_of(statement(v)) for v in vectors]
    variants: dict[str, Callable[[np.ndarray], list[Any]]] = {
        "baseline statement": lambda v: conn.execute(
            sql.SQL(BASELINE_VECTOR).format(table=ident), {"namespace": q, "embedding": v, "limit": 50}
        ).fetchall(),
        "vector_candidates (bench checkout)": lambda v: [
            (c.node_key, c.chunk_order) for c in store.vector_candidates(conn, where, v, 50)
        ],
    }
    results: dict[str, Any] = {}
    for name, call in variants.items():
        samples, overlap = [], []
        for vector, truth in zip(vectors, exact, strict=True):
            ms, rows = timed_rows(lambda c=call, v=vector: c(v))
            samples.append(ms)
            overlap.append(len(set(keys_of(rows)) & set(truth)) / TOP_K)
        results[name] = {**measured(samples), "overlap_at_10": round(statistics.fmean(overlap), 3)}
    for ef in EF_SEARCH:
        with statement_settings(conn, **FORCE_HNSW, **{"hnsw.ef_search": str(ef)}):
            samples, overlap = [], []
            for vector, truth in zip(vectors, exact, strict=True):
                ms, rows = timed_rows(lambda v=vector: statement(v))
                samples.append(ms)
                overlap.append(len(set(keys_of(rows)) & set(truth)) / TOP_K)
        results[f"HNSW forced, ef_search {ef}, iterative relaxed_order"] = {
            **measured(samples),
            "overlap_at_10": round(statistics.fmean(overlap), 3),
        }
    if layout == "multi" and size != "10k":
        started = time.perf_counter()
        conn.execute(
            sql.SQL(
                "CREATE INDEX scale_partial_hnsw ON {} USING hnsw (embedding vector_cosine_ops) WHERE namespace = {}"
            ).format(ident, sql.Literal(q))
        )
        build = round(time.perf_counter() - started, 1)
        conn.execute(sql.SQL("ANALYZE {}").format(ident))
        partial = sql.SQL(
            "SELECT node_key, chunk_order FROM {} WHERE namespace = {} AND embedding IS NOT NULL"
            " ORDER BY embedding <=> %(embedding)s LIMIT 50"
        ).format(ident, sql.Literal(q))
        with statement_settings(conn, **FORCE_HNSW):
            samples, overlap = [], []
            for vector, truth in zip(vectors, exact, strict=True):
                ms, rows = timed_rows(lambda v=vector: conn.execute(partial, {"embedding": v}).fetchall())
                samples.append(ms)
                overlap.append(len(set(keys_of(rows)) & set(truth)) / TOP_K)
        conn.execute("DROP INDEX scale_partial_hnsw")
        results["HNSW partial to Q (per-tenant index)"] = {
            **measured(samples),
            "overlap_at_10": round(statistics.fmean(overlap), 3),
            "build_seconds": build,
        }
    return results


def floors(
    conn: psycopg.Connection[Any], settings: Settings, q: str, queries: list[str], vectors: list[np.ndarray]
) -> dict[str, Any]:
    """One HNSW top-10 (index forced) and one GIN full-text top-10 per query, and their sum."""
    ident = sql.Identifier(settings.chunks_table)
    hnsw = sql.SQL(
        "SELECT id FROM {} WHERE namespace = %s AND embedding IS NOT NULL ORDER BY embedding <=> %s LIMIT 10"
    ).format(ident)
    text = sql.SQL(
        "SELECT id FROM {t} WHERE namespace = %(q)s AND search_document @@ websearch_to_tsquery({c}::regconfig, %(text)s)"
        " ORDER BY ts_rank_cd(search_document, websearch_to_tsquery({c}::regconfig, %(text)s)) DESC LIMIT 10"
    ).format(t=ident, c=sql.Literal(settings.text_search_config))
    vector_ms, text_ms = [], []
    for query, vector in zip(queries, vectors, strict=True):
        with statement_settings(conn, **FORCE_HNSW):
            vector_ms.append(timed_rows(lambda v=vector: conn.execute(hnsw, (q, v)).fetchall())[0])
        text_ms.append(timed_rows(lambda t=query: conn.execute(text, {"q": q, "text": t}).fetchall())[0])
    return {
        "hnsw_top10": measured(vector_ms),
        "fulltext_top10": measured(text_ms),
        "sum": measured([a + b for a, b in zip(vector_ms, text_ms, strict=True)]),
    }


def interleaved(calls: dict[str, list[Callable[[], Any]]]) -> dict[str, dict[str, Any]]:
    """Runs the i-th call of every variant one after another (order alternating with i); per-variant
    latencies."""
    names = list(calls)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for index in range(len(calls[names[0]])):
        for name in names if index % 2 == 0 else names[::-1]:
            started = time.perf_counter()
            calls[name][index]()
            samples[name].append((time.perf_counter() - started) * 1000)
    return {name: measured(values) for name, values in samples.items()}


def cpu_seconds(address: str) -> dict[tuple[str, int], float]:
    """CPU seconds used so far (Linux ``/proc``), by process: ``("query_service", pid)`` for every process
    with ``CB_QUERY_ADDR`` = ``address`` (the worker processes included), ``("postgres", pid)`` for the
    PostgreSQL processes, and ``("machine", 0)`` the busy time of all cores."""
    tick = os.sysconf("SC_CLK_TCK")
    used: dict[tuple[str, int], float] = {}
    marker = f"CB_QUERY_ADDR={address}\0".encode()
    for process in Path("/proc").iterdir():
        if not process.name.isdigit():
            continue
        try:
            fields = (process / "stat").read_text().rsplit(")", 1)[1].split()
            command = (process / "cmdline").read_bytes()
            kind = "postgres" if command.startswith(b"postgres") else ""
            if not kind and marker in (process / "environ").read_bytes():
                kind = "query_service"
        except OSError:
            continue
        if kind:
            used[(kind, int(process.name))] = (int(fields[11]) + int(fields[12])) / tick
    cpu = [int(value) for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    used[("machine", 0)] = (sum(cpu[:8]) - cpu[3] - cpu[4]) / tick  # all but idle and iowait
    return used


def cores_used(
    before: dict[tuple[str, int], float], after: dict[tuple[str, int], float], wall: float
) -> dict[str, float]:
    """Cores per kind between two `cpu_seconds` readings (a process that exited meanwhile is not counted)."""
    cores = {"query_service": 0.0, "postgres": 0.0, "machine": 0.0}
    for key, value in after.items():
        cores[key[0]] += (value - before.get(key, 0.0)) / wall
    return {kind: round(value, 2) for kind, value in cores.items()}


def concurrency(address: str, q: str, queries: list[str], clients: int, seconds: float) -> dict[str, Any]:
    """``clients`` threads, each with its own channel, sending Search with its own share of the queries
    (rotating) until ``seconds`` have passed; throughput per second and latency percentiles."""
    stop = time.perf_counter() + seconds
    samples: list[list[float]] = [[] for _ in range(clients)]
    errors: list[str] = []

    def client(index: int) -> None:
        # Its own connection per client (no shared subchannel): the kernel spreads connections, not calls,
        # over the worker processes of CB_QUERY_PROCESSES.
        channel = grpc.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)])
        stub = retrieval_service_pb2_grpc.RetrievalServiceStub(channel)
        mine = queries[index::clients] or queries
        turn = 0
        while time.perf_counter() < stop:
            request = retrieval_service_pb2.SearchRequest(
                namespace=q, query=mine[turn % len(mine)], top_k=TOP_K
            )
            turn += 1
            started = time.perf_counter()
            try:
                stub.Search(request, timeout=30)
            except grpc.RpcError as error:
                errors.append(str(error.code()))
                continue
            samples[index].append((time.perf_counter() - started) * 1000)

    cpu_started, used_before = time.process_time(), cpu_seconds(address)
    wall = run_in_threads(client, clients)
    client_cores = (time.process_time() - cpu_started) / wall
    used = cores_used(used_before, cpu_seconds(address), wall)
    every = [value for values in samples for value in values]
    return {
        "clients": clients,
        "searches": len(every),
        "errors": len(errors),
        "per_second": round(len(every) / wall, 1),
        # Cores used meanwhile: the load generator itself, the service under test, PostgreSQL, the machine.
        "cores": {
            "clients": round(client_cores, 2),
            **used,
        },
        **measured(every),
    }


def query_embedding(queries: list[str]) -> dict[str, Any]:
    """The model's forward pass for one query, at 1 BLAS thread and at all cores (alternating)."""
    from common.text_models.embeddings.factory import build_embedding_provider

    base = Settings()
    providers = {
        threads: build_embedding_provider(base.model_copy(update={"embedding_threads": threads}))
        for threads in (1, os.cpu_count() or 2)
    }
    for provider in providers.values():
        provider.encode_query("warm-up")
    samples: dict[int, list[float]] = {threads: [] for threads in providers}
    for index, query in enumerate(queries):
        order = list(providers) if index % 2 == 0 else list(providers)[::-1]
        for threads in order:
            started = time.perf_counter()
            providers[threads].encode_query(query)
            samples[threads].append((time.perf_counter() - started) * 1000)
    return {f"{threads} thread(s)": measured(values) for threads, values in samples.items()}
