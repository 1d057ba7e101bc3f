"""The web console's pages at a large namespace: server time, bytes and the console's CPU time per page.

What is loaded into one namespace Q (``--chunks``, default 100,000 chunks in Q):

- a base of ``--base-chunks`` chunks (default 10,000) in documents of 250 chunks, and one document of
  ``--big-document`` chunks (default 5,000), through the ingest domain with `bench.bench_capacity.load`
  (real sentences of the docs vault; a chunk's vector is the normalised mean of the real model's
  embeddings of its two sentences plus noise: each sentence is embedded once, not each chunk);
- the Debian upload stream (5,415 observations: their packages, versions and people as nodes, about
  10,000 facts, one episode chunk each, embedded by the service) recorded through a real ingest service;
- ``--memories`` memory records (default 1,000) of one user through AddMemories (each text embedded);
- ``--audit-events`` explicit audit events (default 2,000) through RecordAuditEvent, when the services
  start for the measurement and Q holds none yet;
- then copies of Q's rows up to ``--chunks`` in one ``INSERT ... SELECT`` (`bench.scale_tables.add_copies`:
  the scale benchmark's fast path; a copy gets the key ``<node_key>~copy<c>`` and a perturbed vector, and
  exists only in the chunks table), with the indexes dropped and rebuilt around it.

With ``--shared-database`` and ``--namespace`` an earlier load is reused when Q already holds ``--chunks``
chunks (so the console of another checkout can be measured on the same data).

What is measured: `cb serve ingest`, `cb serve query` and `cb console` run as processes (development mode:
the token is any word) from this checkout or ``--tree``; each page is fetched ``--repetitions`` times
(after one warm-up fetch) with one client over HTTP: wall time at the client (loopback), the
``Server-Timing`` the console reports when it does, the response's bytes, and the CPU seconds the console
process used during the fetch (``/proc``, in clock ticks of 10 ms: read its mean over the fetches).
p50/p95 per page, the load average with each page; JSON in
bench/results/console-<UTC time>.json.

With ``--baseline-tree`` the console of another checkout runs beside it over the same services, and each
page is fetched from both in turn (A/B interleaved, the order alternating by round).

Usage: .venv/bin/python bench/bench_console.py [--chunks 100000] [--repetitions 7] [--tree DIR]
[--baseline-tree DIR]
[--shared-database --namespace NAME] [--note TEXT] (the embedded database must be up).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from contextlib import contextmanager
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import grpc
import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_capacity import load as load_chunks
from bench.corpus_loading import UPLOADS
from bench.corpus_loading import debian_observations
from bench.corpus_loading import distinctive_sentences
from bench.corpus_loading import load_observations
from bench.corpus_loading import wait_for_embeddings
from bench.run_bench import add_run_options
from bench.run_bench import free_port
from bench.run_bench import percentiles
from bench.run_bench import run_in_database
from bench.run_bench import services
from bench.scale_tables import add_copies
from bench.scale_tables import indexes_rebuilt
from bench.service_results import cpu_seconds
from bench.service_results import machine
from bench.service_results import print_report
from bench.service_results import tree_commit
from bench.service_results import write_json
from common.kernel.config import Settings
from memory_service_grpc_client import MemoryClient
from memory_service_grpc_client.memory.v1 import audit_service_pb2
from memory_service_grpc_client.memory.v1 import memory_service_pb2
from memory_service_grpc_client.memory.v1 import memory_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import observation_service_pb2_grpc

BIG_DOCUMENT = "doc:big-0"
MEMORY_USER = "console-bench"
TOKEN = "bench"  # development mode: the services take any token
TARGET_MS = 1000


def load_average() -> dict[str, float]:
    one, five, _ = os.getloadavg()
    return {"load_1m": round(one, 2), "load_5m": round(five, 2)}


def q_chunks(settings: Settings, q: str) -> int:
    with psycopg.connect(settings.database_url) as conn:
        try:
            row = conn.execute(
                sql.SQL("SELECT count(*) FROM {} WHERE namespace = %s").format(
                    sql.Identifier(settings.chunks_table)
                ),
                (q,),
            ).fetchone()
        except psycopg.errors.UndefinedTable:
            return 0
    return int(row[0]) if row else 0


def load(settings: Settings, q: str, arguments: argparse.Namespace) -> dict[str, Any]:
    """Loads Q (see the module doc); the seconds of each step."""
    build: dict[str, Any] = {}
    sentences = distinctive_sentences(400)
    build["base_seconds"] = round(load_chunks(settings, sentences, arguments.base_chunks, namespace=q), 1)
    build["big_document_seconds"] = round(
        load_chunks(
            settings,
            sentences,
            arguments.big_document,
            namespace=q,
            per_document=arguments.big_document,
            key_prefix="doc:big-",
        ),
        1,
    )
    print("chunks loaded:", build, flush=True)
    with services(extra_env={"CB_EMBEDDING_THREADS": "1"}, kinds=("ingest",)) as (ingest, _):
        channel = grpc.insecure_channel(ingest, options=[("grpc.max_send_message_length", 64 << 20)])
        observations = observation_service_pb2_grpc.ObservationServiceStub(channel)
        build["observations"] = load_observations(observations, debian_observations(q), concurrency=2)
        build["episode_embedding"] = wait_for_embeddings(observations, q, limit_seconds=1800)
        memories = memory_service_pb2_grpc.MemoryServiceStub(channel)
        texts = [text for text in memory_texts() if len(text) <= 8000][: arguments.memories]
        started = time.perf_counter()
        for first in range(0, len(texts), 100):
            memories.AddMemories(
                memory_service_pb2.AddMemoriesRequest(
                    user_id=MEMORY_USER,
                    memories=[memory_service_pb2.NewMemory(text=t) for t in texts[first : first + 100]],
                ),
                timeout=600,
            )
        build["memories"] = {"count": len(texts), "seconds": round(time.perf_counter() - started, 1)}
    print("observations and memories loaded:", build, flush=True)
    table = settings.chunks_table
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "CREATE TEMP TABLE scale_base AS"
                " SELECT row_number() OVER (ORDER BY id) AS rn, * FROM {} WHERE namespace = %s"
            ).format(sql.Identifier(table)),
            (q,),
        )
        conn.execute("CREATE INDEX ON scale_base (rn)")
        base_rows = int(conn.execute("SELECT count(*) FROM scale_base").fetchone()[0])  # type: ignore[index]
        needed = arguments.chunks - base_rows
        if needed > 0:
            copies = -(-needed // base_rows)
            rows_last = needed - (copies - 1) * base_rows
            timings: dict[str, float] = {}
            started = time.perf_counter()
            with indexes_rebuilt(conn, table, arguments.chunks, timings):
                add_copies(conn, table, q, 1, copies, rows_last, "single")
            build["copies"] = {
                "base_rows": base_rows,
                "copies": copies,
                "seconds": round(time.perf_counter() - started, 1),
                "indexes": timings,
            }
    return build


def audit_events(ingest: str, query: str, q: str, count: int) -> dict[str, Any]:
    """Records ``count`` explicit audit events in Q (reviews of its documents, in 20 traces) unless Q
    already holds audit events; what was done."""
    with MemoryClient(ingest, query) as client:
        present = client.list_audit_events(audit_service_pb2.ListAuditEventsRequest(namespace=q, page_size=1))
        if present.events:
            return {"reused": True}
        started = time.perf_counter()
        for index in range(count):
            request = audit_service_pb2.RecordAuditEventRequest(
                namespace=q,
                action=("review", "export", "approve")[index % 3],
                trace_id=f"console-bench-{index % 20}",
                target_key=f"doc:capacity-{index % 40}",
            )
            request.details.update({"note": f"bench event {index}"})
            client.record_audit_event(request)
    return {"recorded": count, "seconds": round(time.perf_counter() - started, 1)}


def memory_texts() -> list[str]:
    """The Debian upload contents (real texts of people's work), in corpus order."""
    import json

    return [
        json.loads(line)["content"].strip()
        for line in (UPLOADS / "observations.jsonl").read_text("utf-8").splitlines()
        if json.loads(line)["content"].strip()
    ]


def busiest_package() -> str:
    """The package with the most versions in the Debian stream (the node with the most facts)."""
    import json

    counts = Counter(
        json.loads(line)["subject"]["id"]
        for line in (UPLOADS / "observations.jsonl").read_text("utf-8").splitlines()
    )
    return f"package:{counts.most_common(1)[0][0]}"


@contextmanager
def console(root: Path, ingest: str, query: str) -> Iterator[tuple[str, int]]:
    """``cb console`` from the tree ``root`` on a free port; yields its base URL and process id."""
    port = free_port()
    child = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "memory_service_tools.cli",
            "--ingest-addr",
            ingest,
            "--query-addr",
            query,
            "console",
            "--port",
            str(port),
        ],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"{base}/healthz", timeout=2).read()
                break
            except (urllib.error.URLError, ConnectionError):
                if time.monotonic() > deadline or child.poll() is not None:
                    raise RuntimeError("the console did not start") from None
                time.sleep(0.2)
        yield base, child.pid
    finally:
        child.terminate()
        child.wait(30)


def fetch(url: str) -> tuple[int, bytes, dict[str, str]]:
    """Status, body and headers (names in lower case) of a GET signed in with the bench's token."""
    request = urllib.request.Request(url, headers={"Cookie": f"cb_console_token={TOKEN}"})
    try:
        with urllib.request.urlopen(request, timeout=300) as response:
            return response.status, response.read(), {k.lower(): v for k, v in response.headers.items()}
    except urllib.error.HTTPError as error:
        return error.code, error.read(), {k.lower(): v for k, v in error.headers.items()}


SERVER_TIMING = re.compile(r"dur=([0-9.]+)")
FAILURE = re.compile(r'class="failure"[^>]*>\s*<p><strong>(\w+)')  # the status codes a page shows


@dataclass
class Samples:
    """What the fetches of one page from one console measured."""

    wall: list[float] = field(default_factory=list)
    server: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    status: int = 0
    failures: list[str] = field(default_factory=list)

    def fetch(self, base: str, pid: int, path: str) -> None:
        cpu_before = cpu_seconds(pid)
        started = time.perf_counter()
        self.status, body, headers = fetch(base + path)
        self.wall.append((time.perf_counter() - started) * 1000)
        self.cpu.append((cpu_seconds(pid) - cpu_before) * 1000)
        self.sizes.append(len(body))
        if match := SERVER_TIMING.search(headers.get("server-timing", "")):
            self.server.append(float(match.group(1)))
        self.failures = FAILURE.findall(body.decode("utf-8", "replace"))

    def summary(self, path: str) -> dict[str, Any]:
        return {
            "path": path,
            "status": self.status,
            "wall": percentiles(self.wall),
            "server_timing": percentiles(self.server) if self.server else None,
            "console_cpu": percentiles(self.cpu),
            "bytes": max(self.sizes),
            "failures_shown": self.failures,
            **load_average(),
        }


def measure_page(consoles: dict[str, tuple[str, int]], path: str, repetitions: int) -> dict[str, Any]:
    """One warm-up fetch per console, then ``repetitions`` rounds fetching ``path`` from each console in
    turn (the order alternating by round): per console, wall ms, Server-Timing ms, bytes, the console's
    CPU ms, the status and the failures the page shows."""
    samples = {name: Samples() for name in consoles}
    for base, _ in consoles.values():
        fetch(base + path)
    names = list(consoles)
    for index in range(repetitions):
        for name in names if index % 2 == 0 else names[::-1]:
            samples[name].fetch(*consoles[name], path)
    return {name: found.summary(path) for name, found in samples.items()}


def pages(q: str, base: str) -> dict[str, str]:
    """The console's pages over Q, the trace and observation ids found on the pack and node pages."""
    package = busiest_package()
    query = "How do I configure the package repository mirrors?"

    def page(path: str, **params: str) -> str:
        return f"{path}?{urlencode(params)}" if params else path

    listed = {
        "namespaces (start page)": page("/"),
        "node: big document": page("/node", ns=q, key=BIG_DOCUMENT),
        "node: big document, second part of its text": page(
            "/node", ns=q, key=BIG_DOCUMENT, text_from="20000"
        ),
        "node: busiest package": page("/node", ns=q, key=package),
        "search": page("/search", ns=q, q=query),
        "pack": page("/pack", ns=q, task=query, budget="1500"),
        "graph depth 1": page("/graph", ns=q, key=package),
        "graph depth 2": page("/graph", ns=q, key=package, depth="2"),
        "graph depth 3": page("/graph", ns=q, key=package, depth="3"),
        "audit": page("/audit", ns=q),
        "audit, one action": page("/audit", ns=q, action="export"),
        "trace of 100 audit events": page("/audit", ns=q, trace_id="console-bench-0"),
        "memories": page("/memories", user=MEMORY_USER),
        "memories with recall": page(
            "/memories", user=MEMORY_USER, q="release notes for the new upstream version"
        ),
        "health": page("/health", ns=q),
    }
    _, pack_body, _ = fetch(base + listed["pack"])
    trace = re.search(r"trace_id=([^\"&]+)", pack_body.decode("utf-8"))
    if trace:
        listed["trace"] = page("/audit", ns=q, trace_id=urllib.parse.unquote_plus(trace.group(1)))
    _, node_body, _ = fetch(base + listed["node: busiest package"])
    observation = re.search(r"/observation\?[^\"]*id=([^\"&]+)", node_body.decode("utf-8"))
    if observation:
        listed["observation"] = page("/observation", ns=q, id=urllib.parse.unquote_plus(observation.group(1)))
    return listed


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="The web console's pages at 100k chunks (module doc).")
    parser.add_argument("--chunks", type=int, default=100_000, help="chunks in the namespace")
    parser.add_argument("--base-chunks", type=int, default=10_000, help="chunks written through the domain")
    parser.add_argument("--big-document", type=int, default=5_000, help="chunks of the one big document")
    parser.add_argument("--memories", type=int, default=1_000, help="memory records of the one user")
    parser.add_argument("--audit-events", type=int, default=2_000, help="explicit audit events in Q")
    parser.add_argument("--repetitions", type=int, default=7, help="timed fetches per page")
    parser.add_argument("--tree", default="", help="checkout whose services and console are measured")
    parser.add_argument(
        "--baseline-tree", default="", help="checkout whose console is measured beside, page by page"
    )
    parser.add_argument("--namespace", default="", help="the namespace (reused when already loaded)")
    parser.add_argument("--load-only", action="store_true", help="load the namespace and stop")
    add_run_options(
        parser, note_help=None, shared_help="work in CB_DATABASE_URL itself (default: a fresh database, dropped afterwards)"
    )
    return parser.parse_args()


def main() -> int:
    return run_in_database(run, parse_arguments(), "memory_console")


def run(arguments: argparse.Namespace, stamp: str) -> int:
    settings = Settings()
    q = arguments.namespace or f"console-{stamp.lower()}"
    tree = Path(arguments.tree).resolve() if arguments.tree else ROOT
    results: dict[str, Any] = {
        "time": stamp,
        "machine": machine(),
        "note": arguments.note,
        "namespace": q,
        "tree": str(tree),
        "commit": tree_commit(tree) if (tree / ".git").exists() else "",
        "repetitions": arguments.repetitions,
        "target_ms": TARGET_MS,
    }
    present = q_chunks(settings, q)
    if present >= arguments.chunks:
        results["build"] = {"reused": present}
    else:
        results["build"] = {**load(settings, q, arguments), **load_average()}
    results["q_chunks"] = q_chunks(settings, q)
    print("namespace", q, "holds", results["q_chunks"], "chunks", flush=True)
    if arguments.load_only:
        return 0
    results["pages"] = {}
    trees = {"this tree": tree}
    if arguments.baseline_tree:
        trees["baseline"] = Path(arguments.baseline_tree).resolve()
    results["trees"] = {name: str(root) for name, root in trees.items()}
    with ExitStack() as stack:
        ingest, query = stack.enter_context(services(root=tree))
        results["build"]["audit_events"] = audit_events(ingest, query, q, arguments.audit_events)
        consoles = {name: stack.enter_context(console(root, ingest, query)) for name, root in trees.items()}
        for name, path in pages(q, consoles["this tree"][0]).items():
            results["pages"][name] = measure_page(consoles, path, arguments.repetitions)
            print(
                name,
                {
                    tree_name: (found["wall"]["p50_ms"], found["wall"]["p95_ms"], found["bytes"])
                    for tree_name, found in results["pages"][name].items()
                },
                flush=True,
            )
    write_json(results, prefix="console")
    print_report(report(results))
    return 0


def report(results: dict[str, Any]) -> list[str]:
    lines = [
        f"\n## {results['time']} — console pages at {results['q_chunks']} chunks",
        "",
        "| page | tree | p50 ms | p95 ms | server p50 ms | console CPU ms (mean) | bytes | p95 over 1 s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, trees in results["pages"].items():
        for tree_name, page in trees.items():
            server = page["server_timing"]["p50_ms"] if page["server_timing"] else ""
            over = "yes" if page["wall"]["p95_ms"] > TARGET_MS else ""
            lines.append(
                f"| {name} | {tree_name} | {page['wall']['p50_ms']} | {page['wall']['p95_ms']} | {server}"
                f" | {page['console_cpu']['mean_ms']} | {page['bytes']} | {over} |"
            )
    return lines


if __name__ == "__main__":
    raise SystemExit(main())
