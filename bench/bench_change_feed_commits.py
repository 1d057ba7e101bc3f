"""What the change feed's numbering at commit costs small transactions (docs/decisions/0041).

``--threads`` connections each commit ``--transactions`` transactions of ``--rows`` observation rows
(one INSERT, raw SQL on a fresh database, so only the table, its triggers and the outbox count), in four
arms: the feed off (``SET memory.change_feed = off``) or on, every thread in one namespace (the numbering
serialises their commits on the namespace's counter row) or each in its own. Reports commits/s and the
commit latency percentiles per arm; written to bench/results/change-feed-commits-<UTC time>.json with the
load average.

Usage: .venv/bin/python bench/bench_change_feed_commits.py [--threads 4] [--transactions 300] [--rows 1]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import uuid
from datetime import UTC
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.client_threads import run_in_threads
from bench.run_bench import fresh_database
from bench.run_bench import percentiles
from bench.service_results import write_json
from common.kernel.config import Settings
from common.storage.database import Database
from common.storage.schema import migrations

INSERT = (
    "INSERT INTO observations (observation_id, namespace, source_system, source_stream, kind, occurred_at,"
    " status) SELECT %s || '-' || g, %s, 'bench', 'commits', 'note', now(), 'processed'"
    " FROM generate_series(1, %s) AS g"
)


def arm(url: str, *, feed: bool, shared: bool, arguments: argparse.Namespace) -> dict[str, Any]:
    namespace = "commits-" + uuid.uuid4().hex[:8]
    latencies: list[float] = []
    lock = threading.Lock()

    def work(index: int) -> None:
        own = namespace if shared else f"{namespace}-{index}"
        with psycopg.connect(url) as conn:
            conn.execute(f"SET memory.change_feed = {'on' if feed else 'off'}")
            conn.commit()
            mine = []
            for n in range(arguments.transactions):
                started = time.perf_counter()
                conn.execute(INSERT, (f"{own}-{index}-{n}", own, arguments.rows))
                conn.commit()
                mine.append((time.perf_counter() - started) * 1000)
        with lock:
            latencies.extend(mine)

    seconds = run_in_threads(work, arguments.threads)
    return {
        "feed": feed,
        "one_namespace": shared,
        "commits_per_second": round(len(latencies) / seconds, 1),
        "commit_ms": percentiles(latencies),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description="Commit cost of the change feed (see the module doc).")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--transactions", type=int, default=300)
    parser.add_argument("--rows", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=2)
    arguments = parser.parse_args()
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    base = os.environ.get("CB_DATABASE_URL", Settings().database_url)
    with fresh_database(base, f"memory_commits_{stamp.lower()}") as url:
        migrations.apply(Database(Settings().model_copy(update={"database_url": url})))
        load_before = os.getloadavg()
        arms = [
            arm(url, feed=feed, shared=shared, arguments=arguments)
            for _ in range(arguments.rounds)
            for feed in (False, True)
            for shared in (True, False)
        ]
    result = {
        "time": datetime.now(UTC).isoformat(),
        "threads": arguments.threads,
        "transactions_per_thread": arguments.transactions,
        "rows_per_transaction": arguments.rows,
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "cpu_count": os.cpu_count(),
        "arms": arms,
    }
    write_json(result, prefix="change-feed-commits", stamp=stamp)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
