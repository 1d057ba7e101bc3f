"""Two namespaces A and B with the same kinds of data, an attacker granted only A, and the checks that B
stays out of reach and unchanged, for `tests/e2e/test_namespace_isolation.py`."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import psycopg
import pytest
from google.protobuf import descriptor_pool
from google.protobuf import json_format
from google.protobuf import message_factory
from grpc_reflection.v1alpha import reflection_pb2
from grpc_reflection.v1alpha import reflection_pb2_grpc

from common.auth.principals import Right
from common.auth.principals import is_open_method
from memory_service_grpc_client import ClientSecurity
from memory_service_grpc_client import make_channel
from memory_service_grpc_client import rpc_failure
from memory_service_grpc_client.memory.v1 import document_service_pb2
from memory_service_grpc_client.memory.v1 import document_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import fact_service_pb2
from memory_service_grpc_client.memory.v1 import fact_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import knowledge_pb2
from memory_service_grpc_client.memory.v1 import observation_query_service_pb2
from memory_service_grpc_client.memory.v1 import observation_query_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import observation_service_pb2
from memory_service_grpc_client.memory.v1 import observation_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import source_service_pb2
from memory_service_grpc_client.memory.v1 import source_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import trace_service_pb2
from memory_service_grpc_client.memory.v1 import trace_service_pb2_grpc
from memory_service_tools.token_writer import add_token
from tests.e2e import memory_attacks
from tests.e2e.conftest import TokenChannels


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


class World(TokenChannels):
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


def load(world: World, side: Side) -> None:
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
        facts = list_facts(channel, side.ns, subject=side.person)
        side.fact_id = next(f.fact_id for f in facts if f.predicate == "WORKS_ON")


def list_facts(channel: grpc.Channel, namespace: str, include_history: bool = True, **filters: str) -> list[Any]:
    stub = fact_query_service_pb2_grpc.FactQueryServiceStub(channel)
    request = fact_query_service_pb2.ListFactsRequest(
        namespace=namespace, include_history=include_history, **filters
    )
    return list(stub.ListFacts(request, timeout=60).facts)


def read_observation(channel: grpc.Channel, namespace: str, observation_id: str) -> Any:
    stub = observation_query_service_pb2_grpc.ObservationQueryServiceStub(channel)
    request = observation_query_service_pb2.GetObservationRequest(
        namespace=namespace, observation_id=observation_id
    )
    return stub.GetObservation(request, timeout=60).observation


def refusal_code(call: Callable[[], Any]) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as raised:
        call()
    return rpc_failure(raised.value).code


def served_methods(address: str, token: str) -> list[str]:
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


def request_class_of(full_method: str) -> Any:
    service_name, method_name = full_method.strip("/").split("/")
    method = descriptor_pool.Default().FindServiceByName(service_name).methods_by_name[method_name]
    return message_factory.GetMessageClass(method.input_type), message_factory.GetMessageClass(
        method.output_type
    )


def naming_namespace(full_method: str, namespace: str) -> Any:
    """A request of ``full_method`` naming ``namespace`` wherever its type has a namespace field."""
    request_class, _ = request_class_of(full_method)
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


def invoke(world: World, full_method: str, request: Any, token: str) -> Any:
    _, response_class = request_class_of(full_method)
    query_methods = set(served_methods(world.query_addr, world.both))
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


def b_untouched(world: World) -> None:
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
            f for f in list_facts(channel, b.ns, subject=b.target_person) if f.predicate != "MEMBER_OF"
        ] == []
        observation = read_observation(channel, b.ns, b.observation_id)
        assert observation.status == "processed" and b.marker in observation.content
        facts = list_facts(channel, b.ns, subject=b.person)
        assert {f.fact_id for f in facts} == {b.fact_id, b.asserted_fact_id}
        assert all(not f.HasField("valid_to") for f in facts)


def get_trace_events(channel: grpc.Channel, namespace: str, trace_id: str) -> list[Any]:
    trace = (
        trace_service_pb2_grpc.TraceServiceStub(channel)
        .GetTrace(trace_service_pb2.GetTraceRequest(namespace=namespace, trace_id=trace_id), timeout=60)
        .trace
    )
    return [entry.audit_event for entry in trace.entries if entry.HasField("audit_event")]


def holds_nothing_of_b(world: World, what: Any) -> None:
    """No text of ``what`` (messages or bytes) names B: its namespace, marker or keys."""
    text = what.decode("utf-8", "replace") if isinstance(what, bytes) else str(what)
    b = world.b
    assert not any(value in text for value in (b.ns, b.marker, b.doc, b.person)), text[:500]


def answer_or_refusal(world: World, method: str, request: Any) -> Any:
    """``request`` by A's admin; a refusal is an answer too (B's data is checked after every attack)."""
    try:
        return invoke(world, method, request, world.attacker)
    except grpc.RpcError as error:
        assert error.code() in (
            grpc.StatusCode.INVALID_ARGUMENT,
            grpc.StatusCode.FAILED_PRECONDITION,
            grpc.StatusCode.NOT_FOUND,
        ), error
        return None


def no_cross_namespace_edges(world: World) -> None:
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
