"""What the change feed emits (docs/how-to/change-feed.md), read through ChangeFeedService.WatchChanges over
a real channel from the outbox written by the real write paths on the real database.

* Rolled-back writes emit nothing: a transaction rolled back, and a savepoint rolled back inside a
  committed transaction, leave no event and no gap in the cursors.
* A resume older than the retention answers FAILED_PRECONDITION with the oldest cursor kept.
* Filters (event types, predicates, key prefixes) and the superseded-fact reaction of the how-to.
* Bad requests answer INVALID_ARGUMENT with field violations.
* Redaction, purge, a closed fact, Retain and DeleteNode emit their events.
"""

from __future__ import annotations

from datetime import UTC
from datetime import datetime
from typing import Any

import grpc
import pytest
from google.protobuf import json_format

from common.kernel.config import Settings
from common.storage.change_feed.outbox import ChangeOutbox
from common.storage.database import Database
from memory_service_grpc_client import rpc_failure
from memory_service_grpc_client.memory.v1 import fact_service_pb2
from memory_service_grpc_client.memory.v1 import fact_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import observation_service_pb2
from tests.e2e.change_feed_helpers import WHEN
from tests.e2e.change_feed_helpers import drain_changes
from tests.e2e.change_feed_helpers import insert_observation
from tests.e2e.change_feed_helpers import load_observation
from tests.e2e.query_service_data import retain

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]


def test_rolled_back_writes_emit_nothing(
    settings: Settings, database: Database, query_channel: grpc.Channel, namespace: str
) -> None:
    with database.connection() as conn:
        insert_observation(conn, settings, namespace, f"{namespace}-committed")
    with pytest.raises(RuntimeError), database.connection() as conn:
        insert_observation(conn, settings, namespace, f"{namespace}-rolled-back")
        raise RuntimeError("the write fails after its statement")
    with database.connection() as conn:
        insert_observation(conn, settings, namespace, f"{namespace}-outer")
        with pytest.raises(RuntimeError), conn.transaction():
            insert_observation(conn, settings, namespace, f"{namespace}-savepoint")
            raise RuntimeError("the savepoint rolls back")
        insert_observation(conn, settings, namespace, f"{namespace}-after-savepoint")
    changes = drain_changes(query_channel, namespace)
    assert [(c.cursor, c.event_type, c.item_key) for c in changes] == [
        (1, "observation.recorded", f"{namespace}-committed"),
        (2, "observation.recorded", f"{namespace}-outer"),
        (3, "observation.recorded", f"{namespace}-after-savepoint"),
    ]
    with database.connection() as conn:
        pending = conn.execute("SELECT count(*) FROM change_feed_pending").fetchone()
    assert pending == (0,), "no transaction left a numbering behind"


def test_a_resume_older_than_the_retention_fails_with_the_oldest_cursor_kept(
    settings: Settings, database: Database, query_channel: grpc.Channel, namespace: str
) -> None:
    with database.connection() as conn:
        for index in range(5):
            insert_observation(conn, settings, namespace, f"{namespace}-{index}")
    pruned = ChangeOutbox(database).prune(
        before=datetime(2000, 1, 1, tzinfo=UTC), max_events=2, namespace=namespace
    )
    assert pruned == 3
    with pytest.raises(grpc.RpcError) as raised:
        drain_changes(query_channel, namespace, after=1)
    failure = rpc_failure(raised.value)
    assert failure.code == grpc.StatusCode.FAILED_PRECONDITION
    assert failure.reason == "CURSOR_EXPIRED"
    assert failure.metadata["oldest_cursor"] == "4"
    assert [c.cursor for c in drain_changes(query_channel, namespace, after=3)] == [4, 5]
    assert [c.cursor for c in drain_changes(query_channel, namespace, after=0)] == [4, 5], (
        "0 starts at the oldest kept"
    )


def test_a_service_reacts_to_a_superseded_fact_through_the_filters(
    ingest_channel: grpc.Channel, query_channel: grpc.Channel, namespace: str
) -> None:
    facts = fact_service_pb2_grpc.FactServiceStub(ingest_channel)

    def assert_fact(owner: str, start: str, supersedes: str = "") -> str:
        request = json_format.ParseDict(
            {
                "namespace": namespace,
                "facts": [
                    {
                        "subject": "customer:acme",
                        "predicate": "ACCOUNT_MANAGER",
                        "object": f"person:{owner}",
                        "valid_from": start,
                        "supersedes": supersedes,
                    }
                ],
            },
            fact_service_pb2.AssertFactsRequest(),
        )
        return str(facts.AssertFacts(request, timeout=60).results[0].fact_id)

    first = assert_fact("anna", "2024-01-01T00:00:00Z")
    second = assert_fact("boris", "2024-06-01T00:00:00Z", supersedes=first)
    assert_fact("other", "2024-01-01T00:00:00Z")  # created and in conflict, not superseded: filtered out
    superseded = drain_changes(
        query_channel, namespace, event_types=["fact.superseded"], predicates=["ACCOUNT_MANAGER"]
    )
    assert [(c.event_type, c.item_key) for c in superseded] == [("fact.superseded", first)]
    payload = json_format.MessageToDict(superseded[0].payload)
    assert payload["superseded_by"] == second
    assert payload["object"] == "person:anna" and payload["subject"] == "customer:acme"
    assert payload["valid_to"].startswith("2024-06-01")
    assert superseded[0].consistency_token.startswith("ct1-")
    families = drain_changes(query_channel, namespace, event_types=["fact.*"])
    assert {c.event_type for c in families} == {"fact.created", "fact.superseded", "fact.conflict_flagged"}
    by_prefix = drain_changes(query_channel, namespace, key_prefixes=["person:bo"])
    assert {c.item_key for c in by_prefix} == {"person:boris"}


def test_bad_requests_answer_invalid_argument_with_field_violations(query_channel: grpc.Channel) -> None:
    with pytest.raises(grpc.RpcError) as raised:
        drain_changes(query_channel, "", after=-1, event_types=["fact superseded"], heartbeat_seconds=301)
    failure = rpc_failure(raised.value)
    assert failure.code == grpc.StatusCode.INVALID_ARGUMENT
    assert {v.field for v in failure.violations} == {
        "namespace",
        "resume_after",
        "event_types[0]",
        "heartbeat_seconds",
    }


def test_redaction_purge_close_retain_and_delete_emit_their_events(
    ingest_channel: grpc.Channel, query_channel: grpc.Channel, namespace: str
) -> None:
    """The write paths beyond recording: each change arrives as its event type, with what it changed."""
    from google.protobuf import timestamp_pb2

    from memory_service_grpc_client.memory.v1 import document_service_pb2
    from memory_service_grpc_client.memory.v1 import document_service_pb2_grpc
    from memory_service_grpc_client.memory.v1 import observation_service_pb2_grpc

    observations = observation_service_pb2_grpc.ObservationServiceStub(ingest_channel)
    results = observations.RecordObservations(
        observation_service_pb2.RecordObservationsRequest(
            observations=[load_observation(namespace, i) for i in range(2)]
        ),
        timeout=60,
    ).results
    first, second = results[0].observation_id, results[1].observation_id
    observations.RedactObservation(
        observation_service_pb2.RedactObservationRequest(
            namespace=namespace, observation_id=first, reason="gdpr"
        ),
        timeout=60,
    )
    observations.PurgeObservation(
        observation_service_pb2.PurgeObservationRequest(
            namespace=namespace, observation_id=second, reason="gdpr"
        ),
        timeout=60,
    )
    facts = fact_service_pb2_grpc.FactServiceStub(ingest_channel)
    asserted = facts.AssertFacts(
        json_format.ParseDict(
            {
                "namespace": namespace,
                "facts": [
                    {"subject": "service:x", "predicate": "OWNED_BY", "object": "team:y", "valid_from": WHEN}
                ],
            },
            fact_service_pb2.AssertFactsRequest(),
        ),
        timeout=60,
    ).results[0]
    facts.CloseFact(
        fact_service_pb2.CloseFactRequest(
            namespace=namespace,
            fact_id=asserted.fact_id,
            valid_to=timestamp_pb2.Timestamp(seconds=1735689600),
        ),
        timeout=60,
    )
    retain(ingest_channel, namespace, "doc:runbook", "# Runbook\n\nSteps.")
    documents = document_service_pb2_grpc.DocumentServiceStub(ingest_channel)
    documents.DeleteNode(
        document_service_pb2.DeleteNodeRequest(
            namespace=namespace, natural_key="doc:runbook", reason="obsolete"
        ),
        timeout=60,
    )
    changes = drain_changes(query_channel, namespace)
    seen = [(c.event_type, c.item_key) for c in changes]
    assert [c.cursor for c in changes] == list(range(1, len(changes) + 1))
    for expected in [
        ("observation.recorded", first),
        ("observation.redacted", first),
        ("observation.purged", second),
        ("fact.evidence_lost", _fact_of(changes, "service:s1")),
        ("fact.created", asserted.fact_id),
        ("fact.closed", asserted.fact_id),
        ("document.retained", "doc:runbook"),
        ("node.deleted", "doc:runbook"),
    ]:
        assert expected in seen, (expected, seen)
    assert seen.index(("observation.recorded", first)) < seen.index(("observation.redacted", first))
    closed = next(c for c in changes if c.event_type == "fact.closed")
    assert json_format.MessageToDict(closed.payload)["valid_to"].startswith("2025-01-01")
    redacted = next(c for c in changes if c.event_type == "observation.redacted")
    assert json_format.MessageToDict(redacted.payload)["reason"] == "gdpr"


def _fact_of(changes: list[Any], subject: str) -> str:
    """The fact_id of the first fact created about ``subject``."""
    return next(c.item_key for c in changes if c.event_type == "fact.created" and c.subject_key == subject)
