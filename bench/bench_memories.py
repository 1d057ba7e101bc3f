"""Memory records: AddMemories throughput and RecallMemories latency and quality at 50k and 100k memories.

Measures, in one run, in a fresh database (`run_bench.run_in_database`, dropped afterwards), against
``cb serve ingest`` / ``cb serve query`` processes in development mode (a request's user_id selects the
user; scope local/development, no project), and a second ``cb serve query`` whose
``memory_recall_exact_below`` exceeds every owner: it serves the exact path (every row of the owner
scored), the baseline of the same run:

* AddMemories: the 5,395 Debian upload contents of at most 8,000 characters (the 20 longer ones are
  refused by the contract) as memories of 20 users, batches of 100, one client: memories/s (the embedding
  of each text is part of the call) and CPU per memory (the ingest process, the database's backends).
  Floor in the same run: the embedding model alone on the same texts in this process (before and after
  the load; their spread shows the noise of the shared machine).
* Growth to each of ``--targets`` (default 50k and 100k: 2,500 and 5,000 per user): the stored memories
  are copied in SQL (memories row, vertex with its graph_nodes row, chunk with its vector) under new ids,
  spread over the same 20 users. The copies are exact duplicates of real texts and vectors: the ranking
  work per query is that of the stated size, their texts are not new. Said in the entry. Then the tenant
  vector indexes are synchronised as ``cb index-tenants`` does (the namespace holds the whole table: it is
  registered for the table's HNSW index; each user, 5% of it, gets an owner index of their memory chunks,
  `common.storage.chunks.owner_vector_indexes`, once they hold ``memory_owner_index_min_rows``).
* RecallMemories at each size: 200 queries (sentences of other Debian contents), each as one of the 20
  users, default preset, touching the returned memories: p50/p95 of the approximate path
  (`common.storage.memories.recall`), interleaved with the exact path's service on the same query, the
  same user's GetMemory (one round trip and one indexed read: the service floor) and, in this process,
  the query's embedding alone (the model floor). Then 100 recalls per path alone for CPU per call (the
  query process and the database's backends), and recall@10 of the approximate path against exact
  scoring in this process on the same 200 queries (also counted with ties: a copy of a result text with
  the same score is as good a result), with the database CPU of each statement (the backend's counters)
  for the approximate path, the walk of the namespace's index it replaced for large owners
  (``MemoryRecall(owner_indexes=False)``) and exact scoring.
* AddMemories again after each size's recall: ``ADD_AGAIN`` of the contents under new keys, against the
  model alone on 1,000 of the texts before and after, with the owner indexes in place (each memory of a
  large owner is inserted into its owner's index too).
* the load average (1 min) at each step.

The copies take about 12 KB of disk per memory (row, vertex, chunk, indexes): ``--targets 1000000`` needs
about 12 GB. With ``--bulk-growth`` the chunk table's indexes are dropped during the copies and built after
them (each build timed in the entry), as after a restore, instead of taking every copy one by one.

To keep the data for a rerun: create a database, point CB_DATABASE_URL at it and pass
``--shared-database``; a later ``--shared-database --recall-only`` run on it skips AddMemories and the
growth already done (the tables hold the target) and measures recall only.

A/B of AddMemories alone against existing databases (``--add-arms``, e.g. two copies of one filled
database, one per variant): an ingest service per arm (``NAME=DATABASE_URL``, or ``NAME@TREE=DATABASE_URL``
to serve from another checkout, e.g. the tree before a change), then ``--add-rounds`` rounds of
``ADD_AGAIN`` new memories per arm, the arms in turn and their order reversed every round (A B, B A, ...),
each against the model alone before and after it: CPU per memory (that arm's service and its database's
backends), memories/s and the load average of every round, and the median per arm. Results in
bench/results/memories-add-<UTC time>.json.

Results: printed, written to bench/results/memories-<UTC time>.json.

Usage: ``.venv/bin/python bench/bench_memories.py [--note TEXT] [--shared-database] [--recall-only]
[--targets N,M]``, or ``... --add-arms A@TREE=URL_A,B=URL_B [--add-rounds 4]``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from contextlib import nullcontext
from datetime import UTC
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import grpc
import psycopg

from bench.run_bench import add_run_options
from bench.run_bench import percentiles
from bench.run_bench import run_in_database
from bench.run_bench import services
from bench.scale_tables import indexes_rebuilt
from bench.service_results import cpu_seconds
from bench.service_results import heading
from bench.service_results import load_average
from bench.service_results import machine
from bench.service_results import print_report
from bench.service_results import tree_commit
from bench.service_results import write_json
from common.kernel.config import Settings
from common.kernel.memory_names import memory_id
from common.storage.chunks.store import embedding_input
from common.storage.chunks.tenant_vector_indexes import TenantVectorIndexes
from common.storage.database import Database
from common.storage.memories.recall import MemoryRecall
from common.storage.memories.store import MemoryQuery
from common.text_models.embeddings.factory import build_embedding_provider
from memory_service_grpc_client.memory.v1 import memory_query_service_pb2
from memory_service_grpc_client.memory.v1 import memory_query_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import memory_service_pb2
from memory_service_grpc_client.memory.v1 import memory_service_pb2_grpc
from query_service.readers.memory_recall import RECALL_PRESETS

UPLOADS = ROOT.parent / "shared" / "corpora" / "debian-uploads" / "observations.jsonl"
USERS = [f"bench-{i:02d}" for i in range(20)]
BATCH = 100
QUERIES = 200
MAX_TEXT = 8000
ADD_AGAIN = 1000
"""Memories added again after each arm's recall, to measure AddMemories with the owner indexes in place."""
NAMESPACE = "org:local:env:development"
EXACT_VARIABLE = "CB_MEMORY_RECALL_EXACT_BELOW"
EXACT_ENV = {EXACT_VARIABLE: str(10**9)}
"""The second query service's setting: every owner below the threshold, so it serves the exact path."""

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


def grow(settings: Settings, target: int, *, bulk: bool = False) -> tuple[int, float, dict[str, float]]:
    """Copies stored memories until the table holds ``target``; returns (rows, seconds, index build
    seconds). With ``bulk`` the chunk table's indexes (the table's HNSW index, the owners' indexes, the
    full-text and trigram ones) are dropped during the copies and built again after them, as after a
    restore: inserting 700k rows one by one into two HNSW graphs takes hours on two cores."""
    start = time.perf_counter()
    statement = psycopg.sql.SQL(COPY_SQL).format(graph=psycopg.sql.Identifier(settings.graph_name))
    builds: dict[str, float] = {}
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        conn.execute("LOAD 'age'")
        conn.execute('SET search_path = ag_catalog, "$user", public')
        with indexes_rebuilt(conn, "chunks", target, builds) if bulk else nullcontext():
            round_number = 0
            while True:
                (count,) = conn.execute("SELECT count(*) FROM memories").fetchone()  # type: ignore[misc]
                if count >= target:
                    break
                round_number += 1
                conn.execute(
                    statement,
                    {
                        "round": f"{target}.{round_number}",
                        "users": USERS,
                        "namespace": NAMESPACE,
                        "limit": target - count,
                    },
                )
        conn.execute("ANALYZE memories")
        conn.execute("ANALYZE chunks")
    return int(count), time.perf_counter() - start, builds


def child_pids() -> list[tuple[int, list[bytes], list[bytes]]]:
    """(pid, command line, environment) of this process's children."""
    children: list[tuple[int, list[bytes], list[bytes]]] = []
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        try:
            pids = (task / "children").read_text().split()
        except OSError:
            continue  # a thread that ended since the listing
        for pid in pids:
            try:
                command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                environment = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            children.append((int(pid), command, environment))
    return children


def service_pids() -> dict[str, int]:
    """The pids of this process's ``cb serve <kind>`` children by kind; a query service started with
    `EXACT_ENV` is ``"exact"``."""
    pids: dict[str, int] = {}
    for pid, command, environment in child_pids():
        if b"serve" in command:
            kind = command[command.index(b"serve") + 1].decode()
            exact = f"{EXACT_VARIABLE}={EXACT_ENV[EXACT_VARIABLE]}".encode() in environment
            pids["exact" if exact else kind] = pid
    return pids


def backend_cpu(conn: psycopg.Connection[Any]) -> dict[int, float]:
    """CPU seconds so far of each PostgreSQL backend connected to this database (other than ``conn``'s)."""
    rows = conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
    ).fetchall()
    return {int(pid): cpu_seconds(int(pid)) for (pid,) in rows}


class CpuMeter:
    """CPU seconds of one service process and of the database's backends between `start` and `stop`."""

    def __init__(self, conn: psycopg.Connection[Any], pid: int) -> None:
        self.conn, self.pid = conn, pid

    def start(self) -> None:
        self.process, self.backends = cpu_seconds(self.pid), backend_cpu(self.conn)

    def stop(self, calls: int) -> dict[str, float]:
        """Milliseconds of CPU per call: the service process, the database backends, and their sum."""
        process = cpu_seconds(self.pid) - self.process
        after = backend_cpu(self.conn)
        database = sum(seconds - self.backends.get(pid, 0.0) for pid, seconds in after.items())
        return {
            "service_ms": round(process * 1000 / calls, 2),
            "database_ms": round(database * 1000 / calls, 2),
            "total_ms": round((process + database) * 1000 / calls, 2),
        }


def synchronise_indexes(settings: Settings) -> dict[str, Any]:
    """What `cb index-tenants` does: the namespace's vector index registered (or built)."""
    start = time.perf_counter()
    changes = TenantVectorIndexes(settings).synchronise()
    return {
        "seconds": round(time.perf_counter() - start, 1),
        "changes": [
            {
                "namespace": c.namespace,
                "user_id": c.user_id,
                "action": c.action,
                "rows": c.rows,
                "seconds": c.seconds,
            }
            for c in changes
        ],
    }


def recall_quality(settings: Settings, vectors: list[Any], users: list[str]) -> dict[str, Any]:
    """recall@10 against exact scoring, in this process, on the same queries, of the approximate path (an
    owner's own index where there is one) and of the walk of the namespace's index (what it replaced), and
    each path's statement times and database CPU (the storage stage alone, no RPC, no embedding)."""
    database = Database(settings)
    arms = {
        "approximate": MemoryRecall(settings),
        "namespace_index": MemoryRecall(settings, owner_indexes=False),
    }
    exact_recall = MemoryRecall(settings)
    weights = RECALL_PRESETS["balanced"]
    hits = dict.fromkeys(arms, 0)
    tie_hits = dict.fromkeys(arms, 0)
    total = 0
    paths: dict[str, dict[str, int]] = {arm: {} for arm in arms}
    wall: dict[str, list[float]] = {arm: [] for arm in [*arms, "exact"]}
    database_cpu = dict.fromkeys([*arms, "exact"], 0.0)
    try:
        for vector, user in zip(vectors, users, strict=True):
            query = MemoryQuery(namespace=NAMESPACE, user_id=user, now=datetime.now(UTC), tiers=("hot",))
            with database.connection() as conn:
                backend = conn.info.backend_pid
                outcomes = {}
                for arm, recall in [*arms.items(), ("exact", exact_recall)]:
                    cpu_before, t0 = cpu_seconds(backend), time.perf_counter()
                    outcomes[arm] = recall.recall(
                        conn, query, vector, weights, limit=10, exact=arm == "exact"
                    )
                    wall[arm].append((time.perf_counter() - t0) * 1000)
                    database_cpu[arm] += cpu_seconds(backend) - cpu_before
            exact = outcomes.pop("exact")
            exact_ids = {m.row["memory_id"] for m in exact.memories}
            tenth = min((m.score for m in exact.memories), default=0.0)
            total += len(exact.memories)
            for arm, outcome in outcomes.items():
                paths[arm][outcome.path] = paths[arm].get(outcome.path, 0) + 1
                hits[arm] += sum(m.row["memory_id"] in exact_ids for m in outcome.memories)
                # The copies repeat texts: a different copy with the same score is as good a result.
                tie_hits[arm] += sum(
                    m.row["memory_id"] in exact_ids or m.score >= tenth - 1e-9 for m in outcome.memories
                )
    finally:
        database.close()
    return {
        "queries": len(vectors),
        "paths": paths["approximate"],
        "recall_at_10": round(hits["approximate"] / max(total, 1), 4),
        "recall_at_10_ties_counted": round(tie_hits["approximate"] / max(total, 1), 4),
        "approximate_statements": percentiles(wall["approximate"]),
        "exact_statements": percentiles(wall["exact"]),
        "database_cpu_ms": {
            arm: round(seconds * 1000 / max(len(vectors), 1), 2) for arm, seconds in database_cpu.items()
        },
        "namespace_index": {
            "paths": paths["namespace_index"],
            "recall_at_10": round(hits["namespace_index"] / max(total, 1), 4),
            "recall_at_10_ties_counted": round(tie_hits["namespace_index"] / max(total, 1), 4),
            "statements": percentiles(wall["namespace_index"]),
        },
    }


def measure_add(
    add: Any,
    admin: psycopg.Connection[Any],
    ingest_pid: int,
    provider: Any,
    items: list[tuple[str, str]],
    load: dict[str, Any],
) -> dict[str, Any]:
    """AddMemories of every content (batches of `BATCH`, the 20 users in turn) against the model alone on
    1,000 of the texts before and after; the load averages go into ``load``."""
    texts = [text for _, text in items]
    floor_before = floor_rate(provider, texts[:1000])
    load["floor_before"] = load_average()
    add_meter = CpuMeter(admin, ingest_pid)
    add_meter.start()
    start = time.perf_counter()
    created = 0
    batches = 0
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
        batches += 1
        created += sum(r.created for r in response.results)
    add_seconds = time.perf_counter() - start
    add_cpu = add_meter.stop(created)
    load["after_add"] = load_average()
    floor_after = floor_rate(provider, texts[:1000])
    load["floor_after"] = load_average()
    floor = (floor_before + floor_after) / 2
    return {
        "memories": created,
        "seconds": round(add_seconds, 2),
        "memories_per_s": round(created / add_seconds, 1),
        "floor_before_per_s": round(floor_before, 1),
        "floor_after_per_s": round(floor_after, 1),
        "share_of_floor": round(created / add_seconds / floor, 3),
        "cpu_per_memory": add_cpu,
    }


def measure_recall(
    arguments: argparse.Namespace,
    settings: Settings,
    provider: Any,
    stubs: dict[str, Any],
    meters: dict[str, CpuMeter],
    queries: list[str],
    some_id: dict[str, str],
) -> dict[str, Any]:
    """At the table's current size: the served recall (approximate path) interleaved with the exact
    path's service, GetMemory and the query's embedding; then CPU per call of each path alone; then
    recall@10."""
    recall_ms, exact_ms, get_ms, embed_ms, returned = [], [], [], [], []
    load_before = load_average()
    for number, text in enumerate(queries):
        user = USERS[number % len(USERS)]
        request = memory_query_service_pb2.RecallMemoriesRequest(query=text, top_k=10, user_id=user)
        t0 = time.perf_counter()
        response = stubs["approximate"].RecallMemories(request, timeout=120)
        t1 = time.perf_counter()
        stubs["exact"].RecallMemories(request, timeout=120)
        t2 = time.perf_counter()
        try:
            stubs["approximate"].GetMemory(
                memory_query_service_pb2.GetMemoryRequest(memory_id=some_id[user], user_id=user), timeout=60
            )
        except grpc.RpcError:
            pass  # the id of another user's batch: a NOT_FOUND round trip costs the same
        t3 = time.perf_counter()
        provider.encode_query(text)
        t4 = time.perf_counter()
        recall_ms.append((t1 - t0) * 1000)
        exact_ms.append((t2 - t1) * 1000)
        get_ms.append((t3 - t2) * 1000)
        embed_ms.append((t4 - t3) * 1000)
        returned.append(len(response.memories))
    load_after = load_average()
    cpu: dict[str, Any] = {}
    alone: dict[str, Any] = {}
    for path in ("approximate", "exact"):
        meters[path].start()
        samples = []
        for number, text in enumerate(queries[: arguments.cpu_calls]):
            started = time.perf_counter()
            stubs[path].RecallMemories(
                memory_query_service_pb2.RecallMemoriesRequest(
                    query=text, top_k=10, user_id=USERS[number % len(USERS)]
                ),
                timeout=120,
            )
            samples.append((time.perf_counter() - started) * 1000)
        cpu[path] = meters[path].stop(arguments.cpu_calls)
        # The same calls' latency with no recall of the other path between them (the interleaved
        # figures above have each approximate recall follow an exact one, which reads every row of a user).
        alone[path] = percentiles(samples)
    cpu["load"] = load_average()
    vectors = [provider.encode_query(text) for text in queries[: arguments.quality_queries]]
    users = [USERS[number % len(USERS)] for number in range(len(vectors))]
    return {
        "recall": percentiles(recall_ms),
        "baseline_exact_recall": percentiles(exact_ms),
        "get_memory_floor": percentiles(get_ms),
        "query_embedding_floor": percentiles(embed_ms),
        "cpu_per_call": cpu,
        "alone": alone,
        "quality": recall_quality(settings, vectors, users),
        "mean_returned": round(sum(returned) / len(returned), 2),
        "load": {"before": load_before, "after": load_after},
    }


def parse_arms(text: str) -> list[tuple[str, str, Path]]:
    """``NAME[@TREE]=DATABASE_URL,...`` as (name, database URL, code tree)."""
    arms = []
    for part in text.split(","):
        label, _, url = part.partition("=")
        name, _, tree = label.partition("@")
        if not name or not url.startswith("postgresql://"):
            raise argparse.ArgumentTypeError(f"expected NAME[@TREE]=postgresql://..., got {part!r}")
        arms.append((name, url, Path(tree).resolve() if tree else ROOT))
    return arms


def run_add_arms(arguments: argparse.Namespace) -> int:
    """The A/B of AddMemories alone (module doc): one ingest service per arm, ``--add-rounds`` rounds of
    `ADD_AGAIN` memories per arm, the arms' order reversed every round."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    settings = Settings()
    provider = build_embedding_provider(settings)
    items = contents()
    arms = arguments.add_arms
    results: dict[str, Any] = {
        "time": stamp,
        "machine": machine(),
        "commit": tree_commit(ROOT),
        "note": arguments.note,
        "arms": {
            name: {"tree": str(tree), "commit": tree_commit(tree), "rounds": []} for name, _, tree in arms
        },
        "load": {"start": load_average()},
    }
    with ExitStack() as stack:
        stubs, admins, pids = {}, {}, {}
        for name, url, tree in arms:
            (address, _) = stack.enter_context(
                services(root=tree, kinds=("ingest",), extra_env={"CB_DATABASE_URL": url})
            )
            channel = stack.enter_context(grpc.insecure_channel(address))
            stubs[name] = memory_service_pb2_grpc.MemoryServiceStub(channel).AddMemories
            admins[name] = stack.enter_context(psycopg.connect(url, autocommit=True))
            marker = f"CB_DATABASE_URL={url}".encode()
            (pids[name],) = [
                pid for pid, command, env in child_pids() if b"serve" in command and marker in env
            ]
        for number in range(arguments.add_rounds):
            order = arms if number % 2 == 0 else arms[::-1]
            start = (number * ADD_AGAIN) % max(len(items) - ADD_AGAIN, 1)
            for name, _, _ in order:
                batch = [
                    (f"ab-{stamp}-{number}-{key}", text) for key, text in items[start : start + ADD_AGAIN]
                ]
                load: dict[str, Any] = {}
                measured = measure_add(stubs[name], admins[name], pids[name], provider, batch, load)
                measured.update(round=number, load=load)
                results["arms"][name]["rounds"].append(measured)
                print(f"round {number} {name}: {json.dumps(measured)}", flush=True)
    for arm in results["arms"].values():
        rounds = arm["rounds"]
        arm["median"] = {
            "memories_per_s": round(statistics.median(r["memories_per_s"] for r in rounds), 1),
            "share_of_floor": round(statistics.median(r["share_of_floor"] for r in rounds), 3),
            **{
                key: round(statistics.median(r["cpu_per_memory"][key] for r in rounds), 2)
                for key in ("service_ms", "database_ms", "total_ms")
            },
        }
    return publish(results, "memories-add", add_arms_report)


def publish(
    results: dict[str, Any], prefix: str, render: Callable[[dict[str, Any]], list[str]]
) -> int:
    """Ends a run: the load at its end, the JSON printed and written (``prefix``), the report printed."""
    results["load"]["end"] = load_average()
    print(json.dumps(results, indent=2))
    write_json(results, prefix=prefix)
    print_report(render(results))
    return 0


def add_arms_report(results: dict[str, Any]) -> list[str]:
    """The Markdown report of an ``--add-arms`` run."""
    lines = [
        heading(results),
        "",
        f"AddMemories A/B (`bench/bench_memories.py --add-arms`), {ADD_AGAIN} memories per arm and round, "
        f"batches of {BATCH}, the arms' order reversed every round.",
        *([f"Note: {results['note']}", ""] if results["note"] else [""]),
        "| arm | round | memories/s | share of the model alone | CPU per memory: service + database | load avg (1 min) |",
        "|---|---|---|---|---|---|",
    ]
    for name, arm in results["arms"].items():
        for r in arm["rounds"]:
            cpu = r["cpu_per_memory"]
            lines.append(
                f"| {name} | {r['round']} | {r['memories_per_s']} | {r['share_of_floor']:.0%} | "
                f"{cpu['service_ms']} + {cpu['database_ms']} ms | {r['load']['floor_before']} -> "
                f"{r['load']['after_add']} |"
            )
        median = arm["median"]
        lines.append(
            f"| {name} | median | {median['memories_per_s']} | {median['share_of_floor']:.0%} | "
            f"{median['service_ms']} + {median['database_ms']} ms | |"
        )
    return lines


def run(arguments: argparse.Namespace, stamp: str) -> int:
    settings = Settings()
    provider = build_embedding_provider(settings)
    items = contents()
    texts = [text for _, text in items]
    results: dict[str, Any] = {
        "time": stamp,
        "machine": machine(),
        "commit": tree_commit(ROOT),
        "note": arguments.note,
        "load": {},
        "settings": {
            "memory_recall_exact_below": settings.memory_recall_exact_below,
            "memory_recall_candidates": settings.memory_recall_candidates,
            "hnsw_ef_search": settings.hnsw_ef_search,
            "hnsw_max_scan_tuples": settings.hnsw_max_scan_tuples,
        },
    }
    results["load"]["start"] = load_average()
    admin = psycopg.connect(settings.database_url, autocommit=True)
    with (
        services() as (ingest_addr, query_addr),
        services(kinds=("query",), extra_env=EXACT_ENV) as (_, exact_addr),
    ):
        pids = service_pids()
        ingest = grpc.insecure_channel(ingest_addr)
        channels = {
            "approximate": grpc.insecure_channel(query_addr),
            "exact": grpc.insecure_channel(exact_addr),
        }
        add = memory_service_pb2_grpc.MemoryServiceStub(ingest).AddMemories
        stubs = {
            path: memory_query_service_pb2_grpc.MemoryQueryServiceStub(c) for path, c in channels.items()
        }
        if not arguments.recall_only:
            results["add"] = measure_add(add, admin, pids["ingest"], provider, items, results["load"])
        rng = random.Random(12)
        queries = [" ".join(rng.choice(texts).split()[:30]) for _ in range(QUERIES)]
        some_id = {
            user: memory_id(NAMESPACE, user, items[(i * BATCH) % len(items)][0])
            for i, user in enumerate(USERS)
        }
        meters = {"approximate": CpuMeter(admin, pids["query"]), "exact": CpuMeter(admin, pids["exact"])}
        results["arms"] = []
        for target in arguments.targets:
            rows, grow_seconds, builds = grow(settings, target, bulk=arguments.bulk_growth)
            arm: dict[str, Any] = {
                "memories": rows,
                "memories_per_user": rows // len(USERS),
                "grow_seconds": round(grow_seconds, 1),
                "indexes_built_after_growth": builds,
                "load_after_grow": load_average(),
                "indexes": synchronise_indexes(settings),
            }
            arm.update(measure_recall(arguments, settings, provider, stubs, meters, queries, some_id))
            # Writes with the owner indexes in place: each memory of a large owner is also inserted into
            # that owner's index (its rows count in the next arm).
            again = [(f"again-{rows}-{key}", text) for key, text in items[:ADD_AGAIN]]
            arm["add_with_owner_indexes"] = measure_add(add, admin, pids["ingest"], provider, again, {})
            results["arms"].append(arm)
        ingest.close()
        for channel in channels.values():
            channel.close()
    admin.close()
    return publish(results, "memories", report)


def report(results: dict[str, Any]) -> list[str]:
    """The Markdown report of a run."""
    add_result, load = results.get("add"), results["load"]
    lines = [
        heading(results),
        "",
        (
            "Memory records (`bench/bench_memories.py`): AddMemories and RecallMemories against "
            "`cb serve` processes, 20 users; the exact path served by a second query "
            "process (memory_recall_exact_below above every owner) in the same run."
        ),
        *([f"Note: {results['note']}", ""] if results["note"] else [""]),
        "| measure | figure | load avg (1 min) |",
        "|---|---|---|",
    ]
    if add_result:
        lines += [
            (
                f"| AddMemories ({add_result['memories']} Debian contents, batches of {BATCH}, embedding included) | "
                f"{add_result['memories_per_s']} memories/s ({add_result['seconds']} s), "
                f"{add_result['share_of_floor']:.0%} of the model alone; CPU per memory: service "
                f"{add_result['cpu_per_memory']['service_ms']} ms + database "
                f"{add_result['cpu_per_memory']['database_ms']} ms | {load['floor_before']} -> {load['after_add']} |"
            ),
            (
                f"| floor: the model alone on 1,000 of the texts, before / after | "
                f"{add_result['floor_before_per_s']} / {add_result['floor_after_per_s']} texts/s | "
                f"{load['floor_before']} / {load['floor_after']} |"
            ),
        ]
    for arm in results["arms"]:
        quality, cpu = arm["quality"], arm["cpu_per_call"]
        lines += [
            (
                f"| RecallMemories at {arm['memories']} memories ({arm['memories_per_user']} per user), top 10, "
                f"{QUERIES} queries: p50 / p95 | {arm['recall']['p50_ms']} / {arm['recall']['p95_ms']} ms | "
                f"{arm['load']['before']} -> {arm['load']['after']} |"
            ),
            (
                f"| baseline: the exact path, interleaved: p50 / p95 | {arm['baseline_exact_recall']['p50_ms']} / "
                f"{arm['baseline_exact_recall']['p95_ms']} ms | |"
            ),
            (
                f"| CPU per recall, approximate / exact (service + database) | {cpu['approximate']['total_ms']} / "
                f"{cpu['exact']['total_ms']} ms | {cpu['load']} |"
            ),
            *(
                [
                    (
                        f"| the same {arm['alone']['approximate']['n']} recalls per path one path at a time: "
                        f"p50 / p95 approximate / exact | {arm['alone']['approximate']['p50_ms']} / "
                        f"{arm['alone']['approximate']['p95_ms']} ms; {arm['alone']['exact']['p50_ms']} / "
                        f"{arm['alone']['exact']['p95_ms']} ms | |"
                    )
                ]
                if "alone" in arm
                else []
            ),
            (
                f"| recall@10 of the approximate path against exact scoring ({quality['queries']} queries; ties "
                f"counted) | {quality['recall_at_10']} ({quality['recall_at_10_ties_counted']}) | |"
            ),
            (
                f"| in process, database CPU per recall: approximate / the namespace index's walk / exact | "
                f"{quality['database_cpu_ms']['approximate']} / {quality['database_cpu_ms']['namespace_index']} / "
                f"{quality['database_cpu_ms']['exact']} ms | |"
            ),
            (
                f"| recall@10 of the namespace index's walk (ties counted) | "
                f"{quality['namespace_index']['recall_at_10']} "
                f"({quality['namespace_index']['recall_at_10_ties_counted']}) | |"
            ),
            (
                f"| AddMemories of {ADD_AGAIN} more at this size (owner indexes in place) | "
                f"{arm['add_with_owner_indexes']['memories_per_s']} memories/s, "
                f"{arm['add_with_owner_indexes']['share_of_floor']:.0%} of the model alone "
                f"({arm['add_with_owner_indexes']['floor_before_per_s']} / "
                f"{arm['add_with_owner_indexes']['floor_after_per_s']} texts/s) | |"
            ),
            (
                f"| floors: GetMemory / the query's embedding, p50 / p95 | {arm['get_memory_floor']['p50_ms']} / "
                f"{arm['get_memory_floor']['p95_ms']} ms; {arm['query_embedding_floor']['p50_ms']} / "
                f"{arm['query_embedding_floor']['p95_ms']} ms | |"
            ),
        ]
    lines += [
        "",
        (
            "Beyond the 5,395 real memories the table holds exact SQL copies of them (rows, vertices, vectors) "
            "under new ids: the ranking work per query is that of the stated size, the texts repeat."
        ),
    ]
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_run_options(parser, note_help=None, shared_help=None)
    parser.add_argument(
        "--targets",
        type=lambda text: [int(part) for part in text.split(",")],
        default=[50_000, 100_000],
        help="table sizes to measure recall at, in order (copies grow the table between them)",
    )
    parser.add_argument(
        "--recall-only",
        action="store_true",
        help="skip AddMemories (with --shared-database, on a database an earlier run filled): recall only",
    )
    parser.add_argument(
        "--bulk-growth",
        action="store_true",
        help="drop the chunk table's indexes during the copies and build them after (for 1M memories)",
    )
    parser.add_argument("--cpu-calls", type=int, default=100, help="recalls per path of the CPU pass")
    parser.add_argument("--quality-queries", type=int, default=200, help="queries of the recall@10 check")
    parser.add_argument(
        "--add-arms",
        type=parse_arms,
        help="AddMemories A/B only: NAME[@TREE]=DATABASE_URL,... (existing databases; see the module doc)",
    )
    parser.add_argument("--add-rounds", type=int, default=4, help="rounds of the --add-arms A/B")
    arguments = parser.parse_args()
    if arguments.add_arms:
        return run_add_arms(arguments)
    return run_in_database(run, arguments, "memory_records_bench")


if __name__ == "__main__":
    raise SystemExit(main())
