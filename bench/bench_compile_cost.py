"""What one CompileContext costs on the LoCoMo development split (target: p95 <= 60 ms over gRPC
on a quiet machine), with a baseline code tree measured in the same run.

Loads the three conversations through the public API (as `bench/bench_context_quality.py` does: one
observation per turn, then waits for the episode embedder on GetEmbeddingBacklog) into a fresh database,
then measures, for each code tree (``--baseline-root``, e.g. an unpacked ``git archive main``, and this
tree), alternating ``--rounds`` times, in a child process that imports that tree:
- CPU time per compile of the compiling process (``time.process_time``, all its threads; the database
  server's own CPU is not in it), the statements and BEGIN/COMMIT round trips per compile (counted on the
  psycopg connection), wall p50/p95 in process;
- CompileContext over gRPC against a `cb serve query` process of that tree: wall p50/p95.
Questions: every ``--every``-th question of categories 1-4, each compiled at 1000 and 2000 tokens; the
query embeddings are computed once beforehand (the model is not what is measured). The load average is
recorded with every figure: on a shared machine wall-clock figures are inflated, CPU time and statement
counts much less.

Usage (one command; the embedded database must be up):
    .venv/bin/python bench/bench_compile_cost.py [--baseline-root DIR] [--rounds 2] [--every 3] [--note TEXT]
Results: bench/results/compile-cost-<UTC time>.json, and the report printed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

LOCOMO = Path(__file__).resolve().parents[2] / "shared" / "corpora" / "locomo-dev" / "locomo-dev.json"
BUDGETS = (1000, 2000)


def load_average() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def questions(every: int) -> list[tuple[str, str]]:
    """(namespace suffix = sample id, question) of every ``every``-th question of categories 1-4."""
    conversations = json.loads(LOCOMO.read_text("utf-8"))
    chosen = [
        (c["sample_id"], q["question"])
        for c in conversations
        for q in c["qa"]
        if q.get("category") in (1, 2, 3, 4)
    ]
    return chosen[::every]


def measure_in_process(prefix: str, every: int) -> dict[str, Any]:
    """Runs in the child process (its ``sys.path[0]`` is the code tree measured)."""
    import psycopg
    import psycopg._connection_base as connection_base

    from bench.run_bench import percentiles
    from common.kernel.config import Settings
    from common.storage.database import Database
    from common.storage.schema import migrations
    from common.text_models.embeddings.factory import build_embedding_provider
    from common.text_models.tokenizer import TokenCounter
    from query_service.context.compiler import ContextCompiler
    from query_service.context.pack.request import ContextRequest
    from query_service.context.pack.settings import context_preset
    from query_service.retrieval.hybrid_search import HybridSearcher
    from query_service.retrieval.hybrid_search import search_preset

    settings = Settings()
    provider = build_embedding_provider(settings)
    work = [(f"{prefix}-{sample}".lower(), question) for sample, question in questions(every)]
    vectors = {question: provider.encode_query(question) for _, question in work}

    class Encoded:
        def encode_query(self, text: str) -> Any:
            return vectors[text] if text in vectors else provider.encode_query(text)

    database = Database(settings, prepare=migrations.apply)
    searcher = HybridSearcher(database, Encoded(), search_preset("default"))
    compiler = ContextCompiler(
        database, searcher, TokenCounter(settings.tokenizer_encoding), context_preset("default")
    )
    for namespace, question in work[:5]:  # warm-up: pool connections, caches
        compiler.compile(ContextRequest(namespace=namespace, query=question, token_budget=2000))
    counts = {"statements": 0, "begin_commit": 0}
    execute, command = psycopg.Cursor.execute, connection_base.BaseConnection._exec_command

    def counted_execute(self: Any, *args: Any, **kwargs: Any) -> Any:
        counts["statements"] += 1
        return execute(self, *args, **kwargs)

    def counted_command(self: Any, *args: Any, **kwargs: Any) -> Any:
        counts["begin_commit"] += 1
        return command(self, *args, **kwargs)

    psycopg.Cursor.execute = counted_execute  # type: ignore[method-assign]
    connection_base.BaseConnection._exec_command = counted_command  # type: ignore[method-assign]
    before_load = load_average()
    walls: list[float] = []
    cpu_started = time.process_time()
    for namespace, question in work:
        for budget in BUDGETS:
            started = time.perf_counter()
            compiler.compile(ContextRequest(namespace=namespace, query=question, token_budget=budget))
            walls.append((time.perf_counter() - started) * 1000)
    cpu = time.process_time() - cpu_started
    database.close()
    calls = len(walls)
    return {
        "compiles": calls,
        "cpu_ms_per_compile": round(1000 * cpu / calls, 2),
        "statements_per_compile": round(counts["statements"] / calls, 2),
        "begin_commit_per_compile": round(counts["begin_commit"] / calls, 2),
        "in_process": percentiles(walls),
        "load_average": [before_load, load_average()],
    }


def measure_grpc(root: Path, prefix: str, every: int) -> dict[str, Any]:
    """CompileContext over gRPC against a query service of the code tree ``root``."""
    import grpc

    from bench.run_bench import percentiles
    from bench.run_bench import services
    from memory_service_grpc_client.memory.v1 import context_service_pb2
    from memory_service_grpc_client.memory.v1 import context_service_pb2_grpc

    work = [(f"{prefix}-{sample}".lower(), question) for sample, question in questions(every)]
    before_load = load_average()
    walls: list[float] = []
    with services(root=root, kinds=("query",)) as (_, query_address):
        stub = context_service_pb2_grpc.ContextServiceStub(grpc.insecure_channel(query_address))
        for namespace, question in work[:5]:
            stub.CompileContext(
                context_service_pb2.CompileContextRequest(
                    namespace=namespace, query=question, token_budget=2000
                ),
                timeout=120,
            )
        for namespace, question in work:
            for budget in BUDGETS:
                started = time.perf_counter()
                stub.CompileContext(
                    context_service_pb2.CompileContextRequest(
                        namespace=namespace, query=question, token_budget=budget
                    ),
                    timeout=120,
                )
                walls.append((time.perf_counter() - started) * 1000)
    return {"grpc": percentiles(walls), "grpc_load_average": [before_load, load_average()]}


def load_locomo(prefix: str) -> dict[str, Any]:
    """The three conversations through RecordObservations, embedded (GetEmbeddingBacklog)."""
    import grpc

    from bench.bench_context_quality import observation
    from bench.bench_context_quality import turns_of
    from bench.corpus_loading import load_observations
    from bench.corpus_loading import wait_for_embeddings
    from bench.run_bench import services
    from memory_service_grpc_client.memory.v1 import observation_service_pb2_grpc
    from memory_service_tools.observation_loader import DEFAULT_OBSERVE_CONCURRENCY

    loaded: dict[str, Any] = {"turns": 0}
    with services(kinds=("ingest",)) as (ingest_address, _):
        observe = observation_service_pb2_grpc.ObservationServiceStub(grpc.insecure_channel(ingest_address))
        for conversation in json.loads(LOCOMO.read_text("utf-8")):
            namespace = f"{prefix}-{conversation['sample_id']}".lower()
            turns = turns_of(conversation["conversation"])
            load = load_observations(
                observe,
                [observation(namespace, conversation["sample_id"], turn) for turn in turns],
                concurrency=DEFAULT_OBSERVE_CONCURRENCY,
            )
            embedded = wait_for_embeddings(observe, namespace)
            loaded["turns"] += load["count"]
            loaded[namespace] = {"left_pending": embedded["left_pending"]}
    return loaded


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="CompileContext cost on locomo-dev (see the module doc).")
    parser.add_argument(
        "--baseline-root", default="", help="a code tree measured before this one, alternating"
    )
    parser.add_argument("--rounds", type=int, default=2, help="alternations of baseline and this tree")
    parser.add_argument("--every", type=int, default=3, help="measure every n-th question (1: all 383)")
    parser.add_argument("--no-grpc", action="store_true", help="in-process figures only")
    parser.add_argument("--note", default="", help="a line added to the entry")
    parser.add_argument("--shared-database", action="store_true", help="load into CB_DATABASE_URL itself")
    parser.add_argument("--child", nargs=3, metavar=("ROOT", "PREFIX", "EVERY"), help=argparse.SUPPRESS)
    return parser.parse_args()


def child(root: str, prefix: str, every: int) -> int:
    sys.path.insert(0, root)
    print(json.dumps(measure_in_process(prefix, every)))
    return 0


def main() -> int:
    arguments = parse_arguments()
    if arguments.child:
        root, prefix, every = arguments.child
        return child(root, prefix, int(every))
    from bench.run_bench import run_in_database

    return run_in_database(run, arguments, "memory_bench_compile")


def run(arguments: argparse.Namespace, stamp: str) -> int:
    from bench.service_results import heading
    from bench.service_results import machine
    from bench.service_results import print_report
    from bench.service_results import write_json

    started = time.perf_counter()
    prefix = f"cost-{stamp}"
    loaded = load_locomo(prefix)
    trees = ([("baseline", Path(arguments.baseline_root).resolve())] if arguments.baseline_root else []) + [
        ("this tree", ROOT)
    ]
    runs: list[dict[str, Any]] = []
    for round_number in range(1, arguments.rounds + 1):
        for label, root in trees:
            output = (
                subprocess.run(
                    [
                        sys.executable,
                        str(Path(__file__).resolve()),
                        "--child",
                        str(root),
                        prefix,
                        str(arguments.every),
                    ],
                    cwd=root,
                    env=dict(os.environ, PYTHONPATH=str(root)),
                    check=True,
                    capture_output=True,
                    text=True,
                )
                .stdout.strip()
                .splitlines()[-1]
            )
            figures = {"tree": label, "root": str(root), "round": round_number, **json.loads(output)}
            if not arguments.no_grpc:
                figures.update(measure_grpc(root, prefix, arguments.every))
            runs.append(figures)
            print(json.dumps(figures), flush=True)
    results = {
        "time": stamp,
        "machine": machine(),
        "note": arguments.note,
        "loaded_turns": loaded["turns"],
        "every": arguments.every,
        "runs": runs,
        "run_seconds": round(time.perf_counter() - started, 1),
    }
    write_json(results, prefix="compile-cost")
    lines = [
        heading(results) + " — CompileContext cost on locomo-dev (`bench/bench_compile_cost.py`)",
        "",
        (
            f"{runs[0]['compiles']} compiles per measurement (every {arguments.every}th question of categories"
            f" 1-4, budgets 1000 and 2000), {loaded['turns']} turns loaded through the API and embedded;"
            " trees alternate."
        ),
        "",
        (
            "| tree (round) | CPU ms / compile | statements / compile | BEGIN+COMMIT / compile |"
            " in process p50 / p95 ms | gRPC p50 / p95 ms | load average (1 min) |"
        ),
        "|---|---|---|---|---|---|---|",
    ]
    for figures in runs:
        grpc_cell = (
            f"{figures['grpc']['p50_ms']} / {figures['grpc']['p95_ms']}"
            if "grpc" in figures
            else "not measured"
        )
        loads = [
            figures["load_average"][0][0],
            figures.get("grpc_load_average", figures["load_average"])[1][0],
        ]
        lines.append(
            f"| {figures['tree']} ({figures['round']}) | {figures['cpu_ms_per_compile']} |"
            f" {figures['statements_per_compile']} | {figures['begin_commit_per_compile']} |"
            f" {figures['in_process']['p50_ms']} / {figures['in_process']['p95_ms']} | {grpc_cell} |"
            f" {loads[0]} -> {loads[1]} |"
        )
    lines.append("")
    lines.append(f"Run time {results['run_seconds']} s; database fresh (created for the run).")
    print_report(lines, note=arguments.note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
