"""Input guarantees over real channels: a bad batch item fails alone, limits name their
field, error details stay small, unparsable bytes are INVALID_ARGUMENT naming the problem."""

from __future__ import annotations

import uuid
from pathlib import Path

import grpc
import pytest
from google.protobuf import struct_pb2
from google.protobuf import timestamp_pb2

from common.auth.principals import Right
from common.kernel.config import Settings
from memory_service_grpc_client import ClientSecurity
from memory_service_grpc_client import make_channel
from memory_service_grpc_client import rpc_failure
from memory_service_grpc_client.memory.v1 import context_service_pb2
from memory_service_grpc_client.memory.v1 import context_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import document_service_pb2
from memory_service_grpc_client.memory.v1 import document_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import fact_service_pb2
from memory_service_grpc_client.memory.v1 import fact_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import knowledge_pb2
from memory_service_grpc_client.memory.v1 import observation_service_pb2
from memory_service_grpc_client.memory.v1 import observation_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import source_service_pb2
from memory_service_grpc_client.memory.v1 import source_service_pb2_grpc
from memory_service_tools.token_writer import add_token
from tests.e2e.conftest import token_secured_services
from tests.e2e.request_strategies import deep_struct_bytes
from tests.e2e.request_strategies import length_delimited

pytestmark = [pytest.mark.e2e, pytest.mark.integration]


def _observation(namespace: str, index: int, content: str) -> knowledge_pb2.Observation:
    observation = knowledge_pb2.Observation(
        namespace=namespace, kind="note", content=content, scopes=["task:t1"]
    )
    observation.source.system = "fuzz"
    observation.source.stream = "s"
    observation.source.external_id = f"e{index}"
    observation.occurred_at.FromJsonString("2026-01-01T00:00:00Z")
    return observation


def test_one_bad_item_fails_alone(ingest_channel: grpc.Channel, namespace: str) -> None:
    """A NUL in one observation, an out-of-range Timestamp in another: those two fail, four are stored."""
    stub = observation_service_pb2_grpc.ObservationServiceStub(ingest_channel)
    batch = [_observation(namespace, index, f"text {index}") for index in range(6)]
    batch[2].content = "bad\x00content"
    batch[4].assertions.add().fact.CopyFrom(
        knowledge_pb2.FactAssertion(
            subject=struct_pb2.Value(string_value="person:a"),
            predicate="knows",
            object=struct_pb2.Value(string_value="person:b"),
        )
    )
    batch[4].assertions[0].fact.valid_to.CopyFrom(timestamp_pb2.Timestamp(seconds=10**13))
    batch[5].data.update({"k\x00": "v"})
    response = stub.RecordObservations(observation_service_pb2.RecordObservationsRequest(observations=batch))
    statuses = [result.status for result in response.results]
    assert statuses[2] == statuses[4] == statuses[5] == "failed"
    assert [statuses[i] for i in (0, 1, 3)] == ["created"] * 3 or all(
        statuses[i] != "failed" for i in (0, 1, 3)
    )
    assert any("observations[2].content" in v for v in response.results[2].field_violations)
    assert any("assertions[0].fact.valid_to" in v for v in response.results[4].field_violations)
    assert any("observations[5].data" in v for v in response.results[5].field_violations)


def test_limits_and_small_details(
    ingest_channel: grpc.Channel, query_channel: grpc.Channel, namespace: str
) -> None:
    """A 500 KB entity title is refused with its field; a 1 MB key answers small details."""
    stub = observation_service_pb2_grpc.ObservationServiceStub(ingest_channel)
    observation = _observation(namespace, 0, "x")
    observation.assertions.add().entity.CopyFrom(
        knowledge_pb2.EntityAssertion(key=struct_pb2.Value(string_value="person:a"), title="t" * 500_000)
    )
    with pytest.raises(grpc.RpcError) as refused:
        stub.RecordObservations(observation_service_pb2.RecordObservationsRequest(observations=[observation]))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    violations = rpc_failure(refused.value).violations
    assert any(v.field == "observations[0].assertions[0].entity.title" for v in violations)

    source = source_service_pb2_grpc.SourceServiceStub(query_channel)
    with pytest.raises(grpc.RpcError) as huge:
        source.GetSource(source_service_pb2.GetSourceRequest(namespace=namespace, natural_key="k" * 2**20))
    assert huge.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    trailing = dict(huge.value.trailing_metadata())
    assert len(trailing["grpc-status-details-bin"]) + len(huge.value.details() or "") < 6 * 1024

    documents = document_service_pb2_grpc.DocumentServiceStub(ingest_channel)
    request = document_service_pb2.RetainRequest(namespace=namespace, natural_key="doc:a", content="x")
    request.provenance.update({"blob": "p" * 100_000})
    with pytest.raises(grpc.RpcError) as provenance:
        documents.Retain(request)
    assert provenance.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert any(v.field == "provenance" for v in rpc_failure(provenance.value).violations)


def test_nesting_too_deep_names_the_problem(ingest_channel: grpc.Channel, namespace: str) -> None:
    """An observation whose data nests 200 levels (past protobuf's 100): INVALID_ARGUMENT saying so."""
    observation = length_delimited(1, namespace.encode()) + length_delimited(
        knowledge_pb2.Observation.DESCRIPTOR.fields_by_name["data"].number, deep_struct_bytes(200)
    )
    payload = length_delimited(1, observation)
    call = ingest_channel.unary_unary(
        "/memory.v1.ObservationService/RecordObservations",
        request_serializer=None,
        response_deserializer=None,
    )
    with pytest.raises(grpc.RpcError) as refused:
        call(payload, timeout=30)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "nested deeper than 100" in (refused.value.details() or "")


def test_invalid_utf8_names_the_problem(ingest_channel: grpc.Channel, namespace: str) -> None:
    """Bytes with a lone surrogate in a string field: INVALID_ARGUMENT saying so, not INTERNAL."""
    payload = document_service_pb2.DeleteNodeRequest(namespace=namespace).SerializeToString()
    payload += bytes([2 << 3 | 2, 3]) + b"\xed\xa0\x80"
    call = ingest_channel.unary_unary(
        "/memory.v1.DocumentService/DeleteNode", request_serializer=None, response_deserializer=None
    )
    with pytest.raises(grpc.RpcError) as refused:
        call(payload, timeout=30)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "UTF-8" in (refused.value.details() or "")


def test_compile_context_refuses_an_oversized_namespace(query_channel: grpc.Channel) -> None:
    """A namespace past its pattern (here 12 KB) is INVALID_ARGUMENT, not an index-row error (INTERNAL)."""
    stub = context_service_pb2_grpc.ContextServiceStub(query_channel)
    request = context_service_pb2.CompileContextRequest(namespace="n" * 12_000, query="alice")
    with pytest.raises(grpc.RpcError) as refused:
        stub.CompileContext(request)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert any(v.field == "namespace" for v in rpc_failure(refused.value).violations)


def test_many_violations_are_cut_with_a_count(ingest_channel: grpc.Channel, namespace: str) -> None:
    """200 facts, each with three bad fields of 2 KB: the answer stays small and says how many were cut."""
    stub = fact_service_pb2_grpc.FactServiceStub(ingest_channel)
    bad = struct_pb2.Value(string_value="x" * 2000 + "\x00")
    facts = [knowledge_pb2.FactAssertion(subject=bad, predicate="p" * 2000, object=bad) for _ in range(200)]
    with pytest.raises(grpc.RpcError) as refused:
        stub.AssertFacts(fact_service_pb2.AssertFactsRequest(namespace=namespace, facts=facts))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    violations = rpc_failure(refused.value).violations
    assert violations[-1].description.endswith("more violations left out")
    trailing = dict(refused.value.trailing_metadata())
    assert len(trailing["grpc-status-details-bin"]) + len(refused.value.details() or "") < 6 * 1024


def test_bad_input_is_refused_after_authentication(settings: Settings, tmp_path: Path) -> None:
    """With tokens: a bad request without a token is UNAUTHENTICATED (nothing about the input is said);
    with a token of another namespace a parsable one is PERMISSION_DENIED (bytes that do not parse name
    no namespace to authorise: INVALID_ARGUMENT); with the right token INVALID_ARGUMENT."""
    tokens_file = tmp_path / "tokens.yaml"
    namespace = "inp-" + uuid.uuid4().hex[:10]
    writer, _ = add_token(tokens_file, principal="writer", namespaces={namespace: [Right.WRITE]})
    other, _ = add_token(tokens_file, principal="other", namespaces={"elsewhere": [Right.WRITE]})
    payload = document_service_pb2.DeleteNodeRequest(namespace=namespace).SerializeToString()
    unparsable = payload + bytes([2 << 3 | 2, 3]) + b"\xed\xa0\x80"
    with_nul = document_service_pb2.DeleteNodeRequest(
        namespace=namespace, natural_key="a\x00"
    ).SerializeToString()
    with token_secured_services(settings, tokens_file) as (ingest_address, _query_address):
        expected = {None: grpc.StatusCode.UNAUTHENTICATED, other: grpc.StatusCode.PERMISSION_DENIED}
        expected[writer] = grpc.StatusCode.INVALID_ARGUMENT
        for token, code in expected.items():
            channel = make_channel(ingest_address, security=ClientSecurity(token=token or ""))
            call = channel.unary_unary(
                "/memory.v1.DocumentService/DeleteNode", request_serializer=None, response_deserializer=None
            )
            for body in (unparsable, with_nul):
                with pytest.raises(grpc.RpcError) as refused:
                    call(body, timeout=30)
                want = grpc.StatusCode.INVALID_ARGUMENT if token == other and body == unparsable else code
                assert refused.value.code() == want, (token is None, token == other, body == unparsable)
            channel.close()
