"""Hidden and expired memories reach no read RPC but Recall (docs/how-to/memory-records.md).

Four memories of one user in a namespace of their own (a fresh project), all naming Customer 8821 and a
marker word, enriched by the real enrichment job (so each has ``MENTIONS`` facts to the entity
``identifier:customer 8821``): ``live`` stays; ``expiring`` has a one-second TTL; ``covered_*`` are
hidden by a lossy summary. Judged for the development caller (who sees everything, so nothing but the
liveness rule can hide them) and for the owner's token: Search, CompileContext, CompileTypedContext
(traversal through MENTIONS), ListFacts, GetSource never show the expired or hidden ones and show the
live one and the summary (the control: the same queries do find memories); the memory RPCs keep their
semantics (Recall shows neither, ListMemories on request, GetMemory by id with ``expired``).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from common.auth.principals import Right
from common.kernel.config import Settings
from common.kernel.memory_names import memory_namespace
from memory_service_grpc_client import ClientSecurity
from memory_service_grpc_client import make_channel
from memory_service_grpc_client.memory.v1 import memory_service_pb2
from memory_service_tools.token_writer import add_token
from tests.e2e.conftest import token_secured_services
from tests.e2e.memory_readers import Caller
from tests.e2e.memory_readers import enrich

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

ENTITY = "identifier:customer 8821"


@dataclass
class World:
    """The memories of `load` (ids by role) and their namespace."""

    namespace: str
    marker: str
    ids: dict[str, str]

    @property
    def gone(self) -> set[str]:
        return {self.ids["expiring"], self.ids["covered_a"], self.ids["covered_b"]}


def load(caller: Caller, settings: Settings) -> World:
    """Adds, enriches, summarises and lets expire the four memories of the module doc."""
    marker = "wombat" + uuid.uuid4().hex[:8]
    texts = {
        "live": f"Customer 8821 asked about {marker} invoices and a refund.",
        "expiring": f"Customer 8821 reported {marker} login failures after the MFA reset.",
        "covered_a": f"Customer 8821 prefers {marker} replies by email.",
        "covered_b": f"Customer 8821 uses the {marker} mobile application every day.",
    }
    items = [{"text": text, **({"ttl": "1s"} if role == "expiring" else {})} for role, text in texts.items()]
    ids = dict(zip(texts, caller.add(*items), strict=True))
    assert all(ids.values())
    namespace = caller.namespace_of(ids["live"])
    for memory_id in ids.values():
        enrich(settings, namespace, memory_id)
    summary = caller.write(
        "SummarizeMemories",
        memory_service_pb2.SummarizeMemoriesRequest(
            memory_ids=[ids["covered_a"], ids["covered_b"]], user_id=caller.user_id
        ),
    ).summary
    ids["summary"] = summary.memory_id
    deadline = time.monotonic() + 60  # wait for the instant to pass (no assertion on durations)
    while not caller.get(ids["expiring"]).expired and time.monotonic() < deadline:
        time.sleep(0.2)
    assert caller.get(ids["expiring"]).expired
    return World(namespace=namespace, marker=marker, ids=ids)


def check_every_read(caller: Caller, world: World) -> None:
    """The assertions of the module doc, for one caller."""
    live, gone = world.ids["live"], world.gone
    # Search: the live memory and the summary are found, the gone ones are not.
    found = caller.search(world.namespace, world.marker)
    assert {live, world.ids["summary"]} <= found, found
    assert not found & gone
    # ListFacts: the live memory's MENTIONS link is there; none of a gone memory, by subject or object.
    assert ENTITY in {f.object for f in caller.facts(world.namespace, subject=live, predicate="MENTIONS")}
    for memory_id in gone:
        assert caller.facts(world.namespace, subject=memory_id) == []
    about_entity = {f.subject for f in caller.facts(world.namespace, object=ENTITY)}
    assert live in about_entity and not about_entity & gone
    # CompileContext, by query and with the gone memories and the entity as anchors.
    pack = caller.context(world.namespace, world.marker, sorted(gone | {ENTITY}))
    assert live in pack
    assert not [memory_id for memory_id in gone if memory_id in pack]
    # CompileTypedContext: the traversal from the entity follows MENTIONS to the live memory only.
    typed = caller.typed_context(world.namespace, ENTITY)
    assert live in typed and not [memory_id for memory_id in gone if memory_id in typed]
    assert live in caller.typed_keys(world.namespace, live)[0]  # a memory as the anchor: found, unless gone
    for memory_id in gone:
        keys, text = caller.typed_keys(world.namespace, memory_id)
        assert memory_id not in keys and world.marker not in text
    # GetSource: a gone memory's node is reported like an absent one.
    assert caller.source(world.namespace, live) == grpc.StatusCode.OK
    for memory_id in gone:
        assert caller.source(world.namespace, memory_id) == grpc.StatusCode.NOT_FOUND
    # The memory RPCs keep their semantics: Recall shows neither; ListMemories on request; GetMemory by id.
    recalled = caller.recall(world.marker)
    assert live in recalled and world.ids["summary"] in recalled and not set(recalled) & gone
    assert caller.listed() == {live, world.ids["summary"]}
    assert caller.listed(include_summarized=True, include_expired=True) == set(world.ids.values())
    assert caller.get(world.ids["expiring"]).expired  # readable by id until the sweep
    assert caller.get(world.ids["covered_a"]).summary_id == world.ids["summary"]


def test_the_development_caller_sees_no_hidden_or_expired_memory(
    ingest_channel: grpc.Channel, query_channel: grpc.Channel, settings: Settings
) -> None:
    project = "prj-" + uuid.uuid4().hex[:10]
    caller = Caller(
        ingest_channel, query_channel, (("x-project-id", project),), user_id="u" + uuid.uuid4().hex[:8]
    )
    check_every_read(caller, load(caller, settings))


@pytest.fixture
def owner(settings: Settings, tmp_path: Path) -> Iterator[Caller]:
    """A memory-scoped token of an organisation of its own, with both services secured by it."""
    organization = "live" + uuid.uuid4().hex[:10]
    tokens_file = tmp_path / "tokens.yaml"
    token, _ = add_token(
        tokens_file,
        principal=f"memory-owner-{organization}",
        namespaces={memory_namespace(organization, "production"): [Right.READ, Right.WRITE]},
        memory_scope=(organization, "production", "owner"),
    )
    admin, _ = add_token(tokens_file, principal=f"admin-{organization}", namespaces={"*": [Right.ADMIN]})
    with token_secured_services(settings, tokens_file) as (ingest_addr, query_addr):
        security = ClientSecurity(token=token)
        with (
            make_channel(ingest_addr, security=security) as ingest,
            make_channel(query_addr, security=security) as query,
            make_channel(ingest_addr, security=ClientSecurity(token=admin)) as packs,
        ):
            yield Caller(ingest, query, (), admin=packs)


def test_the_owner_sees_no_hidden_or_expired_memory_of_its_own(owner: Caller, settings: Settings) -> None:
    check_every_read(owner, load(owner, settings))
