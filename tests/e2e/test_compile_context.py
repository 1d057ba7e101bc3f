"""ContextService.CompileContext over real gRPC channels: the pack fits the budget with facts, chunks and a
trace; bad input names its fields; each chunk is capped so one huge chunk cannot fill the pack.

Servers run in-process on 127.0.0.1:0 (fixtures of tests/e2e/conftest.py) with the real database and the
real embedder; data is written through the ingest service over its own channel. Every test uses a
namespace of its own."""

from __future__ import annotations

from datetime import UTC
from datetime import datetime
from typing import Any

import grpc
import pytest

from common.kernel.config import Settings
from common.kernel.identifiers import fact_id
from common.storage.context_store import ContextStore
from common.storage.database import Database
from common.storage.graph.store import GraphStore
from common.text_models.tokenizer import TokenCounter
from memory_service_grpc_client.memory.v1 import context_service_pb2
from memory_service_grpc_client.memory.v1 import context_service_pb2_grpc
from tests.e2e.context_packs import compile_pack
from tests.e2e.query_service_data import ARTICLE
from tests.e2e.query_service_data import load_facts
from tests.e2e.query_service_data import retain
from tests.e2e.query_service_data import timestamp_of
from tests.e2e.refusals import code_and_fields

pytestmark = pytest.mark.e2e


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
    first, second = load_facts(ingest_channel, namespace)
    retain(ingest_channel, namespace, "doc:openssl/bookworm", ARTICLE, provenance={"path": "openssl.md"})
    retain(
        ingest_channel,
        namespace,
        "doc:curl",
        "# curl\n\nThe libcurl library moved to a new major release; check your TLS backend.",
    )
    tokens = TokenCounter(settings.tokenizer_encoding)

    question = "Which libcurl and openssl versions are installed, and how do security updates arrive?"
    anchors = ["package:openssl"]
    pack = compile_pack(
        query_channel, namespace, query=question, anchors=anchors, token_budget=2000, trace_id="trace-ctx-1"
    )
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
    small = compile_pack(
        query_channel, namespace, query="openssl security updates", anchors=anchors, token_budget=60,
        dropped_limit=3,
    )
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
    then = timestamp_of("2024-03-01T00:00:00Z")
    past = compile_pack(query_channel, namespace, anchors=anchors, as_of=then)
    past_ids = {item.provenance.fact_id for item in past.items}
    assert first in past_ids and second not in past_ids
    # Without a query: the facts, and (below them, to fill the budget) the most recent observations by then.
    assert {item.kind for item in past.items if item.selection.rule != "recent"} == {"fact"}
    assert all(item.kind == "chunk" for item in past.items if item.selection.rule == "recent")


def test_compile_context_rejects_bad_input_with_field_violations(query_channel: grpc.Channel) -> None:
    stub = context_service_pb2_grpc.ContextServiceStub(query_channel)

    def call(**fields: Any) -> Any:
        return lambda: stub.CompileContext(context_service_pb2.CompileContextRequest(**fields), timeout=10)

    assert code_and_fields(call(namespace="", query="", token_budget=100001)) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        ["namespace", "query", "token_budget"],
    )
    assert code_and_fields(call(namespace="ns", anchors=["package:x", ""])) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        ["anchors[1]"],
    )
    assert code_and_fields(call(namespace="ns", query="q", token_budget=-1)) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        ["token_budget"],
    )
    assert code_and_fields(call(namespace="ns", query="q", dropped_limit=101)) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        ["dropped_limit"],
    )


def test_compile_context_caps_each_chunk_so_one_huge_chunk_cannot_fill_the_pack(
    ingest_channel: grpc.Channel, query_channel: grpc.Channel, namespace: str, settings: Settings
) -> None:
    huge = "# Kernel changelog\n\n" + " ".join(f"security fix number {i} for the kernel." for i in range(300))
    retain(ingest_channel, namespace, "doc:huge", huge)
    retain(
        ingest_channel, namespace, "doc:small", "# Bash\n\nA security fix for bash arrived in 5.2.15-2+b7."
    )
    pack = compile_pack(query_channel, namespace, query="security fix", token_budget=1000)
    tokens = TokenCounter(settings.tokenizer_encoding)
    assert pack.token_count == tokens.count(pack.text) <= 1000
    keys = [item.provenance.node_key for item in pack.items]
    assert "doc:huge" in keys and "doc:small" in keys
    huge_items = [item for item in pack.items if item.provenance.node_key == "doc:huge"]
    assert all(item.token_count <= 350 and item.text.endswith(" …") for item in huge_items)
