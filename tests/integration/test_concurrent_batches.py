"""Concurrent RecordObservations batches that share nodes (docs/explanation/architecture.md): they wait for each other in one
order instead of deadlocking (common.storage.key_locks), and every observation is recorded once."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest

from common.storage.database import Database
from common.storage.key_locks import lock_node_keys
from common.storage.key_locks import node_key_lock_id
from ingest_service.observations.recorder import ObservationRecorder

pytestmark = pytest.mark.integration

PEOPLE = [f"person-{number:02d}" for number in range(30)]


def _batch(namespace: str, people: list[str], tag: str) -> list[dict[str, Any]]:
    """One observation per person, each upserting the person's node and asserting a fact about it."""
    return [
        {
            "namespace": namespace,
            "source": {"system": "hr", "stream": tag, "external_id": f"{tag}-{person}"},
            "kind": "person.updated",
            "occurred_at": "2026-01-01T00:00:00Z",
            "assertions": [
                {"entity": {"key": {"type": "person", "id": person}, "title": person}},
                {
                    "fact": {
                        "subject": {"type": "person", "id": person},
                        "predicate": "MEMBER_OF",
                        "object": f"team:{tag}",
                        "valid_from": "2026-01-01T00:00:00Z",
                    }
                },
            ],
        }
        for person in people
    ]


def _record_at_once(
    recorder: ObservationRecorder, batches: list[list[dict[str, Any]]]
) -> tuple[list[Any], list[BaseException]]:
    """Records each batch on a thread of its own, all released together; the results and the errors."""
    errors: list[BaseException] = []
    results: list[Any] = []
    start = threading.Barrier(len(batches))

    def record(batch: list[dict[str, Any]]) -> None:
        start.wait()
        try:
            results.extend(recorder.record_batch(batch))
        except BaseException as error:  # noqa: BLE001 - collected and asserted by the caller
            errors.append(error)

    threads = [threading.Thread(target=record, args=(batch,)) for batch in batches]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return results, errors


def test_concurrent_batches_sharing_nodes_in_opposite_orders_do_not_deadlock(
    database: Database, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    recorder = ObservationRecorder(database)
    batches = [
        _batch(namespace, PEOPLE if index % 2 == 0 else PEOPLE[::-1], f"team{index}") for index in range(4)
    ]
    with caplog.at_level(logging.INFO, logger="common.storage.database"):
        results, errors = _record_at_once(recorder, batches)
    assert not errors, errors
    assert len(results) == 4 * len(PEOPLE)
    assert all(result.created and result.status == "processed" for result in results)
    retries = [record.getMessage() for record in caplog.records if "transaction retry" in record.getMessage()]
    assert retries == []  # without the ordered key locks these batches deadlock and are re-run


def test_lock_node_keys_blocks_a_second_transaction_until_commit(database: Database, namespace: str) -> None:
    keys = [(namespace, "person:a"), (namespace, "person:b")]
    assert node_key_lock_id(namespace, "person:a") != node_key_lock_id(namespace, "person:b")
    assert node_key_lock_id(namespace, "person:a") != node_key_lock_id(namespace + "x", "person:a")
    with database.connection() as holder:
        assert lock_node_keys(holder, keys + [keys[0]]) == 2
        with database.connection() as other:
            try_lock = "SELECT pg_try_advisory_xact_lock(%s)"
            row = other.execute(try_lock, (node_key_lock_id(namespace, "person:b"),)).fetchone()
            assert row is not None and row[0] is False  # held by the first transaction
    with database.connection() as after:
        row = after.execute(try_lock, (node_key_lock_id(namespace, "person:b"),)).fetchone()
        assert row is not None and row[0] is True  # released at commit


def test_contended_keys_leave_out_existing_fact_objects(database: Database, namespace: str) -> None:
    from ingest_service.observations.validation import validate_observation

    recorder = ObservationRecorder(database)
    recorder.record_batch(_batch(namespace, ["existing"], "setup"))  # person:existing now exists
    raw = _batch(namespace, ["someone"], "t")[0]
    raw["assertions"].append(
        {
            "fact": {
                "subject": {"type": "person", "id": "someone"},
                "predicate": "KNOWS",
                "object": "person:existing",
                "valid_from": "2026-01-01T00:00:00Z",
            }
        }
    )
    item, violations = validate_observation(raw, "observations[0]")
    assert item is not None and not violations
    with database.connection() as conn:
        keys = {key for _, key in recorder._contended_keys(conn, [item])}
    # The entity/subject and the new object are locked; the existing object is only read.
    assert keys == {"person:someone", "team:t"}


def test_batches_creating_the_same_new_fact_objects_in_opposite_orders_do_not_deadlock(
    database: Database, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    recorder = ObservationRecorder(database)
    objects = [f"project:p{number:02d}" for number in range(20)]

    def batch(tag: str, order: list[str]) -> list[dict[str, Any]]:
        return [
            {
                "namespace": namespace,
                "source": {"system": "tracker", "stream": tag, "external_id": f"{tag}-{target}"},
                "kind": "work.assigned",
                "occurred_at": "2026-01-01T00:00:00Z",
                "assertions": [
                    {
                        "fact": {
                            "subject": {"type": "person", "id": f"{tag}-{target}"},
                            "predicate": "WORKS_ON",
                            "object": target,
                            "valid_from": "2026-01-01T00:00:00Z",
                        }
                    }
                ],
            }
            for target in order
        ]

    batches = [batch(f"w{index}", objects if index % 2 == 0 else objects[::-1]) for index in range(4)]
    with caplog.at_level(logging.INFO, logger="common.storage.database"):
        _, errors = _record_at_once(recorder, batches)
    assert not errors, errors
    assert not [r for r in caplog.records if "transaction retry" in r.getMessage()]
