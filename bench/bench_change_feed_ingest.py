"""The write path's cost of the change feed, in process: outbox on against off, interleaved.

`bench/bench_ingest.py` (services as processes, 4 calls in flight) measures the same through gRPC, but on
a machine shared with other work its wall times move by more than the difference looked for. Here one
thread records the debian upload stream (5,415 observations, batches of 200) through
`ObservationRecorder.record_batch`, the service's write path without gRPC, into a fresh namespace of a
fresh database, alternately with the feed on and off (``options=-c memory.change_feed=off`` on the
connections of the off arm), ``--rounds`` times each, the order of the two arms swapped every round.
Reported per arm: the wall time, this process's CPU time and the CPU time of the PostgreSQL backends of
the load's database (where the triggers and the numbering run) of each load, their medians, and the
ratio on to off. Written to bench/results/change-feed-ingest-<UTC time>.json with the load average.

Usage: .venv/bin/python bench/bench_change_feed_ingest.py [--rounds 3] [--note TEXT]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
from google.protobuf import json_format

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.run_bench import debian_observations, fresh_database
from bench.service_results import cpu_seconds
from common.kernel.config import Settings
from common.packs.kind_validation import KindValidator
from common.storage.database import Database
from common.storage.schema import migrations
from common.text_models.embeddings.factory import build_embedding_provider
from ingest_service.observations.recorder import ObservationRecorder

BATCH = 200


def backend_cpu(url: str) -> dict[int, float]:
    """CPU seconds used so far by each PostgreSQL backend connected to the database of ``url``."""
    with psycopg.connect(url, autocommit=True) as conn:
        pids = [
            int(row[0])
            for row in conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        ]
    return {pid: cpu_seconds(pid) for pid in pids}


def load(settings: Settings, provider: Any, namespace: str, url: str) -> dict[str, float]:
    database = Database(settings, embedding_model=provider.model_id)
    try:
        recorder = ObservationRecorder(database, encoder=provider, kinds=KindValidator(database))
        raw = [
            json_format.MessageToDict(o, preserving_proto_field_name=True)
            for o in debian_observations(namespace)
        ]
        database.ensure_ready()
        before = backend_cpu(url)
        wall, cpu = time.perf_counter(), time.process_time()
        for start in range(0, len(raw), BATCH):
            recorder.record_batch(raw[start : start + BATCH])
        seconds, process = time.perf_counter() - wall, time.process_time() - cpu
        after = backend_cpu(url)
        backends = sum(value - before.get(pid, 0.0) for pid, value in after.items())
        return {"seconds": seconds, "cpu_seconds": process, "postgres_cpu_seconds": backends}
    finally:
        database.close()


def main() -> int:
    parser = argparse.ArgumentParser(description="Outbox on/off in the write path (see the module doc).")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--note", default="")
    arguments = parser.parse_args()
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    base = os.environ.get("CB_DATABASE_URL", Settings().database_url)
    loads: list[dict[str, Any]] = []
    with fresh_database(base, f"memory_feedcost_{stamp.lower()}") as url:
        on = Settings().model_copy(update={"database_url": url})
        off_url = psycopg.conninfo.make_conninfo(url, options="-c memory.change_feed=off")
        off = on.model_copy(update={"database_url": off_url})
        provider = build_embedding_provider(on)
        provider.load()
        migrations.apply(Database(on, embedding_model=provider.model_id))
        for round_ in range(1, arguments.rounds + 1):
            arms = [("off", off), ("on", on)] if round_ % 2 else [("on", on), ("off", off)]
            for name, settings in arms:
                measured = load(settings, provider, f"cost-{name}-{round_}", url)
                loads.append({"arm": name, "round": round_, "load_average": os.getloadavg(), **measured})
                print(json.dumps(loads[-1]), flush=True)
    medians = {
        arm: {
            key: round(statistics.median(x[key] for x in loads if x["arm"] == arm), 2)
            for key in ("seconds", "cpu_seconds", "postgres_cpu_seconds")
        }
        for arm in ("on", "off")
    }
    result = {
        "time": datetime.now(UTC).isoformat(),
        "note": arguments.note,
        "observations": 5415,
        "batch": BATCH,
        "cpu_count": os.cpu_count(),
        "loads": loads,
        "median": medians,
        "ratio_on_to_off": {
            key: round(medians["on"][key] / medians["off"][key], 3)
            for key in ("seconds", "cpu_seconds", "postgres_cpu_seconds")
        },
    }
    out = ROOT / "bench" / "results" / f"change-feed-ingest-{stamp}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
