"""Per-tenant vector indexes: built and dropped by `TenantVectorIndexes.synchronise`, used by
`ChunkRankings.vector_candidates`, results equal to the exact ranking, in a database of their own (the
synchronisation looks at every namespace of the table, so the shared test database stays untouched)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import psycopg
import pytest
from psycopg import sql

from common.kernel.config import Settings
from common.storage.chunks.rows import ChunkFilter
from common.storage.chunks.store import ChunkStore
from common.storage.chunks.store import ChunkWrite
from common.storage.chunks.store import NodeRef
from common.storage.chunks.tenant_vector_indexes import TenantVectorIndexes
from common.storage.chunks.tenant_vector_indexes import tenant_index_name
from common.storage.database import Database
from common.storage.schema import migrations
from ingest_service.embedding.tenant_indexes import TenantIndexWorker
from tests.conftest import fresh_database

pytestmark = pytest.mark.integration

BIG, SMALL = "tenant-big", "tenant-small"
OTHERS = ("tenant-other-1", "tenant-other-2", "tenant-other-3")
ROWS = {BIG: 240, SMALL: 30, **{name: 240 for name in OTHERS}}


@pytest.fixture(scope="module")
def tenant_settings(settings: Settings) -> Iterator[Settings]:
    with fresh_database(settings) as fresh:
        yield fresh


@pytest.fixture(scope="module")
def tenant_database(tenant_settings: Settings) -> Iterator[Database]:
    database = Database(tenant_settings, prepare=migrations.apply)
    migrations.apply(database)
    store = ChunkStore(tenant_settings)
    rng = np.random.default_rng(11)
    with database.connection() as conn:
        for namespace, rows in ROWS.items():
            for document in range(rows // 10):
                writes = []
                for order in range(10):
                    vector = np.asarray(rng.normal(size=tenant_settings.embedding_dim), dtype=np.float32)
                    vector /= np.linalg.norm(vector)
                    meta = {"kind": "rare"} if document == 0 and order < 3 else {}
                    writes.append(
                        ChunkWrite(order, "", f"chunk {document}-{order} of {namespace}", vector, meta)
                    )
                store.replace_chunks(conn, NodeRef(namespace, f"doc:{document}"), writes)
        conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(tenant_settings.chunks_table)))
    yield database
    database.close()


def _registered(database: Database) -> dict[str, str]:
    with database.connection() as conn:
        rows = conn.execute(
            sql.SQL("SELECT namespace, index_name FROM {}").format(
                sql.Identifier(database.settings.chunks_table + "_tenant_vector_indexes")
            )
        ).fetchall()
    return dict(rows)


def _index_definition(database: Database, name: str) -> str | None:
    with database.connection() as conn:
        row = conn.execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s", (name,)).fetchone()
    return row[0] if row else None


def _index_scans(database: Database, name: str) -> int:
    with database.connection() as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(
            "SELECT idx_scan FROM pg_stat_user_indexes WHERE indexrelname = %s", (name,)
        ).fetchone()
    return int(row[0]) if row else 0


def _exact(
    conn: psycopg.Connection[Any], table: str, where: str, vector: np.ndarray, limit: int
) -> list[Any]:
    return conn.execute(
        sql.SQL(
            "SELECT node_key, chunk_order FROM {} WHERE namespace = %s AND embedding IS NOT NULL {}"
            " ORDER BY (embedding <=> %s) + 0 LIMIT %s"
        ).format(sql.Identifier(table), sql.SQL(where)),
        (BIG, vector, limit),
    ).fetchall()


def test_synchronise_builds_indexes_for_large_tenants_and_the_ranking_uses_them(
    tenant_database: Database, tenant_settings: Settings
) -> None:
    indexes = TenantVectorIndexes(tenant_settings)
    changes = indexes.synchronise(min_rows=200)
    built = {change.namespace for change in changes if change.action == "built"}
    assert built == {BIG, *OTHERS}  # the small tenant stays on the table's index
    assert indexes.synchronise(min_rows=200) == []  # idempotent
    registered = _registered(tenant_database)
    assert set(registered) == built
    name = tenant_index_name(tenant_settings.chunks_table, BIG)
    assert registered[BIG] == name
    definition = _index_definition(tenant_database, name)
    assert definition is not None and "hnsw" in definition and f"'{BIG}'" in definition

    store = ChunkStore(tenant_settings)
    rng = np.random.default_rng(5)
    before = _index_scans(tenant_database, name)
    with tenant_database.read_connection() as conn:
        for _ in range(5):
            vector = np.asarray(rng.normal(size=tenant_settings.embedding_dim), dtype=np.float32)
            vector /= np.linalg.norm(vector)
            found = store.vector_candidates(conn, ChunkFilter(namespace=BIG), vector, 10)
            exact = _exact(conn, tenant_settings.chunks_table, "", vector, 10)
            assert [(c.node_key, c.chunk_order) for c in found] == [tuple(row) for row in exact]
        assert conn.execute("SHOW enable_sort").fetchone() == ("on",)  # the forcing did not outlive the call
        conn.execute("SELECT pg_stat_force_next_flush()")
    # The statistics reach the view when the backend reports them (at most about a second later).
    deadline = time.monotonic() + 10
    while _index_scans(tenant_database, name) < before + 5 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _index_scans(tenant_database, name) >= before + 5


def test_a_filter_the_tenant_index_cannot_fill_falls_back_to_the_exact_ranking(
    tenant_database: Database, tenant_settings: Settings
) -> None:
    TenantVectorIndexes(tenant_settings).synchronise(min_rows=200)
    store = ChunkStore(tenant_settings)
    vector = np.asarray(np.random.default_rng(9).normal(size=tenant_settings.embedding_dim), dtype=np.float32)
    vector /= np.linalg.norm(vector)
    with tenant_database.connection() as conn:  # inside a caller's transaction: a savepoint
        found = store.vector_candidates(conn, ChunkFilter(namespace=BIG, meta={"kind": "rare"}), vector, 10)
        exact = _exact(conn, tenant_settings.chunks_table, 'AND meta @> \'{"kind": "rare"}\'', vector, 10)
        assert conn.execute("SHOW enable_sort").fetchone() == ("on",)
    assert len(found) == 3
    assert [(c.node_key, c.chunk_order) for c in found] == [tuple(row) for row in exact]


def test_a_failed_ranking_statement_leaves_the_connection_as_it_was(
    tenant_database: Database, tenant_settings: Settings
) -> None:
    TenantVectorIndexes(tenant_settings).synchronise(min_rows=200)
    store = ChunkStore(tenant_settings)
    with tenant_database.read_connection() as conn:
        with pytest.raises(
            psycopg.Error
        ):  # a vector of the wrong dimension fails inside the forced statement
            store.vector_candidates(conn, ChunkFilter(namespace=BIG), np.ones(3, dtype=np.float32), 10)
        assert conn.execute("SHOW enable_sort").fetchone() == ("on",)


def test_indexes_of_tenants_below_half_the_threshold_are_dropped(
    tenant_database: Database, tenant_settings: Settings
) -> None:
    indexes = TenantVectorIndexes(tenant_settings)
    indexes.synchronise(min_rows=200)
    assert indexes.synchronise(min_rows=400) == []  # 240 rows: above half of 400, kept
    changes = indexes.synchronise(min_rows=482)
    assert {(change.namespace, change.action) for change in changes} == {
        (namespace, "dropped") for namespace in (BIG, *OTHERS)
    }
    assert _registered(tenant_database) == {}
    assert _index_definition(tenant_database, tenant_index_name(tenant_settings.chunks_table, BIG)) is None
    store = ChunkStore(tenant_settings)
    vector = np.asarray(np.random.default_rng(3).normal(size=tenant_settings.embedding_dim), dtype=np.float32)
    vector /= np.linalg.norm(vector)
    store.tenant_indexes.forget()
    with tenant_database.read_connection() as conn:  # without an index: the planner's exact plan, same rows
        found = store.vector_candidates(conn, ChunkFilter(namespace=BIG), vector, 10)
        exact = _exact(conn, tenant_settings.chunks_table, "", vector, 10)
    assert [(c.node_key, c.chunk_order) for c in found] == [tuple(row) for row in exact]


def test_the_ingest_services_worker_builds_them_on_its_interval(
    tenant_database: Database, tenant_settings: Settings
) -> None:
    TenantVectorIndexes(tenant_settings).synchronise(min_rows=0)  # none left
    assert _registered(tenant_database) == {}
    assert TenantIndexWorker(tenant_settings).interval == 0  # off by default: the command only
    worker = TenantIndexWorker(
        tenant_settings.model_copy(
            update={"tenant_vector_index_interval_seconds": 0.1, "tenant_vector_index_min_rows": 200}
        )
    )
    worker.start()
    try:
        deadline = time.monotonic() + 60
        while set(_registered(tenant_database)) != {BIG, *OTHERS} and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        worker.stop()
    assert set(_registered(tenant_database)) == {BIG, *OTHERS}


def test_cb_index_tenants_builds_and_reports(tenant_database: Database, tenant_settings: Settings) -> None:
    from typer.testing import CliRunner

    from memory_service_tools.cli.app import app

    TenantVectorIndexes(tenant_settings).synchronise(min_rows=0)
    runner = CliRunner()
    environment = {"CB_DATABASE_URL": tenant_settings.database_url}
    built = runner.invoke(app, ["index-tenants", "--min-rows", "200"], env=environment)
    assert built.exit_code == 0, built.output
    assert sorted(line.split()[0] for line in built.output.splitlines()) == ["built"] * 4
    assert f"namespace={BIG} chunks=240" in built.output
    again = runner.invoke(app, ["index-tenants", "--min-rows", "200"], env=environment)
    assert again.exit_code == 0 and again.output.strip() == "tenant vector indexes up to date"
    assert set(_registered(tenant_database)) == {BIG, *OTHERS}


@pytest.fixture(scope="module")
def solo_database(settings: Settings) -> Iterator[Database]:
    """A table that one namespace (300 chunks) holds almost alone (and 20 chunks of another)."""
    with fresh_database(settings) as fresh:
        database = Database(fresh, prepare=migrations.apply)
        migrations.apply(database)
        store = ChunkStore(fresh)
        rng = np.random.default_rng(13)
        with database.connection() as conn:
            for namespace, rows in (("solo", 300), ("tiny", 20)):
                for document in range(rows // 10):
                    writes = []
                    for order in range(10):
                        vector = np.asarray(rng.normal(size=fresh.embedding_dim), dtype=np.float32)
                        writes.append(
                            ChunkWrite(
                                order,
                                "",
                                f"{namespace} {document}-{order}",
                                vector / np.linalg.norm(vector),
                                {},
                            )
                        )
                    store.replace_chunks(conn, NodeRef(namespace, f"doc:{document}"), writes)
            conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(fresh.chunks_table)))
        yield database
        database.close()


def test_a_namespace_holding_most_of_the_table_is_ranked_by_the_tables_index(solo_database: Database) -> None:
    settings = solo_database.settings
    indexes = TenantVectorIndexes(settings)
    changes = indexes.synchronise(min_rows=200)
    assert [(change.namespace, change.action) for change in changes] == [("solo", "registered")]
    assert _registered(solo_database) == {"solo": None}
    table_index = settings.chunks_table + "_embedding_idx"
    before = _index_scans(solo_database, table_index)
    store = ChunkStore(settings)
    rng = np.random.default_rng(17)
    with solo_database.read_connection() as conn:
        for _ in range(3):
            vector = np.asarray(rng.normal(size=settings.embedding_dim), dtype=np.float32)
            vector /= np.linalg.norm(vector)
            found = store.vector_candidates(conn, ChunkFilter(namespace="solo"), vector, 10)
            exact = conn.execute(
                sql.SQL(
                    "SELECT node_key, chunk_order FROM {} WHERE namespace = 'solo'"
                    " ORDER BY (embedding <=> %s) + 0 LIMIT 10"
                ).format(sql.Identifier(settings.chunks_table)),
                (vector,),
            ).fetchall()
            assert [(c.node_key, c.chunk_order) for c in found] == [tuple(row) for row in exact]
        assert conn.execute("SHOW enable_sort").fetchone() == ("on",)
        conn.execute("SELECT pg_stat_force_next_flush()")
    deadline = time.monotonic() + 10
    while _index_scans(solo_database, table_index) < before + 3 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _index_scans(solo_database, table_index) >= before + 3
    # Below half the threshold it is unregistered, and the table's index stays.
    changes = indexes.synchronise(min_rows=1000)
    assert [(change.namespace, change.action) for change in changes] == [("solo", "unregistered")]
    assert _registered(solo_database) == {}
    assert _index_definition(solo_database, table_index) is not None
