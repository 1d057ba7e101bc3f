"""Snapshot reconciliation at scale ("a snapshot of 100k items reconciles in bounded memory
(streamed), measured in bench"): SnapshotService's domain in-process on the real database, streamed
(`SnapshotReconciler.reconcile_stream`, parts generated lazily, as the servicer hands them over) against
the unary path (`reconcile` of whole lists, as a unary ReconcileRequest holds them) as the baseline.

The snapshot is a synthetic "current version per package": ``--items`` items, half entities
``bench_package:pNNNNNN`` with attributes, half BENCH_HAS_VERSION facts package -> version. For each
size and path, in a fresh namespace (no packs) and a fresh worker process (so its peak RSS is its own):

* ``initial``: everything new (entities and facts created);
* ``same-content``: the same state under a new snapshot_id (nothing changes);
* ``changed``: 1 % of the packages dropped (their facts closed) and 1 % with changed attributes.

Per run: wall seconds, items/s, the counts, the worker's RSS before the first run and its peak RSS
(``ru_maxrss``) after each run; the ``stream`` path also reports the tracemalloc peak of the Python heap
during each run (``--tracemalloc``, slower). The labels are the bench's own: a run is one long
transaction, and a writer elsewhere that first touches a label would wait for it. The results, with the
machine's load average (the machine is shared, figures are taken under load), are printed, appended to
``bench/results/reconcile.json`` and summarised on stdout.

Usage: ``.venv/bin/python bench/bench_reconcile.py [--sizes 10000 100000] [--paths stream unary]``
(the database must be up: ``make db``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import os
import platform
import resource
import subprocess
import sys
import time
import tracemalloc
import uuid
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from common.kernel.config import Settings
from common.storage.database import Database
from common.storage.schema import migrations
from ingest_service.snapshots.model import SnapshotHeader
from ingest_service.snapshots.model import SnapshotPart
from ingest_service.snapshots.reconciler import SnapshotReconciler

RESULTS = ROOT / "bench" / "results" / "reconcile.json"
PART_ITEMS = 1000  # items per streamed part (500 entities + 500 facts)
PLANS = (
    ("initial", "s1", dt.datetime(2026, 1, 1, tzinfo=dt.UTC), 0),
    ("same-content", "s2", dt.datetime(2026, 2, 1, tzinfo=dt.UTC), 0),
    ("changed", "s3", dt.datetime(2026, 3, 1, tzinfo=dt.UTC), 100),  # 1 % dropped, 1 % changed
)


def package_items(index: int, every: int) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The entity and fact of package ``index``; None when dropped (``index % every == 0``)."""
    if every and index % every == 0:
        return None
    section = "changed" if every and index % every == 1 else "libs"
    key = f"bench_package:p{index:06d}"
    entity = {"key": key, "attributes": {"section": section, "priority": "optional"}}
    fact = {
        "subject": key,
        "predicate": "BENCH_HAS_VERSION",
        "object": f"bench_version:p{index:06d}@1.{index % 7}",
        "valid_from": "2025-01-01T00:00:00Z",
        "attributes": {"suite": "trixie", "section": section},
    }
    return entity, fact


def parts(packages: int, every: int) -> Iterator[SnapshotPart]:
    """The snapshot as lazily generated parts of `PART_ITEMS` items: never whole in memory."""
    per_part = PART_ITEMS // 2
    for start in range(0, packages, per_part):
        pairs = [
            p for p in (package_items(i, every) for i in range(start, min(start + per_part, packages))) if p
        ]
        yield SnapshotPart([entity for entity, _ in pairs], [fact for _, fact in pairs])


def rss_mib() -> float:
    """Current resident set size of this process (MiB), from /proc."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def max_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def worker(path: str, items: int, use_tracemalloc: bool) -> dict[str, Any]:
    """Runs the three plans on one path in a fresh namespace; returns the measurements."""
    database = Database(Settings(), prepare=migrations.apply)
    migrations.apply(database)
    reconciler = SnapshotReconciler(database)
    namespace = f"bench-reconcile-{path}-" + uuid.uuid4().hex[:8]
    packages = items // 2
    gc.collect()
    report: dict[str, Any] = {
        "path": path,
        "items": items,
        "namespace": namespace,
        "rss_start_mib": round(rss_mib(), 1),
    }
    runs = []
    for name, snapshot_id, at, every in PLANS:
        load_before = os.getloadavg()[0]
        if use_tracemalloc:
            tracemalloc.start()
        started = time.perf_counter()
        if path == "stream":
            header = SnapshotHeader(namespace, "bench", "suite:trixie", snapshot_id, at)
            result = reconciler.reconcile_stream(header, parts(packages, every))
            count = packages * 2 - (2 * len(range(0, packages, every)) if every else 0)
        else:
            pairs = [p for p in (package_items(i, every) for i in range(packages)) if p]
            entities, facts = [e for e, _ in pairs], [f for _, f in pairs]
            del pairs
            result = reconciler.reconcile(
                namespace, "bench", "suite:trixie", snapshot_id, at, entities, facts
            )
            count = len(entities) + len(facts)
            del entities, facts
        seconds = time.perf_counter() - started
        run: dict[str, Any] = {
            "run": name,
            "items": count,
            "seconds": round(seconds, 2),
            "items_per_second": round(count / seconds, 1),
            "counts": asdict(result.counts),
            "max_rss_mib": round(max_rss_mib(), 1),
            "load_average_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        }
        if use_tracemalloc:
            run["tracemalloc_peak_mib"] = round(tracemalloc.get_traced_memory()[1] / 2**20, 2)
            tracemalloc.stop()
        print(json.dumps(run), file=sys.stderr, flush=True)
        runs.append(run)
        gc.collect()
    database.close()
    report["runs"] = runs
    return report


def markdown(record: dict[str, Any]) -> str:
    lines = [
        (
            f"## {record['time']} — snapshot reconciliation (bench/bench_reconcile.py), {record['machine']['cpus']}"
            f" cores, shared and under load (load average"
            f" {', '.join(str(round(x, 2)) for x in record['machine']['load_average'])})"
        ),
        "",
        "| path | items | run | seconds | items/s | peak RSS MiB (start) | tracemalloc peak MiB | counts |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for report in record["reports"]:
        for run in report["runs"]:
            counts = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in run["counts"].items() if v)
            lines.append(
                f"| {report['path']} | {report['items']:,} | {run['run']} | {run['seconds']} | {run['items_per_second']} "
                f"| {run['max_rss_mib']} ({report['rss_start_mib']}) | {run.get('tracemalloc_peak_mib', '')} | {counts} |"
            )
    if record.get("note"):
        lines += ["", record["note"]]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--paths", nargs="+", choices=("stream", "unary"), default=["stream", "unary"])
    parser.add_argument("--tracemalloc", action="store_true", help="tracemalloc peaks (stream path; slower)")
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--note", default="")
    parser.add_argument("--worker", nargs=2, metavar=("PATH", "ITEMS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        path, items = args.worker
        print(json.dumps(worker(path, int(items), args.tracemalloc and path == "stream")))
        return
    reports = []
    for items in args.sizes:
        for path in args.paths:
            command = [sys.executable, __file__, "--worker", path, str(items)] + (
                ["--tracemalloc"] if args.tracemalloc else []
            )
            print(f"# {path} {items:,} items", file=sys.stderr, flush=True)
            done = subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True)
            reports.append(json.loads(done.stdout.strip().splitlines()[-1]))
    record = {
        "time": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "sizes": args.sizes,
        "part_items": PART_ITEMS,
        "reports": reports,
        "machine": {
            "cpus": os.cpu_count(),
            "load_average": os.getloadavg(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "note": args.note,
    }
    print(json.dumps(record, indent=2))
    args.results.parent.mkdir(parents=True, exist_ok=True)
    existing: list[Any] = json.loads(args.results.read_text()) if args.results.exists() else []
    existing.append(record)
    args.results.write_text(json.dumps(existing, ensure_ascii=False, indent=2) + "\n")
    print(markdown(record))
    print(f"appended to {args.results}", file=sys.stderr)


if __name__ == "__main__":
    main()
