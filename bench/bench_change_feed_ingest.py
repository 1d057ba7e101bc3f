"""The write path's cost of the change feed, in process: outbox on against off, interleaved.

`bench/bench_ingest.py` (services as processes, 4 calls in flight) measures the same through gRPC, but on
a machine shared with other work its wall times move by more than the difference looked for. Here one
thread records the debian upload stream (5,415 observations, batches of 200) through
`ObservationRecorder.record_batch`, the service's write path without gRPC, into a fresh namespace, once
per arm and round, ``--rounds`` rounds, the arms' order rotated and reversed from round to round. Every
load runs in its own copy of one migrated, empty database (a load into the tables earlier loads grew
costs more, with the feed on or off, than the difference looked for). The arms (``--arms``):

* ``off``: ``options=-c memory.change_feed=off`` on the load's connections (nothing recorded);
* ``on``: the triggers as the migrations of this checkout leave them;
* ``on-0034``: the triggers as migration 0034 wrote them (its script re-run on the copy: undoes 0037),
  the cost before migration 0037.

Reported per load and as medians per arm: the wall time, this process's CPU time and the CPU time of the
PostgreSQL backends of the load's database (where the triggers and the numbering run), both also per
observation, and each arm's ratio to ``off``. Written to bench/results/change-feed-ingest-<UTC time>.json
with the load average (1, 5, 15 minutes) at the end of each load.

Usage: .venv/bin/python bench/bench_change_feed_ingest.py [--rounds 3] [--arms off,on,on-0034] [--note TEXT]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
from google.protobuf import json_format
from psycopg import sql

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.corpus_loading import debian_observations
from bench.run_bench import fresh_database
from bench.service_results import cpu_seconds
from common.kernel.config import Settings
from common.packs.kind_validation import KindValidator
from common.storage.database import Database
from common.storage.schema import migrations
from common.storage.tables import query_placeholders
from common.text_models.embeddings.factory import build_embedding_provider
from ingest_service.observations.recorder import ObservationRecorder

BATCH = 200
OBSERVATIONS = 5415
ARMS = ("off", "on", "on-0034")
KEYS = ("seconds", "cpu_seconds", "postgres_cpu_seconds", "cpu_ms_per_observation")


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
        return {
            "seconds": seconds,
            "cpu_seconds": process,
            "postgres_cpu_seconds": backends,
            # the write path's CPU per observation: this process (validation, embedding) and the backends
            "cpu_ms_per_observation": 1000 * (process + backends) / OBSERVATIONS,
            "postgres_cpu_ms_per_observation": 1000 * backends / OBSERVATIONS,
        }
    finally:
        database.close()


@contextmanager
def copied_database(base_url: str, template: str, name: str) -> Iterator[str]:
    """A copy of the migrated database ``template``, dropped at the end."""
    source = psycopg.conninfo.conninfo_to_dict(template)["dbname"]
    with psycopg.connect(base_url, autocommit=True) as admin:
        admin.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name), sql.Identifier(source))
        )
    try:
        yield psycopg.conninfo.make_conninfo(base_url, dbname=name)
    finally:
        with psycopg.connect(base_url, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def restore_0034(url: str, settings: Settings) -> None:
    """Re-runs migration 0034's script on the database of ``url``: its trigger functions replace those of
    later migrations."""
    script = (ROOT / "common" / "storage" / "sql" / "0034_change_feed.sql").read_text("utf-8")
    with psycopg.connect(url, autocommit=True) as conn, conn.transaction():
        conn.execute(sql.SQL(script).format(**query_placeholders(settings)))  # type: ignore[arg-type]


def summary(note: str, names: list[str], loads: list[dict[str, Any]]) -> dict[str, Any]:
    """The run's JSON: every load, the medians per arm and each arm's ratio to ``off``."""
    done = [name for name in names if any(x["arm"] == name for x in loads)]
    medians = {
        arm: {key: round(statistics.median(x[key] for x in loads if x["arm"] == arm), 3) for key in KEYS}
        for arm in done
    }
    return {
        "time": datetime.now(UTC).isoformat(),
        "note": note,
        "observations": OBSERVATIONS,
        "batch": BATCH,
        "cpu_count": os.cpu_count(),
        "arms": names,
        "loads": loads,
        "median": medians,
        "ratio_to_off": {
            arm: {key: round(medians[arm][key] / medians["off"][key], 3) for key in KEYS}
            for arm in done
            if "off" in medians
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(description="Outbox on/off in the write path (see the module doc).")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--arms", default=",".join(ARMS), help="comma-separated, from the module doc")
    parser.add_argument("--note", default="")
    arguments = parser.parse_args()
    names = arguments.arms.split(",")
    unknown = [name for name in names if name not in ARMS]
    if unknown:
        parser.error(f"unknown arms {unknown}")
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    base = os.environ.get("CB_DATABASE_URL", Settings().database_url)
    out = ROOT / "bench" / "results" / f"change-feed-ingest-{stamp}.json"
    loads: list[dict[str, Any]] = []
    with fresh_database(base, f"memory_feedcost_{stamp.lower()}") as template:
        settings = Settings().model_copy(update={"database_url": template})
        provider = build_embedding_provider(settings)
        provider.load()
        database = Database(settings, embedding_model=provider.model_id)
        migrations.apply(database)
        database.close()
        for round_ in range(1, arguments.rounds + 1):
            shift = (round_ - 1) % len(names)
            arms = names[shift:] + names[:shift]
            if round_ % 2 == 0:
                arms.reverse()
            for name in arms:
                copy = f"memory_feedcost_{stamp.lower()}_{name.replace('-', '_')}_{round_}"
                with copied_database(base, template, copy) as url:
                    on = settings.model_copy(update={"database_url": url})
                    if name == "on-0034":
                        restore_0034(url, on)
                    if name == "off":
                        off_url = psycopg.conninfo.make_conninfo(url, options="-c memory.change_feed=off")
                        on = on.model_copy(update={"database_url": off_url})
                    measured = load(on, provider, f"cost-{name}", url)
                loads.append({"arm": name, "round": round_, "load_average": os.getloadavg(), **measured})
                print(json.dumps(loads[-1]), flush=True)
                out.write_text(json.dumps(summary(arguments.note, names, loads), indent=2) + "\n")
    result = summary(arguments.note, names, loads)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["median"], indent=2), json.dumps(result["ratio_to_off"], indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
