"""Search in process on a namespace that is already loaded, e.g. the docs vault after `cb ingest`.

The scale benchmark (`bench/bench_scale.py`) builds synthetic document nodes whose properties are small.
A real document node carries its whole text in ``props.content``, and every read that touches its
properties pays for that size: issue 15 session 6 found `ContextStore.node_summaries` at 17 ms of a
53 ms search on the docs vault. This benchmark measures `query_service.hybrid_search.HybridSearcher.search`
as the query service builds it (real embedding model, routed database, default preset) on the given
namespace, with no gRPC:

* queries: the first ``--queries`` chunk texts of the namespace in a fixed pseudo-random order
  (``md5(node_key)``), 40 to 300 characters long, cut to their first 120 characters;
* 20 warm-up searches, then one search at a time; p50 / p95 / mean in milliseconds; the load average.

Compare trees by running it in each checkout (or with the change applied and reverted) one after the
other on a quiet machine, and say so in ``--note``.

Usage: ``.venv/bin/python bench/bench_search_namespace.py --namespace docs-vault [--queries 200]
[--note TEXT]`` (the database must be up and hold the namespace: ``make db``, then
``cb ingest ../shared/corpora/docs-vault --namespace docs-vault``). Results: printed, written to
bench/results/search-namespace-<UTC time>.json, appended to bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.run_bench import percentiles
from bench.service_results import (
    append_entry,
    heading,
    load_average,
    machine,
    tree_commit,
    write_json,
)
from common.kernel.config import Settings
from common.storage.read_routing import RoutedDatabase
from query_service.hybrid_search import HybridSearcher, SearchQuery, search_preset
from query_service.main import query_embedding_provider

WARM_UP = 20
QUERY_CHARS = 120


def queries_of(settings: Settings, namespace: str, count: int) -> list[str]:
    """``count`` + warm-up query texts taken from the namespace's chunks (module doc)."""
    with psycopg.connect(settings.database_url) as conn:
        statement = sql.SQL(
            "SELECT text FROM {} WHERE namespace = %s AND length(text) BETWEEN 40 AND 300"
            " ORDER BY md5(node_key), chunk_order LIMIT %s"
        ).format(sql.Identifier(settings.chunks_table))
        rows = conn.execute(statement, (namespace, count + WARM_UP)).fetchall()
    return [str(row[0])[:QUERY_CHARS] for row in rows]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--namespace", required=True, help="a loaded namespace of CB_DATABASE_URL")
    parser.add_argument("--queries", type=int, default=200, help="measured searches (after 20 warm-up ones)")
    parser.add_argument("--note", default="", help="a line added to the entry, e.g. 'baseline: before X'")
    arguments = parser.parse_args()
    settings = Settings()
    provider = query_embedding_provider(settings)
    database = RoutedDatabase(settings, embedding_model=provider.model_id)
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
    results: dict[str, Any] = {
        "time": stamp,
        "machine": machine(),
        "namespace": arguments.namespace,
        "searches": len(latencies),
        "commit": tree_commit(ROOT),
        **percentiles(latencies),
        "load_1m": [load_before, load_average()],
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
    ]
    if arguments.note:
        lines += ["", f"Note: {arguments.note}"]
    append_entry(lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
