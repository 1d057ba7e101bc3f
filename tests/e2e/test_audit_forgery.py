"""The audit trail cannot be forged through any write path.

A real trace holds one explicit event. Then a writer tries, through every path that writes nodes or
facts (RecordObservations, AssertFacts, Reconcile; Retain and PutChunks are covered by
test_audit_and_deletion), to add an event to that trace, to move it to another trace, or to overwrite
it: an ``audit_event:``/``pc_trace:`` key as an entity or a fact end, an audit type, the ``IN_TRACE``
predicate. Each attempt is INVALID_ARGUMENT naming the field, and the trace reads exactly as before.
"""

from __future__ import annotations

import uuid
from typing import Any

import grpc
import pytest
from google.protobuf import json_format

from memory_service_grpc_client import rpc_failure
from memory_service_grpc_client.memory.v1 import fact_service_pb2
from memory_service_grpc_client.memory.v1 import fact_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import knowledge_pb2
from memory_service_grpc_client.memory.v1 import observation_service_pb2
from memory_service_grpc_client.memory.v1 import observation_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import snapshot_service_pb2
from memory_service_grpc_client.memory.v1 import snapshot_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import trace_service_pb2
from memory_service_grpc_client.memory.v1 import trace_service_pb2_grpc
from tests.e2e.audit_reads import record_audit_event

pytestmark = pytest.mark.e2e

WHEN = "2026-11-01T00:00:00Z"


def _refused_fields(call: Any, request: Any) -> list[str]:
    """The violated field paths of a refused call (the whole batch was invalid: INVALID_ARGUMENT)."""
    with pytest.raises(grpc.RpcError) as raised:
        call(request, timeout=60)
    failure = rpc_failure(raised.value)
    assert failure.code == grpc.StatusCode.INVALID_ARGUMENT, failure
    return sorted(violation.field for violation in failure.violations)


def _trail(channel: grpc.Channel, namespace: str, trace_id: str) -> list[tuple[str, str, str, str]]:
    trace = (
        trace_service_pb2_grpc.TraceServiceStub(channel)
        .GetTrace(trace_service_pb2.GetTraceRequest(namespace=namespace, trace_id=trace_id), timeout=60)
        .trace
    )
    return [
        (
            e.audit_event.event_id,
            e.audit_event.action,
            e.audit_event.target_key,
            json_format.MessageToJson(e.audit_event.details),
        )
        for e in trace.entries
        if e.HasField("audit_event")
    ]


def test_no_write_path_can_forge_or_move_an_audit_event(
    ingest_channel: grpc.Channel, query_channel: grpc.Channel, namespace: str
) -> None:
    trace_id = "victim-" + uuid.uuid4().hex[:8]
    event = record_audit_event(ingest_channel, namespace, "export", trace_id, details={"rows": 12})
    event_key, trace_key = f"audit_event:{event.event_id}", f"pc_trace:{trace_id}"
    before = _trail(query_channel, namespace, trace_id)
    assert [entry[0] for entry in before] == [event.event_id]

    attacks: dict[str, dict[str, Any]] = {
        "overwrite the event": {"entity": {"key": event_key, "title": "nothing happened"}},
        "a fake event by type": {"entity": {"key": "note:fake", "type": "audit_event"}},
        "a fake trace anchor": {"entity": {"key": {"type": "pc_trace", "id": "elsewhere"}}},
        "move the event": {
            "fact": {"subject": event_key, "predicate": "IN_TRACE", "object": "pc_trace:other"}
        },
        "add to the trace": {"fact": {"subject": "note:fake", "predicate": "IN_TRACE", "object": "thing:x"}},
        "hang facts on the anchor": {
            "fact": {"subject": "person:eve", "predicate": "OWNS", "object": trace_key}
        },
    }
    expected = {
        "overwrite the event": ["observations[0].assertions[0].entity.key"],
        "a fake event by type": ["observations[0].assertions[0].entity.type"],
        "a fake trace anchor": ["observations[0].assertions[0].entity.key"],
        "move the event": [
            "observations[0].assertions[0].fact.object",
            "observations[0].assertions[0].fact.predicate",
            "observations[0].assertions[0].fact.subject",
        ],
        "add to the trace": ["observations[0].assertions[0].fact.predicate"],
        "hang facts on the anchor": ["observations[0].assertions[0].fact.object"],
    }
    observations = observation_service_pb2_grpc.ObservationServiceStub(ingest_channel)
    for name, assertion in attacks.items():
        observation = {
            "namespace": namespace,
            "source": {"system": "attacker", "stream": "s", "external_id": name},
            "kind": "note",
            "occurred_at": WHEN,
            "assertions": [assertion],
        }
        request = observation_service_pb2.RecordObservationsRequest(
            observations=[json_format.ParseDict(observation, knowledge_pb2.Observation())]
        )
        assert _refused_fields(observations.RecordObservations, request) == expected[name], name

    facts = fact_service_pb2_grpc.FactServiceStub(ingest_channel)
    for subject, predicate, object_, fields in (
        (
            event_key,
            "IN_TRACE",
            "pc_trace:other",
            ["facts[0].object", "facts[0].predicate", "facts[0].subject"],
        ),
        ("person:eve", "WROTE", event_key, ["facts[0].object"]),
        ("note:fake", "IN_TRACE", "thing:x", ["facts[0].predicate"]),
    ):
        assertion = json_format.ParseDict(
            {"subject": subject, "predicate": predicate, "object": object_, "valid_from": WHEN},
            knowledge_pb2.FactAssertion(),
        )
        request = fact_service_pb2.AssertFactsRequest(namespace=namespace, facts=[assertion])
        assert _refused_fields(facts.AssertFacts, request) == fields

    snapshots = snapshot_service_pb2_grpc.SnapshotServiceStub(ingest_channel)
    for entities, snapshot_facts, fields in (
        ([{"key": event_key}], [], ["entities[0].key"]),
        ([{"key": "note:fake", "type": "pc_trace"}], [], ["entities[0].type"]),
        (
            [],
            [{"subject": event_key, "predicate": "IN_TRACE", "object": trace_key}],
            [
                "facts[0].object",
                "facts[0].predicate",
                "facts[0].subject",
            ],
        ),
    ):
        request = json_format.ParseDict(
            {
                "namespace": namespace,
                "source": "attacker",
                "scope": "all",
                "snapshot_id": uuid.uuid4().hex,
                "snapshot_time": WHEN,
                "entities": entities,
                "facts": snapshot_facts,
            },
            snapshot_service_pb2.ReconcileRequest(),
        )
        assert _refused_fields(snapshots.Reconcile, request) == fields

    assert _trail(query_channel, namespace, trace_id) == before
    with pytest.raises(grpc.RpcError) as other:
        _trail(query_channel, namespace, "other")
    assert other.value.code() == grpc.StatusCode.NOT_FOUND
