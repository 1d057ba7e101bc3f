"""The lexical indexes of the chunks table lead with the namespace (migration 0026): the full-text
and trigram rankings of one namespace among several are answered by one GIN index condition on the
namespace and the lexemes (trigrams), and return that namespace's rows only, in a database of their own
(the plans depend on what else the table holds)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from typing import ClassVar

import numpy as np
import psycopg
import pytest
from psycopg import sql

from common.kernel.config import Settings
from common.storage.chunks.rows import ChunkFilter
from common.storage.chunks.store import ChunkStore
from common.storage.chunks.store import ChunkWrite
from common.storage.chunks.store import NodeRef
from common.storage.database import Database
from common.storage.schema import migrations
from tests.conftest import fresh_database

pytestmark = pytest.mark.integration

NAMESPACES = ("lexical-a", "lexical-b", "lexical-c", "lexical-d")
DOCUMENTS = 30


class RecordingCursor(psycopg.Cursor[Any]):
    """Appends every statement and its parameters it executes to `log`."""

    log: ClassVar[list[tuple[Any, Any]]] = []

    def execute(self, query: Any, params: Any = None, **options: Any) -> RecordingCursor:  # type: ignore[override]
        RecordingCursor.log.append((query, params))
        return super().execute(query, params, **options)  # type: ignore[return-value]


@pytest.fixture(scope="module")
def lexical_database(settings: Settings) -> Iterator[Database]:
    with fresh_database(settings) as fresh:
        database = Database(fresh, prepare=migrations.apply)
        migrations.apply(database)
        store = ChunkStore(fresh)
        rng = np.random.default_rng(5)
        with database.connection() as conn:
            for namespace in NAMESPACES:  # every namespace holds the same texts
                for document in range(DOCUMENTS):
                    writes = []
                    for order in range(4):
                        vector = np.asarray(rng.normal(size=fresh.embedding_dim), dtype=np.float32)
                        text = f"Paragraph {order} about subject{document} and the kernel REF-{document}-{order}."
                        writes.append(ChunkWrite(order, "", text, vector / np.linalg.norm(vector), {}))
                    store.replace_chunks(conn, NodeRef(namespace, f"doc:{document}"), writes)
            conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(fresh.chunks_table)))
        yield database
        database.close()


def _indexes(database: Database) -> dict[str, str]:
    with database.connection() as conn:
        rows = conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s",
            (database.settings.chunks_table,),
        ).fetchall()
    return dict(rows)


def test_the_lexical_gin_indexes_lead_with_the_namespace(lexical_database: Database) -> None:
    table = lexical_database.settings.chunks_table
    indexes = _indexes(lexical_database)
    assert "USING gin (namespace, search_document)" in indexes[f"{table}_namespace_search_idx"]
    identifier = indexes[f"{table}_namespace_identifier_idx"]
    assert "USING gin (namespace, identifier_text gin_trgm_ops)" in identifier
    # no trigram index over the whole text (migration 0028): the table-wide one of 0001 nor 0026's
    gone = {f"{table}_search_idx", f"{table}_trigram_idx", f"{table}_namespace_trigram_idx"}
    assert not gone & set(indexes)
    gin = [definition for definition in indexes.values() if "USING gin" in definition]
    assert all("(meta)" in d or "(namespace, " in d for d in gin), gin


def test_the_lexical_gin_indexes_keep_their_pending_lists_short(settings: Settings) -> None:
    """Migration 0027: new entries wait in a GIN pending list of at most 256 kB (32 pages), which every
    search reads, not the server default of 4 MB; written chunks beyond that are merged into the index."""
    with fresh_database(settings) as fresh:
        database = Database(fresh, prepare=migrations.apply)
        migrations.apply(database)
        table = fresh.chunks_table
        store = ChunkStore(fresh)
        rng = np.random.default_rng(27)
        with database.connection() as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pgstattuple")
            for document in range(60):  # about 1 MB of new full-text and trigram entries
                writes = []
                for order in range(10):
                    words = " ".join(f"w{rng.integers(10**9)}" for _ in range(60))
                    vector = np.asarray(rng.normal(size=fresh.embedding_dim), dtype=np.float32)
                    writes.append(ChunkWrite(order, "", words, vector / np.linalg.norm(vector), {}))
                store.replace_chunks(conn, NodeRef("pending", f"doc:{document}"), writes)
            pending = {
                index: conn.execute("SELECT pending_pages FROM pgstatginindex(%s)", (index,)).fetchone()[0]
                for index in (f"{table}_namespace_search_idx", f"{table}_namespace_identifier_idx")
            }
        database.close()
    assert all(0 < pages <= 32 for pages in pending.values()), pending


def _plans(database: Database, call: Any) -> tuple[list[Any], str]:
    """What ``call(conn)`` returned and the EXPLAIN of the statements it ran (sequential scans off: the
    table is small, the question is which index can answer the statement)."""
    with database.connection() as conn:
        conn.cursor_factory = RecordingCursor
        RecordingCursor.log = []
        found = call(conn)
        statements = list(RecordingCursor.log)
        conn.cursor_factory = psycopg.Cursor
        plans = []
        with conn.transaction(force_rollback=True):
            conn.execute("SET LOCAL enable_seqscan = off")
            for statement, params in statements:
                composed = sql.SQL("EXPLAIN ") + (
                    statement if isinstance(statement, sql.Composable) else sql.SQL(statement)
                )
                plans.append("\n".join(row[0] for row in conn.execute(composed, params).fetchall()))
    return found, "\n".join(plans)


def _index_condition(plan: str, index: str) -> str:
    lines = plan.splitlines()
    at = next(i for i, line in enumerate(lines) if f"Index Scan on {index}" in line)
    return lines[at + 1]


def test_the_full_text_ranking_reads_one_namespace_from_the_index(lexical_database: Database) -> None:
    settings = lexical_database.settings
    store = ChunkStore(settings)
    where = ChunkFilter(namespace="lexical-b")
    found, plan = _plans(lexical_database, lambda conn: store.text_candidates(conn, where, "subject7", 50))
    assert {c.node_key for c in found} == {"doc:7"} and len(found) == 4
    condition = _index_condition(plan, f"{settings.chunks_table}_namespace_search_idx")
    assert "namespace = 'lexical-b'" in condition and "search_document @@" in condition, plan


def test_the_trigram_ranking_reads_one_namespace_from_the_index(lexical_database: Database) -> None:
    settings = lexical_database.settings
    store = ChunkStore(settings)
    where = ChunkFilter(namespace="lexical-c")
    found, plan = _plans(
        lexical_database,
        lambda conn: store.trigram_candidates(conn, where, "see ref-12-3 please", 50, whole_query_chars=0),
    )
    assert [(c.node_key, c.chunk_order, c.score) for c in found] == [("doc:12", 3, 1.0)]
    condition = _index_condition(plan, f"{settings.chunks_table}_namespace_identifier_idx")
    assert "namespace = 'lexical-c'" in condition and "identifier_text ~~* t.pattern" in condition, plan
