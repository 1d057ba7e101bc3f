"""Attacks on B from namespace A through the writing RPCs (observations, facts, documents, chunks,
snapshots, vaults, deletion, audit events), for `tests/e2e/test_namespace_isolation.py`."""

from __future__ import annotations

import functools
import uuid
from typing import Any

import grpc
from google.protobuf import json_format

from memory_service_grpc_client.memory.v1 import audit_service_pb2
from memory_service_grpc_client.memory.v1 import audit_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import document_service_pb2
from memory_service_grpc_client.memory.v1 import document_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import fact_service_pb2
from memory_service_grpc_client.memory.v1 import fact_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import knowledge_pb2
from memory_service_grpc_client.memory.v1 import observation_service_pb2
from memory_service_grpc_client.memory.v1 import observation_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import source_service_pb2
from memory_service_grpc_client.memory.v1 import source_service_pb2_grpc
from tests.e2e.isolation_world import World
from tests.e2e.isolation_world import b_untouched
from tests.e2e.isolation_world import get_trace_events
from tests.e2e.isolation_world import invoke
from tests.e2e.isolation_world import list_facts
from tests.e2e.isolation_world import no_cross_namespace_edges
from tests.e2e.isolation_world import refusal_code
from tests.e2e.isolation_world import request_class_of


def _remove_b_observation(world: World, rpc: str, request_class: Any) -> None:
    """A removal of B's observation named from A (``rpc`` of ObservationService): NOT_FOUND, B unchanged."""
    with world.ingest(world.attacker) as channel:
        call = getattr(observation_service_pb2_grpc.ObservationServiceStub(channel), rpc)
        code = refusal_code(
            lambda: call(
                request_class(namespace=world.a.ns, observation_id=world.b.observation_id, reason="attack"),
                timeout=60,
            )
        )
    assert code == grpc.StatusCode.NOT_FOUND
    b_untouched(world)


def redact(world: World) -> None:
    _remove_b_observation(world, "RedactObservation", observation_service_pb2.RedactObservationRequest)


def purge(world: World) -> None:
    _remove_b_observation(world, "PurgeObservation", observation_service_pb2.PurgeObservationRequest)


def embedding_backlog(world: World) -> None:
    """The backlog of every namespace (an empty namespace) needs a grant on "*"; the attacker's own
    namespace answers with that namespace's backlog only."""
    with world.ingest(world.attacker) as channel:
        stub = observation_service_pb2_grpc.ObservationServiceStub(channel)
        code = refusal_code(
            lambda: stub.GetEmbeddingBacklog(
                observation_service_pb2.GetEmbeddingBacklogRequest(namespace=""), timeout=60
            )
        )
        assert code == grpc.StatusCode.PERMISSION_DENIED
        own = stub.GetEmbeddingBacklog(
            observation_service_pb2.GetEmbeddingBacklogRequest(namespace=world.a.ns), timeout=60
        )
    assert own.pending_chunks >= 0


def close_fact(world: World) -> None:
    with world.ingest(world.attacker) as channel:
        stub = fact_service_pb2_grpc.FactServiceStub(channel)
        for fact_id in (world.b.fact_id, world.b.asserted_fact_id):
            close = fact_service_pb2.CloseFactRequest(namespace=world.a.ns, fact_id=fact_id, reason="attack")
            code = refusal_code(functools.partial(stub.CloseFact, close, timeout=60))
            assert code == grpc.StatusCode.NOT_FOUND
    b_untouched(world)


def assert_facts(world: World) -> None:
    """A fact in A whose ends name B's keys creates A's own (placeholder) nodes, never an edge into B."""
    b = world.b
    with world.ingest(world.attacker) as channel:
        result = (
            fact_service_pb2_grpc.FactServiceStub(channel)
            .AssertFacts(
                fact_service_pb2.AssertFactsRequest(
                    namespace=world.a.ns,
                    facts=[
                        json_format.ParseDict(
                            {
                                "subject": b.target_person,
                                "predicate": "OWNS",
                                "object": b.target_doc,
                                "valid_from": "2024-05-02T00:00:00Z",
                            },
                            knowledge_pb2.FactAssertion(),
                        )
                    ],
                ),
                timeout=60,
            )
            .results[0]
        )
    assert not result.error and result.fact_id != b.asserted_fact_id  # fact_ids include the namespace
    b_untouched(world)
    no_cross_namespace_edges(world)


def retain(world: World) -> None:
    """Retain in A under B's key, linking to B-only keys: A's own node, links not found, B unchanged."""
    b = world.b
    with world.ingest(world.attacker) as channel:
        response = document_service_pb2_grpc.DocumentServiceStub(channel).Retain(
            document_service_pb2.RetainRequest(
                namespace=world.a.ns,
                natural_key=f"doc:attack-{uuid.uuid4().hex[:6]}",
                content="attack content",
                links=[b.doc, b.chunks_doc],
            ),
            timeout=120,
        )
        assert list(response.linked) == [] and sorted(response.missing_links) == sorted([b.doc, b.chunks_doc])
        response = document_service_pb2_grpc.DocumentServiceStub(channel).Retain(
            document_service_pb2.RetainRequest(
                namespace=world.a.ns, natural_key=b.target_doc, content="attack content"
            ),
            timeout=120,
        )
    with world.query(world.attacker) as channel:  # A's own node of that key; B's is not touched
        source = source_service_pb2_grpc.SourceServiceStub(channel).GetSource(
            source_service_pb2.GetSourceRequest(namespace=world.a.ns, natural_key=b.target_doc), timeout=60
        )
    assert source.source.content == "attack content"
    b_untouched(world)
    no_cross_namespace_edges(world)


def put_chunks(world: World) -> None:
    b = world.b
    with world.ingest(world.attacker) as channel:
        response = document_service_pb2_grpc.DocumentServiceStub(channel).PutChunks(
            document_service_pb2.PutChunksRequest(
                namespace=world.a.ns,
                natural_key=b.target_doc,
                chunks=[document_service_pb2.ChunkInput(chunk_order=0, text="attack chunk")],
                links=[b.doc],
            ),
            timeout=120,
        )
    assert response.chunk_count >= 1
    with world.query(world.both) as channel:
        source = source_service_pb2_grpc.SourceServiceStub(channel).GetSource(
            source_service_pb2.GetSourceRequest(namespace=b.ns, natural_key=b.chunks_doc), timeout=60
        )
    assert b.marker in source.source.content and "attack" not in source.source.content
    b_untouched(world)
    no_cross_namespace_edges(world)


def record_observations(world: World) -> None:
    """The same source identity in A is a different observation (ids include the namespace)."""
    b = world.b
    observation = json_format.ParseDict(
        {
            "namespace": world.a.ns,
            "source": {"system": "iso", "stream": "notes", "external_id": "same-in-both-attack"},
            "kind": "note",
            "occurred_at": "2024-05-03T10:00:00Z",
            "content": "attack observation",
            "assertions": [
                {
                    "fact": {
                        "subject": b.target_person,
                        "predicate": "WORKS_ON",
                        "object": b.target_doc,
                        "valid_from": "2024-05-01T10:00:00Z",
                    }
                }
            ],
        },
        knowledge_pb2.Observation(),
    )
    with world.ingest(world.attacker) as channel:
        result = (
            observation_service_pb2_grpc.ObservationServiceStub(channel)
            .RecordObservations(
                observation_service_pb2.RecordObservationsRequest(observations=[observation]), timeout=120
            )
            .results[0]
        )
    assert result.status == "processed" and result.observation_id != b.observation_id
    b_untouched(world)
    no_cross_namespace_edges(world)


def reconcile_attack(world: World) -> None:
    """A complete snapshot of the same (source, scope) in A never closes or changes B's facts of it."""
    b = world.b
    fact = {
        "subject": b.target_person,
        "predicate": "MEMBER_OF",
        "object": "team:core",
        "valid_from": "2024-01-01T00:00:00Z",
    }

    def reconcile(token: str, namespace: str, snapshot_id: str, facts: list[dict[str, Any]]) -> Any:
        request = json_format.ParseDict(
            {
                "namespace": namespace,
                "source": "iso-source",
                "scope": "team:core",
                "snapshot_id": snapshot_id,
                "snapshot_time": "2024-06-01T00:00:00Z",
                "facts": facts,
                "allow_mass_sweep": True,  # an empty snapshot closes all of the scope: said so explicitly
            },
            request_class_of("/memory.v1.SnapshotService/Reconcile")[0](),
        )
        return invoke(world, "/memory.v1.SnapshotService/Reconcile", request, token)

    reconcile(world.writers["b"], b.ns, "b-1", [fact])
    reconcile(world.attacker, world.a.ns, "a-1", [fact])
    reconcile(world.attacker, world.a.ns, "a-2", [])  # closes A's copy only
    with world.query(world.both) as channel:
        b_facts = list_facts(channel, b.ns, subject=b.target_person, predicate="MEMBER_OF")
        a_facts = list_facts(channel, world.a.ns, subject=b.target_person, predicate="MEMBER_OF")
    assert len(b_facts) == 1 and not b_facts[0].HasField("valid_to")
    assert a_facts and all(f.HasField("valid_to") for f in a_facts)
    no_cross_namespace_edges(world)


def delete_node(world: World) -> None:
    """DeleteNode in A naming B's keys: NOT_FOUND (A has no such node), B unchanged."""
    b = world.b
    with world.ingest(world.attacker) as channel:
        stub = document_service_pb2_grpc.DocumentServiceStub(channel)
        for key in (b.doc, b.chunks_doc, b.text_key, b.person):
            request = document_service_pb2.DeleteNodeRequest(
                namespace=world.a.ns, natural_key=key, reason="attack"
            )
            code = refusal_code(functools.partial(stub.DeleteNode, request, timeout=60))
            assert code == grpc.StatusCode.NOT_FOUND, key
    b_untouched(world)


def record_audit_event(world: World) -> None:
    """An event in A on B's trace id about B's key is A's own: B's trace keeps only B's event, and no
    edge joins A's event to B's trace anchor."""
    b = world.b
    trace_id = "iso-audit-" + uuid.uuid4().hex
    with world.ingest(world.writers["b"]) as channel:
        audit_service_pb2_grpc.AuditServiceStub(channel).RecordAuditEvent(
            audit_service_pb2.RecordAuditEventRequest(
                namespace=b.ns, action="export", trace_id=trace_id, target_key=b.doc
            ),
            timeout=60,
        )
    with world.ingest(world.attacker) as channel:
        event = (
            audit_service_pb2_grpc.AuditServiceStub(channel)
            .RecordAuditEvent(
                audit_service_pb2.RecordAuditEventRequest(
                    namespace=world.a.ns,
                    action="attack",
                    trace_id=trace_id,
                    target_key=b.doc,
                    client_event_id="attack-1",
                ),
                timeout=60,
            )
            .event
        )
    assert event.principal == "attacker"
    with world.query(world.both) as channel:
        b_events = get_trace_events(channel, b.ns, trace_id)
        a_events = get_trace_events(channel, world.a.ns, trace_id)
    assert [(e.action, e.principal) for e in b_events] == [("export", "writer-b")]
    assert [(e.action, e.principal) for e in a_events] == [("attack", "attacker")]
    no_cross_namespace_edges(world)


def reconcile_stream(world: World) -> None:
    """The streamed snapshot: same as `reconcile_attack`, and a later message naming B (a second header) is
    refused with PERMISSION_DENIED before the handler sees it; parts name no namespace at all."""
    b = world.b
    fact = {
        "subject": b.target_person,
        "predicate": "MEMBER_OF",
        "object": "team:stream",
        "valid_from": "2024-01-01T00:00:00Z",
    }
    request_class = request_class_of("/memory.v1.SnapshotService/ReconcileStream")[0]

    def messages(namespace: str, snapshot_id: str, facts: list[dict[str, Any]]) -> list[Any]:
        header = {
            "namespace": namespace,
            "source": "iso-stream",
            "scope": "team:stream",
            "snapshot_id": snapshot_id,
            "snapshot_time": "2024-06-01T00:00:00Z",
            "allow_mass_sweep": True,  # an empty snapshot closes all of the scope: said so explicitly
        }
        return [
            json_format.ParseDict({"header": header}, request_class()),
            json_format.ParseDict({"items": {"facts": facts}}, request_class()),
            json_format.ParseDict({"end": {"fact_count": len(facts)}}, request_class()),
        ]

    method = "/memory.v1.SnapshotService/ReconcileStream"
    invoke(world, method, messages(b.ns, "b-1", [fact]), world.writers["b"])
    invoke(world, method, messages(world.a.ns, "a-1", [fact]), world.attacker)
    invoke(world, method, messages(world.a.ns, "a-2", []), world.attacker)  # closes A's copy only
    smuggled = messages(world.a.ns, "a-3", [])[:1] + messages(b.ns, "a-3", [])  # a second header naming B
    assert (
        refusal_code(functools.partial(invoke, world, method, smuggled, world.attacker))
        == grpc.StatusCode.PERMISSION_DENIED
    )
    unknown_token = functools.partial(
        invoke, world, method, messages(world.a.ns, "a-4", []), "cbt_not-a-token"
    )
    assert refusal_code(unknown_token) == grpc.StatusCode.UNAUTHENTICATED
    with world.query(world.both) as channel:
        b_facts = list_facts(channel, b.ns, subject=b.target_person, predicate="MEMBER_OF")
        a_facts = list_facts(channel, world.a.ns, subject=b.target_person, predicate="MEMBER_OF")
    streamed = [f for f in b_facts if f.object == "team:stream"]
    assert len(streamed) == 1 and not streamed[0].HasField("valid_to")
    assert a_facts and all(f.HasField("valid_to") for f in a_facts if f.object == "team:stream")
    no_cross_namespace_edges(world)


def vault_run(world: World) -> None:
    """A vault run in A whose document claims B's target key and links to B's documents writes only into
    A (no edge, fact or placeholder reaches B), A's sweep never touches B, and a second header naming B
    inside A's stream is refused with PERMISSION_DENIED."""
    b = world.b
    method = "/memory.v1.VaultService/IngestVault"
    request_class = request_class_of(method)[0]

    def messages(namespace: str, documents: list[dict[str, Any]]) -> list[Any]:
        return [
            json_format.ParseDict(
                {"header": {"namespace": namespace, "source": "iso-vault"}}, request_class()
            ),
            json_format.ParseDict({"documents": {"documents": documents}}, request_class()),
            json_format.ParseDict({"end": {"document_count": len(documents)}}, request_class()),
        ]

    claim = {
        "path": "claim.md",
        "content": (
            f"---\nnatural_key: {b.target_doc}\nsuperseded_by: {b.doc}\n---\n"
            f"# attack\n\nSee [[{b.doc}]] and [b](../{b.tag}-only.md)."
        ),
    }
    response = invoke(world, method, messages(world.a.ns, [claim]), world.attacker)
    assert response.namespace == world.a.ns
    invoke(world, method, messages(world.a.ns, []), world.attacker)  # a full run of nothing: sweeps A only
    smuggled = messages(world.a.ns, [])[:1] + messages(b.ns, [])
    assert (
        refusal_code(functools.partial(invoke, world, method, smuggled, world.attacker))
        == grpc.StatusCode.PERMISSION_DENIED
    )
    with world.query(world.both) as channel:
        assert list_facts(channel, b.ns, subject=b.target_doc) == []
