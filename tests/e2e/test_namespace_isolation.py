"""Namespace isolation on the real services (docs/how-to/tokens-and-scopes.md).

Both services run in-process with a tokens file (auth on). Namespaces A and B hold the same kinds of
data (observations with facts and text fragments, documents, pre-cut chunks, asserted facts), each with
markers of its own. The attacker's token is granted only namespace A (admin, so every RPC is open to
it there). The suite walks every RPC the two servers serve — enumerated from the servers (reflection)
and the generated descriptors, so a new RPC is either attacked here or fails
`test_every_served_rpc_has_an_isolation_attack` — and tries to reach B:

* naming B as the namespace: PERMISSION_DENIED for every RPC (built generically from the descriptor);
* staying in A but naming B's natural keys, fact_ids, observation_ids, search text and anchors:
  NOT_FOUND or empty results, never B's data, and B is unchanged afterwards.

A token granted both namespaces sees both. Edges never cross namespaces: a link or a fact end naming a
key that exists only in the other namespace does not connect them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from collections.abc import Iterator

import grpc
import pytest

from common.auth.principals import CALLER_FILTERED_METHODS
from common.kernel.config import Settings
from memory_service_grpc_client.memory.v1 import document_service_pb2
from memory_service_grpc_client.memory.v1 import document_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2_grpc
from tests.e2e import memory_attacks
from tests.e2e.conftest import token_secured_services
from tests.e2e.isolation_data_protection_attacks import erase_subject
from tests.e2e.isolation_data_protection_attacks import erasure_receipt
from tests.e2e.isolation_data_protection_attacks import export_import
from tests.e2e.isolation_data_protection_attacks import legal_holds
from tests.e2e.isolation_data_protection_attacks import retention_attack
from tests.e2e.isolation_data_protection_attacks import webhooks_attack
from tests.e2e.isolation_read_attacks import compile_context
from tests.e2e.isolation_read_attacks import compile_typed_context
from tests.e2e.isolation_read_attacks import get_namespace_stats
from tests.e2e.isolation_read_attacks import get_observation
from tests.e2e.isolation_read_attacks import get_source
from tests.e2e.isolation_read_attacks import get_trace
from tests.e2e.isolation_read_attacks import list_audit_events
from tests.e2e.isolation_read_attacks import list_facts_attack
from tests.e2e.isolation_read_attacks import list_namespaces
from tests.e2e.isolation_read_attacks import namespace_configuration_only
from tests.e2e.isolation_read_attacks import search_attack
from tests.e2e.isolation_read_attacks import watch_changes
from tests.e2e.isolation_world import World
from tests.e2e.isolation_world import b_untouched
from tests.e2e.isolation_world import invoke
from tests.e2e.isolation_world import list_facts
from tests.e2e.isolation_world import load
from tests.e2e.isolation_world import naming_namespace
from tests.e2e.isolation_world import no_cross_namespace_edges
from tests.e2e.isolation_world import read_observation
from tests.e2e.isolation_world import refusal_code
from tests.e2e.isolation_world import request_class_of
from tests.e2e.isolation_world import served_methods
from tests.e2e.isolation_write_attacks import assert_facts
from tests.e2e.isolation_write_attacks import close_fact
from tests.e2e.isolation_write_attacks import delete_node
from tests.e2e.isolation_write_attacks import embedding_backlog
from tests.e2e.isolation_write_attacks import purge
from tests.e2e.isolation_write_attacks import put_chunks
from tests.e2e.isolation_write_attacks import reconcile_attack
from tests.e2e.isolation_write_attacks import reconcile_stream
from tests.e2e.isolation_write_attacks import record_audit_event
from tests.e2e.isolation_write_attacks import record_observations
from tests.e2e.isolation_write_attacks import redact
from tests.e2e.isolation_write_attacks import retain
from tests.e2e.isolation_write_attacks import vault_run

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def world(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tokens_file = tmp_path_factory.mktemp("isolation") / "tokens.yaml"
    world = World(tokens_file)
    world.database_url, world.graph = settings.database_url, settings.graph_name
    world.traces_table = settings.context_traces_table
    with token_secured_services(settings, tokens_file) as (world.ingest_addr, world.query_addr):
        load(world, world.a)
        load(world, world.b)
        world.memory.ingest_addr, world.memory.query_addr = world.ingest_addr, world.query_addr
        memory_attacks.load(world.memory)
        yield world


ATTACKS: dict[str, Callable[[World], None]] = {
    "/memory.v1.RetrievalService/Search": search_attack,
    "/memory.v1.ContextService/CompileContext": compile_context,
    "/memory.v1.ContextService/CompileTypedContext": compile_typed_context,
    "/memory.v1.SourceService/GetSource": get_source,
    "/memory.v1.FactQueryService/ListFacts": list_facts_attack,
    "/memory.v1.ObservationQueryService/GetObservation": get_observation,
    "/memory.v1.ObservationService/RecordObservations": record_observations,
    "/memory.v1.ObservationService/RedactObservation": redact,
    "/memory.v1.ObservationService/PurgeObservation": purge,
    "/memory.v1.ObservationService/GetEmbeddingBacklog": embedding_backlog,
    "/memory.v1.FactService/AssertFacts": assert_facts,
    "/memory.v1.FactService/CloseFact": close_fact,
    "/memory.v1.DocumentService/Retain": retain,
    "/memory.v1.DocumentService/PutChunks": put_chunks,
    "/memory.v1.SnapshotService/Reconcile": reconcile_attack,
    "/memory.v1.SnapshotService/ReconcileStream": reconcile_stream,
    "/memory.v1.VaultService/IngestVault": vault_run,
    "/memory.v1.DocumentService/DeleteNode": delete_node,
    "/memory.v1.AuditService/RecordAuditEvent": record_audit_event,
    "/memory.v1.TraceService/GetTrace": get_trace,
    "/memory.v1.AuditService/ListAuditEvents": list_audit_events,
    "/memory.v1.NamespaceService/ListNamespaces": list_namespaces,
    "/memory.v1.NamespaceService/GetNamespaceStats": get_namespace_stats,
    "/memory.v1.DataProtectionService/EraseSubject": erase_subject,
    "/memory.v1.DataProtectionService/GetErasureReceipt": erasure_receipt,
    "/memory.v1.DataProtectionService/CreateLegalHold": legal_holds,
    "/memory.v1.DataProtectionService/LiftLegalHold": legal_holds,
    "/memory.v1.DataProtectionService/ListLegalHolds": legal_holds,
    "/memory.v1.DataProtectionService/SetRetentionRule": retention_attack,
    "/memory.v1.DataProtectionService/DeleteRetentionRule": retention_attack,
    "/memory.v1.DataProtectionService/PreviewRetention": retention_attack,
    "/memory.v1.DataProtectionService/ExportNamespace": export_import,
    "/memory.v1.DataProtectionService/ImportNamespace": export_import,
    "/memory.v1.WebhookService/CreateWebhookSubscription": webhooks_attack,
    "/memory.v1.WebhookService/ListWebhookSubscriptions": webhooks_attack,
    "/memory.v1.WebhookService/DeleteWebhookSubscription": webhooks_attack,
    "/memory.v1.WebhookService/ListDeadLetters": webhooks_attack,
    "/memory.v1.WebhookService/ReplayDeadLetters": webhooks_attack,
    "/memory.v1.ChangeFeedService/WatchChanges": watch_changes,
    "/memory.v1.DomainPackService/RegisterPackage": namespace_configuration_only,
    "/memory.v1.DomainPackService/GetPackage": namespace_configuration_only,
    "/memory.v1.DomainPackService/ListPackages": namespace_configuration_only,
    "/memory.v1.DomainPackService/SetNamespaceKinds": namespace_configuration_only,
    "/memory.v1.DomainPackService/GetNamespaceKinds": namespace_configuration_only,
    **{
        method: functools.partial(lambda attack, world: attack(world.memory), attack)
        for method, attack in memory_attacks.ATTACKS.items()
    },
}


def test_every_served_rpc_has_an_isolation_attack(world: World) -> None:
    served = served_methods(world.ingest_addr, world.both) + served_methods(world.query_addr, world.both)
    assert "/memory.v1.RetrievalService/Search" in served and "/memory.v1.DocumentService/Retain" in served
    missing = [method for method in served if method not in ATTACKS]
    assert not missing, f"RPCs without a namespace-isolation attack in {__name__}: {missing}"


def test_naming_namespace_b_is_denied_for_every_rpc(world: World) -> None:
    served = served_methods(world.ingest_addr, world.both) + served_methods(world.query_addr, world.both)
    for method in served:
        if method in CALLER_FILTERED_METHODS:  # names no namespace: its answer holds the caller's own only
            asked = request_class_of(method)[0](prefix=world.b.ns)
            assert not invoke(world, method, asked, world.attacker).namespaces, method
            continue
        code = refusal_code(functools.partial(invoke, world, method, naming_namespace(method, world.b.ns), world.attacker))
        assert code == grpc.StatusCode.PERMISSION_DENIED, method


@pytest.mark.parametrize("method", sorted(ATTACKS))
def test_namespace_a_never_reaches_b_data(world: World, method: str) -> None:
    served = served_methods(world.ingest_addr, world.both) + served_methods(world.query_addr, world.both)
    assert method in served, f"{method} has an attack but is not served: remove it from ATTACKS or serve it"
    ATTACKS[method](world)
    b_untouched(world)


def test_memory_scopes_never_reach_derived_things(world: World) -> None:
    """Chunks, packs and facts of another user's memories (same organisation) or of another organisation."""
    memory_attacks.derived_things(world.memory)
    memory_attacks.victim_untouched(world.memory)


def test_a_token_for_both_namespaces_sees_both(world: World) -> None:
    with world.query(world.both) as channel:
        search = retrieval_service_pb2_grpc.RetrievalServiceStub(channel)
        for side, other in ((world.a, world.b), (world.b, world.a)):
            hits = search.Search(
                retrieval_service_pb2.SearchRequest(namespace=side.ns, query=side.marker, top_k=20),
                timeout=60,
            ).hits
            assert {side.doc, side.chunks_doc, side.text_key} <= {hit.node_key for hit in hits}
            assert all(other.marker not in hit.text for hit in hits)
            assert {f.fact_id for f in list_facts(channel, side.ns, subject=side.person)} >= {
                side.fact_id,
                side.asserted_fact_id,
            }
            observation = read_observation(channel, side.ns, side.observation_id)
            assert side.marker in observation.content
    assert world.a.observation_id != world.b.observation_id  # same source identity, other namespace


def test_links_and_fact_ends_never_cross_namespaces(world: World) -> None:
    b = world.b
    with world.ingest(world.writers["a"]) as channel:
        response = document_service_pb2_grpc.DocumentServiceStub(channel).Retain(
            document_service_pb2.RetainRequest(
                namespace=world.a.ns, natural_key="doc:a-linker", content="links to B", links=[b.doc]
            ),
            timeout=120,
        )
    assert list(response.missing_links) == [b.doc] and list(response.linked) == []
    with world.ingest(world.writers["b"]) as channel:
        response = document_service_pb2_grpc.DocumentServiceStub(channel).Retain(
            document_service_pb2.RetainRequest(
                namespace=b.ns, natural_key="doc:b-linker", content="links to A", links=[world.a.doc]
            ),
            timeout=120,
        )
    assert list(response.missing_links) == [world.a.doc]
    assert_facts(world)  # a fact in A naming B's keys at both ends
    no_cross_namespace_edges(world)
    with world.query(world.both) as channel:
        b_facts = list_facts(channel, b.ns, object=b.doc)
        assert [f.fact_id for f in b_facts] == [b.asserted_fact_id]
        a_facts = list_facts(channel, world.a.ns, subject=b.target_person)
        assert a_facts and all(f.namespace == world.a.ns for f in a_facts)
    b_untouched(world)
