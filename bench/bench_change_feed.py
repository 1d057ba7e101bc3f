"""Change feed delivery while the debian corpus loads: stream subscribers and webhook receivers.

Starts `cb serve ingest`, `cb serve query` and `cb worker` (webhook dispatch and delivery) as processes on
a fresh database (`run_bench.services`), ``--subscribers`` WatchChanges streams
(one process and gRPC channel each) and ``--receivers`` webhook subscriptions to `http.server` receivers on loopback,
then loads the debian upload stream (5,415 observations, batches of 200, 4 calls in flight, as `cb
observe`). Every subscriber and receiver collects each change's receipt time; the lag of a change is its
receipt time minus its commit time (``commit_time`` of the stream message, ``time`` of the CloudEvent: the
numbering at commit, same clock). Throughput is changes received per second from the first to the last.
Written to bench/results/change-feed-<UTC time>.json with the load average.

Usage: .venv/bin/python bench/bench_change_feed.py [--subscribers 10] [--receivers 3] [--note TEXT]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import threading
import time
from datetime import UTC
from datetime import datetime
from http.server import BaseHTTPRequestHandler
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import grpc
import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.corpus_loading import debian_observations
from bench.corpus_loading import load_observations
from bench.run_bench import fresh_database
from bench.run_bench import percentiles
from bench.run_bench import services
from bench.service_results import write_json
from common.kernel.config import Settings
from memory_service_grpc_client.memory.v1 import change_feed_service_pb2
from memory_service_grpc_client.memory.v1 import change_feed_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import observation_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import webhook_service_pb2
from memory_service_grpc_client.memory.v1 import webhook_service_pb2_grpc


def subscribe(address: str, namespace: str, target: Any, results: Any) -> None:
    """One WatchChanges stream in a process of its own (so receipt times do not wait for this process's
    GIL); puts its (cursor, lag seconds, receipt time) samples on ``results`` once ``target.value``
    (the last cursor, 0 until the load ends) is reached or the stream ends."""
    samples: list[tuple[int, float, float]] = []
    with grpc.insecure_channel(address) as channel:
        stub = change_feed_service_pb2_grpc.ChangeFeedServiceStub(channel)
        stream = stub.WatchChanges(
            change_feed_service_pb2.WatchChangesRequest(namespace=namespace, heartbeat_seconds=1)
        )
        try:
            for response in stream:
                if response.HasField("change"):
                    now = time.time()
                    committed = response.change.commit_time.ToDatetime(tzinfo=UTC).timestamp()
                    samples.append((response.change.cursor, now - committed, now))
                    cursor = response.change.cursor
                else:
                    cursor = response.heartbeat.cursor
                if target.value and cursor >= target.value:
                    break
        except grpc.RpcError:
            pass
        finally:
            stream.cancel()
    results.put(samples)


class Receivers:
    """HTTP receivers on loopback, one path each; records (event id, lag, receipt time) per first receipt."""

    def __init__(self, count: int) -> None:
        self.samples: dict[str, list[tuple[str, float, float]]] = {f"/r{i}": [] for i in range(count)}
        self.seen: dict[str, set[str]] = {path: set() for path in self.samples}
        self.lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                now = time.time()
                event = json.loads(body)
                committed = datetime.fromisoformat(event["time"]).timestamp()
                with owner.lock:
                    if event["id"] not in owner.seen[self.path]:
                        owner.seen[self.path].add(event["id"])
                        owner.samples[self.path].append((event["id"], now - committed, now))
                self.send_response(204)
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"


def summary(lags: list[float], times: list[float]) -> dict[str, Any]:
    span = (max(times) - min(times)) if len(times) > 1 else 0.0
    return {
        "received": len(lags),
        "lag_ms": percentiles([lag * 1000 for lag in lags]),
        "per_second": round(len(lags) / span, 1) if span else None,
    }


def run(arguments: argparse.Namespace, url: str) -> dict[str, Any]:
    os.environ["CB_DATABASE_URL"] = url
    namespace = "feed-bench"
    observations = debian_observations(namespace)
    receivers = Receivers(arguments.receivers)
    allowed = {
        "CB_WEBHOOK_ALLOWED_TARGETS": json.dumps(["127.0.0.1"]),
        "CB_WEBHOOK_RETRY_WAIT_SECONDS": "0.5",
    }
    # The worker in a process of its own, as in production (`cb worker`): here it would share this
    # process's GIL with the subscribers and receivers whose receipt times are measured.
    worker = subprocess.Popen(
        [sys.executable, "-m", "memory_service_tools.cli", "worker", "--concurrency", "4"],
        cwd=ROOT,
        env={**os.environ, **allowed},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    with services(extra_env=allowed) as (ingest_addr, query_addr):
        with grpc.insecure_channel(ingest_addr) as channel:
            hooks = webhook_service_pb2_grpc.WebhookServiceStub(channel)
            for path in receivers.samples:
                hooks.CreateWebhookSubscription(
                    webhook_service_pb2.CreateWebhookSubscriptionRequest(
                        namespace=namespace, target_url=receivers.url(path)
                    ),
                    timeout=30,
                )
            context = multiprocessing.get_context("spawn")
            target, results = context.Value("q", 0), context.Queue()
            subscribers = [
                context.Process(target=subscribe, args=(query_addr, namespace, target, results))
                for _ in range(arguments.subscribers)
            ]
            for subscriber in subscribers:
                subscriber.start()
            time.sleep(5)
            load_before = os.getloadavg()
            load = load_observations(
                observation_service_pb2_grpc.ObservationServiceStub(channel), observations, concurrency=4
            )
        with psycopg.connect(url) as conn:
            row = conn.execute(
                "SELECT last_cursor FROM change_feed_heads WHERE namespace = %s", (namespace,)
            ).fetchone()
        total = int(row[0]) if row else 0
        target.value = total
        streams = [results.get(timeout=arguments.drain_seconds) for _ in subscribers]
        for subscriber in subscribers:
            subscriber.join(30)
        deadline = time.monotonic() + arguments.drain_seconds
        while time.monotonic() < deadline and any(
            len(samples) < total for samples in receivers.samples.values()
        ):
            time.sleep(0.5)
    worker.terminate()
    worker.wait(60)
    stream_lags = [lag for samples in streams for _, lag, _ in samples]
    stream_times = [at for samples in streams for _, _, at in samples]
    hook_lags = [lag for samples in receivers.samples.values() for _, lag, _ in samples]
    hook_times = [at for samples in receivers.samples.values() for _, _, at in samples]
    return {
        "time": datetime.now(UTC).isoformat(),
        "note": arguments.note,
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "cpu_count": os.cpu_count(),
        "observations": len(observations),
        "load": load,
        "changes": total,
        "subscribers": arguments.subscribers,
        "receivers": arguments.receivers,
        "streams": summary(stream_lags, stream_times),
        "streams_each_received": [len(samples) for samples in streams],
        "webhooks": summary(hook_lags, hook_times),
        "webhooks_each_received": [len(samples) for samples in receivers.samples.values()],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description="Change feed delivery under load (see the module doc).")
    parser.add_argument("--subscribers", type=int, default=10)
    parser.add_argument("--receivers", type=int, default=3)
    parser.add_argument("--drain-seconds", type=float, default=300, help="longest wait for the stragglers")
    parser.add_argument("--note", default="")
    arguments = parser.parse_args()
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    base = os.environ.get("CB_DATABASE_URL", Settings().database_url)
    with fresh_database(base, f"memory_feed_{stamp.lower()}") as url:
        result = run(arguments, url)
    write_json(result, prefix="change-feed", stamp=stamp)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
