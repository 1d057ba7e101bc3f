"""CompileTypedContext and write-time identifier extraction over real gRPC, with the
software-delivery pack (service, endpoint, component, issue, person, team; OWNS, DEPENDS_ON, EXPOSES,
ASSIGNED_TO, MEMBER_OF) enabled in strict mode, the real database and the real embedder."""

from __future__ import annotations

import json
import uuid
from typing import Any

import grpc
import psycopg
import pytest
from typer.testing import CliRunner

from common.grpc.server import ServiceHost
from common.kernel.config import Settings
from common.text_models.tokenizer import TokenCounter
from memory_service_grpc_client import rpc_failure
from memory_service_grpc_client.memory.v1 import context_service_pb2
from memory_service_grpc_client.memory.v1 import context_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import document_service_pb2
from memory_service_grpc_client.memory.v1 import document_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2_grpc
from memory_service_tools.cli import app
from tests.e2e.test_domain_packs import _observe
from tests.e2e.test_domain_packs import _register
from tests.e2e.test_domain_packs import _ts
from tests.unit.test_domain_packs import delivery_pack

pytestmark = pytest.mark.e2e


class World:
    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.episode = ""
        self.observation_id = ""


def _org(namespace: str) -> dict[str, Any]:
    def fact(subject: str, predicate: str, object_: str, **extra: Any) -> dict[str, Any]:
        return {"fact": {"subject": subject, "predicate": predicate, "object": object_, **extra}}

    return {
        "namespace": namespace,
        "source": {"system": "cmdb", "stream": "org", "external_id": "org-1"},
        "kind": "org.snapshot",
        "occurred_at": "2026-01-01T00:00:00Z",
        "provenance": {"uri": "cmdb://org/1"},
        "assertions": [
            {"entity": {"key": "team:core", "title": "Core team"}},
            {"entity": {"key": "team:legacy", "title": "Legacy team"}},
            {"entity": {"key": "user:alice", "title": "Alice"}},  # kindAlias user -> person
            {"entity": {"key": "svc:checkout", "title": "Checkout", "attributes": {"tier": "gold"}}},
            {"entity": {"key": "service:payments", "title": "Payments"}},
            {"entity": {"key": "service:ledger", "title": "Ledger"}},
            {"entity": {"key": "endpoint:GET /orders"}},
            {"entity": {"key": "issue:PROJ-123", "title": "Checkout times out"}},
            fact("team:core", "OWNS", "service:checkout", valid_from="2026-01-01T00:00:00Z"),
            fact(
                "team:legacy",
                "OWNS",
                "service:checkout",
                valid_from="2025-01-01T00:00:00Z",
                valid_to="2025-12-31T00:00:00Z",
            ),
            fact("service:checkout", "DEPENDS_ON", "service:payments", valid_from="2025-01-01T00:00:00Z"),
            fact("service:payments", "DEPENDS_ON", "service:ledger", valid_from="2025-01-01T00:00:00Z"),
            fact("service:checkout", "EXPOSES", "endpoint:GET /orders", valid_from="2025-01-01T00:00:00Z"),
            fact("user:alice", "MEMBER_OF", "team:core", valid_from="2025-01-01T00:00:00Z"),
            fact("issue:PROJ-123", "ASSIGNED_TO", "user:alice", valid_from="2026-01-02T00:00:00Z"),
        ],
    }


def _comment(namespace: str) -> dict[str, Any]:
    return {
        "namespace": namespace,
        "source": {"system": "jira", "stream": "comments", "external_id": "c-1"},
        "kind": "issue.commented",
        "occurred_at": "2026-02-01T10:00:00Z",
        "content": "Checkout outage traced to PROJ-123; the PROJ-999 ticket was never filed.",
    }


RUNBOOK = "# Checkout runbook\n\nWhen orders time out, check PROJ-123 first, then PROJ-404."


@pytest.fixture(scope="module")
def world(ingest_channel: grpc.Channel) -> World:
    world = World("test-" + uuid.uuid4().hex[:12])
    _register(ingest_channel, delivery_pack(uuid.uuid4().hex), world.namespace, strict=True)
    results = _observe(ingest_channel, [_org(world.namespace), _comment(world.namespace)])
    assert [r.status for r in results] == ["processed", "processed"], [r.error for r in results]
    world.observation_id = results[1].observation_id
    world.episode = f"episode:{world.observation_id}"
    document_service_pb2_grpc.DocumentServiceStub(ingest_channel).Retain(
        document_service_pb2.RetainRequest(
            namespace=world.namespace, natural_key="doc:runbook", title="Runbook", content=RUNBOOK
        ),
        timeout=120,
    )
    return world


def _typed(channel: grpc.Channel, namespace: str, **fields: Any) -> Any:
    request = context_service_pb2.CompileTypedContextRequest(namespace=namespace, **fields)
    return context_service_pb2_grpc.ContextServiceStub(channel).CompileTypedContext(request, timeout=120).pack


def _facts(channel: grpc.Channel, namespace: str, **filters: Any) -> list[Any]:
    stub = fact_query_service_pb2_grpc.FactQueryServiceStub(channel)
    request = fact_query_service_pb2.ListFactsRequest(namespace=namespace, **filters)
    return list(stub.ListFacts(request, timeout=60).facts)


def _nodes(pack: Any) -> dict[str, int]:
    return {item.natural_key: item.depth for item in pack.items if item.kind == "node"}


def _assert_provenance(pack: Any) -> None:
    assert pack.items
    for item in pack.items:
        assert item.provenance.node_key, item
        if item.kind == "fact":
            assert item.provenance.fact_id and item.relation and item.path, item
            assert item.path[-1].fact_id == item.provenance.fact_id
            assert item.path[-1].node_key == item.natural_key
        else:
            assert item.provenance.node_key == item.natural_key and item.node_type
            assert len(item.path) == item.depth


# -- write-time extraction -------------------------------------------------------------------------


def test_an_observation_mentioning_an_issue_links_its_episode(
    world: World, ingest_channel: grpc.Channel, query_channel: grpc.Channel
) -> None:
    mentions = _facts(query_channel, world.namespace, subject=world.episode, predicate="MENTIONS")
    assert [(f.object, f.evidence) for f in mentions] == [("issue:PROJ-123", "extracted")]
    assert list(mentions[0].observation_ids) == [world.observation_id]
    assert mentions[0].valid_from.ToJsonString() == "2026-02-01T10:00:00Z"
    assert _facts(query_channel, world.namespace, subject="issue:PROJ-999") == []
    [again] = _observe(ingest_channel, [_comment(world.namespace)])
    assert not again.created
    assert _facts(query_channel, world.namespace, subject=world.episode, predicate="MENTIONS") == mentions


def test_a_chunk_mention_links_the_document_and_repeats_create_nothing(
    world: World, ingest_channel: grpc.Channel, query_channel: grpc.Channel
) -> None:
    def linked() -> list[Any]:
        return _facts(
            query_channel,
            world.namespace,
            object="issue:PROJ-123",
            predicate="MENTIONS",
            include_history=True,
        )

    before = linked()
    assert sorted((f.subject, f.evidence) for f in before) == [
        ("doc:runbook", "extracted"),
        (world.episode, "extracted"),
    ]
    stub = document_service_pb2_grpc.DocumentServiceStub(ingest_channel)
    stub.Retain(
        document_service_pb2.RetainRequest(
            namespace=world.namespace, natural_key="doc:runbook", title="Runbook", content=RUNBOOK
        ),
        timeout=120,
    )
    stub.PutChunks(
        document_service_pb2.PutChunksRequest(
            namespace=world.namespace,
            natural_key="doc:notes",
            chunks=[
                document_service_pb2.ChunkInput(chunk_order=0, text="Follow-up for PROJ-123 and PROJ-77.")
            ],
        ),
        timeout=120,
    )
    after = linked()
    assert sorted(f.subject for f in after) == sorted(["doc:notes", "doc:runbook", world.episode])
    assert {f.fact_id for f in before} <= {f.fact_id for f in after}
    assert (
        _facts(
            query_channel, world.namespace, subject="doc:notes", predicate="MENTIONS", include_history=True
        )[0].object
        == "issue:PROJ-123"
    )  # PROJ-77 does not exist: skipped


# -- CompileTypedContext ---------------------------------------------------------------------------


def test_an_alias_anchor_at_depth_one_and_two(world: World, query_channel: grpc.Channel) -> None:
    one = _typed(query_channel, world.namespace, anchors=["svc:checkout"], max_depth=1)
    assert [(a.input, a.natural_key, a.source, a.found) for a in one.anchors] == [
        ("svc:checkout", "service:checkout-svc", "anchor", True)
    ]
    assert _nodes(one) == {
        "service:checkout-svc": 0,
        "team:core": 1,
        "service:payments": 1,
        "endpoint:GET /orders": 1,
    }
    assert {item.relation for item in one.items if item.kind == "fact"} == {"OWNS", "DEPENDS_ON", "EXPOSES"}
    anchor = one.items[0]
    assert (
        anchor.natural_key == "service:checkout-svc" and anchor.node_type == "service" and anchor.depth == 0
    )
    assert "Checkout" in anchor.text and '"tier":"gold"' in anchor.text
    assert one.max_depth == 1 and "MENTIONS" in one.relations and not one.truncated
    _assert_provenance(one)
    two = _typed(query_channel, world.namespace, anchors=["svc:checkout"])
    assert two.max_depth == 2
    assert _nodes(two) == {**_nodes(one), "service:ledger": 2, "person:alice": 2}
    alice = next(item for item in two.items if item.natural_key == "person:alice" and item.kind == "node")
    assert [(s.relation, s.direction, s.node_key) for s in alice.path] == [
        ("OWNS", "in", "team:core"),
        ("MEMBER_OF", "in", "person:alice"),
    ]
    assert alice.anchor == "service:checkout-svc"
    scores = [item.score for item in two.items]
    assert scores == sorted(scores, reverse=True)
    _assert_provenance(two)


def test_identifiers_in_the_query_text_are_anchors(world: World, query_channel: grpc.Channel) -> None:
    pack = _typed(query_channel, world.namespace, query="Who is looking at PROJ-123 and PROJ-5?", max_depth=1)
    assert [(a.input, a.natural_key, a.source, a.found) for a in pack.anchors] == [
        ("PROJ-123", "issue:PROJ-123", "query", True),
        ("PROJ-5", "issue:PROJ-5", "query", False),
    ]
    assert _nodes(pack) == {"issue:PROJ-123": 0, "person:alice": 1, "doc:runbook": 1, world.episode: 1} | (
        {"doc:notes": 1} if "doc:notes" in _nodes(pack) else {}
    )
    mentions = [item for item in pack.items if item.relation == "MENTIONS" and item.kind == "fact"]
    assert mentions and all(item.path[0].direction == "in" for item in mentions)
    assert all("extracted" in item.text for item in mentions)
    assert "Checkout times out" in pack.text and "issue:PROJ-123 ASSIGNED_TO person:alice" in pack.text
    episode = next(item for item in pack.items if item.kind == "node" and item.natural_key == world.episode)
    assert episode.text.endswith("\nCheckout outage traced to PROJ-123; the PROJ-999 ticket was never filed.")
    _assert_provenance(pack)
    asserted = next(item for item in pack.items if item.relation == "ASSIGNED_TO")
    mention = next(item for item in mentions if item.natural_key == world.episode)
    assert asserted.score > mention.score  # evidence rank: asserted 3 > extracted 2
    assert list(mention.provenance.observation_ids) == [world.observation_id]


def test_as_of_in_the_past_and_the_relation_filter(world: World, query_channel: grpc.Channel) -> None:
    past = _typed(
        query_channel,
        world.namespace,
        anchors=["service:checkout"],
        max_depth=1,
        as_of=_ts("2025-06-01T00:00:00Z"),
    )
    assert _nodes(past) == {
        "service:checkout-svc": 0,
        "team:legacy": 1,
        "service:payments": 1,
        "endpoint:GET /orders": 1,
    }
    owns = next(item for item in past.items if item.relation == "OWNS")
    assert "valid from 2025-01-01T00:00:00Z, to 2025-12-31T00:00:00Z" in owns.text
    filtered = _typed(
        query_channel, world.namespace, anchors=["checkout"], relations=["DEPENDS_ON"], max_depth=3
    )
    assert list(filtered.relations) == ["DEPENDS_ON"]
    assert _nodes(filtered) == {"service:checkout-svc": 0, "service:payments": 1, "service:ledger": 2}


def test_the_token_budget_is_respected(world: World, query_channel: grpc.Channel, settings: Settings) -> None:
    full = _typed(query_channel, world.namespace, anchors=["svc:checkout"], max_depth=2, token_budget=4000)
    small = _typed(query_channel, world.namespace, anchors=["svc:checkout"], max_depth=2, token_budget=60)
    tokens = TokenCounter(settings.tokenizer_encoding)
    assert tokens.count(full.text) == full.token_count and full.dropped_count == 0
    assert 0 < small.token_count <= 60 and tokens.count(small.text) == small.token_count
    assert 0 < len(small.items) < len(full.items) and small.dropped_count == len(full.items) - len(
        small.items
    )
    ranked = iter(item.text for item in full.items)
    assert all(any(text == other for other in ranked) for text in (item.text for item in small.items))
    assert small.items[0].text == full.items[0].text  # in rank order, skipping what does not fit
    with psycopg.connect(settings.database_url) as conn:
        row = conn.execute(
            f'SELECT request, decisions FROM "{settings.context_traces_table}" WHERE namespace = %s AND trace_id = %s',
            (world.namespace, small.trace_id),
        ).fetchone()
    assert row is not None
    request, decisions = row
    assert request["compiler"] == "typed" and request["token_count"] == small.token_count
    assert len(decisions) == len(full.items)
    assert sum(1 for d in decisions if d["decision"] == "dropped") == small.dropped_count


def test_errors_name_the_fix(world: World, query_channel: grpc.Channel) -> None:
    def failure(namespace: str, **fields: Any) -> Any:
        with pytest.raises(grpc.RpcError) as raised:
            _typed(query_channel, namespace, **fields)
        return rpc_failure(raised.value)

    without_pack = failure("test-" + uuid.uuid4().hex[:12], anchors=["service:x"])
    assert without_pack.code == grpc.StatusCode.FAILED_PRECONDITION
    assert "SetNamespaceKinds" in without_pack.message
    bad = failure(world.namespace, anchors=["svc:checkout"], max_depth=9, relations=["NOPE"], token_budget=-1)
    assert bad.code == grpc.StatusCode.INVALID_ARGUMENT
    assert sorted(v.field for v in bad.violations) == ["max_depth", "token_budget"]
    unknown = failure(world.namespace, anchors=["svc:checkout"], relations=["OWNS", "NOPE"])
    assert [v.field for v in unknown.violations] == ["relations[1]"]
    assert failure(world.namespace).code == grpc.StatusCode.INVALID_ARGUMENT  # no query, no anchors


def test_the_cli_prints_the_typed_pack(world: World, query_host: ServiceHost) -> None:
    runner = CliRunner()
    base = ["--query-addr", f"127.0.0.1:{query_host.port}", "typed-context", "--namespace", world.namespace]
    result = runner.invoke(app, [*base, "what is PROJ-123 about?", "--depth", "1", "--json"])
    assert result.exit_code == 0, result.output
    pack = json.loads(result.output)["pack"]
    assert pack["anchors"][0]["naturalKey"] == "issue:PROJ-123" and pack["maxDepth"] == 1
    assert {item["naturalKey"] for item in pack["items"]} >= {"issue:PROJ-123", "person:alice"}
    text = runner.invoke(app, [*base, "--anchor", "svc:checkout", "--relation", "EXPOSES", "--budget", "500"])
    assert text.exit_code == 0, text.output
    assert "service:checkout-svc EXPOSES endpoint:GET /orders" in text.output
    assert "anchor svc:checkout -> service:checkout-svc (anchor, found)" in text.output
    bad = runner.invoke(app, [*base, "--anchor", "svc:checkout", "--relation", "NOPE"])
    assert bad.exit_code == 1 and "INVALID_ARGUMENT" in bad.output and "relations[0]" in bad.output
