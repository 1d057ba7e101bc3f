"""Summaries as CompileContext candidates ("summaries when present"; docs/explanation/retrieval.md), against
real services over gRPC with bearer tokens and memory scopes.

One organisation with two users (``ua`` owns the memories, ``ub`` is the hostile neighbour in the same
namespace) and an outsider organisation whose user is also called ``ua``. The owner stores long memories
and a one-sentence lossless summary of them, and a lossy summary of another group. The owner's pack holds
the summary under the rule ``summary`` with its score components, never together with the originals it
covers; the neighbour's and the outsider's packs never show the owner's summaries, even when the
neighbour's own memories and summary match the same query.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from common.kernel.config import Settings
from common.kernel.memory_names import memory_namespace
from memory_service_grpc_client import ClientSecurity
from memory_service_grpc_client import make_channel
from memory_service_grpc_client.memory.v1 import context_service_pb2
from memory_service_grpc_client.memory.v1 import context_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import memory_service_pb2
from memory_service_grpc_client.memory.v1 import memory_service_pb2_grpc
from tests.e2e.conftest import token_secured_services
from tests.e2e.memory_attacks import memory_user_tokens

pytestmark = pytest.mark.e2e


@dataclass
class World:
    organization: str
    marker: str
    tokens: dict[str, str]
    ingest_addr: str = ""
    query_addr: str = ""

    @property
    def namespace(self) -> str:
        return memory_namespace(self.organization, "production")

    def channel(self, address: str, who: str) -> grpc.Channel:
        return make_channel(address, security=ClientSecurity(token=self.tokens[who]))

    def add(self, who: str, texts: list[str]) -> list[str]:
        with self.channel(self.ingest_addr, who) as channel:
            results = (
                memory_service_pb2_grpc.MemoryServiceStub(channel)
                .AddMemories(
                    memory_service_pb2.AddMemoriesRequest(
                        memories=[memory_service_pb2.NewMemory(text=text) for text in texts]
                    ),
                    timeout=120,
                )
                .results
            )
        assert all(r.created for r in results)
        return [r.memory_id for r in results]

    def summarize(self, who: str, ids: list[str], *, lossless: bool) -> str:
        with self.channel(self.ingest_addr, who) as channel:
            return (
                memory_service_pb2_grpc.MemoryServiceStub(channel)
                .SummarizeMemories(
                    memory_service_pb2.SummarizeMemoriesRequest(
                        memory_ids=ids, lossless=lossless, max_sentences=1
                    ),
                    timeout=120,
                )
                .summary.memory_id
            )

    def compile(self, who: str, query: str, namespace: str = "") -> context_service_pb2.ContextPack:
        with self.channel(self.query_addr, who) as channel:
            return (
                context_service_pb2_grpc.ContextServiceStub(channel)
                .CompileContext(
                    context_service_pb2.CompileContextRequest(
                        namespace=namespace or self.namespace,
                        query=query,
                        token_budget=2000,
                        dropped_limit=100,
                    ),
                    timeout=120,
                )
                .pack
            )


@dataclass
class Memories:
    originals: list[str]
    summary: str
    lossy_originals: list[str]
    lossy_summary: str
    neighbour_originals: list[str]
    neighbour_summary: str


def _long_texts(marker: str, subject: str) -> list[str]:
    """Three memories of several sentences each, all about ``subject`` and naming ``marker``."""
    return [
        f"The {marker} {subject} runs on host number {i}. It was installed by the platform team years ago. "
        "Nobody remembers the original configuration, and the documentation was lost in a migration. "
        f"Operators restart the {marker} {subject} when its queue grows beyond ten thousand messages. "
        "The restart takes about four minutes and needs a change ticket."
        for i in range(3)
    ]


@pytest.fixture(scope="module")
def world(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tokens_file: Path = tmp_path_factory.mktemp("summaries") / "tokens.yaml"
    organization = "sum" + uuid.uuid4().hex[:10]
    tokens = memory_user_tokens(tokens_file, "summary", organization, {"owner": "ua", "neighbour": "ub"})
    world = World(organization=organization, marker="wombat" + uuid.uuid4().hex[:8], tokens=tokens)
    with token_secured_services(settings, tokens_file) as (world.ingest_addr, world.query_addr):
        yield world


@pytest.fixture(scope="module")
def memories(world: World) -> Memories:
    originals = world.add("owner", _long_texts(world.marker, "relay"))
    lossy = world.add("owner", _long_texts(world.marker, "archiver"))
    neighbour = world.add("neighbour", _long_texts(world.marker, "relay"))
    return Memories(
        originals=originals,
        summary=world.summarize("owner", originals, lossless=True),
        lossy_originals=lossy,
        lossy_summary=world.summarize("owner", lossy, lossless=False),
        neighbour_originals=neighbour,
        neighbour_summary=world.summarize("neighbour", neighbour, lossless=True),
    )


def _kept(pack: context_service_pb2.ContextPack) -> dict[str, context_service_pb2.ContextItem]:
    return {item.provenance.node_key: item for item in pack.items}


def test_a_summary_is_a_candidate_of_its_own_rule_that_explains_itself(
    world: World, memories: Memories
) -> None:
    pack = world.compile("owner", f"{world.marker} relay restart queue")
    kept = _kept(pack)
    assert memories.summary in kept, [i.provenance.node_key for i in pack.items]
    selection = kept[memories.summary].selection
    assert selection.rule == "summary"
    components = dict(selection.score_components)
    assert components["covers"] == 3.0
    # value per token decided between the summary and its originals, both values explained
    assert components["value_per_token"] >= components["originals_value_per_token"] > 0
    assert "summary" in selection.reason


def test_a_summary_never_shares_the_pack_with_the_originals_it_covers(
    world: World, memories: Memories
) -> None:
    pack = world.compile("owner", f"{world.marker} relay restart queue")
    kept = _kept(pack)
    assert memories.summary in kept
    assert not set(memories.originals) & set(kept)  # no double content
    dropped = {d.provenance.node_key: d.drop_reason for d in pack.dropped}
    covered = [memory_id for memory_id in memories.originals if memory_id in dropped]
    assert covered, dropped  # the originals were candidates, dropped for the summary
    assert all(f"covered by the summary {memories.summary}" in dropped[m] for m in covered)


def test_a_lossy_summary_stands_for_its_hidden_originals(world: World, memories: Memories) -> None:
    pack = world.compile("owner", f"{world.marker} archiver restart queue")
    kept = _kept(pack)
    assert memories.lossy_summary in kept
    assert kept[memories.lossy_summary].selection.rule == "summary"
    assert not set(memories.lossy_originals) & set(kept)


def test_another_users_summary_never_appears(world: World, memories: Memories) -> None:
    owner_ids = {memories.summary, memories.lossy_summary, *memories.originals, *memories.lossy_originals}
    for query in (f"{world.marker} relay restart queue", f"{world.marker} archiver restart queue"):
        pack = world.compile("neighbour", query)
        seen = set(_kept(pack)) | {d.provenance.node_key for d in pack.dropped}
        assert not seen & owner_ids, seen & owner_ids
        # the neighbour's own summary is there: the summary rule ran for this caller too
        assert memories.neighbour_summary in seen
        summaries = [i for i in pack.items if i.selection.rule == "summary"]
        assert {i.provenance.node_key for i in summaries} <= {memories.neighbour_summary}


def test_another_tenants_summary_never_appears(world: World, memories: Memories) -> None:
    query = f"{world.marker} relay restart queue"
    with pytest.raises(grpc.RpcError) as refused:
        world.compile("outsider", query)  # no right on the owner's namespace
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    own = world.compile("outsider", query, namespace=memory_namespace(world.organization + "x", "production"))
    assert world.marker not in own.text and not own.items
