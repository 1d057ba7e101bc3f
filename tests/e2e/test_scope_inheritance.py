"""Scopes follow what a scoped write produces: a table-driven leak count
(`common.domain.scope_inheritance`).

Every write path (RecordObservations with entity, fact, text and placeholder assertions, AssertFacts,
Reconcile, Retain, PutChunks; `tests.e2e.scoped_writes`) writes data scoped ``workspace:x`` as a writer
holding that scope; then every read RPC (Search, GetSource, ListFacts with and without history,
CompileContext, CompileTypedContext with a pack, GetObservation, GetTrace) is called by three readers:
``outsider`` (no scope), ``other`` (``workspace:y``) and ``insider`` (``workspace:x``), over the real
services with tokens. On the code before scope inheritance it counted 144 leaks in 44 cells.

A *leak* is any secret of the hidden data in what a reader without the scope gets back: a unique marker
written into its keys, titles, texts and attributes, a hidden node key, fact_id or observation_id, a
successful GetSource/GetObservation of a hidden key or id, or a hidden anchor reported as found. The
suite counts leaks over every (write path, read RPC, reader) cell and requires 0; it also requires the
insider to see the data wherever the RPC shows such data, so it cannot pass by hiding everything. Public
nodes the hidden writes touch must stay visible, without the hidden titles and attributes.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf import json_format

from common.kernel.config import Settings
from memory_service_grpc_client import ClientSecurity
from memory_service_grpc_client import make_channel
from memory_service_grpc_client import rpc_failure
from memory_service_grpc_client.memory.v1 import context_service_pb2
from memory_service_grpc_client.memory.v1 import context_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import fact_service_pb2
from memory_service_grpc_client.memory.v1 import fact_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import observation_query_service_pb2
from memory_service_grpc_client.memory.v1 import observation_query_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import source_service_pb2
from memory_service_grpc_client.memory.v1 import source_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import trace_service_pb2
from memory_service_grpc_client.memory.v1 import trace_service_pb2_grpc
from tests.e2e.conftest import token_secured_services
from tests.e2e.isolation_world import list_facts
from tests.e2e.scoped_writes import COMMON_WORD
from tests.e2e.scoped_writes import READERS
from tests.e2e.scoped_writes import RPCS
from tests.e2e.scoped_writes import SCOPE
from tests.e2e.scoped_writes import WRITE_PATHS
from tests.e2e.scoped_writes import World
from tests.e2e.scoped_writes import Written
from tests.e2e.scoped_writes import fact
from tests.e2e.scoped_writes import fid
from tests.e2e.scoped_writes import observation
from tests.e2e.scoped_writes import pack
from tests.e2e.scoped_writes import record
from tests.e2e.test_domain_packs import _register

pytestmark = pytest.mark.e2e


def _load(world: World, dev_ingest: grpc.Channel, dev_query: grpc.Channel) -> None:
    _register(dev_ingest, pack(uuid.uuid4().hex), world.ns, strict=False)
    with make_channel(world.ingest_addr, security=ClientSecurity(token=world.writer)) as channel:
        public = [
            {"entity": {"key": world.public_a, "title": "Public A", "attributes": {"tier": "public"}}},
            {"entity": {"key": world.public_b, "title": "Public B"}},
            {"fact": fact(world.public_a, "DEPENDS_ON", world.public_b)},
        ]
        record(channel, observation(world.ns, f"public-{world.tag}", [], "public note", public))
        world.written = [write(world, channel) for write in WRITE_PATHS]
    # A compilation in development mode (no scope: every reader of the namespace reads its trace) that
    # saw everything; GetTrace must show each reader only the decisions about what it may see.
    anchors = sorted({key for w in world.written for key in (*w.keys, *w.anchors)})
    context = context_service_pb2_grpc.ContextServiceStub(dev_query)
    context.CompileContext(
        context_service_pb2.CompileContextRequest(
            namespace=world.ns, query=COMMON_WORD, anchors=anchors, token_budget=8000, trace_id=world.trace_id
        ),
        timeout=120,
    )


@pytest.fixture(scope="module")
def world(
    settings: Settings,
    tmp_path_factory: pytest.TempPathFactory,
    ingest_channel: grpc.Channel,
    query_channel: grpc.Channel,
) -> Iterator[World]:
    tokens_file = tmp_path_factory.mktemp("inheritance") / "tokens.yaml"
    world = World(tokens_file)
    with token_secured_services(settings, tokens_file) as (world.ingest_addr, world.query_addr):
        _load(world, ingest_channel, query_channel)
        yield world


# -- the read RPCs: each returns the texts a reader got back (and the hidden things it was told of) --


def _text(message: Any) -> str:
    return json_format.MessageToJson(message, preserving_proto_field_name=True)


def _ok_or_none(call: Callable[[], Any]) -> Any:
    try:
        return call()
    except grpc.RpcError as error:
        assert rpc_failure(error).code == grpc.StatusCode.NOT_FOUND, rpc_failure(error)
        return None


def _read(rpc: str, channel: grpc.Channel, world: World, written: Written) -> tuple[list[str], int]:
    """What ``rpc`` shows a reader about ``written``: the response texts and the number of hidden
    things it reported as existing (a found GetSource/GetObservation, a found hidden anchor)."""
    ns, m = world.ns, written.marker
    if rpc == "Search":
        stub = retrieval_service_pb2_grpc.RetrievalServiceStub(channel)
        response = stub.Search(
            retrieval_service_pb2.SearchRequest(namespace=ns, query=f"{m} {COMMON_WORD}", top_k=50),
            timeout=60,
        )
        return [_text(response)], 0
    if rpc == "GetSource":
        stub = source_service_pb2_grpc.SourceServiceStub(channel)
        texts, found = [], 0
        for key in written.keys:
            got = _ok_or_none(
                lambda key=key: stub.GetSource(
                    source_service_pb2.GetSourceRequest(namespace=ns, natural_key=key), timeout=60
                )
            )
            if got is not None:
                texts.append(_text(got))
                found += 1
        for key in written.anchors:  # public nodes: visible, and without what the hidden write said
            texts.append(
                _text(
                    stub.GetSource(
                        source_service_pb2.GetSourceRequest(namespace=ns, natural_key=key), timeout=60
                    )
                )
            )
        return texts, found
    if rpc.startswith("ListFacts"):
        stub = fact_query_service_pb2_grpc.FactQueryServiceStub(channel)
        history = rpc.endswith("(history)")
        texts = []
        keys = written.keys + written.anchors
        predicates = ("DEPENDS_ON", "OWNS_CODE", "OWNS_DATA", "FEEDS", "MENTIONS")
        filters = [
            *({"predicate": p} for p in predicates),
            *({"subject": k} for k in keys),
            *({"object": k} for k in keys),
        ]
        for filter_ in filters:
            request = fact_query_service_pb2.ListFactsRequest(
                namespace=ns, include_history=history, page_size=1000, **filter_
            )
            texts.append(_text(stub.ListFacts(request, timeout=60)))
        return texts, 0
    if rpc == "CompileContext":
        stub = context_service_pb2_grpc.ContextServiceStub(channel)
        request = context_service_pb2.CompileContextRequest(
            namespace=ns,
            query=f"{m} {COMMON_WORD}",
            anchors=written.keys + written.anchors,
            token_budget=8000,
        )
        return [_text(stub.CompileContext(request, timeout=120).pack)], 0
    if rpc == "CompileTypedContext":
        stub = context_service_pb2_grpc.ContextServiceStub(channel)
        hidden = set(written.keys)
        request = context_service_pb2.CompileTypedContextRequest(
            namespace=ns, query=m, anchors=written.keys + written.anchors, token_budget=8000, max_depth=3
        )
        pack = stub.CompileTypedContext(request, timeout=120).pack
        found = sum(1 for anchor in pack.anchors if anchor.found and anchor.natural_key in hidden)
        del pack.anchors[:]  # the anchors echo the request; `found` is what they tell
        return [_text(pack)], found
    if rpc == "GetObservation":
        stub = observation_query_service_pb2_grpc.ObservationQueryServiceStub(channel)
        texts = []
        for observation_id in written.observation_ids:
            got = _ok_or_none(
                lambda o=observation_id: stub.GetObservation(
                    observation_query_service_pb2.GetObservationRequest(namespace=ns, observation_id=o),
                    timeout=60,
                )
            )
            if got is not None:
                texts.append(_text(got))
        return texts, len(texts)
    if rpc == "GetTrace":
        stub = trace_service_pb2_grpc.TraceServiceStub(channel)
        got = _ok_or_none(
            lambda: stub.GetTrace(
                trace_service_pb2.GetTraceRequest(namespace=ns, trace_id=world.trace_id), timeout=60
            )
        )
        return ([_text(got)] if got is not None else []), 0
    raise AssertionError(rpc)


def _applies(rpc: str, written: Written) -> bool:
    """GetObservation reads observations: only the RecordObservations paths write one."""
    return rpc != "GetObservation" or bool(written.observation_ids)


def test_no_scoped_write_leaks_to_a_reader_without_its_scope(world: World, record_property: Any) -> None:
    cells = leaks = 0
    leaked: list[str] = []  # one line per leaking cell
    unseen: list[str] = []
    for written in world.written:
        for rpc in RPCS:
            if not _applies(rpc, written):
                continue
            for reader in READERS:
                with make_channel(
                    world.query_addr, security=ClientSecurity(token=world.tokens[reader])
                ) as channel:
                    texts, found = _read(rpc, channel, world, written)
                cells += 1
                blob = "\n".join(texts)
                hits = [secret for secret in written.secrets if secret in blob]
                if reader == "insider":
                    if rpc in written.shown_in and not hits and not found:
                        unseen.append(f"{written.path} x {rpc}")
                    continue
                if hits or found:
                    leaks += len(hits) + found
                    leaked.append(f"{written.path} x {rpc} x {reader}: {hits} found={found}")
    print(
        f"\nscope inheritance: {cells} cells (write path x read RPC x reader) checked,"
        f" {leaks} leaks in {len(leaked)} cells"
    )
    for line in leaked:
        print("  leak:", line)
    record_property("scope_cells", cells)
    record_property("scope_leaks", leaks)
    record_property("scope_leaking_cells", len(leaked))
    assert leaks == 0, leaked
    assert not unseen, f"the insider must see the hidden data: {unseen}"
    assert cells == len(READERS) * sum(_applies(rpc, w) for w in world.written for rpc in RPCS)


def test_public_nodes_touched_by_hidden_writes_stay_public_and_unchanged(world: World) -> None:
    with make_channel(world.query_addr, security=ClientSecurity(token=world.tokens["outsider"])) as channel:
        stub = source_service_pb2_grpc.SourceServiceStub(channel)
        source = stub.GetSource(
            source_service_pb2.GetSourceRequest(namespace=world.ns, natural_key=world.public_a), timeout=60
        ).source
        assert source.title == "Public A"
        facts = list_facts(channel, world.ns, include_history=False, subject=world.public_a)
        assert sorted((f.predicate, f.object) for f in facts) == [
            ("DEPENDS_ON", world.public_b),
            ("FEEDS", world.public_b),
        ]
        feeds = next(f for f in facts if f.predicate == "FEEDS")
        assert json_format.MessageToDict(feeds.attributes) == {"v": "public"} and not feeds.scopes


def test_a_hidden_placeholder_becomes_visible_once_a_visible_write_names_it(world: World) -> None:
    m = world.marker("later")
    target = f"service:{m}"

    def assert_fact(token: str, subject: str, scopes: list[str]) -> str:
        with make_channel(world.ingest_addr, security=ClientSecurity(token=token)) as channel:
            request = json_format.ParseDict(
                {"namespace": world.ns, "facts": [fact(subject, "DEPENDS_ON", target, scopes=scopes)]},
                fact_service_pb2.AssertFactsRequest(),
            )
            result = (
                fact_service_pb2_grpc.FactServiceStub(channel).AssertFacts(request, timeout=60).results[0]
            )
        assert not result.error, result
        return str(result.fact_id)

    hidden_fact = assert_fact(world.writer, world.public_a, [SCOPE])
    with make_channel(world.query_addr, security=ClientSecurity(token=world.tokens["outsider"])) as outsider:
        sources = source_service_pb2_grpc.SourceServiceStub(outsider)
        request = source_service_pb2.GetSourceRequest(namespace=world.ns, natural_key=target)
        assert _ok_or_none(lambda: sources.GetSource(request, timeout=60)) is None
    # A writer without the scope names the key in a visible fact: it must not read "not found" (that
    # would tell it hidden facts name the key), and the placeholder becomes visible.
    public_fact = assert_fact(world.public_writer, world.public_b, [])
    with make_channel(world.query_addr, security=ClientSecurity(token=world.tokens["outsider"])) as outsider:
        sources = source_service_pb2_grpc.SourceServiceStub(outsider)
        got = sources.GetSource(request, timeout=60)
        assert got.source.natural_key == target
        facts = fact_query_service_pb2_grpc.FactQueryServiceStub(outsider)
        listed = facts.ListFacts(
            fact_query_service_pb2.ListFactsRequest(namespace=world.ns, object=target), timeout=60
        ).facts
        assert [f.fact_id for f in listed] == [public_fact]  # the hidden fact stays hidden
    assert hidden_fact != public_fact
    with make_channel(world.query_addr, security=ClientSecurity(token=world.tokens["insider"])) as insider:
        facts = fact_query_service_pb2_grpc.FactQueryServiceStub(insider)
        listed = facts.ListFacts(
            fact_query_service_pb2.ListFactsRequest(namespace=world.ns, object=target), timeout=60
        ).facts
        assert sorted(f.fact_id for f in listed) == sorted([hidden_fact, public_fact])


def test_a_scoped_fact_cannot_supersede_a_fact_more_readers_see(world: World) -> None:
    """Superseding closes the public fact for everyone and names the hidden successor: refused."""
    public_fact = fid(world, world.public_a, "DEPENDS_ON", world.public_b)
    successor = fact(
        world.public_a,
        "DEPENDS_ON",
        f"service:{world.marker('successor')}",
        scopes=[SCOPE],
        supersedes=public_fact,
    )
    successor["valid_from"] = "2024-06-01T00:00:00Z"
    request = json_format.ParseDict(
        {"namespace": world.ns, "facts": [successor]}, fact_service_pb2.AssertFactsRequest()
    )
    writer = make_channel(world.ingest_addr, security=ClientSecurity(token=world.writer))
    with writer, pytest.raises(grpc.RpcError) as raised:
        fact_service_pb2_grpc.FactServiceStub(writer).AssertFacts(request, timeout=60)
    failure = rpc_failure(raised.value)
    assert failure.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "facts[0].supersedes" in {v.field for v in failure.violations}, failure
    with make_channel(world.query_addr, security=ClientSecurity(token=world.tokens["outsider"])) as channel:
        listed = list_facts(channel, world.ns, include_history=False, subject=world.public_a)
    public = next(f for f in listed if f.fact_id == public_fact)
    assert not public.HasField("valid_to") and not public.superseded_by


def test_a_placeholder_named_hidden_then_visible_in_one_request_is_visible(world: World) -> None:
    target = f"service:{world.marker('batch')}"
    request = json_format.ParseDict(
        {
            "namespace": world.ns,
            "facts": [
                fact(world.public_a, "DEPENDS_ON", target, scopes=[SCOPE]),
                fact(world.public_b, "DEPENDS_ON", target),
            ],
        },
        fact_service_pb2.AssertFactsRequest(),
    )
    with make_channel(world.ingest_addr, security=ClientSecurity(token=world.writer)) as channel:
        results = fact_service_pb2_grpc.FactServiceStub(channel).AssertFacts(request, timeout=60).results
    assert all(not r.error for r in results), results
    with make_channel(world.query_addr, security=ClientSecurity(token=world.tokens["outsider"])) as outsider:
        got = source_service_pb2_grpc.SourceServiceStub(outsider).GetSource(
            source_service_pb2.GetSourceRequest(namespace=world.ns, natural_key=target), timeout=60
        )
        assert got.source.natural_key == target
        listed = (
            fact_query_service_pb2_grpc.FactQueryServiceStub(outsider)
            .ListFacts(fact_query_service_pb2.ListFactsRequest(namespace=world.ns, object=target), timeout=60)
            .facts
        )
    assert [f.fact_id for f in listed] == [results[1].fact_id]
