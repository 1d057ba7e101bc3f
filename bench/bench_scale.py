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
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.corpus_loading import distinctive_sentences
from bench.run_bench import add_run_options
from bench.run_bench import run_in_database
from bench.run_bench import services
from bench.scale_arms import arm_breakdown
from bench.scale_measures import TOP_K
from bench.scale_measures import concurrency
from bench.scale_measures import floors
from bench.scale_measures import interleaved
from bench.scale_measures import load
from bench.scale_measures import query_embedding
from bench.scale_measures import vector_arm
from bench.scale_report import draw
from bench.scale_report import entry
from bench.scale_tables import FAQ
from bench.scale_tables import add_copies
from bench.scale_tables import indexes_rebuilt
from bench.scale_tables import ingest_base
from bench.scale_tables import move_copies
from bench.service_results import machine
from bench.service_results import print_report
from bench.service_results import tree_commit
from bench.service_results import write_json
from common.kernel.config import Settings
from common.storage.chunks.tenant_vector_indexes import TenantVectorIndexes
from memory_service_grpc_client.memory.v1 import context_service_pb2
from memory_service_grpc_client.memory.v1 import context_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2_grpc

SIZES = {"10k": 10_000, "100k": 100_000, "1m": 1_000_000}
# -- measuring -------------------------------------------------------------------------------------


@contextmanager
def timed(timings: dict[str, float], name: str) -> Iterator[None]:
    """Adds the block's wall time (seconds, one decimal) to ``timings[name]``."""
    started = time.perf_counter()
    yield
    timings[name] = round(time.perf_counter() - started, 1)


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
    add_run_options(parser, note_help=None, shared_help=argparse.SUPPRESS)
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
