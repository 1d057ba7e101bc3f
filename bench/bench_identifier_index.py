"""A/B of the trigram index over ``identifier_text`` (migration 0028) against the one over the whole ``text``
it replaced (migration 0026): the cost of writing chunks and of the trigram ranking, and whether the
ranking finds the same rows (ingest).

Method. A fresh database (`bench.run_bench.fresh_database`) migrated by this checkout holds, in one
namespace and without embeddings (neither index reads them), the real texts: the episode chunks of the
debian upload stream (`ingest_service.observations.episode_text.episode_pieces`, what `RecordObservations` writes) and
the chunks of the docs vault (`ingest_service.documents.chunking.chunk_markdown`). Beside the migration's index it
builds the one it replaced, ``(namespace, text gin_trgm_ops)``; each measured call runs in a transaction
that leaves one set (`only`: for the old set the column ``identifier_text`` itself is dropped, so its
computation is not charged to it) and is rolled back (catalog changes, untimed).

- Writes: one ``INSERT`` of ``--insert-rows`` new chunks (debian episode texts under new keys, then vault
  texts) per set, rolled back, the sets alternating, ``--insert-rounds`` times after one warm-up round.
- Ranking: ``ChunkRankings.trigram_candidates`` (limit 50, identifier tokens only: ``whole_query_chars``
  0) with the identifier set, and the same statement with ``identifier_text ILIKE`` written back as
  ``text ILIKE`` (the statement of migration 0026) with the text set, alternating query by query after a
  warm-up pass. Queries: ``<package> <version>`` and ``what changed in <version>`` of ``--probes`` uploads
  (seeded sample), and ``release <token>`` for identifier tokens of vault chunks. Both sets must return
  the same rows in the same order; the count of queries where they do is reported.

Run: ``.venv/bin/python -m bench.bench_identifier_index [--probes 300] [--note ...]``; JSON in
bench/results/identifier-index-<time>.json, the tables printed.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from datetime import UTC
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from bench.bench_lexical_indexes import copy_rows
from bench.run_bench import fresh_database
from bench.run_bench import percentiles
from bench.scale_arms import RecordingCursor
from bench.service_results import heading
from bench.service_results import load_average
from bench.service_results import machine
from bench.service_results import print_report
from bench.service_results import write_json
from common.kernel.config import Settings
from common.kernel.identifiers import parse_instant
from common.storage.chunks.query_terms import identifier_tokens
from common.storage.chunks.rows import ChunkFilter
from common.storage.chunks.store import ChunkStore
from common.storage.database import Database
from common.storage.schema import migrations
from ingest_service.documents.chunking import chunk_markdown
from ingest_service.observations.episode_text import episode_pieces

CORPORA = Path(__file__).resolve().parents[2] / "shared" / "corpora"
NAMESPACE = "identifier-bench"
LIMIT = 50
TEXT_INDEX = "bench_text_trigram_idx"


def debian_chunks(settings: Settings) -> tuple[list[tuple[str, int, str, str]], list[dict[str, Any]]]:
    """The episode chunks of the debian stream as ``(node_key, order, heading, text)``, and its lines."""
    lines = [json.loads(line) for line in (CORPORA / "debian-uploads" / "observations.jsonl").open()]
    rows = []
    for number, line in enumerate(lines):
        pieces = episode_pieces(
            kind=line["kind"],
            occurred_at=parse_instant(line["occurred_at"]),
            actor=line.get("actor"),
            subject=line.get("subject"),
            content=line.get("content", ""),
            data=line.get("data", {}),
            limit=settings.chunk_max_chars,
        )
        rows += [(f"episode:{number}", order, head, text) for order, (head, text) in enumerate(pieces)]
    return rows, lines


def vault_chunks(settings: Settings) -> list[tuple[str, int, str, str]]:
    """The chunks of every Markdown file of the docs vault as ``(node_key, order, heading, text)``."""
    rows = []
    for path in sorted((CORPORA / "docs-vault").rglob("*.md")):
        body = path.read_text(encoding="utf-8", errors="replace")
        for chunk in chunk_markdown(body, settings.chunk_max_chars):
            rows.append((f"doc:{path.relative_to(CORPORA)}", chunk.order, chunk.heading, chunk.text))
    return rows


def probes(lines: list[dict[str, Any]], vault: list[tuple[str, int, str, str]], count: int) -> list[str]:
    """The ranking's queries (module doc), seeded."""
    rng = random.Random(28)
    uploads = rng.sample(lines, count)
    queries = [
        f"{line['subject']['id']} {line['data']['version']}"
        if number % 2 == 0
        else f"what changed in {line['data']['version']}"
        for number, line in enumerate(uploads)
        if line.get("subject") and line.get("data", {}).get("version")
    ]
    tokens = [
        token for row in rng.sample(vault, min(len(vault), 4 * count)) for token in identifier_tokens(row[3])
    ]
    queries += [f"release {token}" for token in rng.sample(tokens, min(len(tokens), count // 2))]
    return [query for query in queries if identifier_tokens(query)]


def only(conn: psycopg.Connection[Any], keep: str, table: str) -> None:
    """Inside the caller's transaction: leaves the schema of ``keep`` only. ``identifier``: drops the index
    over ``text``; ``text``: drops the column ``identifier_text`` (and its index with it), which is the
    schema before migration 0028 exactly. The statistics triggers are disabled in both (their occasional
    fold of the lexeme deltas, `sql/0011_lexeme_statistics.sql`, costs the same with either set and
    would only add noise)."""
    if keep == "identifier":
        conn.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(TEXT_INDEX)))
    else:
        conn.execute(sql.SQL("ALTER TABLE {} DROP COLUMN identifier_text").format(sql.Identifier(table)))
    conn.execute(sql.SQL("ALTER TABLE {} DISABLE TRIGGER USER").format(sql.Identifier(table)))


def measure(arguments: argparse.Namespace) -> dict[str, Any]:
    base = Settings()
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    results: dict[str, Any] = {"time": stamp, "machine": machine(), "note": arguments.note}
    with fresh_database(base.database_url, f"bench_identifier_{stamp.lower()}") as url:
        settings = Settings(database_url=url)
        database = Database(settings, prepare=migrations.apply)
        migrations.apply(database)
        database.close()
        table = settings.chunks_table
        debian, lines = debian_chunks(settings)
        vault = vault_chunks(settings)
        indexes = {"identifier": f"{table}_namespace_identifier_idx", "text": TEXT_INDEX}
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("SET jit = off")
            started = time.perf_counter()
            copy_rows(
                conn,
                table,
                [(NAMESPACE, key, order, "", head, text) for key, order, head, text in debian + vault],
            )
            results["rows"] = {"debian_episode_chunks": len(debian), "vault_chunks": len(vault)}
            results["load_s"] = round(time.perf_counter() - started, 1)
            conn.execute(
                sql.SQL(
                    "CREATE INDEX {} ON {} USING gin (namespace, text gin_trgm_ops)"
                    " WITH (gin_pending_list_limit = 256)"
                ).format(sql.Identifier(TEXT_INDEX), sql.Identifier(table))
            )
            conn.execute(sql.SQL("VACUUM ANALYZE {}").format(sql.Identifier(table)))
            results["index_mb"] = {
                name: round(
                    conn.execute("SELECT pg_relation_size(%s::regclass)", (index,)).fetchone()[0] / 2**20, 1
                )
                for name, index in indexes.items()
            }
            results["characters"] = dict(
                zip(
                    ("text", "identifier_text"),
                    conn.execute(
                        sql.SQL(
                            "SELECT avg(length(text))::int, avg(length(identifier_text))::int FROM {}"
                        ).format(sql.Identifier(table))
                    ).fetchone(),
                    strict=True,
                )
            )
            results["inserts"] = inserts(conn, table, indexes, debian, vault, arguments)
            results["ranking"] = ranking(conn, settings, indexes, probes(lines, vault, arguments.probes))
    return results


def inserts(
    conn: psycopg.Connection[Any],
    table: str,
    indexes: dict[str, str],
    debian: list[tuple[str, int, str, str]],
    vault: list[tuple[str, int, str, str]],
    arguments: argparse.Namespace,
) -> dict[str, Any]:
    """Milliseconds of one INSERT of ``--insert-rows`` new chunks per index set and kind of text."""
    statement = sql.SQL(
        "INSERT INTO {} (namespace, node_key, chunk_order, heading, text)"
        " SELECT %s, 'new:' || k, o, h, t FROM unnest(%s::text[], %s::int[], %s::text[], %s::text[]) AS x(k, o, h, t)"
    ).format(sql.Identifier(table))
    rng = random.Random(7)
    out: dict[str, Any] = {}
    for kind, source in (("debian episodes", debian), ("vault chunks", vault)):
        samples: dict[str, list[float]] = {name: [] for name in indexes}
        for round_number in range(arguments.insert_rounds + 1):  # round 0 warms up
            rows = rng.sample(source, arguments.insert_rows)
            columns = [list(column) for column in zip(*rows, strict=True)]
            for shift in range(len(indexes)):
                name = list(indexes)[(round_number + shift) % len(indexes)]
                with conn.transaction(force_rollback=True):
                    only(conn, name, table)
                    started = time.perf_counter()
                    conn.execute(statement, [NAMESPACE, *columns])
                    elapsed = (time.perf_counter() - started) * 1000
                if round_number:
                    samples[name].append(elapsed)
        out[kind] = {
            name: {
                "median_ms": round(statistics.median(s), 1),
                "mean_ms": round(statistics.mean(s), 1),
                "per_row_ms": round(statistics.median(s) / arguments.insert_rows, 3),
                "load": load_average(),
            }
            for name, s in samples.items()
        }
    return out


def ranking(
    conn: psycopg.Connection[Any], settings: Settings, indexes: dict[str, str], queries: list[str]
) -> dict[str, Any]:
    """p50/p95 of the trigram ranking per set (module doc) and the queries whose results are equal."""
    table = settings.chunks_table
    store = ChunkStore(settings)
    where = ChunkFilter(namespace=NAMESPACE)

    def identifier_set(query: str) -> list[Any]:
        return store.trigram_candidates(conn, where, query, LIMIT, whole_query_chars=0)

    samples: dict[str, list[float]] = {name: [] for name in indexes}
    found: dict[str, list[list[int]]] = {name: [] for name in indexes}
    statements: dict[str, tuple[Any, Any]] = {}
    conn.cursor_factory = RecordingCursor
    for query in queries:  # each query's statement as the ranking composes it, written for both sets
        RecordingCursor.log = []
        identifier_set(query)
        statement, params = RecordingCursor.log[-1]
        statements[query] = (statement.as_string(conn), params)
    conn.cursor_factory = psycopg.Cursor
    for number, query in enumerate(queries * 2):  # the first pass warms the caches
        text, params = statements[query]
        forms = {"identifier": text, "text": text.replace("identifier_text ILIKE", "text ILIKE")}
        for shift in range(len(indexes)):
            name = list(indexes)[(number + shift) % len(indexes)]
            with conn.transaction(force_rollback=True):
                only(conn, name, table)
                started = time.perf_counter()
                rows = conn.execute(forms[name], params, prepare=False).fetchall()
                elapsed = (time.perf_counter() - started) * 1000
            if number >= len(queries):
                samples[name].append(elapsed)
                found[name].append([row[0] for row in rows])
    same = sum(a == b for a, b in zip(found["identifier"], found["text"], strict=True))
    return {
        "queries": len(queries),
        "same_rows_and_order": same,
        "rows_p50": int(statistics.median(len(rows) for rows in found["identifier"])),
        **{name: {**percentiles(s), "load": load_average()} for name, s in samples.items()},
    }


def report(results: dict[str, Any]) -> list[str]:
    ranking_figures = results["ranking"]
    lines = [
        heading(results) + " — trigram index over identifier_text (`bench/bench_identifier_index.py`)",
        "",
        (
            f"Note: {results['note']}. One namespace of {results['rows']['debian_episode_chunks']} debian episode"
            f" chunks and {results['rows']['vault_chunks']} docs-vault chunks (text only); average characters"
            f" per chunk: text {results['characters']['text']}, identifier_text"
            f" {results['characters']['identifier_text']}; index size MB: identifier"
            f" {results['index_mb']['identifier']}, text {results['index_mb']['text']}."
        ),
        "",
        "| one INSERT of new chunks | index over | median ms | mean ms | ms per row | load |",
        "|---|---|---|---|---|---|",
    ]
    for kind, sets in results["inserts"].items():
        for name, figures in sets.items():
            lines.append(
                f"| {kind} | {name} | {figures['median_ms']} | {figures['mean_ms']} | {figures['per_row_ms']} |"
                f" {figures['load']} |"
            )
    lines += [
        "",
        (
            f"Trigram ranking, {ranking_figures['queries']} identifier queries (rows p50"
            f" {ranking_figures['rows_p50']}), the sets alternating query by query; same rows in the same"
            f" order: {ranking_figures['same_rows_and_order']} of {ranking_figures['queries']}."
        ),
        "",
        "| index over | p50 ms | p95 ms | mean ms | load |",
        "|---|---|---|---|---|",
    ]
    for name in ("identifier", "text"):
        figures = ranking_figures[name]
        lines.append(
            f"| {name} | {figures['p50_ms']} | {figures['p95_ms']} | {figures['mean_ms']} | {figures['load']} |"
        )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probes", type=int, default=300)
    parser.add_argument("--insert-rows", type=int, default=200)
    parser.add_argument("--insert-rounds", type=int, default=10)
    parser.add_argument("--note", default="")
    arguments = parser.parse_args()
    results = measure(arguments)
    write_json(results, "identifier-index")
    print_report(report(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
