"""Memory records: AddMemories throughput and RecallMemories latency at 100k memories.

Measures, in one run, in a fresh database (`run_bench.run_in_database`, dropped afterwards), against
``cb serve ingest`` / ``cb serve query`` processes in development mode (a request's user_id selects the
user; scope local/development, no project):

* AddMemories: the 5,395 Debian upload contents of at most 8,000 characters (the 20 longer ones are
  refused by the contract) as memories of 20 users, batches of 100, one client: memories/s (the embedding
  of each text is part of the call). Floor in the same run: the embedding model alone on the same texts
  in this process (before and after the load; their spread shows the noise of the shared machine).
* Growth to 100k: the stored memories are copied in SQL (memories row, vertex with its graph_nodes row,
  chunk with its vector) under new ids, spread over the same 20 users, until the table holds 100,000
  memories (5,000 per user). The copies are exact duplicates of real texts and vectors: the ranking
  work per query is that of 100k memories, their texts are not new. Said in the entry.
* RecallMemories at 100k: 200 queries (sentences of other Debian contents), each as one of the 20 users,
  default preset, touching the returned memories: p50/p95. Interleaved with each recall, the same
  user's GetMemory (one round trip and one indexed read: the service floor) and, in this process, the
  query's embedding alone (the model floor).
* the load average (1 min) at each step.

Results: printed, written to bench/results/memories-<UTC time>.json.

Usage: ``.venv/bin/python bench/bench_memories.py [--note TEXT] [--shared-database] [--target N]``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import grpc
import psycopg
from memory_service_grpc_client.memory.v1 import (
    memory_query_service_pb2,
    memory_query_service_pb2_grpc,
    memory_service_pb2,
    memory_service_pb2_grpc,
)

from bench.run_bench import percentiles, run_in_database, services
from bench.service_results import heading, load_average, machine, print_report, write_json
from common.kernel.config import Settings
from common.kernel.memory_names import memory_id
from common.storage.chunks.store import embedding_input
from common.text_models.embeddings.factory import build_embedding_provider

UPLOADS = ROOT.parent / "shared" / "corpora" / "debian-uploads" / "observations.jsonl"
USERS = [f"bench-{i:02d}" for i in range(20)]
BATCH = 100
QUERIES = 200
MAX_TEXT = 8000
NAMESPACE = "org:local:env:development"

# Copies of the stored memories under new ids (rows, vertices with their registry rows, chunks).
COPY_SQL = """
WITH source AS (
    SELECT m.*, g.vertex_id, (ag_catalog.agtype_out(v.properties)::text)::jsonb AS doc,
           %(round)s::text AS round_tag, %(users)s::text[] AS users
    FROM memories m
    JOIN graph_nodes g ON g.namespace = m.namespace AND g.natural_key = m.memory_id
    JOIN {graph}.n_memory v ON v.id = g.vertex_id
    WHERE m.namespace = %(namespace)s AND m.idempotency_key NOT LIKE 'copy-%%'
    ORDER BY m.memory_id LIMIT %(limit)s
), copies AS (
    SELECT s.*, 'copy-' || s.round_tag || '-' || s.memory_id AS new_key,
           s.users[1 + (abs(hashtext(s.round_tag || s.memory_id)) %% array_length(s.users, 1))] AS new_user
    FROM source s
), ids AS (
    SELECT c.*, 'mem-' || substr(encode(sha256(convert_to(c.namespace || '|' || c.new_user || '|' || c.new_key, 'UTF8')), 'hex'), 1, 24) AS new_id
    FROM copies c
), vertices AS (
    INSERT INTO {graph}.n_memory (properties)
    SELECT (jsonb_set(jsonb_set(i.doc, '{{natural_key}}', to_jsonb(i.new_id)),
        '{{props,scopes}}', jsonb_build_array('principal:memory-user/local/development/' || i.new_user))::text)::ag_catalog.agtype
    FROM ids i
    RETURNING id, (ag_catalog.agtype_out(properties)::text)::jsonb ->> 'natural_key' AS natural_key
), registry AS (
    INSERT INTO graph_nodes (namespace, natural_key, node_type, label, vertex_id, scopes)
    SELECT %(namespace)s, v.natural_key, 'memory', 'n_memory', v.id,
           ARRAY['principal:memory-user/local/development/' || i.new_user]
    FROM vertices v JOIN ids i ON i.new_id = v.natural_key
    RETURNING natural_key
), chunk_rows AS (
    INSERT INTO chunks (namespace, node_key, node_type, chunk_order, title, heading, text, source_path, meta, embedding)
    SELECT c.namespace, i.new_id, c.node_type, 0, c.title, c.heading, c.text, 'memory:' || i.new_id,
           jsonb_set(c.meta, '{{scopes}}', jsonb_build_array('principal:memory-user/local/development/' || i.new_user)),
           c.embedding
    FROM ids i JOIN chunks c ON c.namespace = i.namespace AND c.node_key = i.memory_id AND c.chunk_order = 0
    RETURNING node_key
)
INSERT INTO memories (namespace, memory_id, organization_id, environment, project_id, user_id, user_scope,
    idempotency_key, source, event_type, tags, importance, memory_type, tier, created_at, updated_at,
    last_used_at)
SELECT i.namespace, i.new_id, i.organization_id, i.environment, i.project_id, i.new_user,
       'principal:memory-user/local/development/' || i.new_user, i.new_key, i.source, i.event_type, i.tags,
       i.importance, i.memory_type, i.tier, i.created_at, i.updated_at, i.last_used_at
FROM ids i
"""


def contents() -> list[tuple[str, str]]:
    """(external_id, content) of every upload whose content fits a memory."""
    out = []
    for line in UPLOADS.open(encoding="utf-8"):
        observation = json.loads(line)
        if len(observation["content"]) <= MAX_TEXT:
            out.append((observation["source"]["external_id"], observation["content"]))
    return out


def floor_rate(provider: Any, texts: list[str]) -> float:
    start = time.perf_counter()
    for index in range(0, len(texts), BATCH):
        provider.encode_passages([embedding_input("", "", t) for t in texts[index : index + BATCH]])
    return len(texts) / (time.perf_counter() - start)


def grow(settings: Settings, target: int) -> tuple[int, float]:
    """Copies stored memories until the table holds ``target``; returns (rows, seconds)."""
    start = time.perf_counter()
    statement = psycopg.sql.SQL(COPY_SQL).format(graph=psycopg.sql.Identifier(settings.graph_name))
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        conn.execute("LOAD 'age'")
        conn.execute('SET search_path = ag_catalog, "$user", public')
        round_number = 0
        while True:
            (count,) = conn.execute("SELECT count(*) FROM memories").fetchone()  # type: ignore[misc]
            if count >= target:
                break
            round_number += 1
            conn.execute(
                statement,
                {"round": str(round_number), "users": USERS, "namespace": NAMESPACE, "limit": target - count},
            )
        conn.execute("ANALYZE memories")
        conn.execute("ANALYZE chunks")
    return int(count), time.perf_counter() - start


def run(arguments: argparse.Namespace, stamp: str) -> int:
    settings = Settings()
    provider = build_embedding_provider(settings)
    items = contents()
    texts = [text for _, text in items]
    results: dict[str, Any] = {"time": stamp, "machine": machine(), "note": arguments.note, "load": {}}
    results["load"]["start"] = load_average()
    floor_before = floor_rate(provider, texts[:1000])
    results["load"]["floor_before"] = load_average()
    with services() as (ingest_addr, query_addr):
        ingest = grpc.insecure_channel(ingest_addr)
        query = grpc.insecure_channel(query_addr)
        add = memory_service_pb2_grpc.MemoryServiceStub(ingest).AddMemories
        stub = memory_query_service_pb2_grpc.MemoryQueryServiceStub(query)
        start = time.perf_counter()
        created = 0
        for index in range(0, len(items), BATCH):
            batch = items[index : index + BATCH]
            user = USERS[(index // BATCH) % len(USERS)]
            response = add(
                memory_service_pb2.AddMemoriesRequest(
                    memories=[
                        memory_service_pb2.NewMemory(idempotency_key=key, text=text) for key, text in batch
                    ],
                    user_id=user,
                ),
                timeout=600,
            )
            created += sum(r.created for r in response.results)
        add_seconds = time.perf_counter() - start
        results["load"]["after_add"] = load_average()
        floor_after = floor_rate(provider, texts[:1000])
        results["load"]["floor_after"] = load_average()
        results["add"] = {
            "memories": created,
            "seconds": round(add_seconds, 2),
            "memories_per_s": round(created / add_seconds, 1),
            "floor_before_per_s": round(floor_before, 1),
            "floor_after_per_s": round(floor_after, 1),
        }
        rows, grow_seconds = grow(settings, arguments.target)
        results["grow"] = {"rows": rows, "seconds": round(grow_seconds, 1)}
        results["load"]["after_grow"] = load_average()
        rng = random.Random(12)
        queries = [" ".join(rng.choice(texts).split()[:30]) for _ in range(QUERIES)]
        some_id = {
            user: memory_id(NAMESPACE, user, items[(i * BATCH) % len(items)][0])
            for i, user in enumerate(USERS)
        }
        recall_ms, get_ms, embed_ms, returned = [], [], [], []
        for number, text in enumerate(queries):
            user = USERS[number % len(USERS)]
            t0 = time.perf_counter()
            response = stub.RecallMemories(
                memory_query_service_pb2.RecallMemoriesRequest(query=text, top_k=10, user_id=user),
                timeout=120,
            )
            t1 = time.perf_counter()
            try:
                stub.GetMemory(
                    memory_query_service_pb2.GetMemoryRequest(memory_id=some_id[user], user_id=user),
                    timeout=60,
                )
            except grpc.RpcError:
                pass  # the id of another user's batch: a NOT_FOUND round trip costs the same
            t2 = time.perf_counter()
            provider.encode_query(text)
            t3 = time.perf_counter()
            recall_ms.append((t1 - t0) * 1000)
            get_ms.append((t2 - t1) * 1000)
            embed_ms.append((t3 - t2) * 1000)
            returned.append(len(response.memories))
        results["load"]["after_recall"] = load_average()
        results["recall"] = {
            "recall": percentiles(recall_ms),
            "get_memory_floor": percentiles(get_ms),
            "query_embedding_floor": percentiles(embed_ms),
            "mean_returned": round(sum(returned) / len(returned), 2),
            "memories_per_user": rows // len(USERS),
        }
        ingest.close()
        query.close()
    print(json.dumps(results, indent=2))
    write_json(results, prefix="memories")
    add_result, recall = results["add"], results["recall"]
    load = results["load"]
    print_report(
        [
            heading(results),
            "",
            (
                "Memory records (`bench/bench_memories.py`): AddMemories and RecallMemories against "
                "`cb serve` processes, fresh database, 20 users."
            ),
            *([f"Note: {arguments.note}", ""] if arguments.note else [""]),
            "| measure | figure | load avg (1 min) |",
            "|---|---|---|",
            (
                f"| AddMemories ({add_result['memories']} Debian contents, batches of {BATCH}, embedding included) | "
                f"{add_result['memories_per_s']} memories/s ({add_result['seconds']} s) | {load['floor_before']} -> {load['after_add']} |"
            ),
            (
                f"| floor: the model alone on 1,000 of the texts, before / after | {add_result['floor_before_per_s']} / "
                f"{add_result['floor_after_per_s']} texts/s | {load['floor_before']} / {load['floor_after']} |"
            ),
            (
                f"| growth to {results['grow']['rows']} memories by SQL copies of the stored rows, vertices and vectors | "
                f"{results['grow']['seconds']} s | {load['after_grow']} |"
            ),
            (
                f"| RecallMemories at {results['grow']['rows']} memories ({recall['memories_per_user']} per user), "
                f"top 10, {QUERIES} queries: p50 / p95 | {recall['recall']['p50_ms']} / {recall['recall']['p95_ms']} ms | "
                f"{load['after_grow']} -> {load['after_recall']} |"
            ),
            (
                f"| floor: GetMemory (round trip + indexed read), interleaved: p50 / p95 | "
                f"{recall['get_memory_floor']['p50_ms']} / {recall['get_memory_floor']['p95_ms']} ms | |"
            ),
            (
                f"| floor: the query's embedding alone (this process), interleaved: p50 / p95 | "
                f"{recall['query_embedding_floor']['p50_ms']} / {recall['query_embedding_floor']['p95_ms']} ms | |"
            ),
            "",
            (
                "The 100k are the real memories plus exact SQL copies of them (rows, vertices, vectors) under new "
                "ids: the ranking work per query is that of 100k memories, the texts repeat."
            ),
        ]
    )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--note", default="")
    parser.add_argument("--shared-database", action="store_true")
    parser.add_argument("--target", type=int, default=100_000, help="memories to reach by copies")
    return run_in_database(run, parser.parse_args(), "memory_records_bench")


if __name__ == "__main__":
    raise SystemExit(main())
