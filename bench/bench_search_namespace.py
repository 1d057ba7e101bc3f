"""Search in process on a namespace that is already loaded, e.g. the docs vault after `cb ingest`.

The scale benchmark (`bench/bench_scale.py`) builds synthetic document nodes whose properties are small.
A real document node carries its whole text in ``props.content``, and every read that touches its
properties pays for that size: found `ContextStore.node_summaries` at 17 ms of a
53 ms search on the docs vault. This benchmark measures `query_service.retrieval.hybrid_search.HybridSearcher.search`
as the query service builds it (real embedding model, routed database, default preset) on the given
namespace, with no gRPC:

* queries: the first ``--queries`` chunk texts of the namespace in a fixed pseudo-random order
  (``md5(node_key)``), 40 to 300 characters long, cut to their first 120 characters;
* 20 warm-up searches, then one search at a time; p50 / p95 / mean in milliseconds; the load average;
* then the same queries again with each part of a Search timed (`cpu_by_part`): the CPU time of this
  process per Search (every thread: the ranking workers and the pool's included) and, per part, the CPU
  time of the thread that runs it (``time.thread_time``) and its wall time. The parts overlap in wall
  time (the full-text and trigram rankings run while the query is embedded and the vector ranking runs),
  and the lexeme statistics are inside the full-text ranking.

Compare trees by running it in each checkout (or with the change applied and reverted) one after the
other on a quiet machine, and say so in ``--note``.

Usage: ``.venv/bin/python bench/bench_search_namespace.py --namespace docs-vault [--queries 200]
[--note TEXT]`` (the database must be up and hold the namespace: ``make db``, then
``cb ingest ../shared/corpora/docs-vault --namespace docs-vault``). Results: printed, written to
bench/results/search-namespace-<UTC time>.json, and printed.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any
from unittest.mock import patch

import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.run_bench import percentiles
from bench.service_results import heading
from bench.service_results import load_average
from bench.service_results import machine
from bench.service_results import print_report
from bench.service_results import tree_commit
from bench.service_results import write_json
from common.kernel.config import Settings
from common.storage.replicas.read_routing import RoutedDatabase
from common.storage.schema import migrations
from query_service.main import query_embedding_provider
from query_service.retrieval.hybrid_search import HybridSearcher
from query_service.retrieval.hybrid_search import SearchQuery
from query_service.retrieval.hybrid_search import search_preset

WARM_UP = 20
QUERY_CHARS = 120
PARTS: tuple[tuple[str, Callable[[HybridSearcher], Any], str], ...] = (
    ("query embedding", lambda searcher: searcher.encoder, "encode_query"),
    ("vector ranking", lambda searcher: searcher.chunks, "vector_candidates"),
    ("full-text ranking", lambda searcher: searcher.chunks, "text_candidates"),
    ("lexeme statistics (in the full-text ranking)", lambda searcher: searcher.chunks, "lexeme_statistics"),
    ("trigram ranking", lambda searcher: searcher.chunks, "trigram_candidates"),
    ("similar-chunk pairs", lambda searcher: searcher.chunks, "similar_pairs"),
    ("node summaries", lambda searcher: searcher.nodes, "node_summaries"),
)
"""The timed parts of a Search: (name, the searcher's collaborator that has the method, method name)."""


def queries_of(settings: Settings, namespace: str, count: int) -> list[str]:
    """``count`` + warm-up query texts taken from the namespace's chunks (module doc)."""
    with psycopg.connect(settings.database_url) as conn:
        statement = sql.SQL(
            "SELECT text FROM {} WHERE namespace = %s AND length(text) BETWEEN 40 AND 300"
            " ORDER BY md5(node_key), chunk_order LIMIT %s"
        ).format(sql.Identifier(settings.chunks_table))
        rows = conn.execute(statement, (namespace, count + WARM_UP)).fetchall()
    return [str(row[0])[:QUERY_CHARS] for row in rows]


def cpu_by_part(searcher: HybridSearcher, namespace: str, texts: list[str]) -> dict[str, Any]:
    """Runs one Search per text with every `PARTS` method wrapped by a timer (`unittest.mock.patch.object`
    on the collaborator, undone afterwards). Returns the process CPU per Search and, per part, the mean
    CPU time of the thread running it and its mean wall time per Search, in milliseconds."""
    totals = {name: [0.0, 0.0] for name, _, _ in PARTS}
    with ExitStack() as wrappers:
        for name, owner_of, attribute in PARTS:
            owner = owner_of(searcher)
            method = getattr(owner, attribute)

            def timed(
                *args: Any,
                _method: Callable[..., Any] = method,
                _name: str = name,
                **kwargs: Any,
            ) -> Any:
                cpu, wall = time.thread_time(), time.perf_counter()
                try:
                    return _method(*args, **kwargs)
                finally:
                    totals[_name][0] += time.thread_time() - cpu
                    totals[_name][1] += time.perf_counter() - wall

            wrappers.enter_context(patch.object(owner, attribute, timed))
        started = time.process_time()
        for text in texts:
            searcher.search(SearchQuery(namespace=namespace, query=text))
        process = time.process_time() - started
    count = len(texts)
    return {
        "process_cpu_ms": round(process / count * 1000, 2),
        "parts": {
            name: {"cpu_ms": round(cpu / count * 1000, 2), "wall_ms": round(wall / count * 1000, 2)}
            for name, (cpu, wall) in totals.items()
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--namespace", required=True, help="a loaded namespace of CB_DATABASE_URL")
    parser.add_argument("--queries", type=int, default=200, help="measured searches (after 20 warm-up ones)")
    parser.add_argument("--note", default="", help="a line added to the entry, e.g. 'baseline: before X'")
    arguments = parser.parse_args()
    settings = Settings()
    provider = query_embedding_provider(settings)
    database = RoutedDatabase(settings, embedding_model=provider.model_id, prepare=migrations.apply)
    searcher = HybridSearcher(database, provider, search_preset("default"))
    texts = queries_of(settings, arguments.namespace, arguments.queries)
    if len(texts) <= WARM_UP:
        message = f"namespace {arguments.namespace!r} has {len(texts)} chunks of 40-300 characters"
        print(f"error: {message}", file=sys.stderr)
        return 2
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    load_before = load_average()
    for text in texts[:WARM_UP]:
        searcher.search(SearchQuery(namespace=arguments.namespace, query=text))
    latencies: list[float] = []
    for index, text in enumerate(texts[WARM_UP:], start=1):
        started = time.perf_counter()
        searcher.search(SearchQuery(namespace=arguments.namespace, query=text))
        latencies.append((time.perf_counter() - started) * 1000)
        if index % 50 == 0:
            print(f"  {index}/{len(texts) - WARM_UP} searches", flush=True)
    load_after = load_average()
    parts = cpu_by_part(searcher, arguments.namespace, texts[WARM_UP:])
    results: dict[str, Any] = {
        "time": stamp,
        "machine": machine(),
        "namespace": arguments.namespace,
        "searches": len(latencies),
        "commit": tree_commit(ROOT),
        **percentiles(latencies),
        "load_1m": [load_before, load_after],
        "cpu_per_search": parts,
        "note": arguments.note,
    }
    print(results)
    write_json(results, prefix="search-namespace")
    lines = [
        heading(results) + " — Search in process on a loaded namespace (`bench/bench_search_namespace.py`)",
        "",
        (
            f"Namespace `{results['namespace']}`, {results['searches']} searches (its own chunk texts, first"
            f" {QUERY_CHARS} characters), tree {results['commit']}: p50 {results['p50_ms']} /"
            f" p95 {results['p95_ms']} ms, mean {results['mean_ms']} ms;"
            f" load average {results['load_1m'][0]} -> {results['load_1m'][1]}."
        ),
        "",
        (
            f"CPU per Search (a second pass over the same queries, `cpu_by_part`): this process"
            f" {parts['process_cpu_ms']} ms; per part, CPU of the thread that runs it / wall ms: "
            + "; ".join(
                f"{name} {part['cpu_ms']} / {part['wall_ms']}" for name, part in parts["parts"].items()
            )
            + "."
        ),
    ]
    print_report(lines, note=arguments.note)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
