"""Capacity of the read side: Search and CompileContext throughput of query_service
processes reading from a streaming replica, at 100k chunks.

In a fresh database (`run_bench.run_in_database`; the embedded replica replays it like everything else):

1. loads ``--chunks`` chunks (default 100,000) in documents of 250 chunks through the ingest domain
   (`DocumentWriter.put_chunks`, one transaction per document). A chunk's text is two random sentences of
   the docs vault (``../shared/corpora``, one per document) with a document number and an identifier, so
   full-text and trigram rankings see real text; its vector is the normalised mean of the real model's
   embeddings of the two sentences (each sentence embedded once) plus a small noise, so no two are equal
   (embedding 100k chunks one by one would take an hour on 2 cores and measure the model, not the read side);
2. waits until the replica replayed the load, starts one and then two ``cb serve query`` processes with
   ``CB_READ_DATABASE_URL`` = the replica, and drives each configuration with ``--clients`` concurrent
   closed-loop clients over one channel that balances per call (``round_robin`` over the processes), for
   ``--seconds`` per RPC: Search (top_k 10) and CompileContext (budget 1000) on sentences of the corpus.

Reports calls/s in total, per process and per core (this machine's cores, which also run the database,
its replica and the clients), with p50/p95 latency, the CPU time per call of the query processes and of
the replica's PostgreSQL processes (from /proc: what a call costs, whatever else runs), and the load
average; prints the report and writes
writes bench/results/capacity-<UTC time>.json.

Usage: .venv/bin/python bench/bench_capacity.py [--chunks N] [--clients N] [--seconds S] [--note TEXT]
(the embedded database and its replica must be up: ``make db``).
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.client_threads import run_in_threads
from bench.corpus_loading import distinctive_sentences
from bench.run_bench import add_run_options
from bench.run_bench import free_port
from bench.run_bench import percentiles
from bench.run_bench import run_in_database
from bench.service_results import machine
from bench.service_results import print_report
from bench.service_results import write_json
from common.kernel.config import Settings
from common.storage.database import Database
from common.storage.schema import migrations
from common.text_models.embeddings.factory import build_embedding_provider
from ingest_service.documents.validation import ChunkInput
from ingest_service.documents.validation import PutChunksInput
from ingest_service.documents.writer import DocumentWriter
from memory_service_grpc_client import wait_for_serving
from memory_service_grpc_client.memory.v1 import context_service_pb2
from memory_service_grpc_client.memory.v1 import context_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2_grpc
from memory_service_tools.embedded_db.replica import REPLICA_PORT
from memory_service_tools.embedded_db.replica import replica_status

NAMESPACE = "capacity"
CHUNKS_PER_DOCUMENT = 250
NOISE = 0.02


class SentenceEncoder:
    """The real model, once per distinct sentence; a chunk of two sentences gets the normalised mean of
    theirs plus a little noise (see the module doc)."""

    def __init__(self, provider: Any) -> None:
        self.provider = provider
        self.model_id = provider.model_id
        self.dimension = provider.dimension
        self.pairs: dict[str, tuple[str, str]] = {}
        self.cache: dict[str, np.ndarray] = {}
        self.random = np.random.default_rng(13)

    def encode_passages(self, texts: Any) -> np.ndarray:
        pairs = [self.pairs[text.split("\n", 1)[-1]] for text in texts]  # "<title> — <heading>\n<text>"
        missing = sorted({s for pair in pairs for s in pair if s not in self.cache})
        if missing:
            for sentence, vector in zip(missing, self.provider.encode_passages(missing), strict=True):
                self.cache[sentence] = vector
        out = np.stack([self.cache[a] + self.cache[b] for a, b in pairs]).astype(np.float32)
        out += self.random.normal(0, NOISE, out.shape).astype(np.float32)
        out /= np.linalg.norm(out, axis=1, keepdims=True)
        return out


def load(
    settings: Settings,
    sentences: list[str],
    chunks: int,
    *,
    namespace: str = NAMESPACE,
    per_document: int = CHUNKS_PER_DOCUMENT,
    key_prefix: str = "doc:capacity-",
) -> float:
    """Writes ``chunks`` chunks into ``namespace`` (see the module doc), ``per_document`` chunks per
    document keyed ``<key_prefix><number>``; returns the seconds it took."""
    provider = build_embedding_provider(settings)
    database = Database(settings, embedding_model=provider.model_id, prepare=migrations.apply)
    migrations.apply(database)
    encoder = SentenceEncoder(provider)
    writer = DocumentWriter(database, encoder, settings)
    started = time.perf_counter()
    rng = random.Random(7)
    for document in range(chunks // per_document):
        pieces = []
        for order in range(per_document):
            first, second = rng.sample(sentences, 2)
            text = f"{first} {second} (doc {document}, REF-{document * per_document + order})"
            encoder.pairs[text] = (first, second)
            pieces.append(ChunkInput(chunk_order=order, heading=f"Part {order}", text=text))
        writer.put_chunks(
            PutChunksInput(
                namespace=namespace,
                natural_key=f"{key_prefix}{document}",
                chunks=tuple(pieces),
                title=f"Doc {document}",
            )
        )
        encoder.pairs.clear()
        if document % 40 == 39:
            print(
                f"  {(document + 1) * per_document} chunks, {time.perf_counter() - started:.0f} s",
                flush=True,
            )
    database.close()
    return time.perf_counter() - started


def wait_for_replay(primary_url: str, replica_url: str) -> None:
    with psycopg.connect(primary_url, autocommit=True) as primary:
        target = primary.execute("SELECT pg_current_wal_lsn()").fetchone()[0]  # type: ignore[index]
    with psycopg.connect(replica_url, autocommit=True) as replica:
        while not replica.execute("SELECT pg_last_wal_replay_lsn() >= %s", (target,)).fetchone()[0]:  # type: ignore[index]
            time.sleep(0.5)


@contextmanager
def query_processes(count: int, replica_url: str) -> Iterator[tuple[list[str], list[int]]]:
    addresses = [f"127.0.0.1:{free_port()}" for _ in range(count)]
    children = [
        subprocess.Popen(
            [sys.executable, "-m", "memory_service_tools.cli", "serve", "query"],
            cwd=ROOT,
            env=dict(
                os.environ, CB_QUERY_ADDR=address, CB_QUERY_METRICS_PORT="0", CB_READ_DATABASE_URL=replica_url
            ),
            stderr=subprocess.DEVNULL,
        )
        for address in addresses
    ]
    try:
        for address in addresses:
            if not wait_for_serving(address, timeout=180):
                raise RuntimeError(f"query_service at {address} did not become SERVING")
        yield addresses, [child.pid for child in children]
    finally:
        for child in children:
            child.terminate()
        for child in children:
            child.wait(30)


def drive(
    addresses: list[str],
    call: Callable[[grpc.Channel, str], Any],
    queries: list[str],
    clients: int,
    seconds: float,
) -> dict[str, Any]:
    """``clients`` closed-loop threads over one round-robin channel for ``seconds``: calls/s and latency."""
    target = "ipv4:" + ",".join(addresses)
    options = [("grpc.lb_policy_name", "round_robin"), ("grpc.max_receive_message_length", 64 * 2**20)]
    samples: list[float] = []
    errors = [0]
    lock = threading.Lock()
    with grpc.insecure_channel(target, options=options) as channel:
        for query in queries[:clients]:  # warm-up: every process has loaded its model and pools
            call(channel, query)
        deadline = time.perf_counter() + seconds

        def client(seed: int) -> None:
            rng = random.Random(seed)
            while time.perf_counter() < deadline:
                started = time.perf_counter()
                try:
                    call(channel, rng.choice(queries))
                except grpc.RpcError:
                    with lock:
                        errors[0] += 1
                    continue
                with lock:
                    samples.append((time.perf_counter() - started) * 1000)

        elapsed = run_in_threads(client, clients)
    return {"calls_per_s": round(len(samples) / elapsed, 2), "errors": errors[0], **percentiles(samples)}


_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds used so far by the processes ``pids`` (Linux /proc)."""
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / _TICKS
    return total


def replica_backends() -> list[int]:
    """The processes of the replica's postmaster and its children (backends, startup, walreceiver)."""
    postmaster = replica_status().pid
    if postmaster is None:
        return []
    pids = [postmaster]
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == postmaster:
                pids.append(int(stat.parent.name))
        except (OSError, ValueError, IndexError):
            continue
    return pids


def search(channel: grpc.Channel, query: str) -> Any:
    return retrieval_service_pb2_grpc.RetrievalServiceStub(channel).Search(
        retrieval_service_pb2.SearchRequest(namespace=NAMESPACE, query=query, top_k=10), timeout=60
    )


def compile_context(channel: grpc.Channel, query: str) -> Any:
    return context_service_pb2_grpc.ContextServiceStub(channel).CompileContext(
        context_service_pb2.CompileContextRequest(namespace=NAMESPACE, query=query, token_budget=1000),
        timeout=60,
    )


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Read-side capacity at 100k chunks (see the module doc).")
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=30.0)
    add_run_options(parser, note_help=None, shared_help=argparse.SUPPRESS)
    return parser.parse_args()


def run(arguments: argparse.Namespace, stamp: str) -> int:
    settings = Settings()
    replica_url = psycopg.conninfo.make_conninfo(settings.database_url, port=str(REPLICA_PORT))
    sentences = distinctive_sentences(1000)  # one per document of the docs vault
    print(f"loading {arguments.chunks} chunks ({len(sentences)} distinct sentences)", flush=True)
    load_seconds = load(settings, sentences, arguments.chunks)
    wait_for_replay(settings.database_url, replica_url)
    queries = [
        sentence.split(",")[0][:120]
        for sentence in random.Random(3).sample(sentences, min(400, len(sentences)))
    ]
    results: dict[str, Any] = {
        "time": stamp,
        "benchmark": "capacity",
        "machine": machine(),
        "chunks": arguments.chunks,
        "load_seconds": round(load_seconds, 1),
        "clients": arguments.clients,
        "seconds_per_measurement": arguments.seconds,
        "runs": {},
    }
    cores = os.cpu_count() or 1
    for processes in (1, 2):
        with query_processes(processes, replica_url) as (addresses, pids):
            for name, call in (("Search", search), ("CompileContext", compile_context)):
                load_before = os.getloadavg()
                database = replica_backends()
                service_before, database_before = cpu_seconds(pids), cpu_seconds(database)
                measured = drive(addresses, call, queries, arguments.clients, arguments.seconds)
                calls = measured["n"]
                # CPU per call (ms) of the query processes and of the replica (backends started during
                # the run are missed by the "before" list only if they ended: pools keep them).
                measured["service_cpu_ms_per_call"] = round(
                    1000 * (cpu_seconds(pids) - service_before) / calls, 2
                )
                database_after = cpu_seconds(sorted(set(database) | set(replica_backends())))
                measured["replica_cpu_ms_per_call"] = round(
                    1000 * (database_after - database_before) / calls, 2
                )
                measured["per_process"] = round(measured["calls_per_s"] / processes, 2)
                measured["per_core"] = round(measured["calls_per_s"] / cores, 2)
                measured["load_average"] = [round(x, 2) for x in load_before]
                results["runs"][f"{name} x{processes}"] = measured
                print(f"{name} with {processes} process(es): {measured}", flush=True)
    write_json(results, prefix="capacity")
    lines = [
        "",
        (
            f"## {stamp} — read-side capacity at {arguments.chunks:,} chunks (`bench/bench_capacity.py`), "
            f"{cores} cores, {results['machine'].get('cpu', '')}"
        ),
        "",
        (
            f"query_service processes read from the embedded streaming replica; {arguments.clients} closed-loop "
            f"clients over one round-robin channel, {arguments.seconds:.0f} s per row; the same {cores} cores run "
            f"the primary, the replica and the clients. Load: {load_seconds:.0f} s for {arguments.chunks:,} chunks."
        ),
        "",
        "| RPC | processes | calls/s | per process | per core | p50 ms | p95 ms | errors | service CPU ms/call | replica CPU ms/call | load average before |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key, row in results["runs"].items():
        name, processes = key.split(" x")
        lines.append(
            f"| {name} | {processes} | {row['calls_per_s']} | {row['per_process']} | {row['per_core']} | "
            f"{row['p50_ms']} | {row['p95_ms']} | {row['errors']} | {row['service_cpu_ms_per_call']} | "
            f"{row['replica_cpu_ms_per_call']} | {', '.join(map(str, row['load_average']))} |"
        )
    print_report(lines, note=arguments.note)
    return 0


if __name__ == "__main__":
    sys.exit(run_in_database(run, parse_arguments(), "memory_capacity"))
