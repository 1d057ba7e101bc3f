"""Asynchronous enrichment of memories, through gRPC against real service processes and
a real ``cb worker`` process.

Measures, in one run, in a fresh database (`run_bench.run_in_database`, dropped afterwards), on the
contents of the debian uploads corpus (real changelog texts) added as memories of one user:

* the floor: the rule enricher alone (`RuleEnricher.enrich`, models loaded) on the same texts in this
  process, memories/s, measured before and after the worker runs (the machine is shared: their spread
  shows the noise);
* worker throughput: ``--memories`` memories added by ``AddMemories`` (batches of 100) while no worker
  runs (their jobs wait in the queue), then ``cb worker --concurrency C`` started: memories/s from the
  first enrichment to the last (the rows' ``updated_at``, written by the job), the worker's start-up
  (model loading) left out; reported as the ratio to the floor;
* enrichment lag under a steady add rate: with the worker running, one memory per ``AddMemories`` call
  at ``--rate`` per second for ``--seconds``; lag = the row's ``updated_at`` when enriched minus its
  ``created_at`` (both written by this machine's clock: the ingest service at the add, the worker at the
  enrichment): p50 / p95 / max; and from the moment ``AddMemories`` answered (the bench's clock, the same
  machine's), which leaves out the add's own embedding and commit;
* CPU per enriched memory in the throughput step: the worker process plus the PostgreSQL backends of
  the bench's database (`/proc`), from the first enrichment seen to the last, per memory enriched in
  between; next to it the floor's CPU per memory (this process, the enricher alone);
* the load average (1 min) at each step.

Results: printed, written to bench/results/enrichment-<UTC time>.json.

Usage: ``.venv/bin/python bench/bench_enrichment.py [--memories N] [--rate R] [--seconds S]
[--concurrency C] [--note TEXT] [--shared-database]`` (the database must be up: ``make db``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import grpc
import psycopg

from bench.bench_change_feed_ingest import backend_cpu
from bench.corpus_loading import UPLOADS
from bench.run_bench import add_run_options
from bench.run_bench import percentiles
from bench.run_bench import run_in_database
from bench.run_bench import services
from bench.service_results import cpu_seconds
from bench.service_results import heading
from bench.service_results import load_average
from bench.service_results import machine
from bench.service_results import print_report
from bench.service_results import write_json
from common.kernel.config import Settings
from ingest_service.memories.enrichment.language_models import load_models
from ingest_service.memories.enrichment.model import MemoryText
from ingest_service.memories.enrichment.rule_enricher import RuleEnricher
from memory_service_grpc_client.memory.v1 import memory_service_pb2
from memory_service_grpc_client.memory.v1 import memory_service_pb2_grpc

BATCH = 100


def corpus_texts() -> list[str]:
    """The distinct non-empty contents of the debian observations, in file order."""
    seen: dict[str, None] = {}
    with (UPLOADS / "observations.jsonl").open(encoding="utf-8") as lines:
        for line in lines:
            text = str(json.loads(line).get("content") or "").strip()
            if text:
                seen.setdefault(text, None)
    return list(seen)


def floor(texts: list[str]) -> dict[str, float]:
    enricher = RuleEnricher()
    load = load_average()
    started, cpu = time.perf_counter(), time.process_time()
    for text in texts:
        enricher.enrich(MemoryText(text))
    seconds = time.perf_counter() - started
    cpu_ms = (time.process_time() - cpu) * 1000 / max(1, len(texts))
    return {
        "per_second": round(len(texts) / seconds, 1),
        "seconds": round(seconds, 2),
        "cpu_ms_per_memory": round(cpu_ms, 2),
        "load": load,
    }


def add(stub: Any, user: str, texts: list[str], key_prefix: str) -> list[str]:
    ids = []
    for start in range(0, len(texts), BATCH):
        request = memory_service_pb2.AddMemoriesRequest(
            user_id=user,
            memories=[
                memory_service_pb2.NewMemory(text=text, idempotency_key=f"{key_prefix}-{start + i}")
                for i, text in enumerate(texts[start : start + BATCH])
            ],
        )
        response = stub.AddMemories(request, timeout=600)
        ids.extend(result.memory_id for result in response.results)
    return ids


def enrichment_times(url: str, ids: list[str]) -> dict[str, tuple[float, float | None]]:
    """memory_id -> (created_at, updated_at when enriched else None), epoch seconds."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT memory_id, extract(epoch FROM created_at),"
            " CASE WHEN enriched_version >= version THEN extract(epoch FROM updated_at) END"
            " FROM memories WHERE memory_id = ANY(%s)",
            (ids,),
        ).fetchall()
    return {str(r[0]): (float(r[1]), None if r[2] is None else float(r[2])) for r in rows}


def wait_enriched(
    url: str, ids: list[str], limit_s: float, at_least: int | None = None
) -> dict[str, tuple[float, float | None]]:
    """The enrichment times once all of ``ids`` (or ``at_least`` of them) are enriched, or at the limit."""
    deadline = time.monotonic() + limit_s
    wanted = len(ids) if at_least is None else at_least
    while True:
        times = enrichment_times(url, ids)
        done = sum(1 for i in ids if times.get(i, (0.0, None))[1] is not None)
        if done >= wanted or time.monotonic() > deadline:
            return times
        time.sleep(0.5 if at_least is None else 0.05)


def start_worker(concurrency: int, url: str) -> subprocess.Popen[bytes]:
    env = dict(os.environ, CB_DATABASE_URL=url, CB_LOG_LEVEL="WARNING")
    return subprocess.Popen(
        [sys.executable, "-m", "memory_service_tools.cli", "worker", "--concurrency", str(concurrency)],
        cwd=ROOT,
        env=env,
    )


def run(arguments: argparse.Namespace, stamp: str) -> int:
    settings = Settings()
    url = settings.database_url
    texts = corpus_texts()
    throughput_texts = texts[: arguments.memories]
    lag_count = int(arguments.rate * arguments.seconds)
    lag_texts = texts[arguments.memories : arguments.memories + lag_count]
    load_models()
    floor_before = floor(throughput_texts)
    print(f"floor before: {floor_before}", flush=True)
    results: dict[str, Any] = {"time": stamp, "machine": machine(), "note": arguments.note}
    worker: subprocess.Popen[bytes] | None = None
    with services() as (ingest_addr, _query_addr), grpc.insecure_channel(ingest_addr) as channel:
        stub = memory_service_pb2_grpc.MemoryServiceStub(channel)
        user = "bench-user"
        load_add = load_average()
        started = time.perf_counter()
        ids = add(stub, user, throughput_texts, "throughput")
        add_seconds = time.perf_counter() - started
        print(f"added {len(ids)} memories in {add_seconds:.1f} s", flush=True)
        try:
            load_worker = load_average()
            worker = start_worker(arguments.concurrency, url)
            # CPU from the first enrichment on (the worker's start-up, model loading, left out)
            first = wait_enriched(url, ids, limit_s=600, at_least=1)
            done_first = sum(1 for _, t in first.values() if t is not None)
            cpu_first = cpu_seconds(worker.pid), backend_cpu(url)
            times = wait_enriched(url, ids, limit_s=3600)
            cpu_last = cpu_seconds(worker.pid), backend_cpu(url)
            enriched = sorted(t for _, t in times.values() if t is not None)
            span = enriched[-1] - enriched[0] if len(enriched) > 1 else float("nan")
            measured = max(1, len(enriched) - done_first)
            worker_cpu = cpu_last[0] - cpu_first[0]
            database_cpu = sum(c - cpu_first[1].get(pid, 0.0) for pid, c in cpu_last[1].items())
            results["throughput"] = {
                "memories": len(ids),
                "enriched": len(enriched),
                "concurrency": arguments.concurrency,
                "seconds_first_to_last": round(span, 2),
                "per_second": round((len(enriched) - 1) / span, 1),
                "worker_cpu_ms_per_memory": round(worker_cpu * 1000 / measured, 2),
                "database_cpu_ms_per_memory": round(database_cpu * 1000 / measured, 2),
                "load_before": load_worker,
                "load_after": load_average(),
                "add_seconds": round(add_seconds, 2),
                "add_load": load_add,
            }
            print(f"throughput: {results['throughput']}", flush=True)
            # steady adds, one memory per call
            load_lag = load_average()
            lag_ids: list[str] = []
            answered: dict[str, float] = {}  # memory_id -> when AddMemories returned (epoch seconds)
            interval = 1.0 / arguments.rate
            next_at = time.perf_counter()
            for index, text in enumerate(lag_texts):
                next_at += interval
                (memory_id,) = add(stub, user, [text], f"lag-{index}")
                answered[memory_id] = time.time()
                lag_ids.append(memory_id)
                time.sleep(max(0.0, next_at - time.perf_counter()))
            times = wait_enriched(url, lag_ids, limit_s=600)
            lags = [(t - c) * 1000 for c, t in times.values() if t is not None]
            after_answer = [(times[i][1] - answered[i]) * 1000 for i in lag_ids if times[i][1] is not None]
            summary = percentiles(lags)
            answer_summary = percentiles(after_answer)
            results["lag"] = {
                "rate_per_second": arguments.rate,
                "seconds": arguments.seconds,
                "memories": len(lag_ids),
                "enriched": len(lags),
                "p50_s": round(summary["p50_ms"] / 1000, 3),
                "p95_s": round(summary["p95_ms"] / 1000, 3),
                "max_s": round(max(lags) / 1000, 3),
                "after_response_p50_s": round(answer_summary["p50_ms"] / 1000, 3),
                "after_response_p95_s": round(answer_summary["p95_ms"] / 1000, 3),
                "load_before": load_lag,
                "load_after": load_average(),
            }
            print(f"lag: {results['lag']}", flush=True)
        finally:
            if worker is not None:
                worker.send_signal(signal.SIGTERM)
                worker.wait(120)
    floor_after = floor(throughput_texts)
    results["floor"] = {"before": floor_before, "after": floor_after}
    best_floor = max(floor_before["per_second"], floor_after["per_second"])
    results["throughput"]["ratio_to_floor"] = round(results["throughput"]["per_second"] / best_floor, 3)
    write_json(results, prefix="enrichment")
    throughput, lag = results["throughput"], results["lag"]
    lines = [
        heading(results),
        "",
        (
            "Enrichment of memories (`bench/bench_enrichment.py`): debian changelog texts added"
            " as memories by `AddMemories` (a `cb serve ingest` process, fresh database), enriched by a"
            " `cb worker` process (procrastinate on the same PostgreSQL, rule enricher); floor = the rule"
            " enricher alone on the same texts in the bench process, before and after."
        ),
        *([f"Note: {arguments.note}"] if arguments.note else []),
        "",
        "| measure | figure | load avg (1 min) |",
        "|---|---|---|",
        (
            f"| worker throughput ({throughput['memories']} memories queued, concurrency"
            f" {throughput['concurrency']}, first to last enrichment) | {throughput['per_second']} memories/s"
            f" ({throughput['seconds_first_to_last']} s) | {throughput['load_before']} -> {throughput['load_after']} |"
        ),
        (
            f"| floor: the rule enricher alone, before / after | {floor_before['per_second']} /"
            f" {floor_after['per_second']} memories/s | {floor_before['load']} / {floor_after['load']} |"
        ),
        f"| worker / best floor | {throughput['ratio_to_floor']} | |",
        (
            f"| CPU per enriched memory: worker + database / the enricher alone (floor, before) |"
            f" {throughput['worker_cpu_ms_per_memory']} + {throughput['database_cpu_ms_per_memory']} ms /"
            f" {floor_before['cpu_ms_per_memory']} ms | |"
        ),
        (
            f"| enrichment lag, {lag['memories']} memories at {lag['rate_per_second']}/s (one per AddMemories),"
            f" from the add (created_at) | p50 {lag['p50_s']} s, p95 {lag['p95_s']} s, max {lag['max_s']} s |"
            f" {lag['load_before']} -> {lag['load_after']} |"
        ),
        (
            f"| the same lag from AddMemories' response | p50 {lag['after_response_p50_s']} s,"
            f" p95 {lag['after_response_p95_s']} s | |"
        ),
        (
            f"| AddMemories of the {throughput['memories']} (batches of {BATCH}, embedding included) |"
            f" {throughput['add_seconds']} s | {throughput['add_load']} |"
        ),
    ]
    print_report(lines)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description="Enrichment benchmark (see the module doc).")
    parser.add_argument("--memories", type=int, default=1000, help="memories queued for the throughput")
    parser.add_argument("--rate", type=float, default=2.0, help="memories added per second for the lag")
    parser.add_argument("--seconds", type=float, default=60.0, help="how long the steady adds last")
    parser.add_argument("--concurrency", type=int, default=4, help="cb worker --concurrency (its default)")
    add_run_options(parser, "a line added to the entry", shared_help="measure in CB_DATABASE_URL itself")
    return run_in_database(run, parser.parse_args(), "memory_bench_enrichment")


if __name__ == "__main__":
    raise SystemExit(main())
