"""Asynchronous enrichment end to end (docs/how-to/memory-records.md): AddMemories over
gRPC -> the real procrastinate worker (in this process, `EnrichmentQueue.running`) -> GetMemory shows the
fields, the entities are graph nodes linked to the memory (MENTIONS, evidence ``extracted``) that only the
memory's owner sees, through Search, CompileContext and ListFacts.

Everything runs in a fresh database of its own (the worker's periodic sweep enqueues every due memory of
its database, and must not enrich what other tests left in the shared one). Services with tokens:
acme/production user 8821 (the owner), acme/production user 7777 (same tenant, another user) and a
hostile tenant evil/production.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import psycopg
import pytest
from google.protobuf import json_format

from common.auth.principals import Right
from common.kernel.config import Settings
from common.kernel.memory_names import memory_namespace
from ingest_service.memories.enrichment.model import Enrichment
from ingest_service.memories.enrichment.model import MemoryText
from ingest_service.memories.enrichment.queue import ENRICH_TASK
from ingest_service.memories.enrichment.rule_enricher import RuleEnricher
from ingest_service.worker import build_worker
from memory_service_grpc_client import ClientSecurity
from memory_service_grpc_client import make_channel
from memory_service_grpc_client.memory.v1 import context_service_pb2
from memory_service_grpc_client.memory.v1 import context_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import memory_query_service_pb2
from memory_service_grpc_client.memory.v1 import memory_query_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import memory_record_pb2
from memory_service_grpc_client.memory.v1 import memory_service_pb2
from memory_service_grpc_client.memory.v1 import memory_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2_grpc
from memory_service_tools.token_writer import add_token
from tests import waiting
from tests.conftest import fresh_database
from tests.e2e.conftest import token_secured_services
from tests.e2e.memory_readers import source_status
from tests.e2e.pack_registration import enable_pack
from tests.e2e.pack_registration import register_pack
from tests.unit.test_domain_packs import delivery_pack

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

FACT = {"idempotencyKey": "9421", "text": "User Alice prefers concise replies and uses dark mode."}
INCIDENT = {
    "idempotencyKey": "18420",
    "text": "Customer 8821 reported login failures after MFA reset.",
    "source": "support_ticket",
    "eventType": "incident_resolved",
}
ACME = memory_namespace("acme", "production", "")
EVIL = memory_namespace("evil", "production", "")


class FlakyEnricher:
    """The rule enricher, failing the first call for texts containing ``fail_once`` (a job failing once)."""

    name = "rules"

    def __init__(self, fail_once: str) -> None:
        self.rules = RuleEnricher()
        self.fail_once = fail_once
        self.calls: list[str] = []
        self.lock = threading.Lock()

    def enrich(self, item: MemoryText) -> Enrichment:
        with self.lock:
            self.calls.append(item.text)
            first = self.calls.count(item.text) == 1
        if self.fail_once in item.text and first:
            raise RuntimeError("enricher fails once")
        return self.rules.enrich(item)


@dataclass
class World:
    settings: Settings
    ingest_addr: str
    query_addr: str
    owner: str
    neighbour: str
    hostile: str
    enricher: FlakyEnricher

    def channel(self, address: str, token: str) -> grpc.Channel:
        return make_channel(address, security=ClientSecurity(token=token))

    def add(self, token: str, *items: dict[str, Any]) -> list[str]:
        with self.channel(self.ingest_addr, token) as channel:
            request = json_format.ParseDict(
                {"memories": list(items)}, memory_service_pb2.AddMemoriesRequest()
            )
            response = memory_service_pb2_grpc.MemoryServiceStub(channel).AddMemories(request, timeout=120)
        return [result.memory_id for result in response.results]

    def get(self, token: str, memory_id: str) -> memory_record_pb2.Memory:
        with self.channel(self.query_addr, token) as channel:
            stub = memory_query_service_pb2_grpc.MemoryQueryServiceStub(channel)
            return stub.GetMemory(
                memory_query_service_pb2.GetMemoryRequest(memory_id=memory_id), timeout=60
            ).memory

    def facts(self, token: str, namespace: str, **filters: str) -> list[Any]:
        with self.channel(self.query_addr, token) as channel:
            stub = fact_query_service_pb2_grpc.FactQueryServiceStub(channel)
            request = fact_query_service_pb2.ListFactsRequest(namespace=namespace, **filters)
            return list(stub.ListFacts(request, timeout=60).facts)

    def search(self, token: str, namespace: str, query: str) -> list[Any]:
        with self.channel(self.query_addr, token) as channel:
            stub = retrieval_service_pb2_grpc.RetrievalServiceStub(channel)
            request = retrieval_service_pb2.SearchRequest(namespace=namespace, query=query, top_k=20)
            return list(stub.Search(request, timeout=60).hits)

    def source_code(self, token: str, namespace: str, key: str) -> grpc.StatusCode:
        """GetSource's status for node ``key``."""
        with self.channel(self.query_addr, token) as channel:
            return source_status(channel, namespace, key)

    def typed_context(self, token: str, namespace: str, anchor: str) -> str:
        """CompileTypedContext's pack text from ``anchor``, MENTIONS only."""
        with self.channel(self.query_addr, token) as channel:
            stub = context_service_pb2_grpc.ContextServiceStub(channel)
            request = context_service_pb2.CompileTypedContextRequest(
                namespace=namespace, query="", anchors=[anchor], relations=["MENTIONS"]
            )
            return str(stub.CompileTypedContext(request, timeout=60))

    def context(self, token: str, namespace: str, query: str, anchors: tuple[str, ...] = ()) -> str:
        """CompileContext's pack text."""
        with self.channel(self.query_addr, token) as channel:
            stub = context_service_pb2_grpc.ContextServiceStub(channel)
            request = context_service_pb2.CompileContextRequest(
                namespace=namespace, query=query, anchors=list(anchors)
            )
            return stub.CompileContext(request, timeout=60).pack.text


def wait_for(condition: Callable[[], bool], what: str) -> None:
    """`tests.waiting.wait_for` with the worker's bound (180 s, polled every 0.2 s)."""
    waiting.wait_for(condition, what, limit_s=180.0, interval_s=0.2)


@pytest.fixture(scope="module")
def world(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tokens_file: Path = tmp_path_factory.mktemp("enrichment-tokens") / "tokens.yaml"
    owner, _ = add_token(
        tokens_file,
        principal="owner",
        namespaces={ACME: [Right.READ, Right.WRITE]},
        memory_scope=("acme", "production", "8821"),
    )
    neighbour, _ = add_token(
        tokens_file,
        principal="neighbour",
        namespaces={ACME: [Right.READ, Right.WRITE]},
        memory_scope=("acme", "production", "7777"),
    )
    admin, _ = add_token(tokens_file, principal="admin", namespaces={"*": [Right.ADMIN], ACME: [Right.ADMIN]})
    hostile, _ = add_token(
        tokens_file,
        principal="hostile",
        namespaces={EVIL: [Right.ADMIN]},
        memory_scope=("evil", "production", "666"),
    )
    with fresh_database(settings) as fresh:
        fresh = fresh.model_copy(
            update={
                "enrichment_retry_wait_seconds": 1,
                "enrichment_attempts": 3,
                "shutdown_grace_seconds": 5,
                # the worker's periodic maintenance every second, expired memories swept at once
                "memory_maintenance_cron": "* * * * * *",
                "memory_expiry_grace_hours": 0.0,
            }
        )
        enricher = FlakyEnricher(fail_once="Customer 8821")
        queue, database = build_worker(fresh, concurrency=2, enricher=enricher)
        try:
            with (
                token_secured_services(fresh, tokens_file) as (ingest_addr, query_addr),
                queue.running(concurrency=2),
            ):
                with make_channel(ingest_addr, security=ClientSecurity(token=admin)) as channel:
                    _enable_delivery_pack(channel, ACME)  # typed context needs a pack's relations
                yield World(fresh, ingest_addr, query_addr, owner, neighbour, hostile, enricher)
        finally:
            database.close()


def _enable_delivery_pack(channel: grpc.Channel, namespace: str) -> None:
    pack = delivery_pack(uuid.uuid4().hex)
    assert register_pack(channel, pack)
    enable_pack(channel, namespace, pack)


def _enriched(world: World, memory_id: str) -> bool:
    memory = world.get(world.owner, memory_id)
    return memory.enriched_version == memory.version


def _jobs(world: World) -> list[tuple[str, str, int]]:
    with psycopg.connect(world.settings.database_url) as conn:
        rows = conn.execute(
            "SELECT args->>'memory_id', status::text, attempts FROM procrastinate_jobs WHERE task_name = %s",
            (ENRICH_TASK,),
        ).fetchall()
    return [(str(a), str(b), int(c)) for a, b, c in rows]


def test_added_memories_are_enriched_by_the_worker(world: World) -> None:
    fact_id, incident_id = world.add(world.owner, FACT, INCIDENT)
    wait_for(lambda: _enriched(world, fact_id) and _enriched(world, incident_id), "both enriched")
    fact = world.get(world.owner, fact_id)
    assert list(fact.key_points) == [FACT["text"]]
    assert "Alice" in fact.entities and "dark mode" in fact.topics
    assert fact.memory_type == memory_record_pb2.MEMORY_TYPE_FACT
    assert 0.0 < fact.quality_score <= 1.0
    incident = world.get(world.owner, incident_id)
    assert list(incident.entities)[:2] == ["Customer 8821", "MFA"]  # the example of docs/how-to/memory-records.md
    assert incident.memory_type == memory_record_pb2.MEMORY_TYPE_EVENT
    # the incident's job failed once (FlakyEnricher) and was retried: two tries, one success
    jobs = {memory_id: (status, attempts) for memory_id, status, attempts in _jobs(world)}
    assert jobs[incident_id] == ("succeeded", 2)
    assert world.enricher.calls.count(INCIDENT["text"]) == 2


def test_entities_are_graph_nodes_linked_to_the_memory(world: World) -> None:
    (memory_id,) = world.add(
        world.owner, {"idempotencyKey": "e1", "text": "Order #55012 of Acme Corp shipped; see PROJ-12."}
    )
    wait_for(lambda: _enriched(world, memory_id), "enriched")
    mentions = world.facts(world.owner, ACME, subject=memory_id, predicate="MENTIONS")
    objects = {fact.object for fact in mentions}
    assert "identifier:order 55012" in objects and "organization:Acme Corp" in objects
    assert "issue:PROJ-12" in objects  # the namespace's pack names its identifiers
    assert {fact.evidence for fact in mentions} == {"extracted"}
    # a memory naming several things does not contradict itself: MENTIONS is many-valued
    assert [fact.object for fact in mentions if fact.conflict] == []
    # CompileContext sees the entity of the memory: its MENTIONS fact, anchored at the entity or the memory
    for anchor in ("organization:Acme Corp", memory_id):
        pack = world.context(world.owner, ACME, "who shipped the order", anchors=(anchor,))
        assert "MENTIONS" in pack and "organization:Acme Corp" in pack, anchor
    # and CompileTypedContext walks from the entity to the memory
    assert memory_id in world.typed_context(world.owner, ACME, "organization:Acme Corp")


def test_a_duplicate_delivery_changes_nothing(world: World) -> None:
    (memory_id,) = world.add(world.owner, {"idempotencyKey": "dup", "text": "Bob from Initech renewed 4471."})
    wait_for(lambda: _enriched(world, memory_id), "enriched")
    before = world.get(world.owner, memory_id)
    facts_before = world.facts(world.owner, ACME, subject=memory_id)
    job = build_worker_job(world)
    assert job.run(ACME, memory_id, before.version) is False  # the same job delivered again
    assert job.run(ACME, memory_id, before.version - 1) is False  # a job of an older version
    after = world.get(world.owner, memory_id)
    assert after == before
    assert world.facts(world.owner, ACME, subject=memory_id) == facts_before


def test_a_new_version_is_enriched_and_closes_what_it_no_longer_names(world: World) -> None:
    (memory_id,) = world.add(
        world.owner, {"idempotencyKey": "v", "text": "Carol from Globex called about 7781."}
    )
    wait_for(lambda: _enriched(world, memory_id), "version 1 enriched")
    first = {f.object for f in world.facts(world.owner, ACME, subject=memory_id, predicate="MENTIONS")}
    assert any(key.endswith(":Globex") for key in first)  # the recogniser's kind: product or organisation
    with world.channel(world.ingest_addr, world.owner) as channel:
        request = json_format.ParseDict(
            {
                "memoryId": memory_id,
                "memory": {"text": "Carol moved to Umbrella Corp."},
                "updateMask": "text",
            },
            memory_service_pb2.UpdateMemoryRequest(),
        )
        updated = memory_service_pb2_grpc.MemoryServiceStub(channel).UpdateMemory(request, timeout=120).memory
    assert updated.version == 2
    wait_for(lambda: world.get(world.owner, memory_id).enriched_version == 2, "version 2 enriched")
    memory = world.get(world.owner, memory_id)
    assert "Umbrella Corp" in memory.entities and "Globex" not in memory.entities
    current = {f.object for f in world.facts(world.owner, ACME, subject=memory_id, predicate="MENTIONS")}
    assert any(key.endswith(":Umbrella Corp") for key in current)
    assert not any(key.endswith(":Globex") for key in current)  # closed: valid no longer


def test_a_memory_committed_without_its_enqueue_is_found_by_the_sweep(world: World, provider: Any) -> None:
    """The process that committed the memory died before deferring its job (the writer has no hook):
    the worker's periodic sweep enqueues it, and it is enriched."""
    from common.domain.memory_scope import MemoryScope
    from common.storage.database import Database
    from common.storage.schema import migrations
    from ingest_service.memories.validation import NewMemoryInput
    from ingest_service.memories.writer import MemoryWriter

    database = Database(world.settings, embedding_model=provider.model_id, prepare=migrations.apply)
    try:
        writer = MemoryWriter(database, provider)  # on_due=None: nothing is enqueued at the commit
        (result,) = writer.add(
            MemoryScope("acme", "production", "", "8821"),
            [NewMemoryInput(text="Dave from Hooli reported an outage.", idempotency_key="lost")],
        )
    finally:
        database.close()
    wait_for(lambda: _enriched(world, result.memory_id), "the swept memory enriched")
    assert [job for job in _jobs(world) if job[0] == result.memory_id] == [(result.memory_id, "succeeded", 1)]
    assert "Hooli" in world.get(world.owner, result.memory_id).entities


def test_the_worker_runs_the_expiry_sweep(world: World) -> None:
    (memory_id,) = world.add(world.owner, {"idempotencyKey": "ttl", "text": "Temporary note.", "ttl": "1s"})

    def gone() -> bool:
        try:
            world.get(world.owner, memory_id)
        except grpc.RpcError as error:
            assert error.code() == grpc.StatusCode.NOT_FOUND
            return True
        return False

    wait_for(gone, "the expired memory swept by the worker's periodic maintenance")


def build_worker_job(world: World) -> Any:
    from common.storage.database import Database
    from common.storage.schema import migrations
    from ingest_service.memories.enrichment.jobs import EnrichmentJob

    return EnrichmentJob(Database(world.settings, prepare=migrations.apply), RuleEnricher())


def test_other_users_and_tenants_never_see_the_entities(world: World) -> None:
    marker = "Zanzibar Logistics"
    (memory_id,) = world.add(
        world.owner, {"idempotencyKey": "secret", "text": f"Customer 99120 of {marker} asked for a refund."}
    )
    wait_for(lambda: _enriched(world, memory_id), "enriched")
    owned = world.facts(world.owner, ACME, subject=memory_id, predicate="MENTIONS")
    assert any(fact.object == f"organization:{marker}" for fact in owned)
    entity = f"organization:{marker}"
    assert world.source_code(world.owner, ACME, entity) == grpc.StatusCode.OK  # the entity is a node
    # the same tenant's other user: not even the entity node's existence
    assert world.source_code(world.neighbour, ACME, entity) == grpc.StatusCode.NOT_FOUND
    assert world.facts(world.neighbour, ACME, subject=memory_id) == []
    assert world.facts(world.neighbour, ACME, object=f"organization:{marker}") == []
    assert not [hit for hit in world.search(world.neighbour, ACME, marker) if marker in str(hit)]
    assert marker not in world.context(world.neighbour, ACME, marker)
    assert marker not in world.context(world.neighbour, ACME, marker, anchors=(f"organization:{marker}",))
    assert memory_id not in world.typed_context(world.neighbour, ACME, f"organization:{marker}")
    # the hostile tenant: in its own namespace nothing, naming the victim's is refused
    assert world.facts(world.hostile, EVIL, subject=memory_id) == []
    assert world.source_code(world.hostile, EVIL, entity) == grpc.StatusCode.NOT_FOUND
    assert world.source_code(world.hostile, ACME, entity) == grpc.StatusCode.PERMISSION_DENIED
    assert not world.search(world.hostile, EVIL, marker)
    assert marker not in world.context(world.hostile, EVIL, marker, anchors=(f"organization:{marker}",))
    for call in (
        lambda: world.facts(world.hostile, ACME, subject=memory_id),
        lambda: world.search(world.hostile, ACME, marker),
        lambda: world.context(world.hostile, ACME, marker),
    ):
        with pytest.raises(grpc.RpcError) as refused:
            call()
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    with pytest.raises(grpc.RpcError) as missing:
        world.get(world.hostile, memory_id)
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND
    # the neighbour's own memory naming the same entity: the neighbour sees its own link and the entity
    (own,) = world.add(world.neighbour, {"idempotencyKey": "same", "text": f"{marker} called us."})
    wait_for(lambda: world.get(world.neighbour, own).enriched_version == 1, "the neighbour's memory enriched")
    assert {f.object for f in world.facts(world.neighbour, ACME, subject=own, predicate="MENTIONS")} == {
        entity
    }
    assert world.source_code(world.neighbour, ACME, entity) == grpc.StatusCode.OK
    assert world.facts(world.neighbour, ACME, subject=memory_id) == []  # still not the owner's link
