"""Scale and concurrency benchmark of the read side, on the real corpora, in a fresh database.

How the tables are built:
- the **base** is real: the docs vault (398 Markdown files) and the Debian FAQ (224 answers, English and
  Russian) retained through a real ingest service into the queried namespace Q (about 10k chunks, the
  "10k" size); before the first larger size, the Debian upload stream (5,415 observations, one episode
  chunk each) is recorded into the namespace ``Q-debian``, a real second tenant;
- larger sizes are **copies** of the base rows written by one ``INSERT ... SELECT`` per size: copy *c* of a
  row gets the key ``<node_key>~copy<c>`` and the embedding ``l2_normalize(3·e + e')`` where ``e'`` is
  the embedding of another base row chosen by a fixed permutation of copy and row (so no two rows share
  a vector, and each copy stays near its original); texts are copied as they are (the full-text and
  trigram arms then see duplicate texts);
- two **layouts** per size: ``single`` (every copy in Q: one namespace holds the table) and ``multi``
  (copy *c* spread over the namespaces ``Q-tenant-<10c..10c+9>`` of about 1k rows each, Q keeps its 10k
  base rows: one namespace among many). The layout changes by one ``UPDATE`` of the copies' namespace.
- before each bulk change the chunk indexes other than the key constraints are dropped and afterwards
  rebuilt, each build timed (the HNSW build is the expensive one: ``maintenance_work_mem`` is set from
  the table's size, ``max_parallel_maintenance_workers`` to cores - 1), then ``VACUUM ANALYZE``.

What is measured at each size and layout, in the same run:
- Search (top_k 10) and CompileContext (budget 1500) over gRPC, p50/p95, against the query service of
  "this tree" (the checkout of this file, or ``--tree DIR``) and, with ``--baseline-tree``, against the
  query service of another checkout on the same database, request by request alternately (A/B
  interleaved); the commit of each tree is recorded per size (services start anew for each size);
- the floor: one HNSW top-10 statement (the index forced) and one GIN full-text top-10 statement, per
  query, in-process with the query vectors computed beforehand (no model, no service);
- the vector arm: the statement of the baseline, `ChunkRankings.vector_candidates` (of the checkout of
  this file, in-process, whatever ``--tree`` is), and the candidates of
  (HNSW forced at several ``hnsw.ef_search`` with iterative scans; in the multi layout an HNSW
  index partial to Q, the per-tenant index, which is also what a partition of Q would hold), each with
  p50/p95 and overlap@10 against the exact top-10 (no index but the covering B-tree allowed);
- each ranking arm in-process and the ``EXPLAIN (ANALYZE, BUFFERS)`` of its statements for the query at
  its median and the slowest (`bench/scale_arms.py`);
- the query embedding alone (the model's forward pass for one query) at 1 BLAS thread and at all cores;
- with ``--clients``, at each size and layout of ``--concurrency-at``: 1, 4, 16, 32 clients each sending
  its own queries for ``--concurrency-seconds``, throughput per second and p95, for both services.
Every figure is stored with the machine and the load average when it was taken (bench/service_results.py);
JSON in bench/results/scale-<time>.json, the report printed, the curve in
bench/results/scale-<time>.png.

Usage: .venv/bin/python bench/bench_scale.py [--sizes 10k,100k,1m] [--layouts single,multi]
[--tree DIR] [--baseline-tree DIR] [--queries 100] [--clients 1,4,16,32] [--concurrency-at 100k:multi]
[--synthetic-base 10000] [--env K=V,...] [--baseline-env K=V,...] [--note TEXT]
(``--synthetic-base N``: the base is N chunks of `bench/bench_capacity.py`'s loader, real sentences
with vectors from the real model, written through `DocumentWriter.put_chunks`, instead of the corpora
through Retain; for a quick run on a loaded machine)
(matplotlib for the picture comes with the bench extra of requirements/dev.txt, installed by ``make deps``;
the embedded database must be up).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from memory_service_grpc_client.memory.v1 import (
    context_service_pb2,
    context_service_pb2_grpc,
    retrieval_service_pb2,
    retrieval_service_pb2_grpc,
)

from bench.run_bench import (
    distinctive_sentences,
    percentiles,
    run_in_database,
    services,
)
from bench.scale_arms import arm_breakdown
from bench.scale_report import draw, entry
from bench.scale_tables import FAQ, add_copies, indexes_rebuilt, ingest_base, move_copies
from bench.service_results import machine, print_report, tree_commit, write_json
from common.kernel.config import Settings
from common.storage.chunks.rows import ChunkFilter
from common.storage.chunks.store import ChunkStore
from common.storage.chunks.tenant_vector_indexes import TenantVectorIndexes

SIZES = {"10k": 10_000, "100k": 100_000, "1m": 1_000_000}
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


# -- measuring -------------------------------------------------------------------------------------


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


@contextmanager
def timed(timings: dict[str, float], name: str) -> Iterator[None]:
    """Adds the block's wall time (seconds, one decimal) to ``timings[name]``."""
    started = time.perf_counter()
    yield
    timings[name] = round(time.perf_counter() - started, 1)


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

    started, cpu_started, used_before = time.perf_counter(), time.process_time(), cpu_seconds(address)
    threads = [threading.Thread(target=client, args=(index,)) for index in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
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


# -- the run ---------------------------------------------------------------------------------------


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Scale and concurrency benchmark of the read side (module doc)."
    )
    parser.add_argument("--sizes", default="10k,100k,1m", help="comma-separated subset of 10k, 100k, 1m")
    parser.add_argument("--layouts", default="single,multi", help="comma-separated subset of single, multi")
    parser.add_argument(
        "--tree",
        default="",
        help="checkout whose query service is under test ('this tree'; default: the checkout of this file)",
    )
    parser.add_argument(
        "--baseline-tree", default="", help="checkout whose query service is the A/B baseline"
    )
    parser.add_argument(
        "--queries", type=int, default=100, help="queries per measurement (half vault, half FAQ)"
    )
    parser.add_argument("--clients", default="1,4,16,32", help="client counts of the concurrency benchmark")
    parser.add_argument(
        "--concurrency-at", default="100k:multi", help="size:layout pairs for the concurrency runs"
    )
    parser.add_argument("--concurrency-seconds", type=float, default=15.0)
    parser.add_argument(
        "--synthetic-base",
        type=int,
        default=0,
        help="base of N synthetic chunks (bench_capacity's) instead of the real corpora (the quick run)",
    )
    parser.add_argument(
        "--env",
        default="",
        help="KEY=VALUE,... added to the environment of the query service under test (e.g. CB_QUERY_PROCESSES=2)",
    )
    parser.add_argument("--baseline-env", default="", help="KEY=VALUE,... for the baseline's query service")
    parser.add_argument("--note", default="")
    parser.add_argument("--shared-database", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args()


def main() -> int:
    return run_in_database(run, parse_arguments(), "memory_scale")


def run(arguments: argparse.Namespace, stamp: str) -> int:
    settings = Settings()
    sizes = [size for size in SIZES if size in arguments.sizes.split(",")]
    layouts = [layout for layout in ("single", "multi") if layout in arguments.layouts.split(",")]
    concurrency_at = set(arguments.concurrency_at.split(","))
    q = f"scale-{stamp.lower()}"
    results: dict[str, Any] = {
        "time": stamp,
        "machine": machine(),
        "note": arguments.note,
        "tree": arguments.tree or str(ROOT),
        "baseline_tree": arguments.baseline_tree,
        "namespace": q,
        "states": [],
    }
    faq_questions = [
        json.loads(line)["query"]
        for line in (FAQ / "debian-faq-queries.jsonl").read_text("utf-8").splitlines()
    ]
    half = arguments.queries // 2
    queries = distinctive_sentences(arguments.queries - half) + faq_questions[::2][:half]
    if arguments.synthetic_base:
        # The quick base: the capacity benchmark's chunks (real sentences, vectors from the real model's
        # sentence embeddings) instead of the real corpora through Retain (10 min on a quiet machine,
        # about an hour at load 15); no Debian tenant then.
        from bench.bench_capacity import load as load_synthetic

        seconds = load_synthetic(settings, distinctive_sentences(400), arguments.synthetic_base, namespace=q)
        base = {"synthetic_chunks": arguments.synthetic_base, "seconds": round(seconds, 1)}
        results["build"] = {"base": base, "debian": "none (synthetic base)", **load()}
    else:
        results["build"] = {"base": ingest_base(q, debian=False), **load()}
    print("base:", results["build"]["base"], flush=True)

    from common.text_models.embeddings.factory import build_embedding_provider

    provider = build_embedding_provider(settings.model_copy(update={"embedding_threads": 1}))
    vectors = [np.asarray(provider.encode_query(query), dtype=np.float32) for query in queries]
    results["query_embedding"] = query_embedding(queries)

    from pgvector.psycopg import register_vector

    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        register_vector(conn)
        conn.execute(sql.SQL("SET hnsw.ef_search = {}").format(sql.Literal(settings.hnsw_ef_search)))
        conn.execute("SET hnsw.iterative_scan = relaxed_order")
        conn.execute(
            sql.SQL("SET hnsw.max_scan_tuples = {}").format(sql.Literal(settings.hnsw_max_scan_tuples))
        )
        results["pgvector"] = conn.execute(
            "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
        ).fetchone()[0]  # type: ignore[index]
        table = settings.chunks_table
        conn.execute(
            sql.SQL(
                "CREATE TEMP TABLE scale_base AS SELECT row_number() OVER (ORDER BY id) AS rn, * FROM {} WHERE namespace = %s"
            ).format(sql.Identifier(table)),
            (q,),
        )
        conn.execute("CREATE INDEX ON scale_base (rn)")
        base_rows = conn.execute("SELECT count(*) FROM scale_base").fetchone()[0]  # type: ignore[index]
        copies_done, layout_now = 0, "single"
        for size in sizes:
            if size != "10k" and "debian" not in results["build"]:
                results["build"]["debian"] = ingest_base(q, debian=True)
                print("debian:", results["build"]["debian"], flush=True)
            plan = layouts if size != "10k" else ["single"]
            if layout_now == "multi" and len(plan) == 2:
                plan = plan[::-1]  # continue with the layout the table has
            for position, layout in enumerate(plan):
                timings: dict[str, float] = {}
                started = time.perf_counter()
                total = conn.execute(
                    sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table))
                ).fetchone()[0]  # type: ignore[index]
                if size != "10k":
                    with indexes_rebuilt(conn, table, max(SIZES[size], total), timings):
                        if position == 0 and total < SIZES[size]:
                            needed = SIZES[size] - total
                            if layout != layout_now and copies_done:
                                with timed(timings, "move_copies"):
                                    move_copies(conn, table, q, layout)
                            last = copies_done + -(-needed // base_rows)
                            rows_last = needed - (last - copies_done - 1) * base_rows
                            with timed(timings, "copy_rows"):
                                add_copies(conn, table, q, copies_done + 1, last, rows_last, layout)
                            copies_done = last
                        else:
                            with timed(timings, "move_copies"):
                                move_copies(conn, table, q, layout)
                    layout_now = layout
                else:
                    with timed(timings, "analyze"):
                        conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(table)))
                # The per-tenant vector indexes the rule asks for (Q among many; none when Q is the table).
                tenant_started = time.perf_counter()
                tenant_changes = TenantVectorIndexes(settings).synchronise()
                if tenant_changes:
                    timings["tenant_vector_idx"] = round(time.perf_counter() - tenant_started, 1)
                state = measure_state(
                    conn, settings, arguments, q, size, layout, queries, vectors, concurrency_at
                )
                state["build"] = {
                    "seconds": round(time.perf_counter() - started - state.pop("seconds"), 1),
                    "indexes": timings,
                    "tenant_indexes": [dataclasses.asdict(change) for change in tenant_changes],
                }
                results["states"].append(state)
                print(
                    json.dumps({k: state[k] for k in ("size", "layout", "rows", "q_rows")}),
                    state["search"],
                    flush=True,
                )
                write_json(results, prefix="scale")
    write_json(results, prefix="scale")
    picture = draw(results)
    print_report(entry(results, picture))
    return 0


def measure_state(
    conn: psycopg.Connection[Any],
    settings: Settings,
    arguments: argparse.Namespace,
    q: str,
    size: str,
    layout: str,
    queries: list[str],
    vectors: list[np.ndarray],
    concurrency_at: set[str],
) -> dict[str, Any]:
    started = time.perf_counter()
    table = sql.Identifier(settings.chunks_table)
    state: dict[str, Any] = {
        "size": size,
        "layout": layout,
        "rows": conn.execute(sql.SQL("SELECT count(*) FROM {}").format(table)).fetchone()[0],  # type: ignore[index]
        "q_rows": conn.execute(
            sql.SQL("SELECT count(*) FROM {} WHERE namespace = %s").format(table), (q,)
        ).fetchone()[0],  # type: ignore[index]
        "namespaces": conn.execute(
            sql.SQL("SELECT count(DISTINCT namespace) FROM {}").format(table)
        ).fetchone()[0],  # type: ignore[index]
    }
    trees = {"this tree": Path(arguments.tree) if arguments.tree else ROOT}
    if arguments.baseline_tree:
        trees["baseline"] = Path(arguments.baseline_tree)
    # Read when the services start: a tree under test can move on between sizes (a snapshot re-checked-out).
    state["commits"] = {name: tree_commit(root) for name, root in trees.items()}
    environments = {"this tree": arguments.env, "baseline": arguments.baseline_env}
    state["environments"] = {name: environments[name] for name in trees}
    with ExitStack() as stack:
        addresses = {
            name: stack.enter_context(
                services(
                    root=root,
                    kinds=("query",),
                    extra_env=dict(pair.split("=", 1) for pair in environments[name].split(",") if pair),
                )
            )[1]
            for name, root in trees.items()
        }
        search, context = {}, {}
        for name, address in addresses.items():
            channel = grpc.insecure_channel(address, options=[("grpc.max_receive_message_length", 64 << 20)])
            stub = retrieval_service_pb2_grpc.RetrievalServiceStub(channel)
            compile_stub = context_service_pb2_grpc.ContextServiceStub(channel)
            for query in queries[:3]:  # warm-up: model, pool, caches
                stub.Search(
                    retrieval_service_pb2.SearchRequest(namespace=q, query=query, top_k=TOP_K), timeout=120
                )
            search[name] = [
                lambda s=stub, t=query: s.Search(
                    retrieval_service_pb2.SearchRequest(namespace=q, query=t, top_k=TOP_K), timeout=60
                )
                for query in queries
            ]
            context[name] = [
                lambda s=compile_stub, t=query: s.CompileContext(
                    context_service_pb2.CompileContextRequest(namespace=q, query=t, token_budget=1500),
                    timeout=120,
                )
                for query in queries
            ]
        state["search"] = interleaved(search)
        state["compile_context"] = interleaved(context)
        state["floor"] = floors(conn, settings, q, queries, vectors)
        state["vector_arm"] = vector_arm(conn, settings, q, vectors, layout, size)
        state["arms"] = arm_breakdown(conn, settings, q, queries, vectors)
        if f"{size}:{layout}" in concurrency_at and arguments.clients:
            state["concurrency"] = {name: [] for name in addresses}
            for clients in [int(c) for c in arguments.clients.split(",")]:
                for name, address in addresses.items():
                    outcome = concurrency(address, q, queries, clients, arguments.concurrency_seconds)
                    state["concurrency"][name].append(outcome)
                    print(name, outcome, flush=True)
    state["seconds"] = time.perf_counter() - started
    return state


if __name__ == "__main__":
    sys.exit(main())
