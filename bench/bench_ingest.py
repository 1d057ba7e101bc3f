"""Observation ingest A/B ("debian corpus through cb observe"; embedding), one run.

Loads the whole debian upload stream (5,415 observations) the way `cb observe` sends it (batches of 200,
`DEFAULT_OBSERVE_CONCURRENCY` calls in flight) into a fresh namespace, once per variant and round,
interleaved (round 1: every variant, round 2: every variant again), each against its own freshly started
service processes:

- ``base``: the services of another checkout (``--base-root``, e.g. the code before this change);
- ``background``: this checkout, episode chunks embedded by the background embedder (the default);
- ``inline``: this checkout with ``CB_EPISODE_EMBEDDING=inline`` (embedded in the write).

After each load it measures the set-based floor of the same rows (`run_bench.set_based_floor`) and, for
every variant but ``inline``, how long after the load the service reports an empty embedding backlog
(`corpus_loading.wait_for_embeddings`, at most ``--embedding-wait`` seconds); what is left of the backlog is
then taken off it. Each load runs in a fresh database of its own, dropped after it: in one database,
loads after an earlier load and its floor measurement were at times much slower (58.7 s against the
first's 21.0 s, with 2.3x and 4.7x the CPU time of the service and of PostgreSQL; cause not found, see
bench/RESULTS.md (git history)); ``--same-database`` runs every load in the run's one database instead.
Results are printed and written to bench/results/ingest-<UTC time>.json, with the
load average and the CPU time the service process and the PostgreSQL processes used during each load
(`bench.service_results.cpu_seconds`).

- each ``--variant NAME=VAR:VALUE;...``: this checkout, background embedding, with those environment
  variables (e.g. ``defer=CB_EPISODE_EMBEDDING_MAX_DEFERRAL_SECONDS:600``).

Usage: .venv/bin/python bench/bench_ingest.py [--base-root DIR] [--rounds 2] [--without-inline]
[--same-database] [--variant NAME=VAR:VALUE;...] [--note TEXT]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.corpus_loading import debian_observations
from bench.corpus_loading import load_observations
from bench.corpus_loading import wait_for_embeddings
from bench.run_bench import free_port
from bench.run_bench import fresh_database
from bench.run_bench import run_in_database
from bench.run_bench import set_based_floor
from bench.service_results import cpu_seconds
from bench.service_results import heading
from bench.service_results import load_average
from bench.service_results import machine
from bench.service_results import postgres_cpu_seconds
from bench.service_results import print_report
from bench.service_results import write_json
from common.kernel.config import Settings
from memory_service_grpc_client import wait_for_serving
from memory_service_grpc_client.memory.v1 import observation_service_pb2_grpc
from memory_service_tools.observation_loader import DEFAULT_OBSERVE_CONCURRENCY


@contextmanager
def ingest_service(root: Path, environment: dict[str, str]) -> Iterator[tuple[str, int]]:
    """`cb serve ingest` of the checkout at ``root`` (its code first on the path) on a free port; yields
    its address and process id."""
    address = f"127.0.0.1:{free_port()}"
    env = dict(os.environ, CB_INGEST_ADDR=address, CB_INGEST_METRICS_PORT="0", **environment)
    if root != ROOT:
        env["PYTHONPATH"] = f"{root}:{root / 'common' / 'generated'}"
    child = subprocess.Popen(
        [sys.executable, "-m", "memory_service_tools.cli", "serve", "ingest"], cwd=root, env=env
    )
    try:
        if not wait_for_serving(address, timeout=180):
            raise RuntimeError(f"ingest service of {root} did not become SERVING")
        yield address, child.pid
    finally:
        child.terminate()
        child.wait(60)


def run(arguments: argparse.Namespace, stamp: str) -> int:
    settings = Settings()
    variants: list[tuple[str, Path, dict[str, str]]] = [
        ("background", ROOT, {"CB_EPISODE_EMBEDDING": "background"}),
    ]
    if not arguments.without_inline:
        variants.append(("inline", ROOT, {"CB_EPISODE_EMBEDDING": "inline"}))
    for variant in arguments.variant:
        name, _, assignments = variant.partition("=")
        environment = dict(pair.split(":", 1) for pair in assignments.split(";") if pair)
        variants.append((name, ROOT, {"CB_EPISODE_EMBEDDING": "background", **environment}))
    if arguments.base_root:
        variants.insert(0, ("base", Path(arguments.base_root).resolve(), {}))
    runs: list[dict[str, Any]] = []
    for round_ in range(1, arguments.rounds + 1):
        for name, root, environment in variants:
            namespace = f"ingest-{name}-{round_}-{stamp}"
            with _load_database(arguments, settings, f"memory_ingest_{stamp.lower()}_{round_}_{name}") as url:
                load = _measured_load(arguments, name, round_, root, environment, namespace, url)
            runs.append(load)
            print(json.dumps(load), flush=True)
    results = {"time": stamp, "machine": machine(), "note": arguments.note, "runs": runs}
    write_json(results, prefix="ingest")
    lines = [
        heading(results) + " — observation ingest A/B (`bench/bench_ingest.py`)",
        "",
        (
            f"debian upload stream ({runs[0]['count']} observations) through `record_observations` (what"
            f" `cb observe` runs: batches of 200, {DEFAULT_OBSERVE_CONCURRENCY} in flight) into a fresh"
            " namespace per run"
            + (
                " (every load in the run's one database)"
                if arguments.same_database
                else " in a fresh database of its own"
            )
            + ", variants interleaved per round, each against freshly started ingest processes; floor = the"
            " same rows written again set-based (`run_bench.set_based_floor`) right after the load; CPU s = CPU time of the service process (all its threads) and of every"
            " PostgreSQL process during the load, which other work on a shared machine does not inflate as"
            " it does the wall time."
        ),
        "",
        "| round | variant | load s | obs/s | floor s | floor obs/s | load / floor | CPU s during the load: service, PostgreSQL | embedded after the load | load average (start, end) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for load in runs:
        embedded = load.get("embedding")
        lines.append(
            f"| {load['round']} | {load['variant']} | {load['seconds']} | {load['per_second']} |"
            f" {load['set_based_floor']['seconds']} | {load['set_based_floor']['per_second']} |"
            f" {load['ratio_to_floor']}x |"
            f" {load['cpu_seconds']['service']}, {load['cpu_seconds']['postgres']} |"
            f" {_embedded(load['variant'], embedded)} |"
            f" {load['load_average'][0]}, {load['load_average'][1]} |"
        )
    print_report(lines, note=arguments.note)
    return 0


@contextmanager
def _load_database(arguments: argparse.Namespace, settings: Settings, name: str) -> Iterator[str]:
    """The database one load runs in: a fresh one on the server of ``CB_DATABASE_URL`` (the default:
    after an earlier load and its floor measurement in one database, a load was at times 1.5-2.8x
    slower, bench/RESULTS.md (git history)), or, with ``--same-database``, the run's database itself (every
    load next to the earlier ones; also with ``--shared-database``, which measures next to what that
    database holds)."""
    if arguments.same_database:
        yield settings.database_url
        return
    with fresh_database(settings.database_url, name) as url:
        previous = os.environ.get("CB_DATABASE_URL")
        os.environ["CB_DATABASE_URL"] = url
        try:
            yield url
        finally:
            if previous is None:
                os.environ.pop("CB_DATABASE_URL", None)
            else:
                os.environ["CB_DATABASE_URL"] = previous


def _measured_load(
    arguments: argparse.Namespace,
    name: str,
    round_: int,
    root: Path,
    environment: dict[str, str],
    namespace: str,
    url: str,
) -> dict[str, Any]:
    """One load of the corpus into ``namespace`` of the database ``url`` by a fresh service of ``root``:
    the load's figures, its CPU time, the set-based floor and (all variants but inline) the embedding
    wait."""
    observations = debian_observations(namespace)
    with ingest_service(root, environment) as (address, pid):
        channel = grpc.insecure_channel(address, options=[("grpc.max_send_message_length", 64 << 20)])
        stub = observation_service_pb2_grpc.ObservationServiceStub(channel)
        load_start = load_average()
        service_cpu, database_cpu = cpu_seconds(pid), postgres_cpu_seconds()
        load = load_observations(stub, observations, concurrency=DEFAULT_OBSERVE_CONCURRENCY)
        load["cpu_seconds"] = {
            "service": round(cpu_seconds(pid) - service_cpu, 2),
            "postgres": round(postgres_cpu_seconds() - database_cpu, 2),
        }
        load["variant"], load["round"] = name, round_
        load["load_average"] = [load_start, load_average()]
        floor = set_based_floor(url, namespace)
        floor["per_second"] = round(len(observations) / floor["seconds"], 1)
        load["set_based_floor"] = floor
        load["ratio_to_floor"] = round(load["seconds"] / floor["seconds"], 2)
        if name != "inline":
            try:
                load["embedding"] = wait_for_embeddings(
                    stub, namespace, limit_seconds=arguments.embedding_wait
                )
            except grpc.RpcError as error:  # a base from before the background embedder
                if error.code() != grpc.StatusCode.UNIMPLEMENTED:
                    raise
        channel.close()
    if arguments.same_database:  # the next load shares this database
        abandon_backlog(url, namespace)  # the service has stopped: its embedder holds no claim
    return load


def abandon_backlog(url: str, namespace: str) -> None:
    """Takes what is left of ``namespace``'s embedding backlog off it, so the next variant's embedder in
    the same database (``--same-database``) starts from an empty backlog (it claims the oldest pending
    chunks of every namespace first: without this, a variant would spend its load embedding the previous
    variant's rest)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            psycopg.sql.SQL(
                "UPDATE {} SET embedding_pending = false WHERE namespace = %s AND embedding_pending"
            ).format(psycopg.sql.Identifier(Settings().chunks_table)),
            (namespace,),
        )


def _embedded(variant: str, embedding: dict[str, Any] | None) -> str:
    """The embedding column of a run: the wait, the backlog at the end of the load and what was left."""
    if embedding is None:
        return {"inline": "in the write", "base": "never (a base without GetEmbeddingBacklog)"}.get(
            variant, ""
        )
    return (
        f"{embedding['backlog_at_end_of_load']} pending; {embedding['embedded_per_second']}/s for"
        f" {embedding['seconds_until_embedded']} s, {embedding['left_pending']} left"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description="Observation ingest A/B (see the module doc).")
    parser.add_argument("--base-root", default="", help="checkout whose services are the baseline")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--note", default="")
    parser.add_argument(
        "--embedding-wait", type=float, default=120, help="longest wait (s) for the backlog after a load"
    )
    parser.add_argument(
        "--shared-database",
        action="store_true",
        help="measure in CB_DATABASE_URL itself, every load in it (implies --same-database)",
    )
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        help="an extra variant of this checkout: NAME=VAR:VALUE;VAR:VALUE (environment of its service)",
    )
    parser.add_argument("--without-inline", action="store_true", help="leave the inline variant out")
    parser.add_argument(
        "--same-database",
        action="store_true",
        help="every load in the run's one database (default: each load in a fresh database of its own)",
    )
    arguments = parser.parse_args()
    arguments.same_database = arguments.same_database or arguments.shared_database
    started = time.perf_counter()
    code = run_in_database(run, arguments, "memory_ingest")
    print(f"run time {time.perf_counter() - started:.0f} s")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
