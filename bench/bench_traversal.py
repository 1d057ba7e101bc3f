"""Typed traversal (docs/explanation/architecture.md: "Variable-length paths ([*..n]) are very slow: traverse with
bounded recursive CTEs"): the recursive walk of `common.storage.graph.traversal` against the Cypher
variable-length path over the same anchors, in the same run, on the debian namespace (the real upload
stream: package -HAS_VERSION-> version -UPLOADED_BY-> person; run ``cb observe --file
../shared/corpora/debian-uploads/observations.jsonl`` first).

For each depth, ``--anchors`` packages (the first ones by key, so runs compare) are walked one by one:

* ``cte``: `TraversalStore.walk` with both relations, as of now, fanout 50, row limit 2000 (what
  CompileTypedContext runs; it also filters by validity, evidence and visibility);
* ``cypher``: ``MATCH p = (a:package {namespace, natural_key})-[*1..d]-(b) RETURN count(p)`` — no
  filters at all, so it does less per edge — under a statement timeout of ``--timeout`` seconds per
  anchor (a timeout counts as the timeout).

Reported per depth and method: median and p95 milliseconds per anchor, timeouts, and the ratio of the
medians, and the Cypher queries AGE failed ("could not open relation with OID 0", an AGE 1.5 error on
some variable-length paths; they are left out of the figures). The machine is shared (2 cores, other work running): compare the ratio, not the absolute
figures. Results are printed and appended to ``bench/results/traversal.json``.

Usage: ``.venv/bin/python bench/bench_traversal.py [--namespace debian] [--anchors 20] [--depths 2 3 4]``
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
import time
from datetime import UTC
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psycopg

from common.kernel.config import Settings
from common.storage.database import Database
from common.storage.graph.store import GraphStore
from common.storage.graph.traversal import RelationRule
from common.storage.graph.traversal import TraversalStore
from common.storage.graph.traversal import WalkQuery
from common.storage.schema import migrations

RESULTS = ROOT / "bench" / "results" / "traversal.json"
RULES = [
    RelationRule("HAS_VERSION", frozenset({"package"}), frozenset({"version"})),
    RelationRule("UPLOADED_BY", frozenset({"version"}), frozenset({"person"})),
]


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--namespace", default="debian")
    parser.add_argument("--anchors", type=int, default=20)
    parser.add_argument("--depths", type=int, nargs="+", default=[2, 3, 4])
    parser.add_argument("--timeout", type=float, default=20.0, help="Cypher statement timeout per anchor (s)")
    args = parser.parse_args()
    database = Database(Settings(), prepare=migrations.apply)
    database.ensure_ready()
    graph = GraphStore(database)
    store = TraversalStore()
    with database.connection() as conn:
        anchors = [
            str(row[0])
            for row in conn.execute(
                "SELECT natural_key FROM graph_nodes WHERE namespace = %s AND node_type = 'package'"
                " ORDER BY natural_key LIMIT %s",
                (args.namespace, args.anchors),
            ).fetchall()
        ]
    if not anchors:
        raise SystemExit(f"no package nodes in namespace {args.namespace!r}: load the debian corpus first")
    load = os.getloadavg()[0]
    for anchor in anchors:  # warm-up: both methods once per anchor (caches, AGE label metadata)
        with database.connection() as conn:
            store.walk(conn, WalkQuery(args.namespace, [anchor], datetime.now(UTC), 1, RULES))
            graph.cypher(
                conn,
                "MATCH (a:package {namespace: $namespace, natural_key: $key})-[]->(b) RETURN count(b)",
                {"namespace": args.namespace, "key": anchor},
            )
    runs: list[dict[str, Any]] = []
    for depth in args.depths:
        cte_ms: list[float] = []
        steps: list[int] = []
        cypher_ms: list[float] = []
        timeouts = failures = 0
        for anchor in anchors:
            with database.connection() as conn:
                started = time.perf_counter()
                walk = store.walk(conn, WalkQuery(args.namespace, [anchor], datetime.now(UTC), depth, RULES))
                cte_ms.append((time.perf_counter() - started) * 1000)
                steps.append(walk.rows)
            started = time.perf_counter()
            try:
                with database.connection() as conn:
                    conn.execute(f"SET LOCAL statement_timeout = {int(args.timeout * 1000)}")
                    graph.cypher(
                        conn,
                        # The path form: without ``p =`` AGE 1.5 fails on an undirected VLE ("could not
                        # open relation with OID 0").
                        f"MATCH p = (a:package {{namespace: $namespace, natural_key: $key}})-[*1..{depth}]-(b)"
                        " RETURN count(p)",
                        {"namespace": args.namespace, "key": anchor},
                    )
                cypher_ms.append((time.perf_counter() - started) * 1000)
            except psycopg.errors.QueryCanceled:
                timeouts += 1
                cypher_ms.append(args.timeout * 1000)
            except psycopg.errors.InternalError:
                failures += 1  # AGE 1.5: "could not open relation with OID 0" on some VLE queries
        run = {
            "depth": depth,
            "anchors": len(anchors),
            "cte_ms_p50": round(statistics.median(cte_ms), 2),
            "cte_ms_p95": round(percentile(cte_ms, 0.95), 2),
            "cte_steps_p50": statistics.median(steps),
            "cte_steps_max": max(steps),
            "cypher_ms_p50": round(statistics.median(cypher_ms), 2) if cypher_ms else None,
            "cypher_ms_p95": round(percentile(cypher_ms, 0.95), 2) if cypher_ms else None,
            "cypher_timeouts": timeouts,
            "cypher_failures": failures,
            "cypher_over_cte_p50": round(
                statistics.median(cypher_ms) / max(statistics.median(cte_ms), 1e-6), 1
            ),
        }
        runs.append(run)
        print(json.dumps(run), flush=True)
    record = {
        "at": dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ"),
        "namespace": args.namespace,
        "load_average": round(load, 2),
        "cores": os.cpu_count(),
        "runs": runs,
    }
    history = json.loads(RESULTS.read_text()) if RESULTS.exists() else []
    history.append(record)
    RESULTS.write_text(json.dumps(history, indent=2) + "\n")
    database.close()


if __name__ == "__main__":
    main()
