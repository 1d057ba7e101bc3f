"""Namespace isolation on the real services (docs/how-to/tokens-and-scopes.md).

Both services run in-process with a tokens file (auth on). Namespaces A and B hold the same kinds of
data (observations with facts and text fragments, documents, pre-cut chunks, asserted facts), each with
markers of its own. The attacker's token is granted only namespace A (admin, so every RPC is open to
it there). The suite walks every RPC the two servers serve — enumerated from the servers (reflection)
and the generated descriptors, so a new RPC is either attacked here or fails
`test_every_served_rpc_has_an_isolation_attack` — and tries to reach B:

* naming B as the namespace: PERMISSION_DENIED for every RPC (built generically from the descriptor);
* staying in A but naming B's natural keys, fact_ids, observation_ids, search text and anchors:
  NOT_FOUND or empty results, never B's data, and B is unchanged afterwards.

A token granted both namespaces sees both. Edges never cross namespaces: a link or a fact end naming a
key that exists only in the other namespace does not connect them.
"""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import psycopg
import pytest
from google.protobuf import descriptor_pool, json_format, message_factory
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from memory_service_grpc_client import ClientSecurity, make_channel, rpc_failure
from memory_service_grpc_client.memory.v1 import (
    audit_service_pb2,
    audit_service_pb2_grpc,
    context_service_pb2,
    context_service_pb2_grpc,
    document_service_pb2,
    document_service_pb2_grpc,
    fact_query_service_pb2,
    fact_query_service_pb2_grpc,
    fact_service_pb2,
    fact_service_pb2_grpc,
    knowledge_pb2,
    namespace_service_pb2,
    namespace_service_pb2_grpc,
    observation_query_service_pb2,
    observation_query_service_pb2_grpc,
    observation_service_pb2,
    observation_service_pb2_grpc,
    retrieval_service_pb2,
    retrieval_service_pb2_grpc,
    source_service_pb2,
    source_service_pb2_grpc,
    trace_service_pb2,
    trace_service_pb2_grpc,
)

from common.auth.principals import CALLER_FILTERED_METHODS, Right, is_open_method
from common.kernel.config import Settings
from memory_service_tools.token_writer import add_token
from tests.e2e import memory_attacks
from tests.e2e.conftest import token_secured_services

pytestmark = pytest.mark.e2e


class Side:
    """One namespace and the identifiers of its data."""

    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.ns = f"iso-{tag}-" + uuid.uuid4().hex[:10]
        self.marker = f"zyzzyva{tag}{uuid.uuid4().hex[:6]}"  # a word only this namespace's texts contain
        self.doc = f"doc:{tag}-only"  # natural key that exists only in this namespace
        self.chunks_doc = f"doc:{tag}-chunks"
        self.person = f"person:{tag}-only"
        # Keys of this namespace that attacks from the other one write under (reads attack the keys above,
        # which the other namespace never writes, so the attacks do not depend on their order).
        self.target_doc = f"doc:{tag}-target"
        self.target_person = f"person:{tag}-target"
        self.observation_id = ""
        self.fact_id = ""
        self.asserted_fact_id = ""
        self.text_key = ""


class World:
    def __init__(self, tokens_file: Path) -> None:
        self.a, self.b = Side("a"), Side("b")
        self.attacker, _ = add_token(tokens_file, principal="attacker", namespaces={self.a.ns: [Right.ADMIN]})
        self.both, _ = add_token(
            tokens_file, principal="both", namespaces={self.a.ns: [Right.READ], self.b.ns: [Right.READ]}
        )
        self.writers = {
            side.tag: add_token(
                tokens_file, principal=f"writer-{side.tag}", namespaces={side.ns: [Right.WRITE]}
            )[0]
            for side in (self.a, self.b)
        }
        # Memory records: two users of one organisation and an outsider (tests/e2e/memory_attacks.py).
        self.memory = memory_attacks.MemoryWorld.create(tokens_file)
        self.ingest_addr = self.query_addr = ""
        self.database_url = ""
        self.graph = ""
        self.traces_table = ""

    def query(self, token: str) -> grpc.Channel:
        return make_channel(self.query_addr, security=ClientSecurity(token=token))

    def ingest(self, token: str) -> grpc.Channel:
        return make_channel(self.ingest_addr, security=ClientSecurity(token=token))


def _load(world: World, side: Side) -> None:
    with world.ingest(world.writers[side.tag]) as channel:
        documents = document_service_pb2_grpc.DocumentServiceStub(channel)
        documents.Retain(
            document_service_pb2.RetainRequest(
                namespace=side.ns,
                natural_key=side.doc,
                title=f"Runbook {side.marker}",
                content=f"# Runbook {side.marker}\n\nRestart the {side.marker} daemon with care.",
            ),
            timeout=120,
        )
        documents.Retain(
            document_service_pb2.RetainRequest(
                namespace=side.ns, natural_key=side.target_doc, content=f"Target {side.marker}."
            ),
            timeout=120,
        )
        documents.PutChunks(
            document_service_pb2.PutChunksRequest(
                namespace=side.ns,
                natural_key=side.chunks_doc,
                chunks=[
                    document_service_pb2.ChunkInput(chunk_order=0, text=f"Chunked note on {side.marker}.")
                ],
            ),
            timeout=120,
        )
        observation = json_format.ParseDict(
            {
                "namespace": side.ns,
                "source": {"system": "iso", "stream": "notes", "external_id": "same-in-both"},
                "kind": "note",
                "occurred_at": "2024-05-01T10:00:00Z",
                "subject": {"type": "person", "id": f"{side.tag}-only"},
                "content": f"{side.marker} observation content",
                "assertions": [
                    {
                        "fact": {
                            "subject": side.person,
                            "predicate": "WORKS_ON",
                            "object": f"project:{side.marker}",
                            "valid_from": "2024-05-01T10:00:00Z",
                        }
                    },
                    {
                        "text": {
                            "text": f"Text fragment about {side.marker}.",
                            "title": f"Fragment {side.marker}",
                        }
                    },
                ],
            },
            knowledge_pb2.Observation(),
        )
        result = (
            observation_service_pb2_grpc.ObservationServiceStub(channel)
            .RecordObservations(
                observation_service_pb2.RecordObservationsRequest(observations=[observation]), timeout=120
            )
            .results[0]
        )
        assert result.status == "processed", result.error
        side.observation_id = result.observation_id
        side.text_key = f"text:{result.observation_id}/1"
        asserted = (
            fact_service_pb2_grpc.FactServiceStub(channel)
            .AssertFacts(
                fact_service_pb2.AssertFactsRequest(
                    namespace=side.ns,
                    facts=[
                        json_format.ParseDict(
                            {
                                "subject": side.person,
                                "predicate": "OWNS",
                                "object": side.doc,
                                "valid_from": "2024-05-02T00:00:00Z",
                            },
                            knowledge_pb2.FactAssertion(),
                        )
                    ],
                ),
                timeout=120,
            )
            .results[0]
        )
        assert not asserted.error, asserted.error
        side.asserted_fact_id = asserted.fact_id
    with world.query(world.both) as channel:
        facts = _list_facts(channel, side.ns, subject=side.person)
        side.fact_id = next(f.fact_id for f in facts if f.predicate == "WORKS_ON")


@pytest.fixture(scope="module")
def world(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tokens_file = tmp_path_factory.mktemp("isolation") / "tokens.yaml"
    world = World(tokens_file)
    world.database_url, world.graph = settings.database_url, settings.graph_name
    world.traces_table = settings.context_traces_table
    with token_secured_services(settings, tokens_file) as (world.ingest_addr, world.query_addr):
        _load(world, world.a)
        _load(world, world.b)
        world.memory.ingest_addr, world.memory.query_addr = world.ingest_addr, world.query_addr
        memory_attacks.load(world.memory)
        yield world


# -- helpers ---------------------------------------------------------------------------------------


def _list_facts(channel: grpc.Channel, namespace: str, **filters: str) -> list[Any]:
    stub = fact_query_service_pb2_grpc.FactQueryServiceStub(channel)
    request = fact_query_service_pb2.ListFactsRequest(namespace=namespace, include_history=True, **filters)
    return list(stub.ListFacts(request, timeout=60).facts)


def _code(call: Callable[[], Any]) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as raised:
        call()
    return rpc_failure(raised.value).code


def _served_methods(address: str, token: str) -> list[str]:
    """Full names (``/pkg.Service/Method``) of every RPC the server serves, from reflection + descriptors."""
    with make_channel(address, security=ClientSecurity(token=token)) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        responses = stub.ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")])
        )
        services = [s.name for r in responses for s in r.list_services_response.service]
    pool = descriptor_pool.Default()
    methods = []
    for name in services:
        if is_open_method(f"/{name}/"):
            continue
        service = pool.FindServiceByName(name)
        methods += [f"/{name}/{method.name}" for method in service.methods]
    return sorted(methods)


def _request_class(full_method: str) -> Any:
    service_name, method_name = full_method.strip("/").split("/")
    method = descriptor_pool.Default().FindServiceByName(service_name).methods_by_name[method_name]
    return message_factory.GetMessageClass(method.input_type), message_factory.GetMessageClass(
        method.output_type
    )


def _naming(full_method: str, namespace: str) -> Any:
    """A request of ``full_method`` naming ``namespace`` wherever its type has a namespace field."""
    request_class, _ = _request_class(full_method)
    request = request_class()
    fields = request.DESCRIPTOR.fields_by_name
    if "namespace" in fields:
        request.namespace = namespace
        return request
    for field in request.DESCRIPTOR.fields:
        nested = field.message_type
        if nested is None or "namespace" not in nested.fields_by_name:
            continue
        if field.is_repeated:
            getattr(request, field.name).add().namespace = namespace
        else:
            getattr(request, field.name).namespace = namespace
    return request


def _call(world: World, full_method: str, request: Any, token: str) -> Any:
    _, response_class = _request_class(full_method)
    query_methods = set(_served_methods(world.query_addr, world.both))
    address = world.query_addr if full_method in query_methods else world.ingest_addr
    service_name, method_name = full_method.strip("/").split("/")
    streaming = (
        descriptor_pool.Default()
        .FindServiceByName(service_name)
        .methods_by_name[method_name]
        .client_streaming
    )
    server_streaming = (
        descriptor_pool.Default()
        .FindServiceByName(service_name)
        .methods_by_name[method_name]
        .server_streaming
    )
    with make_channel(address, security=ClientSecurity(token=token)) as channel:
        if server_streaming:  # the messages sent within a few seconds (WatchChanges never ends by itself)
            stream = channel.unary_stream(
                full_method,
                request_serializer=lambda message: message.SerializeToString(),
                response_deserializer=response_class.FromString,
            )
            received: list[Any] = []
            try:
                for message in stream(request, timeout=5):
                    received.append(message)
            except grpc.RpcError as error:
                if error.code() != grpc.StatusCode.DEADLINE_EXCEEDED:
                    raise
            return received
        if streaming:  # a client stream of ``request`` (one message, or a list of messages)
            stream = channel.stream_unary(
                full_method,
                request_serializer=lambda message: message.SerializeToString(),
                response_deserializer=response_class.FromString,
            )
            return stream(iter(request if isinstance(request, list) else [request]), timeout=60)
        method = channel.unary_unary(
            full_method,
            request_serializer=lambda message: message.SerializeToString(),
            response_deserializer=response_class.FromString,
        )
        return method(request, timeout=60)


def _b_untouched(world: World) -> None:
    """B's data is exactly as loaded (read with the token granted both namespaces)."""
    b = world.b
    with world.query(world.both) as channel:
        source = source_service_pb2_grpc.SourceServiceStub(channel).GetSource(
            source_service_pb2.GetSourceRequest(namespace=b.ns, natural_key=b.doc), timeout=60
        )
        assert b.marker in source.source.content and "attack" not in source.source.content
        target = source_service_pb2_grpc.SourceServiceStub(channel).GetSource(
            source_service_pb2.GetSourceRequest(namespace=b.ns, natural_key=b.target_doc), timeout=60
        )
        assert target.source.content == f"Target {b.marker}."
        assert [
            f for f in _list_facts(channel, b.ns, subject=b.target_person) if f.predicate != "MEMBER_OF"
        ] == []
        observation = (
            observation_query_service_pb2_grpc.ObservationQueryServiceStub(channel)
            .GetObservation(
                observation_query_service_pb2.GetObservationRequest(
                    namespace=b.ns, observation_id=b.observation_id
                ),
                timeout=60,
            )
            .observation
        )
        assert observation.status == "processed" and b.marker in observation.content
        facts = _list_facts(channel, b.ns, subject=b.person)
        assert {f.fact_id for f in facts} == {b.fact_id, b.asserted_fact_id}
        assert all(not f.HasField("valid_to") for f in facts)


# -- attacks from namespace A on B's data, one per RPC ---------------------------------------------


def _search(world: World) -> None:
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


def _compile_context(world: World) -> None:
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


def _compile_typed_context(world: World) -> None:
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


def _get_source(world: World) -> None:
    b = world.b
    with world.query(world.attacker) as channel:
        stub = source_service_pb2_grpc.SourceServiceStub(channel)
        for key in (b.doc, b.chunks_doc, b.text_key, b.person):
            request = source_service_pb2.GetSourceRequest(namespace=world.a.ns, natural_key=key)
            code = _code(functools.partial(stub.GetSource, request, timeout=60))
            assert code == grpc.StatusCode.NOT_FOUND, key


def _list_facts_attack(world: World) -> None:
    b = world.b
    with world.query(world.attacker) as channel:
        assert _list_facts(channel, world.a.ns, subject=b.person) == []
        assert _list_facts(channel, world.a.ns, object=b.doc) == []
        assert _list_facts(channel, world.a.ns, object=f"project:{b.marker}") == []


def _get_observation(world: World) -> None:
    with world.query(world.attacker) as channel:
        stub = observation_query_service_pb2_grpc.ObservationQueryServiceStub(channel)
        code = _code(
            lambda: stub.GetObservation(
                observation_query_service_pb2.GetObservationRequest(
                    namespace=world.a.ns, observation_id=world.b.observation_id
                ),
                timeout=60,
            )
        )
    assert code == grpc.StatusCode.NOT_FOUND


def _redact(world: World) -> None:
    with world.ingest(world.attacker) as channel:
        stub = observation_service_pb2_grpc.ObservationServiceStub(channel)
        code = _code(
            lambda: stub.RedactObservation(
                observation_service_pb2.RedactObservationRequest(
                    namespace=world.a.ns, observation_id=world.b.observation_id, reason="attack"
                ),
                timeout=60,
            )
        )
    assert code == grpc.StatusCode.NOT_FOUND
    _b_untouched(world)


def _purge(world: World) -> None:
    with world.ingest(world.attacker) as channel:
        stub = observation_service_pb2_grpc.ObservationServiceStub(channel)
        code = _code(
            lambda: stub.PurgeObservation(
                observation_service_pb2.PurgeObservationRequest(
                    namespace=world.a.ns, observation_id=world.b.observation_id, reason="attack"
                ),
                timeout=60,
            )
        )
    assert code == grpc.StatusCode.NOT_FOUND
    _b_untouched(world)


def _embedding_backlog(world: World) -> None:
    """The backlog of every namespace (an empty namespace) needs a grant on "*"; the attacker's own
    namespace answers with that namespace's backlog only."""
    with world.ingest(world.attacker) as channel:
        stub = observation_service_pb2_grpc.ObservationServiceStub(channel)
        code = _code(
            lambda: stub.GetEmbeddingBacklog(
                observation_service_pb2.GetEmbeddingBacklogRequest(namespace=""), timeout=60
            )
        )
        assert code == grpc.StatusCode.PERMISSION_DENIED
        own = stub.GetEmbeddingBacklog(
            observation_service_pb2.GetEmbeddingBacklogRequest(namespace=world.a.ns), timeout=60
        )
    assert own.pending_chunks >= 0


def _close_fact(world: World) -> None:
    with world.ingest(world.attacker) as channel:
        stub = fact_service_pb2_grpc.FactServiceStub(channel)
        for fact_id in (world.b.fact_id, world.b.asserted_fact_id):
            close = fact_service_pb2.CloseFactRequest(namespace=world.a.ns, fact_id=fact_id, reason="attack")
            code = _code(functools.partial(stub.CloseFact, close, timeout=60))
            assert code == grpc.StatusCode.NOT_FOUND
    _b_untouched(world)


def _assert_facts(world: World) -> None:
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
    _b_untouched(world)
    _no_cross_namespace_edges(world)


def _retain(world: World) -> None:
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
    _b_untouched(world)
    _no_cross_namespace_edges(world)


def _put_chunks(world: World) -> None:
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
    _b_untouched(world)
    _no_cross_namespace_edges(world)


def _record_observations(world: World) -> None:
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
    _b_untouched(world)
    _no_cross_namespace_edges(world)


def _reconcile(world: World) -> None:
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
            _request_class("/memory.v1.SnapshotService/Reconcile")[0](),
        )
        return _call(world, "/memory.v1.SnapshotService/Reconcile", request, token)

    reconcile(world.writers["b"], b.ns, "b-1", [fact])
    reconcile(world.attacker, world.a.ns, "a-1", [fact])
    reconcile(world.attacker, world.a.ns, "a-2", [])  # closes A's copy only
    with world.query(world.both) as channel:
        b_facts = _list_facts(channel, b.ns, subject=b.target_person, predicate="MEMBER_OF")
        a_facts = _list_facts(channel, world.a.ns, subject=b.target_person, predicate="MEMBER_OF")
    assert len(b_facts) == 1 and not b_facts[0].HasField("valid_to")
    assert a_facts and all(f.HasField("valid_to") for f in a_facts)
    _no_cross_namespace_edges(world)


def _delete_node(world: World) -> None:
    """DeleteNode in A naming B's keys: NOT_FOUND (A has no such node), B unchanged."""
    b = world.b
    with world.ingest(world.attacker) as channel:
        stub = document_service_pb2_grpc.DocumentServiceStub(channel)
        for key in (b.doc, b.chunks_doc, b.text_key, b.person):
            request = document_service_pb2.DeleteNodeRequest(
                namespace=world.a.ns, natural_key=key, reason="attack"
            )
            code = _code(functools.partial(stub.DeleteNode, request, timeout=60))
            assert code == grpc.StatusCode.NOT_FOUND, key
    _b_untouched(world)


def _get_trace_events(channel: grpc.Channel, namespace: str, trace_id: str) -> list[Any]:
    trace = (
        trace_service_pb2_grpc.TraceServiceStub(channel)
        .GetTrace(trace_service_pb2.GetTraceRequest(namespace=namespace, trace_id=trace_id), timeout=60)
        .trace
    )
    return [entry.audit_event for entry in trace.entries if entry.HasField("audit_event")]


def _record_audit_event(world: World) -> None:
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
        b_events = _get_trace_events(channel, b.ns, trace_id)
        a_events = _get_trace_events(channel, world.a.ns, trace_id)
    assert [(e.action, e.principal) for e in b_events] == [("export", "writer-b")]
    assert [(e.action, e.principal) for e in a_events] == [("attack", "attacker")]
    _no_cross_namespace_edges(world)


def _get_trace(world: World) -> None:
    """B's trace id (audit event and context compilation) read from A: NOT_FOUND, nothing of B."""
    b = world.b
    trace_id = "iso-get-trace-" + uuid.uuid4().hex
    with world.ingest(world.writers["b"]) as channel:
        audit_service_pb2_grpc.AuditServiceStub(channel).RecordAuditEvent(
            audit_service_pb2.RecordAuditEventRequest(
                namespace=b.ns, action="review", trace_id=trace_id, details={"marker": b.marker}
            ),
            timeout=60,
        )
    with world.query(world.both) as channel:
        context_service_pb2_grpc.ContextServiceStub(channel).CompileContext(
            context_service_pb2.CompileContextRequest(namespace=b.ns, query=b.marker, trace_id=trace_id),
            timeout=120,
        )
        assert len(_get_trace_events(channel, b.ns, trace_id)) == 1
    with world.query(world.attacker) as channel:
        stub = trace_service_pb2_grpc.TraceServiceStub(channel)
        request = trace_service_pb2.GetTraceRequest(namespace=world.a.ns, trace_id=trace_id)
        assert _code(functools.partial(stub.GetTrace, request, timeout=60)) == grpc.StatusCode.NOT_FOUND


def _list_audit_events(world: World) -> None:
    """A's admin lists A's audit trail filtered by B's principal, key and marker: none of B's events."""
    b = world.b
    trace_id = "iso-list-audit-" + uuid.uuid4().hex
    with world.ingest(world.writers["b"]) as channel:
        audit_service_pb2_grpc.AuditServiceStub(channel).RecordAuditEvent(
            audit_service_pb2.RecordAuditEventRequest(
                namespace=b.ns,
                action="review",
                trace_id=trace_id,
                target_key=b.doc,
                details={"marker": b.marker},
            ),
            timeout=60,
        )
    with world.ingest(world.attacker) as channel:  # an event of A's own, on the same trace id
        audit_service_pb2_grpc.AuditServiceStub(channel).RecordAuditEvent(
            audit_service_pb2.RecordAuditEventRequest(
                namespace=world.a.ns, action="review", trace_id=trace_id
            ),
            timeout=60,
        )
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


def _reconcile_stream(world: World) -> None:
    """The streamed snapshot: same as `_reconcile`, and a later message naming B (a second header) is
    refused with PERMISSION_DENIED before the handler sees it; parts name no namespace at all."""
    b = world.b
    fact = {
        "subject": b.target_person,
        "predicate": "MEMBER_OF",
        "object": "team:stream",
        "valid_from": "2024-01-01T00:00:00Z",
    }
    request_class = _request_class("/memory.v1.SnapshotService/ReconcileStream")[0]

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
    _call(world, method, messages(b.ns, "b-1", [fact]), world.writers["b"])
    _call(world, method, messages(world.a.ns, "a-1", [fact]), world.attacker)
    _call(world, method, messages(world.a.ns, "a-2", []), world.attacker)  # closes A's copy only
    smuggled = messages(world.a.ns, "a-3", [])[:1] + messages(b.ns, "a-3", [])  # a second header naming B
    assert (
        _code(functools.partial(_call, world, method, smuggled, world.attacker))
        == grpc.StatusCode.PERMISSION_DENIED
    )
    unknown_token = functools.partial(
        _call, world, method, messages(world.a.ns, "a-4", []), "cbt_not-a-token"
    )
    assert _code(unknown_token) == grpc.StatusCode.UNAUTHENTICATED
    with world.query(world.both) as channel:
        b_facts = _list_facts(channel, b.ns, subject=b.target_person, predicate="MEMBER_OF")
        a_facts = _list_facts(channel, world.a.ns, subject=b.target_person, predicate="MEMBER_OF")
    streamed = [f for f in b_facts if f.object == "team:stream"]
    assert len(streamed) == 1 and not streamed[0].HasField("valid_to")
    assert a_facts and all(f.HasField("valid_to") for f in a_facts if f.object == "team:stream")
    _no_cross_namespace_edges(world)


def _list_namespaces(world: World) -> None:
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


def _get_namespace_stats(world: World) -> None:
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


def _namespace_configuration_only(world: World) -> None:
    """RPCs over namespace configuration or global packages: nothing of B is reachable by key; naming B
    is denied (`test_naming_namespace_b_is_denied_for_every_rpc`)."""


def _vault_run(world: World) -> None:
    """A vault run in A whose document claims B's target key and links to B's documents writes only into
    A (no edge, fact or placeholder reaches B), A's sweep never touches B, and a second header naming B
    inside A's stream is refused with PERMISSION_DENIED."""
    b = world.b
    method = "/memory.v1.VaultService/IngestVault"
    request_class = _request_class(method)[0]

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
    response = _call(world, method, messages(world.a.ns, [claim]), world.attacker)
    assert response.namespace == world.a.ns
    _call(world, method, messages(world.a.ns, []), world.attacker)  # a full run of nothing: sweeps A only
    smuggled = messages(world.a.ns, [])[:1] + messages(b.ns, [])
    assert (
        _code(functools.partial(_call, world, method, smuggled, world.attacker))
        == grpc.StatusCode.PERMISSION_DENIED
    )
    with world.query(world.both) as channel:
        assert _list_facts(channel, b.ns, subject=b.target_doc) == []


def _holds_nothing_of_b(world: World, what: Any) -> None:
    """No text of ``what`` (messages or bytes) names B: its namespace, marker or keys."""
    text = what.decode("utf-8", "replace") if isinstance(what, bytes) else str(what)
    b = world.b
    assert not any(value in text for value in (b.ns, b.marker, b.doc, b.person)), text[:500]


def _answer_or_refusal(world: World, method: str, request: Any) -> Any:
    """``request`` by A's admin; a refusal is an answer too (B's data is checked after every attack)."""
    try:
        return _call(world, method, request, world.attacker)
    except grpc.RpcError as error:
        assert error.code() in (
            grpc.StatusCode.INVALID_ARGUMENT,
            grpc.StatusCode.FAILED_PRECONDITION,
            grpc.StatusCode.NOT_FOUND,
        ), error
        return None


def _erase_subject(world: World) -> None:
    """A's admin erasing B's keys and marker inside A erases nothing of B; the receipt names nothing of B."""
    b = world.b
    from memory_service_grpc_client.memory.v1 import data_protection_service_pb2 as dp

    for request in (
        dp.EraseSubjectRequest(namespace=world.a.ns, node_key=b.person, reason="iso", confirm=True),
        dp.EraseSubjectRequest(namespace=world.a.ns, value=b.marker, reason="iso", confirm=True),
    ):
        answer = _answer_or_refusal(world, "/memory.v1.DataProtectionService/EraseSubject", request)
        if answer is not None:
            _holds_nothing_of_b(world, answer)


def _erasure_receipt(world: World) -> None:
    """A receipt made in A is readable in A only: asked for in B's name it is refused."""
    from memory_service_grpc_client.memory.v1 import data_protection_service_pb2 as dp

    made = _call(
        world,
        "/memory.v1.DataProtectionService/EraseSubject",
        dp.EraseSubjectRequest(
            namespace=world.a.ns, node_key="person:iso-nobody", reason="iso", confirm=True
        ),
        world.attacker,
    )
    method = "/memory.v1.DataProtectionService/GetErasureReceipt"
    read = _call(
        world,
        method,
        dp.GetErasureReceiptRequest(namespace=world.a.ns, receipt_id=made.receipt.receipt_id),
        world.attacker,
    )
    assert read.receipt.receipt_id == made.receipt.receipt_id
    asked_in_b = dp.GetErasureReceiptRequest(namespace=world.b.ns, receipt_id=made.receipt.receipt_id)
    code = _code(functools.partial(_call, world, method, asked_in_b, world.both))
    assert code in (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.NOT_FOUND), code


def _legal_holds(world: World) -> None:
    """A hold made in A on B's key is A's: listed in A only, lifted in A; nothing of B changes."""
    from memory_service_grpc_client.memory.v1 import data_protection_service_pb2 as dp

    made = _call(
        world,
        "/memory.v1.DataProtectionService/CreateLegalHold",
        dp.CreateLegalHoldRequest(namespace=world.a.ns, subject_key=world.b.doc, reason="iso"),
        world.attacker,
    )
    listed = _call(
        world,
        "/memory.v1.DataProtectionService/ListLegalHolds",
        dp.ListLegalHoldsRequest(namespace=world.a.ns),
        world.attacker,
    )
    assert made.hold.hold_id in {hold.hold_id for hold in listed.holds}
    _call(
        world,
        "/memory.v1.DataProtectionService/LiftLegalHold",
        dp.LiftLegalHoldRequest(namespace=world.a.ns, hold_id=made.hold.hold_id),
        world.attacker,
    )


def _retention(world: World) -> None:
    """A retention rule of A previews and deletes only A's data (B's is checked untouched afterwards)."""
    from google.protobuf import duration_pb2, timestamp_pb2
    from memory_service_grpc_client.memory.v1 import data_protection_service_pb2 as dp

    rule = dp.RetentionRule(
        namespace=world.a.ns,
        data_class="context_traces",
        max_age=duration_pb2.Duration(seconds=86_400 * 3650),
    )
    _call(
        world,
        "/memory.v1.DataProtectionService/SetRetentionRule",
        dp.SetRetentionRuleRequest(rule=rule),
        world.attacker,
    )
    preview = _call(
        world,
        "/memory.v1.DataProtectionService/PreviewRetention",
        dp.PreviewRetentionRequest(
            namespace=world.a.ns, as_time=timestamp_pb2.Timestamp(seconds=4_102_444_800)
        ),
        world.attacker,
    )
    _holds_nothing_of_b(world, preview)
    _call(
        world,
        "/memory.v1.DataProtectionService/DeleteRetentionRule",
        dp.DeleteRetentionRuleRequest(namespace=world.a.ns, data_class="context_traces"),
        world.attacker,
    )


def _export_import(world: World) -> None:
    """A's export holds nothing of B; the same archive relabelled as B's is refused into A."""
    from memory_service_grpc_client.memory.v1 import data_protection_service_pb2 as dp

    parts = _call(
        world,
        "/memory.v1.DataProtectionService/ExportNamespace",
        dp.ExportNamespaceRequest(namespace=world.a.ns),
        world.attacker,
    )
    archive = b"".join(part.data for part in parts)
    assert archive
    _holds_nothing_of_b(world, archive)
    forged = archive.replace(world.a.ns.encode(), world.b.ns.encode())
    method = "/memory.v1.DataProtectionService/ImportNamespace"
    code = _code(
        functools.partial(
            _call,
            world,
            method,
            [dp.ImportNamespaceRequest(namespace=world.a.ns, data=forged)],
            world.attacker,
        )
    )
    assert code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.PERMISSION_DENIED), code


def _webhooks(world: World) -> None:
    """A's subscriptions and dead letters are A's: none of B's are listed, replayed or deleted from A."""
    from memory_service_grpc_client.memory.v1 import webhook_service_pb2 as wh

    # Loopback is not allow-listed here: the subscription is refused, and nothing else exists in A.
    _answer_or_refusal(
        world,
        "/memory.v1.WebhookService/CreateWebhookSubscription",
        wh.CreateWebhookSubscriptionRequest(namespace=world.a.ns, target_url="http://127.0.0.1:9/hook"),
    )
    listed = _call(
        world,
        "/memory.v1.WebhookService/ListWebhookSubscriptions",
        wh.ListWebhookSubscriptionsRequest(namespace=world.a.ns),
        world.attacker,
    )
    _holds_nothing_of_b(world, listed)
    for method, request in (
        ("ListDeadLetters", wh.ListDeadLettersRequest(namespace=world.a.ns, subscription_id="wh-none")),
        (
            "ReplayDeadLetters",
            wh.ReplayDeadLettersRequest(
                namespace=world.a.ns, subscription_id="wh-none", all_dead_letters=True
            ),
        ),
        (
            "DeleteWebhookSubscription",
            wh.DeleteWebhookSubscriptionRequest(namespace=world.a.ns, subscription_id="wh-none"),
        ),
    ):
        answer = _answer_or_refusal(world, f"/memory.v1.WebhookService/{method}", request)
        if answer is not None:
            _holds_nothing_of_b(world, answer)


def _watch_changes(world: World) -> None:
    """A's change feed from its first cursor holds A's changes only: nothing names B."""
    from memory_service_grpc_client.memory.v1 import change_feed_service_pb2 as cf

    received = _call(
        world,
        "/memory.v1.ChangeFeedService/WatchChanges",
        cf.WatchChangesRequest(namespace=world.a.ns, heartbeat_seconds=1),
        world.attacker,
    )
    changes = [message.change for message in received if message.HasField("change")]
    assert changes and all(change.namespace == world.a.ns for change in changes)
    _holds_nothing_of_b(world, changes)


ATTACKS: dict[str, Callable[[World], None]] = {
    "/memory.v1.RetrievalService/Search": _search,
    "/memory.v1.ContextService/CompileContext": _compile_context,
    "/memory.v1.ContextService/CompileTypedContext": _compile_typed_context,
    "/memory.v1.SourceService/GetSource": _get_source,
    "/memory.v1.FactQueryService/ListFacts": _list_facts_attack,
    "/memory.v1.ObservationQueryService/GetObservation": _get_observation,
    "/memory.v1.ObservationService/RecordObservations": _record_observations,
    "/memory.v1.ObservationService/RedactObservation": _redact,
    "/memory.v1.ObservationService/PurgeObservation": _purge,
    "/memory.v1.ObservationService/GetEmbeddingBacklog": _embedding_backlog,
    "/memory.v1.FactService/AssertFacts": _assert_facts,
    "/memory.v1.FactService/CloseFact": _close_fact,
    "/memory.v1.DocumentService/Retain": _retain,
    "/memory.v1.DocumentService/PutChunks": _put_chunks,
    "/memory.v1.SnapshotService/Reconcile": _reconcile,
    "/memory.v1.SnapshotService/ReconcileStream": _reconcile_stream,
    "/memory.v1.VaultService/IngestVault": _vault_run,
    "/memory.v1.DocumentService/DeleteNode": _delete_node,
    "/memory.v1.AuditService/RecordAuditEvent": _record_audit_event,
    "/memory.v1.TraceService/GetTrace": _get_trace,
    "/memory.v1.AuditService/ListAuditEvents": _list_audit_events,
    "/memory.v1.NamespaceService/ListNamespaces": _list_namespaces,
    "/memory.v1.NamespaceService/GetNamespaceStats": _get_namespace_stats,
    "/memory.v1.DataProtectionService/EraseSubject": _erase_subject,
    "/memory.v1.DataProtectionService/GetErasureReceipt": _erasure_receipt,
    "/memory.v1.DataProtectionService/CreateLegalHold": _legal_holds,
    "/memory.v1.DataProtectionService/LiftLegalHold": _legal_holds,
    "/memory.v1.DataProtectionService/ListLegalHolds": _legal_holds,
    "/memory.v1.DataProtectionService/SetRetentionRule": _retention,
    "/memory.v1.DataProtectionService/DeleteRetentionRule": _retention,
    "/memory.v1.DataProtectionService/PreviewRetention": _retention,
    "/memory.v1.DataProtectionService/ExportNamespace": _export_import,
    "/memory.v1.DataProtectionService/ImportNamespace": _export_import,
    "/memory.v1.WebhookService/CreateWebhookSubscription": _webhooks,
    "/memory.v1.WebhookService/ListWebhookSubscriptions": _webhooks,
    "/memory.v1.WebhookService/DeleteWebhookSubscription": _webhooks,
    "/memory.v1.WebhookService/ListDeadLetters": _webhooks,
    "/memory.v1.WebhookService/ReplayDeadLetters": _webhooks,
    "/memory.v1.ChangeFeedService/WatchChanges": _watch_changes,
    "/memory.v1.DomainPackService/RegisterPackage": _namespace_configuration_only,
    "/memory.v1.DomainPackService/GetPackage": _namespace_configuration_only,
    "/memory.v1.DomainPackService/ListPackages": _namespace_configuration_only,
    "/memory.v1.DomainPackService/SetNamespaceKinds": _namespace_configuration_only,
    "/memory.v1.DomainPackService/GetNamespaceKinds": _namespace_configuration_only,
    **{
        method: functools.partial(lambda attack, world: attack(world.memory), attack)
        for method, attack in memory_attacks.ATTACKS.items()
    },
}


def _no_cross_namespace_edges(world: World) -> None:
    """No AGE edge touching a vertex of A or B joins vertices of two namespaces."""
    with psycopg.connect(world.database_url) as conn:
        conn.execute("LOAD 'age'")
        conn.execute('SET search_path = "$user", public, ag_catalog')
        graph = json.dumps(world.graph)
        # Start from the vertices of A and B (GIN containment on properties), then read the namespace of
        # both ends of each of their edges by id: never a scan of the whole graph.
        row = conn.execute(
            f"WITH mine AS (SELECT id FROM {graph}._ag_label_vertex"
            " WHERE properties @> %s::ag_catalog.agtype OR properties @> %s::ag_catalog.agtype),"
            f" touching AS (SELECT e.start_id, e.end_id FROM {graph}._ag_label_edge e"
            " WHERE e.start_id IN (SELECT id FROM mine) OR e.end_id IN (SELECT id FROM mine))"
            " SELECT count(*) FILTER (WHERE s.ns IS DISTINCT FROM t.ns), count(*) FROM touching x"
            " CROSS JOIN LATERAL (SELECT (ag_catalog.agtype_out(properties)::text)::jsonb ->> 'namespace' AS ns"
            f" FROM {graph}._ag_label_vertex WHERE id = x.start_id) s"
            " CROSS JOIN LATERAL (SELECT (ag_catalog.agtype_out(properties)::text)::jsonb ->> 'namespace' AS ns"
            f" FROM {graph}._ag_label_vertex WHERE id = x.end_id) t",
            (json.dumps({"namespace": world.a.ns}), json.dumps({"namespace": world.b.ns})),
        ).fetchone()
    assert row is not None
    crossing, total = row
    assert total > 0 and crossing == 0


# -- tests -----------------------------------------------------------------------------------------


def test_every_served_rpc_has_an_isolation_attack(world: World) -> None:
    served = _served_methods(world.ingest_addr, world.both) + _served_methods(world.query_addr, world.both)
    assert "/memory.v1.RetrievalService/Search" in served and "/memory.v1.DocumentService/Retain" in served
    missing = [method for method in served if method not in ATTACKS]
    assert not missing, f"RPCs without a namespace-isolation attack in {__name__}: {missing}"


def test_naming_namespace_b_is_denied_for_every_rpc(world: World) -> None:
    served = _served_methods(world.ingest_addr, world.both) + _served_methods(world.query_addr, world.both)
    for method in served:
        if method in CALLER_FILTERED_METHODS:  # names no namespace: its answer holds the caller's own only
            asked = _request_class(method)[0](prefix=world.b.ns)
            assert not _call(world, method, asked, world.attacker).namespaces, method
            continue
        code = _code(functools.partial(_call, world, method, _naming(method, world.b.ns), world.attacker))
        assert code == grpc.StatusCode.PERMISSION_DENIED, method


@pytest.mark.parametrize("method", sorted(ATTACKS))
def test_namespace_a_never_reaches_b_data(world: World, method: str) -> None:
    served = _served_methods(world.ingest_addr, world.both) + _served_methods(world.query_addr, world.both)
    assert method in served, f"{method} has an attack but is not served: remove it from ATTACKS or serve it"
    ATTACKS[method](world)
    _b_untouched(world)


def test_memory_scopes_never_reach_derived_things(world: World) -> None:
    """Chunks, packs and facts of another user's memories (same organisation) or of another organisation."""
    memory_attacks.derived_things(world.memory)
    memory_attacks.victim_untouched(world.memory)


def test_a_token_for_both_namespaces_sees_both(world: World) -> None:
    with world.query(world.both) as channel:
        search = retrieval_service_pb2_grpc.RetrievalServiceStub(channel)
        for side, other in ((world.a, world.b), (world.b, world.a)):
            hits = search.Search(
                retrieval_service_pb2.SearchRequest(namespace=side.ns, query=side.marker, top_k=20),
                timeout=60,
            ).hits
            assert {side.doc, side.chunks_doc, side.text_key} <= {hit.node_key for hit in hits}
            assert all(other.marker not in hit.text for hit in hits)
            assert {f.fact_id for f in _list_facts(channel, side.ns, subject=side.person)} >= {
                side.fact_id,
                side.asserted_fact_id,
            }
            observation = (
                observation_query_service_pb2_grpc.ObservationQueryServiceStub(channel)
                .GetObservation(
                    observation_query_service_pb2.GetObservationRequest(
                        namespace=side.ns, observation_id=side.observation_id
                    ),
                    timeout=60,
                )
                .observation
            )
            assert side.marker in observation.content
    assert world.a.observation_id != world.b.observation_id  # same source identity, other namespace


def test_links_and_fact_ends_never_cross_namespaces(world: World) -> None:
    b = world.b
    with world.ingest(world.writers["a"]) as channel:
        response = document_service_pb2_grpc.DocumentServiceStub(channel).Retain(
            document_service_pb2.RetainRequest(
                namespace=world.a.ns, natural_key="doc:a-linker", content="links to B", links=[b.doc]
            ),
            timeout=120,
        )
    assert list(response.missing_links) == [b.doc] and list(response.linked) == []
    with world.ingest(world.writers["b"]) as channel:
        response = document_service_pb2_grpc.DocumentServiceStub(channel).Retain(
            document_service_pb2.RetainRequest(
                namespace=b.ns, natural_key="doc:b-linker", content="links to A", links=[world.a.doc]
            ),
            timeout=120,
        )
    assert list(response.missing_links) == [world.a.doc]
    _assert_facts(world)  # a fact in A naming B's keys at both ends
    _no_cross_namespace_edges(world)
    with world.query(world.both) as channel:
        b_facts = _list_facts(channel, b.ns, object=b.doc)
        assert [f.fact_id for f in b_facts] == [b.asserted_fact_id]
        a_facts = _list_facts(channel, world.a.ns, subject=b.target_person)
        assert a_facts and all(f.namespace == world.a.ns for f in a_facts)
    _b_untouched(world)
