"""query_service over real gRPC channels: Search, GetSource, ListFacts (CompileContext
in test_compile_context.py).

Servers run in-process on 127.0.0.1:0 (fixtures of tests/e2e/conftest.py) with the real database and the
real embedder; data is written through the ingest service (DocumentService, ObservationService) over its
own channel. Every test uses a namespace of its own.
"""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from google.protobuf import json_format

from memory_service_grpc_client.memory.v1 import document_service_pb2
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import source_service_pb2
from memory_service_grpc_client.memory.v1 import source_service_pb2_grpc
from tests.e2e.query_service_data import ARTICLE
from tests.e2e.query_service_data import load_facts
from tests.e2e.query_service_data import put_chunks
from tests.e2e.query_service_data import retain
from tests.e2e.query_service_data import struct_of
from tests.e2e.query_service_data import timestamp_of
from tests.e2e.refusals import code_and_fields

pytestmark = pytest.mark.e2e


def test_search_fuses_three_rankings_with_provenance_and_filters(
    ingest_channel: grpc.Channel, query_channel: grpc.Channel, namespace: str
) -> None:
    retained = retain(
        ingest_channel,
        namespace,
        "doc:openssl/bookworm",
        ARTICLE,
        provenance={"repository": "docs", "commit_sha": "abc123", "path": "openssl/bookworm.md"},
        meta={"collection": "faq"},
        source_path="openssl/bookworm.md",
        scopes=["task:SEC-1"],
    )
    assert (retained.created, retained.chunk_count) == (True, 2)
    retain(
        ingest_channel,
        namespace,
        "doc:cooking",
        "# Soup\n\nBorscht needs beetroot, cabbage and dill.",
        type="note",
        meta={"collection": "kb"},
    )
    stub = retrieval_service_pb2_grpc.RetrievalServiceStub(query_channel)

    response = stub.Search(
        retrieval_service_pb2.SearchRequest(
            namespace=namespace, query="security updates for openssl", top_k=5
        ),
        timeout=30,
    )
    top = response.hits[0]
    assert (top.node_key, top.chunk_order, top.heading) == ("doc:openssl/bookworm", 0, "OpenSSL on bookworm")
    assert top.vector_score > 0 and top.text_score > 0 and top.score > 0
    assert top.node_type == "document" and top.source_path == "openssl/bookworm.md"
    assert top.provenance.node_key == top.node_key and top.provenance.chunk_order == 0
    assert json_format.MessageToDict(top.provenance.metadata) == {
        "repository": "docs",
        "commit_sha": "abc123",
        "path": "openssl/bookworm.md",
    }
    assert [hit.score for hit in response.hits] == sorted((hit.score for hit in response.hits), reverse=True)

    exact = stub.Search(
        retrieval_service_pb2.SearchRequest(namespace=namespace, query="2.36-9+deb12u4"), timeout=30
    )
    assert (exact.hits[0].node_key, exact.hits[0].chunk_order) == ("doc:openssl/bookworm", 1)
    assert exact.hits[0].trigram_score == 1.0

    # the filters keep what matches the query and their condition (irrelevant chunks fall below the
    # relevance floor anyway, so each query names what it should find)
    notes = stub.Search(
        retrieval_service_pb2.SearchRequest(namespace=namespace, query="beetroot openssl", types=["note"]),
        timeout=30,
    )
    assert {hit.node_key for hit in notes.hits} == {"doc:cooking"}
    faq = stub.Search(
        retrieval_service_pb2.SearchRequest(
            namespace=namespace, query="beetroot openssl", meta=struct_of({"collection": "faq"})
        ),
        timeout=30,
    )
    assert {hit.node_key for hit in faq.hits} == {"doc:openssl/bookworm"}
    scoped = stub.Search(
        retrieval_service_pb2.SearchRequest(
            namespace=namespace, query="beetroot openssl", node_keys=["doc:openssl/bookworm"]
        ),
        timeout=30,
    )
    assert {hit.node_key for hit in scoped.hits} == {"doc:openssl/bookworm"}
    other = stub.Search(
        retrieval_service_pb2.SearchRequest(namespace=namespace + "-other", query="openssl"), timeout=30
    )
    assert list(other.hits) == []


def test_search_rejects_bad_input_with_field_violations(query_channel: grpc.Channel) -> None:
    stub = retrieval_service_pb2_grpc.RetrievalServiceStub(query_channel)
    code, fields = code_and_fields(
        lambda: stub.Search(
            retrieval_service_pb2.SearchRequest(namespace="", query=" ", top_k=101), timeout=10
        )
    )
    assert (code, fields) == (grpc.StatusCode.INVALID_ARGUMENT, ["namespace", "query", "top_k"])
    code, fields = code_and_fields(
        lambda: stub.Search(
            retrieval_service_pb2.SearchRequest(namespace="ns", query="q", top_k=-1), timeout=10
        )
    )
    assert (code, fields) == (grpc.StatusCode.INVALID_ARGUMENT, ["top_k"])
    code, fields = code_and_fields(
        lambda: stub.Search(
            retrieval_service_pb2.SearchRequest(namespace="ns", query="q", preset="fastest"), timeout=10
        )
    )
    assert (code, fields) == (grpc.StatusCode.INVALID_ARGUMENT, ["preset"])
    for preset in ("documents", "conversations"):
        stub.Search(retrieval_service_pb2.SearchRequest(namespace="ns", query="q", preset=preset), timeout=30)


def test_get_source_original_chunks_and_errors(
    ingest_channel: grpc.Channel, query_channel: grpc.Channel, namespace: str
) -> None:
    tricky = ARTICLE + "\n$$ 'q' \"dq\" \\back\\slash\r\nёжик\ttab 🙂\n"
    retain(ingest_channel, namespace, "doc:tricky", tricky, provenance={"path": "x.md", "n": 3})
    second = document_service_pb2.ChunkInput(chunk_order=1, heading="B", text="second")
    first = document_service_pb2.ChunkInput(chunk_order=0, heading="A", text="first")
    put_chunks(ingest_channel, namespace, "doc:pre", second, first, title="Pre-cut")
    stub = source_service_pb2_grpc.SourceServiceStub(query_channel)
    original = stub.GetSource(
        source_service_pb2.GetSourceRequest(namespace=namespace, natural_key="doc:tricky"), timeout=30
    ).source
    assert original.content.encode("utf-8") == tricky.encode("utf-8")
    assert (original.content_source, original.chunk_count, original.type) == ("original", 2, "document")
    assert json_format.MessageToDict(original.provenance.metadata) == {"path": "x.md", "n": 3.0}
    assembled = stub.GetSource(
        source_service_pb2.GetSourceRequest(namespace=namespace, natural_key="doc:pre"), timeout=30
    ).source
    assert (assembled.content, assembled.content_source, assembled.title) == (
        "first\n\nsecond",
        "chunks",
        "Pre-cut",
    )

    code, _ = code_and_fields(
        lambda: stub.GetSource(
            source_service_pb2.GetSourceRequest(namespace=namespace, natural_key="doc:nope")
        )
    )
    assert code == grpc.StatusCode.NOT_FOUND
    code, fields = code_and_fields(
        lambda: stub.GetSource(source_service_pb2.GetSourceRequest(namespace="", natural_key=""))
    )
    assert (code, fields) == (grpc.StatusCode.INVALID_ARGUMENT, ["namespace", "natural_key"])


def test_retain_rejects_bad_input_with_field_violations(ingest_channel: grpc.Channel, namespace: str) -> None:
    code, fields = code_and_fields(
        lambda: retain(ingest_channel, namespace, "", "x", links=["doc:a", "", "doc:a"], scopes=["bad"])
    )
    assert (code, fields) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        ["natural_key", "links[1]", "links[2]", "scopes[0]"],
    )


def test_list_facts_as_of_history_pages_and_conflicts(
    ingest_channel: grpc.Channel, query_channel: grpc.Channel, namespace: str
) -> None:
    first, second = load_facts(ingest_channel, namespace)
    stub = fact_query_service_pb2_grpc.FactQueryServiceStub(query_channel)

    def facts(**fields: Any) -> Any:
        return stub.ListFacts(
            fact_query_service_pb2.ListFactsRequest(namespace=namespace, **fields), timeout=30
        )

    current = facts(subject="package:openssl", predicate="HAS_VERSION").facts
    assert [(f.fact_id, f.object, f.HasField("valid_to"), f.supersedes) for f in current] == [
        (second, "version:openssl@3.0.11", False, first)
    ]
    assert current[0].valid_from.ToJsonString() == "2024-06-01T00:00:00Z"
    assert current[0].evidence == "asserted" and current[0].observation_ids

    march = facts(subject="package:openssl", predicate="HAS_VERSION", as_of=timestamp_of("2024-03-01T00:00:00Z")).facts
    assert [(f.fact_id, f.superseded_by, f.valid_to.ToJsonString()) for f in march] == [
        (first, second, "2024-06-01T00:00:00Z")
    ]
    history = facts(subject="package:openssl", predicate="HAS_VERSION", include_history=True).facts
    assert [f.fact_id for f in history] == [first, second]

    maintainers = facts(subject="package:openssl", predicate="MAINTAINED_BY").facts
    assert sorted((f.object, f.conflict) for f in maintainers) == [
        ("person:alice", True),
        ("person:bob", True),
    ]
    assert all(not f.conflict for f in history)

    # Pages of one, in (subject, predicate, valid_from, fact_id) order, until the token is empty.
    seen: list[str] = []
    token = ""
    while True:
        page = facts(subject="package:openssl", include_history=True, page_size=1, page_token=token)
        seen.extend(f.fact_id for f in page.facts)
        token = page.next_page_token
        if not token:
            break
    everything = facts(subject="package:openssl", include_history=True).facts
    assert seen == [f.fact_id for f in everything] and len(seen) == 4
    by_object = facts(object="version:libcurl@8.5.0").facts
    assert [f.subject for f in by_object] == ["package:libcurl"]


def test_list_facts_rejects_bad_input_with_field_violations(query_channel: grpc.Channel) -> None:
    stub = fact_query_service_pb2_grpc.FactQueryServiceStub(query_channel)

    def call(**fields: Any) -> Any:
        return lambda: stub.ListFacts(fact_query_service_pb2.ListFactsRequest(**fields), timeout=10)

    assert code_and_fields(call(namespace="ns")) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        ["subject", "predicate", "object"],
    )
    assert code_and_fields(call(subject="package:x")) == (grpc.StatusCode.INVALID_ARGUMENT, ["namespace"])
    assert code_and_fields(call(namespace="ns", subject="package:x", page_size=1001)) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        ["page_size"],
    )
    assert code_and_fields(call(namespace="ns", subject="package:x", page_size=-5)) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        ["page_size"],
    )
    for token in ("garbage!", "bm90IGpzb24", "WzFd", "NQ=="):
        assert code_and_fields(call(namespace="ns", subject="package:x", page_token=token)) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            ["page_token"],
        ), token
