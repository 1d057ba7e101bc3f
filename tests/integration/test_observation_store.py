"""ObservationStore.insert_many on the real database: one statement for a batch (issue 15), the same rows,
order and duplicate rule as one insert per observation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from common.kernel.config import Settings
from common.storage.database import Database
from common.storage.observation_store import ObservationStore

pytestmark = pytest.mark.integration


def _record(namespace: str, observation_id: str, **overrides: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "observation_id": observation_id,
        "namespace": namespace,
        "source_system": "tests",
        "source_stream": "store",
        "source_external_id": None,
        "kind": "note",
        "occurred_at": datetime(2026, 5, 1, 10, 0, 0, 123456, tzinfo=UTC),
        "actor": None,
        "subject": {"type": "package", "id": "zsh"},
        "scopes": ["team:core", "project:ü"],
        "content": "text with \"quotes\", a backslash \\ and 日本語",
        "data": {"n": 12345678901234567890, "x": 0.1, "nested": {"list": [1, "two", None, True]}},
        "assertions": [{"entity": {"type": "package", "id": "zsh"}}],
        "provenance": {"uri": "tests://store"},
        "status": "processed",
    }
    record.update(overrides)
    return record


def test_insert_many_stores_the_rows_in_order_and_skips_duplicates(
    settings: Settings, database: Database, namespace: str
) -> None:
    store = ObservationStore(settings)
    first = _record(namespace, f"{namespace}-1")
    # an occurred_at with another offset is stored as the same instant
    second = _record(
        namespace,
        f"{namespace}-2",
        occurred_at=datetime(2026, 5, 1, 13, 0, tzinfo=timezone(timedelta(hours=3))),
        actor={"type": "person", "id": "ann"},
        scopes=[],
        source_external_id="ext-2",
    )
    with database.connection() as conn:
        assert store.insert_many(conn, [first]) == {first["observation_id"]}
    with database.connection() as conn:
        # the stored one, then a new one sent twice: only the first of the two is inserted
        inserted = store.insert_many(conn, [first, second, {**second, "content": "the second copy"}])
        assert inserted == {second["observation_id"]}
        rows = conn.execute(
            "SELECT observation_id, occurred_at, actor, subject, scopes, content, data, assertions, provenance,"
            " source_external_id, recorded_order FROM observations WHERE namespace = %s"
            " ORDER BY recorded_order",
            (namespace,),
        ).fetchall()
    assert [row[0] for row in rows] == [first["observation_id"], second["observation_id"]]
    stored_first, stored_second = rows
    assert stored_first[1] == first["occurred_at"]
    assert stored_first[2] is None  # a JSON null actor is SQL NULL, as with one insert per observation
    assert stored_first[3] == first["subject"]
    assert stored_first[4] == first["scopes"]
    assert stored_first[5] == first["content"]
    assert stored_first[6] == first["data"]
    assert stored_first[7] == first["assertions"]
    assert stored_first[8] == first["provenance"]
    assert stored_first[9] is None
    assert stored_second[1] == datetime(2026, 5, 1, 10, 0, tzinfo=UTC)
    assert stored_second[2] == {"type": "person", "id": "ann"}
    assert stored_second[4] == []
    assert stored_second[5] == second["content"]  # the first copy of the id, not the second
    assert stored_second[9] == "ext-2"
    assert stored_first[10] < stored_second[10]


def test_insert_many_keeps_the_order_of_a_large_batch(
    settings: Settings, database: Database, namespace: str
) -> None:
    store = ObservationStore(settings)
    records = [_record(namespace, f"{namespace}-{index:04d}-{(7919 * index) % 1000}") for index in range(500)]
    with database.connection() as conn:
        assert len(store.insert_many(conn, records)) == 500
        stored = [
            row[0]
            for row in conn.execute(
                "SELECT observation_id FROM observations WHERE namespace = %s ORDER BY recorded_order",
                (namespace,),
            )
        ]
    assert stored == [record["observation_id"] for record in records]
