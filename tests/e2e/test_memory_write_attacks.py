"""A hostile user attacks the memory write paths; no read RPC derives anything of it for another user
(docs/how-to/memory-records.md).

One organisation with the victim ``ub`` and the attacker ``ua``, and an outsider of another organisation
whose user id is also ``ub`` (the same user id in another tenant). Every memory names the same entity
(``identifier:customer 4242``), so their enrichment shares its placeholder node. The attacker then
writes through every memory write path: AddMemories (metadata and provenance naming the victim's memory
and marker), UpdateMemory (its text naming the victim's marker), SummarizeMemories (lossy, hiding its
own), its memory expiring, DeleteMemory, and its quota exhausted. After each step every read RPC
(Search, CompileContext, CompileTypedContext over MENTIONS, ListFacts, GetSource, Recall, ListMemories)
shows the victim exactly its own (its memory, its MENTIONS link, the entity), and neither the attacker
nor the outsider anything of the victim (ids, marker, facts).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from google.protobuf import field_mask_pb2

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

ENTITY = "identifier:customer 4242"
QUOTA = 6


@dataclass
class Tenants:
    victim: Caller
    attacker: Caller
    outsider: Caller
    namespace: str
    outsider_namespace: str
    marker: str
    victim_id: str = ""
    outsider_id: str = ""


@pytest.fixture
def tenants(settings: Settings, tmp_path: Path) -> Iterator[Tenants]:
    organization = "atk" + uuid.uuid4().hex[:10]
    outsider_org = organization + "x"
    tokens_file = tmp_path / "tokens.yaml"
    tokens = {}
    for name, org, user in (
        ("victim", organization, "ub"),
        ("attacker", organization, "ua"),
        ("outsider", outsider_org, "ub"),
    ):
        tokens[name], _ = add_token(
            tokens_file,
            principal=f"memory-{name}-{organization}",
            namespaces={memory_namespace(org, "production"): [Right.READ, Right.WRITE]},
            memory_scope=(org, "production", user),
        )
    admin, _ = add_token(tokens_file, principal=f"admin-{organization}", namespaces={"*": [Right.ADMIN]})
    overrides = {"memory_quota_per_user": QUOTA}
    with token_secured_services(settings, tokens_file, **overrides) as (ingest_addr, query_addr):
        channels = []
        try:
            callers = {}
            for name, token in tokens.items():
                security = ClientSecurity(token=token)
                ingest, query = (
                    make_channel(ingest_addr, security=security),
                    make_channel(query_addr, security=security),
                )
                packs = make_channel(ingest_addr, security=ClientSecurity(token=admin))
                channels += [ingest, query, packs]
                callers[name] = Caller(ingest, query, (), admin=packs)
            yield Tenants(
                **callers,
                namespace=memory_namespace(organization, "production"),
                outsider_namespace=memory_namespace(outsider_org, "production"),
                marker="numbat" + uuid.uuid4().hex[:8],
            )
        finally:
            for channel in channels:
                channel.close()


def victim_sees_its_own(world: Tenants) -> None:
    victim = world.victim
    assert world.victim_id in victim.search(world.namespace, world.marker)
    assert ENTITY in {
        f.object for f in victim.facts(world.namespace, subject=world.victim_id, predicate="MENTIONS")
    }
    assert victim.source(world.namespace, ENTITY) == grpc.StatusCode.OK
    assert world.victim_id in victim.typed_keys(world.namespace, ENTITY)[0]
    assert world.victim_id in victim.context_keys(world.namespace, world.marker, [ENTITY])[0]
    assert world.victim_id in victim.recall(world.marker)
    assert world.victim_id in victim.listed()
    assert victim.get(world.victim_id).text.endswith(f"{world.marker} refund.")


def others_see_nothing_of_the_victim(world: Tenants, attacker_ids: set[str]) -> None:
    victim_id, marker = world.victim_id, world.marker
    readers = (
        (world.attacker, world.namespace, attacker_ids),
        (world.outsider, world.outsider_namespace, {world.outsider_id}),
    )
    for caller, namespace, own in readers:
        assert victim_id not in caller.search(namespace, marker)
        assert victim_id not in caller.search(namespace, "Customer 4242 refund")
        subjects = {f.subject for f in caller.facts(namespace, object=ENTITY)}
        assert subjects <= own, subjects - own  # only the reader's own MENTIONS links of the shared entity
        assert caller.facts(namespace, subject=victim_id) == []
        phrase = f"asked for a {marker}"  # the victim's text alone
        keys, text = caller.context_keys(namespace, marker, [ENTITY, victim_id])
        assert victim_id not in keys and phrase not in text and f"{victim_id} MENTIONS" not in text
        keys, text = caller.typed_keys(namespace, ENTITY)
        assert victim_id not in keys and phrase not in text
        assert caller.source(namespace, victim_id) == grpc.StatusCode.NOT_FOUND
        assert victim_id not in caller.recall(marker) and victim_id not in caller.listed(
            include_summarized=True, include_expired=True
        )
    # the outsider (same user id, another tenant) never reaches the victim's namespace
    with pytest.raises(grpc.RpcError) as refused:
        world.outsider.search(world.namespace, marker)
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED


def test_no_memory_write_path_reaches_another_users_reads(tenants: Tenants, settings: Settings) -> None:
    world = tenants
    (world.victim_id,) = world.victim.add({"text": f"Customer 4242 asked for a {world.marker} refund."})
    enrich(settings, world.namespace, world.victim_id)
    (world.outsider_id,) = world.outsider.add({"text": f"Customer 4242 wrote about {world.marker} too."})
    enrich(settings, world.outsider_namespace, world.outsider_id)
    victim_sees_its_own(world)
    attacker = world.attacker
    # AddMemories: the victim's id and marker in the attacker's metadata, provenance, tags and text.
    bait = {
        "text": f"Customer 4242 {world.marker} refund: see {world.victim_id}.",
        "metadata": {"memory_id": world.victim_id, "summary_id": world.victim_id},
        "provenance": {"summarized_ids": [world.victim_id], "memory_id": world.victim_id},
        "tags": [world.marker, world.victim_id],
        "idempotencyKey": world.victim_id,
    }
    added = attacker.add(bait, {"text": f"Customer 4242 likes {world.marker} tea."})
    for memory_id in added:
        enrich(settings, world.namespace, memory_id)
    assert world.victim_id not in added
    mine = set(added)
    victim_sees_its_own(world)
    others_see_nothing_of_the_victim(world, mine)
    # UpdateMemory: the attacker's text now names the victim's marker and id.
    attacker.write(
        "UpdateMemory",
        memory_service_pb2.UpdateMemoryRequest(
            memory_id=added[1],
            memory=memory_service_pb2.NewMemory(
                text=f"Customer 4242 {world.marker} refund {world.victim_id}"
            ),
            update_mask=field_mask_pb2.FieldMask(paths=["text"]),
        ),
    )
    enrich(settings, world.namespace, added[1], 2)
    victim_sees_its_own(world)
    others_see_nothing_of_the_victim(world, mine)
    # SummarizeMemories (lossy): the attacker hides its own; a summary naming the victim's id in its group.
    summary = attacker.write(
        "SummarizeMemories",
        memory_service_pb2.SummarizeMemoriesRequest(memory_ids=added, group_id=world.victim_id),
    ).summary
    enrich(settings, world.namespace, summary.memory_id)
    mine.add(summary.memory_id)
    assert world.victim.get(world.victim_id).summary_id == ""
    victim_sees_its_own(world)
    others_see_nothing_of_the_victim(world, mine)
    # An attacker's memory naming the entity expires.
    (expiring,) = attacker.add({"text": f"Customer 4242 {world.marker} refund soon gone.", "ttl": "1s"})
    enrich(settings, world.namespace, expiring)
    mine.add(expiring)
    deadline = time.monotonic() + 60  # wait for the instant to pass (no assertion on durations)
    while not attacker.get(expiring).expired and time.monotonic() < deadline:
        time.sleep(0.2)
    victim_sees_its_own(world)
    others_see_nothing_of_the_victim(world, mine)
    # DeleteMemory of every attacker memory naming the shared entity (its placeholder stays the victim's).
    for memory_id in [*added, summary.memory_id, expiring]:
        attacker.write(
            "DeleteMemory", memory_service_pb2.DeleteMemoryRequest(memory_id=memory_id, reason="x")
        )
    victim_sees_its_own(world)
    others_see_nothing_of_the_victim(world, set())
    # The attacker's quota exhausted: the victim still adds (quotas are per user and scope).
    results = attacker.write(
        "AddMemories",
        memory_service_pb2.AddMemoriesRequest(
            memories=[
                memory_service_pb2.NewMemory(text=f"filler {i} {world.marker}") for i in range(QUOTA + 2)
            ]
        ),
    ).results
    refused = [r for r in results if r.error_code == "RESOURCE_EXHAUSTED"]
    assert len(refused) == 2 and all(r.quota_count == QUOTA for r in refused)
    assert all(r.quota_limit == QUOTA for r in refused)
    (second,) = world.victim.add({"text": f"Customer 4242 thanked us for the {world.marker} refund."})
    assert second
    victim_sees_its_own(world)
    others_see_nothing_of_the_victim(world, {r.memory_id for r in results if r.memory_id})
