"""Attacks on B from namespace A through the reading RPCs (search, context, sources, facts, observations,
traces, audit, namespaces, domain packs, the change feed), for `tests/e2e/test_namespace_isolation.py`."""

from __future__ import annotations

import functools
import json
import uuid
from typing import Any

import grpc
import psycopg
from google.protobuf import json_format

from common.kernel.config import Settings
from memory_service_grpc_client.memory.v1 import audit_service_pb2
from memory_service_grpc_client.memory.v1 import audit_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import context_service_pb2
from memory_service_grpc_client.memory.v1 import context_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import namespace_service_pb2
from memory_service_grpc_client.memory.v1 import namespace_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import observation_query_service_pb2
from memory_service_grpc_client.memory.v1 import observation_query_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import source_service_pb2
from memory_service_grpc_client.memory.v1 import source_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import trace_service_pb2
from memory_service_grpc_client.memory.v1 import trace_service_pb2_grpc
from tests.e2e.audit_reads import record_audit_event
from tests.e2e.isolation_world import World
from tests.e2e.isolation_world import get_trace_events
from tests.e2e.isolation_world import holds_nothing_of_b
from tests.e2e.isolation_world import invoke
from tests.e2e.isolation_world import list_facts
from tests.e2e.isolation_world import refusal_code


def search_attack(world: World) -> None:
    b = world.b
    with world.query(world.attacker) as channel:
        stub = retrieval_service_pb2_grpc.RetrievalServiceStub(channel)
        for request in (
            retrieval_service_pb2.SearchRequest(namespace=world.a.ns, query=b.marker, top_k=100),
            retrieval_service_pb2.SearchRequest(
                namespace=world.a.ns, query=b.marker, node_keys=[b.doc, b.chunks_doc, b.text_key]
            ),
        ):
            hits = stub.Search(request, timeout=60).hits
            assert all(b.marker not in hit.text and b.marker not in hit.title for hit in hits)
            assert all(hit.node_key not in (b.doc, b.chunks_doc, b.text_key) for hit in hits)


def compile_context(world: World) -> None:
    """B's search text, anchors and trace_id from A: nothing of B in the pack, and the trace recorded
    under B's trace_id stays B's (the compilation from A is journaled under A)."""
    b = world.b
    trace_id = "iso-trace-" + uuid.uuid4().hex
    with world.query(world.both) as channel:
        own = (
            context_service_pb2_grpc.ContextServiceStub(channel)
            .CompileContext(
                context_service_pb2.CompileContextRequest(namespace=b.ns, query=b.marker, trace_id=trace_id),
                timeout=120,
            )
            .pack
        )
    assert b.marker in own.text
    with world.query(world.attacker) as channel:
        pack = (
            context_service_pb2_grpc.ContextServiceStub(channel)
            .CompileContext(
                context_service_pb2.CompileContextRequest(
                    namespace=world.a.ns,
                    query=b.marker,
                    anchors=[b.person, b.doc, f"project:{b.marker}"],
                    token_budget=4000,
                    trace_id=trace_id,
                ),
                timeout=120,
            )
            .pack
        )
    assert b.marker not in pack.text
    assert b.fact_id not in pack.text and b.asserted_fact_id not in pack.text
    assert all(item.provenance.fact_id not in (b.fact_id, b.asserted_fact_id) for item in pack.items)
    with psycopg.connect(world.database_url) as conn:
        rows = conn.execute(
            f"SELECT namespace, decisions::text FROM {json.dumps(world.traces_table)} WHERE trace_id = %s",
            (trace_id,),
        ).fetchall()
    assert sorted(ns for ns, _ in rows) == sorted([world.a.ns, b.ns])
    assert all(b.marker not in decisions for ns, decisions in rows if ns == world.a.ns)


def compile_typed_context(world: World) -> None:
    """The same domain pack in A and B; from A, B's anchors, B's identifiers in the query text (idPatterns)
    and B's relations find nothing of B: the anchors are not found, the walk stays in A."""
    from common.packs.domain_packs import PackRegistry
    from common.storage.database import Database
    from common.storage.schema import migrations

    a, b = world.a, world.b
    pack = {
        "name": "iso-delivery",
        "version": uuid.uuid4().hex,
        "kinds": [
            {"kind": "person", "idPatterns": ["[ab]-only"]},
            {"kind": "project", "idPatterns": ["zyzzyva[ab][0-9a-f]{6}"]},
            {"kind": "doc"},
        ],
        "relations": [
            {"relation": "WORKS_ON", "fromKinds": ["person"], "toKinds": ["project"]},
            {"relation": "OWNS", "fromKinds": ["person"], "toKinds": ["doc"]},
        ],
    }
    database = Database(
        Settings(database_url=world.database_url, graph_name=world.graph), prepare=migrations.apply
    )
    try:
        registry = PackRegistry(database)
        registry.register(pack)
        for side in (a, b):
            registry.set_namespace_kinds(side.ns, [{"name": pack["name"], "version": pack["version"]}], False)
    finally:
        database.close()

    def typed(token: str, namespace: str, query: str, anchors: list[str]) -> Any:
        with world.query(token) as channel:
            return (
                context_service_pb2_grpc.ContextServiceStub(channel)
                .CompileTypedContext(
                    context_service_pb2.CompileTypedContextRequest(
                        namespace=namespace, query=query, anchors=anchors, max_depth=4, token_budget=4000
                    ),
                    timeout=120,
                )
                .pack
            )

    own = typed(world.both, b.ns, f"work of {b.marker}", [b.person])
    assert b.marker in own.text and b.fact_id in own.text  # the same request reaches B's data in B
    pack_from_a = typed(world.attacker, a.ns, f"work of {b.marker} by b-only", [b.person, b.doc, a.person])
    found = {anchor.natural_key: anchor.found for anchor in pack_from_a.anchors}
    assert found == {b.person: False, b.doc: False, a.person: True, f"project:{b.marker}": False}
    assert a.marker in pack_from_a.text and b.marker not in pack_from_a.text
    assert b.fact_id not in pack_from_a.text and b.asserted_fact_id not in pack_from_a.text
    assert all(
        item.provenance.fact_id not in (b.fact_id, b.asserted_fact_id)
        and item.natural_key not in (b.person, b.doc, f"project:{b.marker}")
        for item in pack_from_a.items
    )


def get_source(world: World) -> None:
    b = world.b
    with world.query(world.attacker) as channel:
        stub = source_service_pb2_grpc.SourceServiceStub(channel)
        for key in (b.doc, b.chunks_doc, b.text_key, b.person):
            request = source_service_pb2.GetSourceRequest(namespace=world.a.ns, natural_key=key)
            code = refusal_code(functools.partial(stub.GetSource, request, timeout=60))
            assert code == grpc.StatusCode.NOT_FOUND, key


def list_facts_attack(world: World) -> None:
    b = world.b
    with world.query(world.attacker) as channel:
        assert list_facts(channel, world.a.ns, subject=b.person) == []
        assert list_facts(channel, world.a.ns, object=b.doc) == []
        assert list_facts(channel, world.a.ns, object=f"project:{b.marker}") == []


def get_observation(world: World) -> None:
    with world.query(world.attacker) as channel:
        stub = observation_query_service_pb2_grpc.ObservationQueryServiceStub(channel)
        code = refusal_code(
            lambda: stub.GetObservation(
                observation_query_service_pb2.GetObservationRequest(
                    namespace=world.a.ns, observation_id=world.b.observation_id
                ),
                timeout=60,
            )
        )
    assert code == grpc.StatusCode.NOT_FOUND


def get_trace(world: World) -> None:
    """B's trace id (audit event and context compilation) read from A: NOT_FOUND, nothing of B."""
    b = world.b
    trace_id = "iso-get-trace-" + uuid.uuid4().hex
    with world.ingest(world.writers["b"]) as channel:
        record_audit_event(channel, b.ns, "review", trace_id, details={"marker": b.marker})
    with world.query(world.both) as channel:
        context_service_pb2_grpc.ContextServiceStub(channel).CompileContext(
            context_service_pb2.CompileContextRequest(namespace=b.ns, query=b.marker, trace_id=trace_id),
            timeout=120,
        )
        assert len(get_trace_events(channel, b.ns, trace_id)) == 1
    with world.query(world.attacker) as channel:
        stub = trace_service_pb2_grpc.TraceServiceStub(channel)
        request = trace_service_pb2.GetTraceRequest(namespace=world.a.ns, trace_id=trace_id)
        assert refusal_code(functools.partial(stub.GetTrace, request, timeout=60)) == grpc.StatusCode.NOT_FOUND


def list_audit_events(world: World) -> None:
    """A's admin lists A's audit trail filtered by B's principal, key and marker: none of B's events."""
    b = world.b
    trace_id = "iso-list-audit-" + uuid.uuid4().hex
    with world.ingest(world.writers["b"]) as channel:
        record_audit_event(channel, b.ns, "review", trace_id, target_key=b.doc, details={"marker": b.marker})
    with world.ingest(world.attacker) as channel:  # an event of A's own, on the same trace id
        record_audit_event(channel, world.a.ns, "review", trace_id)
    with world.query(world.attacker) as channel:
        stub = audit_service_pb2_grpc.AuditServiceStub(channel)
        every = stub.ListAuditEvents(
            audit_service_pb2.ListAuditEventsRequest(namespace=world.a.ns, page_size=1000), timeout=60
        ).events
        for filters in ({"principal": "writer-b"}, {"node_key": b.doc}, {"action": "review"}):
            listed = stub.ListAuditEvents(
                audit_service_pb2.ListAuditEventsRequest(namespace=world.a.ns, **filters), timeout=60
            ).events
            assert all(event.principal != "writer-b" for event in listed), filters
    assert [e.trace_id for e in every if e.trace_id == trace_id] == [trace_id]  # A's own event only
    shown = json.dumps([json_format.MessageToDict(event) for event in every])
    assert b.marker not in shown and "writer-b" not in shown


def list_namespaces(world: World) -> None:
    """A's token lists A and never B, whatever prefix it asks for; the counts are A's own."""
    with world.query(world.attacker) as channel:
        stub = namespace_service_pb2_grpc.NamespaceServiceStub(channel)
        listed = stub.ListNamespaces(namespace_service_pb2.ListNamespacesRequest(), timeout=60).namespaces
        assert [item.namespace for item in listed] == [world.a.ns]
        assert [
            item.namespace
            for item in stub.ListNamespaces(
                namespace_service_pb2.ListNamespacesRequest(prefix=world.b.ns), timeout=60
            ).namespaces
        ] == []
    with world.query(world.both) as channel:
        both = (
            namespace_service_pb2_grpc.NamespaceServiceStub(channel)
            .ListNamespaces(namespace_service_pb2.ListNamespacesRequest(), timeout=60)
            .namespaces
        )
    counts = {item.namespace: item for item in both}
    assert set(counts) == {world.a.ns, world.b.ns}
    assert listed[0] == counts[world.a.ns]  # A's counts hold nothing of B


def get_namespace_stats(world: World) -> None:
    """B's counts are refused to A (PERMISSION_DENIED, see the naming test); A's hold nothing of B."""
    with world.query(world.both) as channel:
        stub = namespace_service_pb2_grpc.NamespaceServiceStub(channel)
        a_by_both = stub.GetNamespaceStats(
            namespace_service_pb2.GetNamespaceStatsRequest(namespace=world.a.ns), timeout=60
        )
    with world.query(world.attacker) as channel:
        a_by_attacker = namespace_service_pb2_grpc.NamespaceServiceStub(channel).GetNamespaceStats(
            namespace_service_pb2.GetNamespaceStatsRequest(namespace=world.a.ns), timeout=60
        )
    assert a_by_attacker == a_by_both and a_by_attacker.chunk_count > 0


def namespace_configuration_only(world: World) -> None:
    """RPCs over namespace configuration or global packages: nothing of B is reachable by key; naming B
    is denied (`test_naming_namespace_b_is_denied_for_every_rpc`)."""


def watch_changes(world: World) -> None:
    """A's change feed from its first cursor holds A's changes only: nothing names B."""
    from memory_service_grpc_client.memory.v1 import change_feed_service_pb2 as cf

    received = invoke(
        world,
        "/memory.v1.ChangeFeedService/WatchChanges",
        cf.WatchChangesRequest(namespace=world.a.ns, heartbeat_seconds=1),
        world.attacker,
    )
    changes = [message.change for message in received if message.HasField("change")]
    assert changes and all(change.namespace == world.a.ns for change in changes)
    holds_nothing_of_b(world, changes)
