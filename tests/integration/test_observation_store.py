"""ObservationStore.insert_many on the real database: one statement for a batch, the same rows,
order and duplicate rule as one insert per observation."""

from __future__ import annotations

from datetime import UTC
from datetime import datetime
from datetime import timedelta
from datetime import timezone
from typing import Any

import pytest
from psycopg import sql

from common.kernel.config import Settings
from common.storage.database import Database
from common.storage.observation_store import EncodedObservation
from common.storage.observation_store import ObservationStore
from common.storage.observation_store import encode_observation

pytestmark = pytest.mark.integration

COLUMNS = (
    "observation_id, source_system, source_stream, source_external_id, kind, occurred_at, actor IS NULL,"
    " actor, subject, scopes, content, data, assertions, provenance, status"
)


def _record(namespace: str, observation_id: str, **overrides: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "observation_id": observation_id,
        "namespace": namespace,
        "source_system": "tests-system",
        "source_stream": "store-stream",
        "source_external_id": None,
        "kind": "note",
        "occurred_at": datetime(2026, 5, 1, 10, 0, 0, 123456, tzinfo=UTC),
        "actor": None,
        "subject": {"type": "package", "id": "zsh"},
        "scopes": ["team:core", "project:ü"],
        "content": 'text with "quotes", a backslash \\ and 日本語',
        "data": {"n": 12345678901234567890, "x": 0.1, "nested": {"list": [1, "two", None, True]}},
        "assertions": [{"entity": {"type": "package", "id": "zsh"}}],
        "provenance": {"uri": "tests://store"},
        "status": "processed",
    }
    record.update(overrides)
    return record


def _encoded(records: list[dict[str, Any]]) -> list[EncodedObservation]:
    return [encode_observation(record) for record in records]


def _stored(conn: Any, settings: Settings, namespace: str) -> list[tuple[Any, ...]]:
    statement = sql.SQL("SELECT {} FROM {} WHERE namespace = %s ORDER BY recorded_order").format(
        sql.SQL(COLUMNS), sql.Identifier(settings.observations_table)
    )
    return conn.execute(statement, (namespace,)).fetchall()


def test_insert_many_stores_every_column_keeps_the_first_copy_and_skips_stored_ids(
    settings: Settings, database: Database, namespace: str
) -> None:
    store = ObservationStore(settings)
    stored = _record(namespace, f"{namespace}-stored")
    # another offset is stored as the same instant; year 5 keeps its year (not read by DateStyle)
    second = _record(
        namespace,
        f"{namespace}-second",
        occurred_at=datetime(2026, 5, 1, 13, 0, tzinfo=timezone(timedelta(hours=3))),
        actor={"type": "person", "id": "ann"},
        scopes=[],
        source_external_id="ext-2",
        kind="upload",
        status="partially_processed",
    )
    ancient = _record(namespace, f"{namespace}-ancient", occurred_at=datetime(5, 5, 1, 10, 0, tzinfo=UTC))
    with database.connection() as conn:
        assert store.insert_many(conn, _encoded([stored])) == {stored["observation_id"]}
    with database.connection() as conn:
        inserted = store.insert_many(
            conn, _encoded([stored, second, {**second, "content": "a later copy"}, ancient])
        )
        assert inserted == {second["observation_id"], ancient["observation_id"]}
        rows = _stored(conn, settings, namespace)
    assert [row[0] for row in rows] == [
        stored["observation_id"],
        second["observation_id"],
        ancient["observation_id"],
    ]
    for row, record in zip(rows, (stored, second, ancient), strict=True):
        assert row[1:6] == (
            record["source_system"],
            record["source_stream"],
            record["source_external_id"],
            record["kind"],
            record["occurred_at"],
        )
        assert row[6] is (record["actor"] is None)  # SQL NULL, not the JSON null
        assert row[7:] == (
            record["actor"],
            record["subject"],
            record["scopes"],
            record["content"],  # the first copy of a repeated id, not the later one
            record["data"],
            record["assertions"],
            record["provenance"],
            record["status"],
        )
    assert rows[2][5].year == 5


def test_insert_many_numbers_a_batch_in_its_own_order(
    settings: Settings, database: Database, namespace: str
) -> None:
    store = ObservationStore(settings)
    # ids whose text order is not the batch order, so ordering by id would fail this test
    records = [_record(namespace, f"{namespace}-{(7919 * index) % 1009:04d}-{index}") for index in range(500)]
    with database.connection() as conn:
        assert len(store.insert_many(conn, _encoded(records))) == 500
        stored = [row[0] for row in _stored(conn, settings, namespace)]
    assert stored == [record["observation_id"] for record in records]
    assert stored != sorted(stored)


def test_encode_observation_refuses_a_record_without_every_column(
    settings: Settings, database: Database, namespace: str
) -> None:
    store = ObservationStore(settings)
    record = _record(namespace, f"{namespace}-partial")
    del record["kind"]
    with pytest.raises(KeyError, match="kind"):
        encode_observation(record)
    with database.connection() as conn:
        assert store.insert_many(conn, []) == set()
        assert _stored(conn, settings, namespace) == []
