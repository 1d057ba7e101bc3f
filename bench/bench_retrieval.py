"""Ranking quality on the bilingual Debian FAQ pairs, through gRPC against real service
processes in a fresh database, next to stemmed BM25, dense and dense + BM25 baselines computed in the
same run.

Data: ``../shared/corpora/retrieval-eval/`` (its README): 224 FAQ answers (112 English, the same 112 in
Russian) and 224 questions, each with its answer in both languages as the relevant documents. Each answer
is stored with Retain (natural key = ``doc_id``, content = the answer, meta {lang}) into one namespace.

Measures per method over all questions (a ranking is the list of distinct documents in hit order, the
first 10 counted; relevance is binary, both answers relevant):
- MRR@10: 1 / rank of the first relevant document (0 when none is in the first 10);
- nDCG@10: DCG of the relevant documents among the first 10 over the ideal DCG of two relevant documents;
- cross-language hit@10: the answer in the *other* language is among the first 10;
- hit@10 per task (en->en, ru->ru, en->ru, ru->en): the task's answer is among the first 10.

Methods: the service's Search (top_k 10) for each named preset given with ``--presets`` (``SearchRequest.preset``;
an empty name is the server's default); ``bm25``: Okapi BM25 (``rank_bm25``, k1 1.5, b 0.75) over the
lexemes of the same text search configuration as the service (``to_tsvector``, each lexeme repeated by its
number of positions), so its stemming equals the service's; ``dense``: cosine over the configured embedding
provider's vectors of the stored chunk input (`common.storage.chunks.store.embedding_input`); ``dense+bm25``:
reciprocal rank fusion of the first 50 of those two (BM25: documents with a positive score) with k 60 (Cormack et al. 2009). Search latency over gRPC (p50/p95)
per preset, and the full-text and trigram rankings called in-process on the loaded table (p50/p95).

Usage: .venv/bin/python bench/bench_retrieval.py [--presets documents,conversations,] [--note TEXT]
[--shared-database]. Results go to bench/results/retrieval-<UTC time>.json (and are printed).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import grpc
import numpy as np
import psycopg
from google.protobuf import struct_pb2
from rank_bm25 import BM25Okapi

from bench.run_bench import add_run_options
from bench.run_bench import percentiles
from bench.run_bench import run_in_database
from bench.run_bench import services
from bench.service_results import heading
from bench.service_results import machine
from bench.service_results import print_report
from bench.service_results import write_json
from common.kernel.config import Settings
from common.storage.chunks.rows import ChunkFilter
from common.storage.chunks.store import ChunkStore
from common.storage.chunks.store import embedding_input
from common.storage.database import Database
from common.storage.schema import migrations
from common.text_models.embeddings.factory import build_embedding_provider
from memory_service_grpc_client.memory.v1 import document_service_pb2
from memory_service_grpc_client.memory.v1 import document_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2_grpc

DATA = ROOT.parent / "shared" / "corpora" / "retrieval-eval"
CUTOFF = 10
RRF_K = 60
TASKS = ("en->en", "ru->ru", "en->ru", "ru->en")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]


def distinct(ranked: list[str]) -> list[str]:
    """``ranked`` without repeats (a document with several chunks counts at its best rank)."""
    out: list[str] = []
    for item in ranked:
        if item and item not in out:
            out.append(item)
    return out


def stored_chunks(conn: psycopg.Connection[Any], settings: Settings, namespace: str) -> list[tuple[Any, ...]]:
    """(node_key, title, heading, text, lexemes) of every chunk of ``namespace``, the lexemes those of its
    stored ``search_document`` (the service's text search configuration), each repeated by its number of
    positions."""
    return conn.execute(
        "SELECT node_key, title, heading, text,"
        " (SELECT array_agg(lexeme ORDER BY lexeme) FROM unnest(search_document)"
        "  , generate_series(1, coalesce(array_length(positions, 1), 1))) AS tokens"
        f" FROM {psycopg.sql.Identifier(settings.chunks_table).as_string(conn)}"
        " WHERE namespace = %s ORDER BY node_key, chunk_order",
        (namespace,),
    ).fetchall()


def query_lexemes(conn: psycopg.Connection[Any], settings: Settings, text: str) -> list[str]:
    """The lexemes of ``text`` in the service's text search configuration, repeated by their positions."""
    return [
        str(row[0])
        for row in conn.execute(
            "SELECT lexeme FROM unnest(to_tsvector(%s::regconfig, %s)),"
            " generate_series(1, coalesce(array_length(positions, 1), 1))",
            (settings.text_search_config, text),
        ).fetchall()
    ]


def chunk_bm25(stored: list[tuple[Any, ...]]) -> BM25Okapi:
    """Stemmed BM25 (``rank_bm25``, k1 1.5, b 0.75) over the lexemes of `stored_chunks`."""
    return BM25Okapi([list(row[4] or []) for row in stored])


def bm25_ranking(bm25: BM25Okapi, keys: list[str], lexemes: list[str]) -> list[str]:
    """The documents (``keys``, one per stored chunk) by their best chunk's BM25 score for ``lexemes``,
    those with a positive score only."""
    scores = bm25.get_scores(lexemes)
    return distinct([keys[i] for i in np.argsort(-scores, kind="stable") if scores[i] > 0])


def measures(ranked: list[str], query: dict[str, Any]) -> dict[str, float]:
    """MRR@10, nDCG@10, cross-language hit@10 and the task's hit@10 of one ranking (module doc)."""
    top = distinct(ranked)[:CUTOFF]
    relevant = set(query["relevant"].values())
    first = next((rank for rank, doc in enumerate(top, start=1) if doc in relevant), 0)
    dcg = sum(1 / math.log2(rank + 1) for rank, doc in enumerate(top, start=1) if doc in relevant)
    ideal = sum(1 / math.log2(rank + 1) for rank in range(1, len(relevant) + 1))
    other = "ru" if query["lang"] == "en" else "en"
    return {
        "mrr": 1 / first if first else 0.0,
        "ndcg": dcg / ideal,
        "cross_hit": float(query["relevant"][other] in top),
        f"{query['lang']}->{query['lang']}": float(query["relevant"][query["lang"]] in top),
        f"{query['lang']}->{other}": float(query["relevant"][other] in top),
    }


def fuse(*rankings: list[str]) -> list[str]:
    """Reciprocal rank fusion (k 60, equal weights) of document rankings."""
    scores: dict[str, float] = {}
    for ranking in rankings:
        for rank, doc in enumerate(ranking, start=1):
            scores[doc] = scores.get(doc, 0.0) + 1 / (RRF_K + rank)
    return sorted(scores, key=lambda doc: (-scores[doc], doc))


def mean(rows: list[dict[str, float]], key: str) -> float | None:
    values = [row[key] for row in rows if key in row]
    return round(sum(values) / len(values), 3) if values else None


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Ranking quality on the FAQ pairs (see the module doc).")
    parser.add_argument(
        "--presets",
        default="",
        help="comma-separated SearchRequest.preset names to measure ('' = the server's default)",
    )
    add_run_options(parser)
    return parser.parse_args()


def main() -> int:
    return run_in_database(run, parse_arguments(), "memory_bench_retrieval")


def run(arguments: argparse.Namespace, stamp: str) -> int:
    started = time.perf_counter()
    settings = Settings()
    documents = read_jsonl(DATA / "debian-faq-docs.jsonl")
    queries = read_jsonl(DATA / "debian-faq-queries.jsonl")
    namespace = f"faq-{stamp}".lower()
    presets = list(dict.fromkeys(arguments.presets.split(",")))
    rows: dict[str, list[dict[str, float]]] = {}
    latency: dict[str, list[float]] = {}
    with services() as (ingest_address, query_address):
        ingest = grpc.insecure_channel(ingest_address)
        query = grpc.insecure_channel(query_address)
        retain = document_service_pb2_grpc.DocumentServiceStub(ingest)
        search = retrieval_service_pb2_grpc.RetrievalServiceStub(query)
        load_started = time.perf_counter()
        for document in documents:
            meta = struct_pb2.Struct()
            meta.update({"lang": document["lang"]})
            retain.Retain(
                document_service_pb2.RetainRequest(
                    namespace=namespace,
                    natural_key=document["doc_id"],
                    title=document["title"] or document["doc_id"],
                    content=document["text"],
                    meta=meta,
                ),
                timeout=300,
            )
        load_seconds = time.perf_counter() - load_started
        search.Search(retrieval_service_pb2.SearchRequest(namespace=namespace, query="warm-up"), timeout=120)
        for preset in presets:
            method = f"service[{preset or 'server default'}]"
            rows[method], latency[method] = [], []
            for item in queries:
                request = retrieval_service_pb2.SearchRequest(
                    namespace=namespace, query=item["query"], top_k=CUTOFF
                )
                if preset and "preset" in request.DESCRIPTOR.fields_by_name:
                    request.preset = preset
                begin = time.perf_counter()
                response = search.Search(request, timeout=60)
                latency[method].append((time.perf_counter() - begin) * 1000)
                rows[method].append(measures([hit.node_key for hit in response.hits], item))

    database = Database(settings, prepare=migrations.apply)
    try:
        store = ChunkStore(settings)
        where = ChunkFilter(namespace)
        arm_latency: dict[str, list[float]] = {"text": [], "trigram": []}
        with database.connection() as conn:
            stored = stored_chunks(conn, settings, namespace)
            lexemes = {item["query_id"]: query_lexemes(conn, settings, item["query"]) for item in queries}
            for item in queries:
                for name, arm in (("text", store.text_candidates), ("trigram", store.trigram_candidates)):
                    begin = time.perf_counter()
                    arm(conn, where, item["query"], 50)
                    arm_latency[name].append((time.perf_counter() - begin) * 1000)
    finally:
        database.close()
    keys = [row[0] for row in stored]
    bm25 = chunk_bm25(stored)
    provider = build_embedding_provider(settings)
    passages = provider.encode_passages([embedding_input(row[1], row[2], row[3]) for row in stored])
    for method in ("bm25", "dense", "dense+bm25"):
        rows[method] = []
    for item in queries:
        bm25_ranked = bm25_ranking(bm25, keys, lexemes[item["query_id"]])
        dense_scores = passages @ provider.encode_query(item["query"])
        dense_ranked = distinct([keys[i] for i in np.argsort(-dense_scores, kind="stable")])
        rows["bm25"].append(measures(bm25_ranked, item))
        rows["dense"].append(measures(dense_ranked, item))
        rows["dense+bm25"].append(measures(fuse(dense_ranked[:50], bm25_ranked[:50]), item))

    table = {
        method: {key: mean(values, key) for key in ("mrr", "ndcg", "cross_hit", *TASKS)}
        for method, values in rows.items()
    }
    results: dict[str, Any] = {
        "time": stamp,
        "machine": machine(),
        "load_average": [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]],
        "embedding_provider": settings.embedding_provider,
        "text_search_config": settings.text_search_config,
        "note": arguments.note,
        "database": "shared (CB_DATABASE_URL as is)"
        if arguments.shared_database
        else "fresh (created for the run)",
        "documents": len(documents),
        "chunks": len(stored),
        "queries": len(queries),
        "load_seconds": round(load_seconds, 1),
        "table": table,
        "search_grpc": {method: percentiles(samples) for method, samples in latency.items()},
        "arms_in_process": {name: percentiles(samples) for name, samples in arm_latency.items()},
    }
    results["run_seconds"] = round(time.perf_counter() - started, 1)
    write_json(results, prefix="retrieval")
    lines = entry(results)
    print_report(lines)
    return 0


def entry(results: dict[str, Any]) -> list[str]:
    """The printed report: one row per method, latencies below."""
    lines = [
        heading(results) + " — ranking quality on the Debian FAQ pairs (`bench/bench_retrieval.py`)",
        "",
        (
            f"{results['queries']} questions over {results['documents']} answers ({results['chunks']} chunks,"
            f" Retain in {results['load_seconds']} s); embedding provider {results['embedding_provider']},"
            f" text search config {results['text_search_config']}; load average"
            f" {' '.join(str(x) for x in results['load_average'])}."
        ),
        "",
        "| method | MRR@10 | nDCG@10 | cross-language hit@10 | "
        + " | ".join(f"hit@10 {t}" for t in TASKS)
        + " |",
        "|---|---|---|---|" + "---|" * len(TASKS),
    ]
    for method, figures in results["table"].items():
        cells = [figures["mrr"], figures["ndcg"], figures["cross_hit"], *(figures[t] for t in TASKS)]
        lines.append(f"| {method} | " + " | ".join(str(cell) for cell in cells) + " |")
    lines.append("")
    for method, figures in results["search_grpc"].items():
        lines.append(f"Search {method} over gRPC: p50 {figures['p50_ms']} / p95 {figures['p95_ms']} ms.")
    for name, figures in results["arms_in_process"].items():
        lines.append(
            f"{name} ranking in process (limit 50): p50 {figures['p50_ms']} / p95 {figures['p95_ms']} ms."
        )
    lines.append(f"Run time {results['run_seconds']} s; database {results['database']}.")
    if results.get("note"):
        lines.append(f"Note: {results['note']}")
    return lines


if __name__ == "__main__":
    sys.exit(main())
