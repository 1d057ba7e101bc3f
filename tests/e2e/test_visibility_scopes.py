"""Visibility scopes inside a namespace on the real services (docs/explanation/knowledge-model.md;
`common.storage.visibility`).

Both services run in-process with a tokens file (auth on). One namespace holds public items, items with
relevance scopes only (``task:``, ``project:``), items scoped to ``workspace:alpha`` and items scoped to
``principal:bob``. Readers: ``outsider`` (no scopes), ``insider`` (``workspace:alpha``) and ``bob`` (no
scopes listed; his own ``principal:bob`` counts). Each of Search, ListFacts, GetSource, GetObservation and
CompileContext must hide the workspace-scoped item from the outsider and show it to the insider; a few
visible items still fill ``top_k`` / ``page_size`` when many hidden ones rank before them.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from common.auth.principals import Right
from common.kernel.config import Settings
from memory_service_grpc_client import ClientSecurity
from memory_service_grpc_client import make_channel
from memory_service_grpc_client import rpc_failure
from memory_service_grpc_client.memory.v1 import context_service_pb2
from memory_service_grpc_client.memory.v1 import context_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import document_service_pb2
from memory_service_grpc_client.memory.v1 import document_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import knowledge_pb2
from memory_service_grpc_client.memory.v1 import observation_query_service_pb2
from memory_service_grpc_client.memory.v1 import observation_query_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import observation_service_pb2
from memory_service_grpc_client.memory.v1 import observation_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import source_service_pb2
from memory_service_grpc_client.memory.v1 import source_service_pb2_grpc
from tests.e2e.conftest import token_secured_services
from tests.e2e.note_observations import asserted_fact
from tests.e2e.note_observations import note
from tests.e2e.token_grants import grant

pytestmark = pytest.mark.e2e

FLOOD = 60  # hidden chunks / facts ranked before the visible ones: more than one ranking's candidates (50)


class World:
    """Secured hosts, tokens and the loaded namespace."""

    def __init__(self, tokens_file: Path) -> None:
        self.ns = "vis-" + uuid.uuid4().hex[:12]
        # A writer may write only the restricting scopes it holds (write-side scopes, `common.domain.write_access`).
        writer_scopes = ["workspace:alpha", "principal:bob"]
        self.writer = grant(tokens_file, "vis-writer", Right.WRITE, [self.ns], scopes=writer_scopes)
        self.outsider = grant(tokens_file, "outsider", Right.READ, [self.ns])
        self.insider = grant(tokens_file, "insider", Right.READ, [self.ns], scopes=["workspace:alpha"])
        self.bob = grant(tokens_file, "bob", Right.READ, [self.ns])
        self.ingest_addr = self.query_addr = ""
        self.secret_observation = ""
        self.public_observation = ""

    def channel(self, token: str) -> grpc.Channel:
        return make_channel(self.query_addr, security=ClientSecurity(token=token))


def _retain(channel: grpc.Channel, namespace: str, key: str, content: str, scopes: list[str]) -> None:
    stub = document_service_pb2_grpc.DocumentServiceStub(channel)
    stub.Retain(
        document_service_pb2.RetainRequest(
            namespace=namespace, natural_key=key, title=key, content=content, scopes=scopes
        ),
        timeout=120,
    )


def _put_chunks(channel: grpc.Channel, namespace: str, key: str, texts: list[str], scopes: list[str]) -> None:
    stub = document_service_pb2_grpc.DocumentServiceStub(channel)
    stub.PutChunks(
        document_service_pb2.PutChunksRequest(
            namespace=namespace,
            natural_key=key,
            title=key,
            scopes=scopes,
            chunks=[
                document_service_pb2.ChunkInput(chunk_order=order, heading="h", text=text)
                for order, text in enumerate(texts)
            ],
        ),
        timeout=300,
    )


def _fact(subject: str, predicate: str, obj: str, when: str) -> dict[str, Any]:
    return asserted_fact(subject, predicate, obj, when)


def _observation(
    namespace: str, external_id: str, scopes: list[str], content: str, assertions: list[dict[str, Any]]
) -> knowledge_pb2.Observation:
    return note(namespace, "vis-test", external_id, content, scopes=scopes, assertions=assertions)


def _load(world: World) -> None:
    ns = world.ns
    with make_channel(world.ingest_addr, security=ClientSecurity(token=world.writer)) as channel:
        _retain(channel, ns, "doc:public", "Zebra quasar public note about the canteen menu.", [])
        _retain(
            channel,
            ns,
            "doc:relevance",
            "Zebra quasar note for the task board.",
            ["task:PROJ-1", "project:x"],
        )
        _retain(
            channel,
            ns,
            "doc:secret",
            "Zebra quasar secret plan: acquire the blue company.",
            ["workspace:alpha"],
        )
        _retain(channel, ns, "doc:bob", "Zebra quasar personal reminder for bob only.", ["principal:bob"])
        # Many hidden chunks that match "kumquat" better than the few visible ones.
        _put_chunks(
            channel, ns, "doc:flood", ["kumquat kumquat kumquat orchard " * 3] * FLOOD, ["workspace:alpha"]
        )
        _put_chunks(
            channel, ns, "doc:few", [f"a single kumquat on tree {i}" for i in range(3)], ["task:PROJ-2"]
        )
        stub = observation_service_pb2_grpc.ObservationServiceStub(channel)
        hidden_facts = [
            _fact("person:ivan", "HAS_SKILL", f"skill:hidden-{i:03d}", "2024-01-01T00:00:00Z")
            for i in range(FLOOD)
        ]
        results = stub.RecordObservations(
            observation_service_pb2.RecordObservationsRequest(
                observations=[
                    _observation(
                        ns,
                        "secret-1",
                        ["workspace:alpha", "task:PROJ-1"],
                        "Ivan works on the secret merger.",
                        [
                            _fact("person:ivan", "WORKS_ON", "project:merger", "2024-05-01T10:00:00Z"),
                            *hidden_facts,
                        ],
                    ),
                    _observation(
                        ns,
                        "public-1",
                        ["task:PROJ-1"],
                        "Ivan likes tea.",
                        [
                            _fact("person:ivan", "LIKES", "drink:tea", "2024-05-01T10:00:00Z"),
                            _fact("person:ivan", "HAS_SKILL", "skill:visible-1", "2024-06-01T00:00:00Z"),
                            _fact("person:ivan", "HAS_SKILL", "skill:visible-2", "2024-06-01T00:00:00Z"),
                            # public fact whose object is a hidden node: must not leak it
                            _fact("person:ivan", "AUTHORED", "doc:secret", "2024-05-01T10:00:00Z"),
                        ],
                    ),
                ]
            ),
            timeout=300,
        ).results
        assert [r.status for r in results] == ["processed", "processed"], [r.error for r in results]
        world.secret_observation, world.public_observation = (
            results[0].observation_id,
            results[1].observation_id,
        )


@pytest.fixture(scope="module")
def world(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tokens_file = tmp_path_factory.mktemp("visibility") / "tokens.yaml"
    world = World(tokens_file)
    with token_secured_services(settings, tokens_file) as (world.ingest_addr, world.query_addr):
        _load(world)
        yield world


def _search(channel: grpc.Channel, namespace: str, query: str, top_k: int = 10) -> list[Any]:
    stub = retrieval_service_pb2_grpc.RetrievalServiceStub(channel)
    return list(
        stub.Search(
            retrieval_service_pb2.SearchRequest(namespace=namespace, query=query, top_k=top_k), timeout=60
        ).hits
    )


def _facts(channel: grpc.Channel, namespace: str, page_size: int = 0, **filters: str) -> list[Any]:
    stub = fact_query_service_pb2_grpc.FactQueryServiceStub(channel)
    request = fact_query_service_pb2.ListFactsRequest(namespace=namespace, page_size=page_size, **filters)
    return list(stub.ListFacts(request, timeout=60).facts)


def _source(channel: grpc.Channel, namespace: str, key: str) -> Any:
    stub = source_service_pb2_grpc.SourceServiceStub(channel)
    return stub.GetSource(
        source_service_pb2.GetSourceRequest(namespace=namespace, natural_key=key), timeout=60
    )


def _get_observation(channel: grpc.Channel, namespace: str, observation_id: str) -> Any:
    stub = observation_query_service_pb2_grpc.ObservationQueryServiceStub(channel)
    return stub.GetObservation(
        observation_query_service_pb2.GetObservationRequest(
            namespace=namespace, observation_id=observation_id
        ),
        timeout=60,
    )


def _compile(channel: grpc.Channel, namespace: str, query: str, anchors: list[str]) -> Any:
    stub = context_service_pb2_grpc.ContextServiceStub(channel)
    return stub.CompileContext(
        context_service_pb2.CompileContextRequest(
            # 6000: the insider's pack holds the FLOOD hidden facts, the episodes' SUBJECT facts to the
            # anchor and the secret chunk
            namespace=namespace,
            query=query,
            anchors=anchors,
            token_budget=6000,
        ),
        timeout=120,
    ).pack


def _not_found(call: Callable[[], Any]) -> None:
    with pytest.raises(grpc.RpcError) as raised:
        call()
    assert rpc_failure(raised.value).code == grpc.StatusCode.NOT_FOUND


# -- Search ----------------------------------------------------------------------------------------


def test_search_hides_workspace_scoped_chunks(world: World) -> None:
    for token, expected in (
        (world.outsider, {"doc:public", "doc:relevance"}),
        (world.insider, {"doc:public", "doc:relevance", "doc:secret"}),
        (world.bob, {"doc:public", "doc:relevance", "doc:bob"}),
    ):
        with world.channel(token) as channel:
            hits = _search(channel, world.ns, "zebra quasar", top_k=20)
        keys = {hit.node_key for hit in hits} & {"doc:public", "doc:relevance", "doc:secret", "doc:bob"}
        assert keys == expected, token  # the vector ranking returns every visible chunk for top_k 20


def test_search_fills_top_k_with_visible_chunks_when_hidden_ones_rank_higher(world: World) -> None:
    with world.channel(world.outsider) as channel:
        hits = _search(channel, world.ns, "kumquat", top_k=3)
    assert len(hits) == 3
    assert {hit.node_key for hit in hits} == {"doc:few"}
    with world.channel(world.insider) as channel:
        hits = _search(channel, world.ns, "kumquat", top_k=3)
    assert {hit.node_key for hit in hits} == {"doc:flood"}  # the better matches, once visible


# -- ListFacts -------------------------------------------------------------------------------------


def test_list_facts_hides_scoped_facts_and_facts_touching_hidden_nodes(world: World) -> None:
    with world.channel(world.outsider) as channel:
        facts = _facts(channel, world.ns, subject="person:ivan", page_size=1000)
        objects = {f.object for f in facts}
        assert {"drink:tea", "skill:visible-1", "skill:visible-2"} <= objects
        assert "project:merger" not in objects
        assert "doc:secret" not in objects  # a public fact whose object node is hidden
        assert not any(o.startswith("skill:hidden") for o in objects)
        assert _facts(channel, world.ns, object="project:merger") == []
    with world.channel(world.insider) as channel:
        facts = _facts(channel, world.ns, subject="person:ivan", page_size=1000)
        objects = {f.object for f in facts}
        assert {"drink:tea", "project:merger", "doc:secret"} <= objects
        merger = next(f for f in facts if f.object == "project:merger")
        assert "workspace:alpha" in merger.scopes
        assert sum(o.startswith("skill:hidden") for o in objects) == FLOOD


def test_list_facts_fills_a_page_when_hidden_facts_sort_first(world: World) -> None:
    with world.channel(world.outsider) as channel:
        facts = _facts(channel, world.ns, subject="person:ivan", predicate="HAS_SKILL", page_size=2)
    assert sorted(f.object for f in facts) == ["skill:visible-1", "skill:visible-2"]


# -- GetSource -------------------------------------------------------------------------------------


def test_get_source_of_a_hidden_node_is_not_found(world: World) -> None:
    with world.channel(world.outsider) as channel:
        _not_found(lambda: _source(channel, world.ns, "doc:secret"))
        _not_found(lambda: _source(channel, world.ns, "doc:bob"))
        _not_found(lambda: _source(channel, world.ns, "doc:flood"))  # re-assembled from hidden chunks
        assert "canteen" in _source(channel, world.ns, "doc:public").source.content
        assert "task board" in _source(channel, world.ns, "doc:relevance").source.content
        assert _source(channel, world.ns, "doc:few").source.chunk_count == 3
    with world.channel(world.insider) as channel:
        assert "secret plan" in _source(channel, world.ns, "doc:secret").source.content
        assert _source(channel, world.ns, "doc:flood").source.content.count("kumquat") == 3 * 3 * FLOOD
        _not_found(lambda: _source(channel, world.ns, "doc:bob"))
    with world.channel(world.bob) as channel:
        assert "bob only" in _source(channel, world.ns, "doc:bob").source.content


# -- GetObservation --------------------------------------------------------------------------------


def test_get_observation_hides_workspace_scoped_observations(world: World) -> None:
    with world.channel(world.outsider) as channel:
        _not_found(lambda: _get_observation(channel, world.ns, world.secret_observation))
        public = _get_observation(channel, world.ns, world.public_observation).observation
        assert public.content == "Ivan likes tea." and list(public.scopes) == ["task:PROJ-1"]
    with world.channel(world.insider) as channel:
        secret = _get_observation(channel, world.ns, world.secret_observation).observation
        assert secret.content == "Ivan works on the secret merger."


# -- CompileContext --------------------------------------------------------------------------------


def test_compile_context_hides_scoped_chunks_facts_and_hidden_fact_ends(world: World) -> None:
    with world.channel(world.outsider) as channel:
        pack = _compile(channel, world.ns, "zebra quasar secret plan merger", ["person:ivan"])
    assert "canteen" in pack.text and "drink:tea" in pack.text  # public chunk and public fact
    for leaked in ("secret plan", "project:merger", "doc:secret", "skill:hidden", "bob only"):
        assert leaked not in pack.text, leaked
    for item in pack.items:
        assert item.provenance.node_key not in ("doc:secret", "doc:bob")
    with world.channel(world.insider) as channel:
        pack = _compile(channel, world.ns, "zebra quasar secret plan merger", ["person:ivan"])
    assert "secret plan" in pack.text and "project:merger" in pack.text and "doc:secret" in pack.text


def test_compile_context_drops_facts_of_hidden_entities_named_in_visible_chunks(world: World) -> None:
    # "merger" names project:merger (a fact end) in a visible chunk; its facts are hidden, and so is the
    # key itself for the outsider.
    with make_channel(world.ingest_addr, security=ClientSecurity(token=world.writer)) as channel:
        _retain(channel, world.ns, "doc:mentions", "Everyone talks about the merger and about tea.", [])
    with world.channel(world.outsider) as channel:
        pack = _compile(channel, world.ns, "everyone talks about the merger", [])
    assert "Everyone talks" in pack.text
    assert "project:merger" not in pack.text and "WORKS_ON" not in pack.text


# -- development mode ------------------------------------------------------------------------------


def test_development_mode_sees_every_scope(world: World, query_channel: grpc.Channel) -> None:
    """Auth off (loopback only) is a local superuser: every item of the namespace is visible."""
    hits = _search(query_channel, world.ns, "zebra quasar", top_k=20)
    assert {"doc:public", "doc:relevance", "doc:secret", "doc:bob"} <= {hit.node_key for hit in hits}
    assert "secret plan" in _source(query_channel, world.ns, "doc:secret").source.content
    assert _get_observation(query_channel, world.ns, world.secret_observation).observation.content


def test_get_source_reassembles_only_visible_chunks(world: World) -> None:
    """PutChunks calls with different scopes: the node is visible, one of its chunks is not."""
    with make_channel(world.ingest_addr, security=ClientSecurity(token=world.writer)) as channel:
        stub = document_service_pb2_grpc.DocumentServiceStub(channel)
        for order, text, scopes in ((0, "hidden part", ["workspace:alpha"]), (1, "public part", [])):
            stub.PutChunks(
                document_service_pb2.PutChunksRequest(
                    namespace=world.ns,
                    natural_key="doc:mixed",
                    scopes=scopes,
                    chunks=[document_service_pb2.ChunkInput(chunk_order=order, text=text)],
                ),
                timeout=120,
            )
    with world.channel(world.outsider) as channel:
        source = _source(channel, world.ns, "doc:mixed").source
    assert source.content == "public part" and source.chunk_count == 1
    with world.channel(world.insider) as channel:
        source = _source(channel, world.ns, "doc:mixed").source
    assert source.content == "hidden part\n\npublic part" and source.chunk_count == 2
