"""A/B of the lexical indexes of the chunks table for one namespace among many: the full-text
(BM25) and trigram rankings of `common.storage.chunks.rankings`, in-process, at 10k and 1M chunks, with
each candidate set of GIN indexes, interleaved query by query in one run; and the insert cost of each set.

Method. Three fresh databases (`bench.run_bench.fresh_database`), migrated: ``10k`` and ``100k`` hold
namespace Q alone (10k, 100k chunks), ``1m`` holds Q (10k) and 99 tenants of 10k chunks each. The texts are those of
`bench/bench_capacity.py`'s synthetic base (two real vault sentences of 400 and a reference per chunk,
`bench/bench_scale.py --synthetic-base`'s base), without embeddings (the lexical arms read none); every
tenant holds Q's texts, as in bench_scale's copies: the worst case for a table-wide index. Q's rows are
written with the statistics triggers on (BM25 reads them), the tenants' rows with the triggers off (only
Q is queried). Every index set of `variants` is built side by side; each measured call runs in a
transaction that drops the indexes of the *other* sets and is rolled back afterwards (a catalog change
only, untimed), so the planner sees exactly one set and every set meets the same cache and load. The
arms are called as `bench/scale_arms.py` calls them (limit 50, trigram whole query from 8 words), the
sets rotating per query; the plan of each set's slowest query is recorded (``EXPLAIN (ANALYZE,
BUFFERS)``, same transaction). Write cost: ``--insert-rows`` new chunks of Q in one ``INSERT`` (one
Retain's statement shape: generated ``search_document``, the statistics triggers) into the large table
with each set, rolled back, sets interleaved, ``--insert-rounds`` times.

Run: ``.venv/bin/python -m bench.bench_lexical_indexes [--queries 60] [--note ...]``; JSON in
bench/results/lexical-indexes-<time>.json, the tables printed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
from collections.abc import Callable
from datetime import UTC
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql

from bench.bench_capacity import CHUNKS_PER_DOCUMENT
from bench.corpus_loading import distinctive_sentences
from bench.run_bench import fresh_database
from bench.run_bench import percentiles
from bench.scale_arms import LIMIT
from bench.scale_arms import TRIGRAM_WHOLE_QUERY_CHARS
from bench.scale_arms import TRIGRAM_WHOLE_QUERY_MIN_WORDS
from bench.scale_arms import RecordingCursor
from bench.scale_arms import explained
from bench.scale_tables import FAQ
from bench.scale_tables import droppable_indexes
from bench.service_results import heading
from bench.service_results import machine
from bench.service_results import print_report
from bench.service_results import write_json
from common.kernel.config import Settings
from common.storage.chunks.rows import ChunkFilter
from common.storage.chunks.store import ChunkStore
from common.storage.database import Database
from common.storage.schema import migrations

Q = "lexical-q"
TENANTS = 99
BASE_ROWS = 10_000


def load() -> str:
    return "load " + " / ".join(f"{x:.2f}" for x in os.getloadavg())


def variants(table: str) -> dict[str, list[sql.Composed]]:
    """The index sets compared: name -> CREATE INDEX statements (names prefixed ``ab_``)."""
    t = sql.Identifier(table)
    q = sql.Literal(Q)

    def index(name: str, body: str, predicate: sql.Composable | None = None) -> sql.Composed:
        return sql.SQL("CREATE INDEX {} ON {} USING gin " + body + "{}").format(
            sql.Identifier(f"ab_{name}"), t, predicate or sql.SQL("")
        )

    only_q = sql.SQL(" WHERE namespace = {}").format(q)
    return {
        "table_wide": [
            index("wide_search", "(search_document)"),
            index("wide_trigram", "(identifier_text gin_trgm_ops)"),
        ],
        "namespace_leading": [
            index("lead_search", "(namespace, search_document)"),
            index("lead_trigram", "(namespace, identifier_text gin_trgm_ops)"),
        ],
        "table_wide_plus_partial": [
            index("wide_search", "(search_document)"),
            index("wide_trigram", "(identifier_text gin_trgm_ops)"),
            index("part_search", "(search_document)", only_q),
            index("part_trigram", "(identifier_text gin_trgm_ops)", only_q),
        ],
    }


def index_name(statement: sql.Composed, conn: psycopg.Connection[Any]) -> str:
    return statement.as_string(conn).split(" ")[2].strip('"')


def base_rows(sentences: list[str], namespace: str, rows: int, key_prefix: str) -> list[tuple[Any, ...]]:
    """The synthetic base's chunks (`bench/bench_capacity.load`'s texts, same seed), without vectors."""
    rng = random.Random(7)
    out = []
    for number in range(rows):
        document, order = divmod(number, CHUNKS_PER_DOCUMENT)
        first, second = rng.sample(sentences, 2)
        text = f"{first} {second} (doc {document}, REF-{number})"
        out.append(
            (namespace, f"doc:{key_prefix}-{document}", order, f"Doc {document}", f"Part {order}", text)
        )
    return out


def copy_rows(conn: psycopg.Connection[Any], table: str, rows: list[tuple[Any, ...]]) -> None:
    statement = sql.SQL("COPY {} (namespace, node_key, chunk_order, title, heading, text) FROM STDIN").format(
        sql.Identifier(table)
    )
    with conn.cursor() as cursor, cursor.copy(statement) as copy:
        for row in rows:
            copy.write_row(row)


def build(
    url: str, sentences: list[str], q_rows: int, tenants: int, timings: dict[str, Any]
) -> dict[str, set[str]]:
    """Migrates the database of ``url``, writes Q's ``q_rows`` chunks (and ``tenants`` copies of them),
    builds every index set."""
    settings = Settings(database_url=url)
    database = Database(settings, prepare=migrations.apply)
    migrations.apply(database)
    database.close()
    table = settings.chunks_table
    with psycopg.connect(url, autocommit=True) as conn:
        keep = {"namespace_idx"}
        for name, _ in droppable_indexes(conn, table):
            if not any(name.endswith(suffix) for suffix in keep):
                conn.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(name)))
        started = time.perf_counter()
        copy_rows(conn, table, base_rows(sentences, Q, q_rows, "lexical"))
        timings["q_rows_s"] = round(time.perf_counter() - started, 1)
        if tenants:
            started = time.perf_counter()
            conn.execute(sql.SQL("ALTER TABLE {} DISABLE TRIGGER USER").format(sql.Identifier(table)))
            conn.execute(
                sql.SQL(
                    "INSERT INTO {t} (namespace, node_key, chunk_order, title, heading, text)"
                    " SELECT 'tenant-' || lpad(c::text, 3, '0'), node_key, chunk_order, title, heading, text"
                    " FROM {t} CROSS JOIN generate_series(1, %s) AS c WHERE namespace = %s"
                ).format(t=sql.Identifier(table)),
                (tenants, Q),
            )
            conn.execute(sql.SQL("ALTER TABLE {} ENABLE TRIGGER USER").format(sql.Identifier(table)))
            timings["tenant_rows_s"] = round(time.perf_counter() - started, 1)
        conn.execute("SET maintenance_work_mem = '1GB'")
        sets = variants(table)
        names: dict[str, set[str]] = {}
        built: set[str] = set()
        for variant, statements in sets.items():
            names[variant] = {index_name(statement, conn) for statement in statements}
            for statement in statements:
                name = index_name(statement, conn)
                if name in built:
                    continue
                started = time.perf_counter()
                conn.execute(statement)
                timings[f"build_{name}_s"] = round(time.perf_counter() - started, 1)
                built.add(name)
        started = time.perf_counter()
        conn.execute(sql.SQL("VACUUM ANALYZE {}").format(sql.Identifier(table)))
        timings["vacuum_analyze_s"] = round(time.perf_counter() - started, 1)
        sizes = conn.execute(
            "SELECT c.relname, pg_relation_size(c.oid) FROM pg_class c WHERE c.relname = ANY(%s)",
            (sorted(built),),
        ).fetchall()
        timings["index_mb"] = {name: round(size / 2**20, 1) for name, size in sizes}
    return names


def only(conn: psycopg.Connection[Any], names: dict[str, set[str]], variant: str) -> None:
    """Inside the caller's transaction: drops every benchmark index not of ``variant``."""
    for name in set().union(*names.values()) - names[variant]:
        conn.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(name)))


def arms(url: str, names: dict[str, set[str]], queries: list[str], wanted: list[str]) -> dict[str, Any]:
    """p50/p95 of the text and trigram arms per index set (module doc), and the slowest query's plans."""
    settings = Settings(database_url=url)
    store = ChunkStore(settings)
    where = ChunkFilter(namespace=Q)
    calls: dict[str, Callable[[psycopg.Connection[Any], str], list[Any]]] = {
        "text": lambda conn, query: store.text_candidates(conn, where, query, LIMIT),
        "trigram": lambda conn, query: store.trigram_candidates(
            conn,
            where,
            query,
            LIMIT,
            whole_query_chars=TRIGRAM_WHOLE_QUERY_CHARS,
            whole_query_min_words=TRIGRAM_WHOLE_QUERY_MIN_WORDS,
        ),
    }
    samples = {(arm, v): [] for arm in calls for v in wanted}
    rows = {(arm, v): [] for arm in calls for v in wanted}
    logs: dict[tuple[str, str], list[Any]] = {key: [] for key in samples}
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET jit = off")
        conn.cursor_factory = RecordingCursor
        for index, query in enumerate(queries * 2):  # first pass warms the caches, second is measured
            for shift in range(len(wanted)):
                variant = wanted[(index + shift) % len(wanted)]
                for arm, call in calls.items():
                    with conn.transaction(force_rollback=True):
                        RecordingCursor.log = []  # a fresh list: the DROPs are not the arm's statements
                        only(conn, names, variant)
                        RecordingCursor.log = []
                        started = time.perf_counter()
                        found = call(conn, query)
                        elapsed = (time.perf_counter() - started) * 1000
                    if index >= len(queries):
                        samples[(arm, variant)].append(elapsed)
                        rows[(arm, variant)].append(len(found))
                        logs[(arm, variant)].append(RecordingCursor.log)
        conn.cursor_factory = psycopg.Cursor
        results: dict[str, Any] = {}
        for (arm, variant), measured in samples.items():
            slowest = max(range(len(measured)), key=measured.__getitem__)
            with conn.transaction(force_rollback=True):
                only(conn, names, variant)
                plans = explained(conn, logs[(arm, variant)][slowest])
            results[f"{arm}/{variant}"] = {
                **percentiles(measured),
                "load": load(),
                "rows_p50": int(statistics.median(rows[(arm, variant)])),
                "slowest_query": queries[slowest],
                "slowest_ms": round(measured[slowest], 2),
                "plans_slowest": plans,
            }
    return results


def inserts(
    url: str, names: dict[str, set[str]], sentences: list[str], count: int, rounds: int
) -> dict[str, Any]:
    """Milliseconds for one INSERT of ``count`` new chunks of Q into the large table per index set."""
    table = sql.Identifier(Settings(database_url=url).chunks_table)
    rows = base_rows(sentences, Q, count, "insert")
    statement = sql.SQL(
        "INSERT INTO {} (namespace, node_key, chunk_order, title, heading, text)"
        " SELECT * FROM unnest(%s::text[], %s::text[], %s::int[], %s::text[], %s::text[], %s::text[])"
    ).format(table)
    columns = [list(column) for column in zip(*rows, strict=True)]
    wanted = list(names)
    samples: dict[str, list[float]] = {v: [] for v in wanted}
    with psycopg.connect(url, autocommit=True) as conn:
        for round_number in range(rounds + 1):  # round 0 warms up
            for shift in range(len(wanted)):
                variant = wanted[(round_number + shift) % len(wanted)]
                with conn.transaction(force_rollback=True):
                    only(conn, names, variant)
                    started = time.perf_counter()
                    conn.execute(statement, columns)
                    elapsed = (time.perf_counter() - started) * 1000
                if round_number:
                    samples[variant].append(elapsed)
    return {
        variant: {
            "median_ms": round(statistics.median(s), 1),
            "min_ms": round(min(s), 1),
            "rows_per_s": round(count / statistics.median(s) * 1000),
            "load": load(),
        }
        for variant, s in samples.items()
    }


def report(results: dict[str, Any]) -> list[str]:
    lines = [
        heading(results) + " — lexical index A/B (`bench/bench_lexical_indexes.py`)",
        "",
        (
            f"Note: {results['note']}. Queries: {results['queries']} (half vault sentences, half FAQ"
            " questions), each measured once per index set after one warm-up pass, sets interleaved query by query."
        ),
        "",
        (
            "| arm | index set | 10k (Q alone) p50 / p95 ms | 100k (Q alone) | 1M (Q 10k among 100 tenants) |"
            " 1M slowest (ms) |"
        ),
        "|---|---|---|---|---|---|",
    ]

    def cell(figures: dict[str, Any] | None) -> str:
        return f"{figures['p50_ms']} / {figures['p95_ms']} ({figures['load']})" if figures else ""

    for key, figures in results["1m"]["arms"].items():
        arm, variant = key.split("/")
        small = [cell(results[size]["arms"].get(key)) for size in ("10k", "100k")]
        lines.append(
            f"| {arm} | {variant} | {' | '.join(small)} | {cell(figures)} | {figures['slowest_ms']} |"
        )
    lines += ["", f"Insert of {results['insert_rows']} chunks of Q into the 1M table, one statement:", ""]
    lines += ["| index set | median ms | min ms | chunks/s |", "|---|---|---|---|"]
    for variant, figures in results["1m"]["inserts"].items():
        lines.append(
            f"| {variant} | {figures['median_ms']} | {figures['min_ms']} | {figures['rows_per_s']} ({figures['load']}) |"
        )
    builds = "; ".join(f"{size} {results[size]['build']}" for size in ("10k", "100k", "1m"))
    lines += ["", f"Build (s; index sizes MB): {builds}", ""]
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", type=int, default=60)
    parser.add_argument("--tenants", type=int, default=TENANTS)
    parser.add_argument("--insert-rows", type=int, default=10_000)
    parser.add_argument("--insert-rounds", type=int, default=5)
    parser.add_argument("--note", default="")
    parser.add_argument("--no-record", action="store_true", help="print only (a trial run)")
    arguments = parser.parse_args()
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    sentences = distinctive_sentences(400)
    faq = [
        json.loads(line)["query"]
        for line in (FAQ / "debian-faq-queries.jsonl").read_text("utf-8").splitlines()
    ]
    half = arguments.queries // 2
    queries = distinctive_sentences(arguments.queries - half) + faq[::2][:half]
    results: dict[str, Any] = {
        "time": stamp,
        "machine": machine(),
        "note": arguments.note,
        "queries": len(queries),
        "insert_rows": arguments.insert_rows,
    }
    base = Settings().database_url
    for size, q_rows, tenants in (
        ("10k", BASE_ROWS, 0),
        ("100k", 10 * BASE_ROWS, 0),
        ("1m", BASE_ROWS, arguments.tenants),
    ):
        with fresh_database(base, f"lexical_{size}_{stamp.lower()}") as url:
            timings: dict[str, Any] = {}
            names = build(url, sentences, q_rows, tenants, timings)
            print(size, "built", timings, load(), flush=True)
            wanted = list(names) if tenants else ["table_wide", "namespace_leading"]
            results[size] = {"build": timings, "arms": arms(url, names, queries, wanted)}
            print(
                size,
                {k: (v["p50_ms"], v["p95_ms"]) for k, v in results[size]["arms"].items()},
                load(),
                flush=True,
            )
            if tenants:
                results[size]["inserts"] = inserts(
                    url, names, sentences, arguments.insert_rows, arguments.insert_rounds
                )
                print("inserts", results[size]["inserts"], flush=True)
    if arguments.no_record:
        print("\n".join(report(results)))
        return 0
    write_json(results, prefix="lexical-indexes")
    print_report(report(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
