"""query_service over real gRPC channels: Search, GetSource, ListFacts, CompileContext.

Servers run in-process on 127.0.0.1:0 (fixtures of tests/e2e/conftest.py) with the real database and the
real embedder; data is written through the ingest service (DocumentService, ObservationService) over its
own channel. Every test uses a namespace of its own.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import grpc
import pytest
from google.protobuf import json_format, struct_pb2, timestamp_pb2
from memory_service_grpc_client import rpc_failure
from memory_service_grpc_client.memory.v1 import (
    context_service_pb2,
    context_service_pb2_grpc,
    document_service_pb2,
    document_service_pb2_grpc,
    fact_query_service_pb2,
    fact_query_service_pb2_grpc,
    knowledge_pb2,
    observation_service_pb2,
    observation_service_pb2_grpc,
    retrieval_service_pb2,
    retrieval_service_pb2_grpc,
    source_service_pb2,
    source_service_pb2_grpc,
)

from common.kernel.config import Settings
from common.kernel.identifiers import fact_id
from common.storage.context_store import ContextStore
from common.storage.database import Database
from common.storage.graph.store import GraphStore
from common.text_models.tokenizer import TokenCounter

pytestmark = pytest.mark.e2e

ARTICLE = """---
title: "OpenSSL on bookworm"
natural_key: "doc:openssl/bookworm"
---
# OpenSSL on bookworm

Bookworm ships openssl 3.0.11. Security updates arrive through bookworm-security;
run `apt full-upgrade` to install them.

## glibc

The C library libc6 is at version 2.36-9+deb12u4 after the last point release.
"""


def _struct(value: dict[str, Any]) -> struct_pb2.Struct:
    message = struct_pb2.Struct()
    message.update(value)
    return message


def _ts(text: str) -> timestamp_pb2.Timestamp:
    message = timestamp_pb2.Timestamp()
    message.FromJsonString(text)
    return message


def _failure(call: Any) -> tuple[grpc.StatusCode, list[str]]:
    with pytest.raises(grpc.RpcError) as raised:
        call()
    failure = rpc_failure(raised.value)
    return failure.code, [violation.field for violation in failure.violations]


def _retain(channel: grpc.Channel, namespace: str, key: str, content: str, **fields: Any) -> Any:
    stub = document_service_pb2_grpc.DocumentServiceStub(channel)
    for name in ("provenance", "meta"):
        if name in fields:
            fields[name] = _struct(fields[name])
    return stub.Retain(
        document_service_pb2.RetainRequest(namespace=namespace, natural_key=key, content=content, **fields),
        timeout=120,
    )


def _observe(channel: grpc.Channel, observations: list[dict[str, Any]]) -> list[Any]:
    stub = observation_service_pb2_grpc.ObservationServiceStub(channel)
    request = observation_service_pb2.RecordObservationsRequest(
        observations=[json_format.ParseDict(item, knowledge_pb2.Observation()) for item in observations]
    )
    results = list(stub.RecordObservations(request, timeout=120).results)
    assert [r.status for r in results] == ["processed"] * len(observations), [r.error for r in results]
    return results


def _upload(namespace: str, package: str, version: str, when: str, supersedes: str = "") -> dict[str, Any]:
    fact: dict[str, Any] = {
        "subject": {"type": "package", "id": package},
        "predicate": "HAS_VERSION",
        "object": {"type": "version", "id": f"{package}@{version}"},
        "valid_from": when,
        "evidence": "asserted",
        "confidence": 1.0,
    }
    if supersedes:
        fact["supersedes"] = supersedes
    return {
        "namespace": namespace,
        "source": {
            "system": "debian",
            "stream": f"changelog/{package}",
            "external_id": f"{package}/{version}",
        },
        "kind": "package.uploaded",
        "occurred_at": when,
        "subject": {"type": "package", "id": package},
        "content": f"{package} {version} uploaded",
        "provenance": {"uri": f"debian-changelog:{package}/{version}"},
        "assertions": [{"fact": fact}],
    }


def _maintainers(namespace: str) -> dict[str, Any]:
    def fact(person: str, confidence: float, evidence: str) -> dict[str, Any]:
        return {
            "fact": {
                "subject": "package:openssl",
                "predicate": "MAINTAINED_BY",
                "object": f"person:{person}",
                "valid_from": "2024-02-01T00:00:00Z",
                "evidence": evidence,
                "confidence": confidence,
            }
        }

    return {
        "namespace": namespace,
        "source": {"system": "tracker", "stream": "maintainers", "external_id": "m-1"},
        "kind": "maintainer.changed",
        "occurred_at": "2024-02-01T00:00:00Z",
        "assertions": [fact("alice", 0.9, "asserted"), fact("bob", 0.4, "inferred")],
    }


def _load_facts(ingest_channel: grpc.Channel, namespace: str) -> tuple[str, str]:
    """openssl 3.0.9 (2024-01-01) superseded by 3.0.11 (2024-06-01); two conflicting maintainers;
    libcurl (named only in a chunk) at 8.5.0. Returns the two openssl HAS_VERSION fact ids."""
    first = fact_id(
        namespace, "package:openssl", "HAS_VERSION", "version:openssl@3.0.9", datetime(2024, 1, 1, tzinfo=UTC)
    )
    second = fact_id(
        namespace,
        "package:openssl",
        "HAS_VERSION",
        "version:openssl@3.0.11",
        datetime(2024, 6, 1, tzinfo=UTC),
    )
    _observe(
        ingest_channel,
        [
            _upload(namespace, "openssl", "3.0.9", "2024-01-01T00:00:00Z"),
            _upload(namespace, "openssl", "3.0.11", "2024-06-01T00:00:00Z", supersedes=first),
            _maintainers(namespace),
            _upload(namespace, "libcurl", "8.5.0", "2024-03-01T00:00:00Z"),
        ],
    )
    return first, second


# -- Search ----------------------------------------------------------------------------------------


def test_search_fuses_three_rankings_with_provenance_and_filters(
    ingest_channel: grpc.Channel, query_channel: grpc.Channel, namespace: str
) -> None:
    retained = _retain(
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
    _retain(
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
            namespace=namespace, query="beetroot openssl", meta=_struct({"collection": "faq"})
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
    code, fields = _failure(
        lambda: stub.Search(
            retrieval_service_pb2.SearchRequest(namespace="", query=" ", top_k=101), timeout=10
        )
    )
    assert (code, fields) == (grpc.StatusCode.INVALID_ARGUMENT, ["namespace", "query", "top_k"])
    code, fields = _failure(
        lambda: stub.Search(
            retrieval_service_pb2.SearchRequest(namespace="ns", query="q", top_k=-1), timeout=10
        )
    )
    assert (code, fields) == (grpc.StatusCode.INVALID_ARGUMENT, ["top_k"])
    code, fields = _failure(
        lambda: stub.Search(
            retrieval_service_pb2.SearchRequest(namespace="ns", query="q", preset="fastest"), timeout=10
        )
    )
    assert (code, fields) == (grpc.StatusCode.INVALID_ARGUMENT, ["preset"])
    for preset in ("documents", "conversations"):
        stub.Search(retrieval_service_pb2.SearchRequest(namespace="ns", query="q", preset=preset), timeout=30)


# -- GetSource -------------------------------------------------------------------------------------


def test_get_source_original_chunks_and_errors(
    ingest_channel: grpc.Channel, query_channel: grpc.Channel, namespace: str
) -> None:
    tricky = ARTICLE + "\n$$ 'q' \"dq\" \\back\\slash\r\nёжик\ttab 🙂\n"
    _retain(ingest_channel, namespace, "doc:tricky", tricky, provenance={"path": "x.md", "n": 3})
    documents = document_service_pb2_grpc.DocumentServiceStub(ingest_channel)
    documents.PutChunks(
        document_service_pb2.PutChunksRequest(
            namespace=namespace,
            natural_key="doc:pre",
            title="Pre-cut",
            chunks=[
                document_service_pb2.ChunkInput(chunk_order=1, heading="B", text="second"),
                document_service_pb2.ChunkInput(chunk_order=0, heading="A", text="first"),
            ],
        ),
        timeout=60,
    )
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

    code, _ = _failure(
        lambda: stub.GetSource(
            source_service_pb2.GetSourceRequest(namespace=namespace, natural_key="doc:nope")
        )
    )
    assert code == grpc.StatusCode.NOT_FOUND
    code, fields = _failure(
        lambda: stub.GetSource(source_service_pb2.GetSourceRequest(namespace="", natural_key=""))
    )
    assert (code, fields) == (grpc.StatusCode.INVALID_ARGUMENT, ["namespace", "natural_key"])


def test_retain_rejects_bad_input_with_field_violations(ingest_channel: grpc.Channel, namespace: str) -> None:
    code, fields = _failure(
        lambda: _retain(ingest_channel, namespace, "", "x", links=["doc:a", "", "doc:a"], scopes=["bad"])
    )
    assert (code, fields) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        ["natural_key", "links[1]", "links[2]", "scopes[0]"],
    )


# -- ListFacts -------------------------------------------------------------------------------------


def test_list_facts_as_of_history_pages_and_conflicts(
    ingest_channel: grpc.Channel, query_channel: grpc.Channel, namespace: str
) -> None:
    first, second = _load_facts(ingest_channel, namespace)
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

    march = facts(subject="package:openssl", predicate="HAS_VERSION", as_of=_ts("2024-03-01T00:00:00Z")).facts
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

    assert _failure(call(namespace="ns")) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        ["subject", "predicate", "object"],
    )
    assert _failure(call(subject="package:x")) == (grpc.StatusCode.INVALID_ARGUMENT, ["namespace"])
    assert _failure(call(namespace="ns", subject="package:x", page_size=1001)) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        ["page_size"],
    )
    assert _failure(call(namespace="ns", subject="package:x", page_size=-5)) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        ["page_size"],
    )
    for token in ("garbage!", "bm90IGpzb24", "WzFd", "NQ=="):
        assert _failure(call(namespace="ns", subject="package:x", page_token=token)) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            ["page_token"],
        ), token


# -- CompileContext --------------------------------------------------------------------------------


def _laid_out(items: Any) -> str:
    """The pack text rebuilt from its items: blocks joined by a blank line; the items of one group (turns
    of one stream's day) one line each under the group's header."""
    blocks: list[tuple[str, list[str]]] = []
    for item in items:
        if item.group and blocks and blocks[-1][0] == item.group:
            blocks[-1][1].append(item.text)
        else:
            blocks.append((item.group, [item.text]))
    return "\n\n".join("\n".join([header, *lines]) if header else lines[0] for header, lines in blocks)


def test_compile_context_fits_the_budget_with_facts_chunks_and_trace(
    ingest_channel: grpc.Channel,
    query_channel: grpc.Channel,
    namespace: str,
    settings: Settings,
    database: Database,
) -> None:
    first, second = _load_facts(ingest_channel, namespace)
    _retain(ingest_channel, namespace, "doc:openssl/bookworm", ARTICLE, provenance={"path": "openssl.md"})
    _retain(
        ingest_channel,
        namespace,
        "doc:curl",
        "# curl\n\nThe libcurl library moved to a new major release; check your TLS backend.",
    )
    stub = context_service_pb2_grpc.ContextServiceStub(query_channel)
    tokens = TokenCounter(settings.tokenizer_encoding)

    pack = stub.CompileContext(
        context_service_pb2.CompileContextRequest(
            namespace=namespace,
            query="Which libcurl and openssl versions are installed, and how do security updates arrive?",
            anchors=["package:openssl"],
            token_budget=2000,
            trace_id="trace-ctx-1",
        ),
        timeout=60,
    ).pack
    assert pack.trace_id == "trace-ctx-1" and pack.token_budget == 2000
    assert pack.token_count == tokens.count(pack.text) <= 2000
    assert pack.text == _laid_out(pack.items)
    kinds = {item.kind for item in pack.items}
    assert kinds == {"chunk", "fact"}
    fact_items = {item.provenance.fact_id: item for item in pack.items if item.kind == "fact"}
    assert second in fact_items and first not in fact_items  # only facts valid now
    assert fact_items[second].text.startswith(
        f"package:openssl HAS_VERSION version:openssl@3.0.11 (valid from 2024-06-01T00:00:00Z; asserted, "
        f"confidence 1.00; {second})"
    )
    assert fact_items[second].provenance.observation_ids
    conflicted = [item for item in pack.items if item.conflict]
    assert {item.provenance.fact_id for item in conflicted} == {
        fact_id(
            namespace, "package:openssl", "MAINTAINED_BY", f"person:{p}", datetime(2024, 2, 1, tzinfo=UTC)
        )
        for p in ("alice", "bob")
    }
    # libcurl is no anchor: its fact comes in because a retrieved chunk names it.
    assert any(item.text.startswith("package:libcurl HAS_VERSION") for item in fact_items.values())
    # The asserted, confident maintainer ranks above the inferred, unsure one.
    scores = {item.text.split(" ")[2]: item.score for item in conflicted}
    assert scores["person:alice"] > scores["person:bob"]
    chunk_items = [item for item in pack.items if item.kind == "chunk"]
    assert any(item.provenance.node_key == "doc:openssl/bookworm" for item in chunk_items)
    assert all(item.token_count == tokens.count(item.text) for item in pack.items)

    with database.connection() as conn:
        traces = ContextStore(settings, GraphStore(database)).traces(conn, namespace, "trace-ctx-1")
    assert len(traces) == 1
    decisions = traces[0]["decisions"]
    assert sum(1 for d in decisions if d["decision"] == "kept") == len(pack.items)
    assert traces[0]["request"]["token_budget"] == 2000

    # A small budget keeps fewer items, still within the budget, and says why the others were dropped.
    small = stub.CompileContext(
        context_service_pb2.CompileContextRequest(
            namespace=namespace,
            query="openssl security updates",
            anchors=["package:openssl"],
            token_budget=60,
            dropped_limit=3,
        ),
        timeout=60,
    ).pack
    assert 0 < small.token_count == tokens.count(small.text) <= 60
    assert small.dropped_count > 0 and small.trace_id.startswith("ctx-")
    # Every item says why it was selected; the best dropped candidates say why they were dropped.
    assert all(item.selection.rule in ("hit", "neighbour", "anchor_fact", "mention") for item in small.items)
    assert all(item.selection.reason and item.selection.score_components for item in small.items)
    assert 0 < len(small.dropped) <= 3 and [d.score for d in small.dropped] == sorted(
        (d.score for d in small.dropped), reverse=True
    )
    # a candidate goes for the budget, or because it repeats an episode that is a candidate itself
    assert all(
        d.drop_reason.startswith(("over budget", "adds nothing")) and d.selection.rule and d.text
        for d in small.dropped
    )
    assert any(d.drop_reason.startswith("over budget") for d in small.dropped)
    assert not pack.dropped  # not asked for
    with database.connection() as conn:
        small_trace = ContextStore(settings, GraphStore(database)).traces(conn, namespace, small.trace_id)
    reasons = [d["reason"] for d in small_trace[0]["decisions"] if d["decision"] == "dropped"]
    assert len(reasons) == small.dropped_count
    assert all(reason.startswith(("over budget", "adds nothing")) for reason in reasons)

    # as_of in the past: the version valid then.
    past = stub.CompileContext(
        context_service_pb2.CompileContextRequest(
            namespace=namespace, anchors=["package:openssl"], as_of=_ts("2024-03-01T00:00:00Z")
        ),
        timeout=60,
    ).pack
    past_ids = {item.provenance.fact_id for item in past.items}
    assert first in past_ids and second not in past_ids
    # Without a query: the facts, and (below them, to fill the budget) the most recent observations by then.
    assert {item.kind for item in past.items if item.selection.rule != "recent"} == {"fact"}
    assert all(item.kind == "chunk" for item in past.items if item.selection.rule == "recent")


def test_compile_context_rejects_bad_input_with_field_violations(query_channel: grpc.Channel) -> None:
    stub = context_service_pb2_grpc.ContextServiceStub(query_channel)

    def call(**fields: Any) -> Any:
        return lambda: stub.CompileContext(context_service_pb2.CompileContextRequest(**fields), timeout=10)

    assert _failure(call(namespace="", query="", token_budget=100001)) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        ["namespace", "query", "token_budget"],
    )
    assert _failure(call(namespace="ns", anchors=["package:x", ""])) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        ["anchors[1]"],
    )
    assert _failure(call(namespace="ns", query="q", token_budget=-1)) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        ["token_budget"],
    )
    assert _failure(call(namespace="ns", query="q", dropped_limit=101)) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        ["dropped_limit"],
    )


def test_compile_context_caps_each_chunk_so_one_huge_chunk_cannot_fill_the_pack(
    ingest_channel: grpc.Channel, query_channel: grpc.Channel, namespace: str, settings: Settings
) -> None:
    huge = "# Kernel changelog\n\n" + " ".join(f"security fix number {i} for the kernel." for i in range(300))
    _retain(ingest_channel, namespace, "doc:huge", huge)
    _retain(
        ingest_channel, namespace, "doc:small", "# Bash\n\nA security fix for bash arrived in 5.2.15-2+b7."
    )
    stub = context_service_pb2_grpc.ContextServiceStub(query_channel)
    pack = stub.CompileContext(
        context_service_pb2.CompileContextRequest(
            namespace=namespace, query="security fix", token_budget=1000
        ),
        timeout=60,
    ).pack
    tokens = TokenCounter(settings.tokenizer_encoding)
    assert pack.token_count == tokens.count(pack.text) <= 1000
    keys = [item.provenance.node_key for item in pack.items]
    assert "doc:huge" in keys and "doc:small" in keys
    huge_items = [item for item in pack.items if item.provenance.node_key == "doc:huge"]
    assert all(item.token_count <= 350 and item.text.endswith(" …") for item in huge_items)
