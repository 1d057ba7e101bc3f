"""Snapshot reconciliation at scale (issue 4 §3): SnapshotService.Reconcile's domain in-process on the real
database, with a synthetic "current version per package" snapshot of ``--items`` items (half entities
``bench_package:pNNNNNN`` with attributes, half BENCH_HAS_VERSION facts package -> version). The labels are
the bench's own: the run is one long transaction, and a writer elsewhere that first touches a label
(``GraphStore.ensure_label`` creates its indexes) would wait for it.

Runs, in a fresh namespace (no packs), one reconciliation each:

* ``initial``: everything new (entities created, facts created);
* ``same-content``: the same state under a new snapshot_id (everything unchanged);
* ``changed``: 10 % of the packages dropped (their facts closed), 10 % with changed attributes.

For each: wall seconds, items/s, the counts, and the process's peak RSS after the run (``ru_maxrss``),
so memory growth across runs is visible. The results, with a description of the machine and its load,
are printed and appended to ``bench/results/reconcile.json`` (a JSON list, one object per run).

Usage: ``.venv/bin/python bench/bench_reconcile.py [--items 100000]`` (the database must be up: ``make db``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import resource
import sys
import time
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from common.config import Settings
from common.db import Database
from ingest_service.snapshots import SnapshotReconciler

RESULTS = ROOT / "bench" / "results" / "reconcile.json"


def snapshot(packages: int, *, drop_every: int = 0, change_every: int = 0) -> tuple[list[Any], list[Any]]:
    entities, facts = [], []
    for index in range(packages):
        if drop_every and index % drop_every == 0:
            continue
        section = "changed" if change_every and index % change_every == 1 else "libs"
        key = f"bench_package:p{index:06d}"
        entities.append({"key": key, "attributes": {"section": section, "priority": "optional"}})
        facts.append(
            {
                "subject": key,
                "predicate": "BENCH_HAS_VERSION",
                "object": f"bench_version:p{index:06d}@1.{index % 7}",
                "valid_from": "2025-01-01T00:00:00Z",
                "attributes": {"suite": "trixie", "section": section},
            }
        )
    return entities, facts


def max_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args()
    packages = args.items // 2
    settings = Settings()
    database = Database(settings)
    database.migrate()
    reconciler = SnapshotReconciler(database)
    namespace = "bench-reconcile-" + uuid.uuid4().hex[:8]
    runs = []
    plans = [
        ("initial", "s1", dt.datetime(2026, 1, 1, tzinfo=dt.UTC), {}),
        ("same-content", "s2", dt.datetime(2026, 2, 1, tzinfo=dt.UTC), {}),
        ("changed", "s3", dt.datetime(2026, 3, 1, tzinfo=dt.UTC), {"drop_every": 10, "change_every": 10}),
    ]
    for name, snapshot_id, at, shape in plans:
        entities, facts = snapshot(packages, **shape)
        items = len(entities) + len(facts)
        started = time.perf_counter()
        result = reconciler.reconcile(namespace, "bench", "suite:trixie", snapshot_id, at, entities, facts)
        seconds = time.perf_counter() - started
        del entities, facts
        run = {
            "run": name,
            "items": items,
            "seconds": round(seconds, 2),
            "items_per_second": round(items / seconds, 1),
            "counts": asdict(result.counts),
            "max_rss_mib": round(max_rss_mib(), 1),
        }
        print(json.dumps(run), flush=True)
        runs.append(run)
    database.close()
    record = {
        "time": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "items": args.items,
        "namespace": namespace,
        "runs": runs,
        "machine": {
            "cpus": os.cpu_count(),
            "load_average": os.getloadavg(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
    }
    args.results.parent.mkdir(parents=True, exist_ok=True)
    existing: list[Any] = json.loads(args.results.read_text()) if args.results.exists() else []
    existing.append(record)
    args.results.write_text(json.dumps(existing, ensure_ascii=False, indent=2) + "\n")
    print(f"appended to {args.results}")


if __name__ == "__main__":
    main()
