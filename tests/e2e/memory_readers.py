"""Every read RPC of one caller, as the memory tests use them (`tests/e2e/test_memory_liveness.py`,
`tests/e2e/test_memory_write_attacks.py`): the memory RPCs, Search, CompileContext, CompileTypedContext,
ListFacts, GetSource, and the enrichment job run in process on the real database."""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field
from typing import Any

import grpc
from google.protobuf import json_format

from common.kernel.config import Settings
from common.kernel.memory_names import memory_namespace
from common.storage.database import Database
from common.storage.schema import migrations
from ingest_service.memories.enrichment.jobs import EnrichmentJob
from ingest_service.memories.enrichment.rule_enricher import RuleEnricher
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
from memory_service_grpc_client.memory.v1 import source_service_pb2
from memory_service_grpc_client.memory.v1 import source_service_pb2_grpc
from tests.e2e.pack_registration import enable_pack
from tests.e2e.pack_registration import register_pack
from tests.unit.test_domain_packs import delivery_pack

PACK_VERSION = "memory-readers-1"
"""The one delivery pack version the memory read tests enable (`Caller.enable_pack`)."""


@dataclass
class Caller:
    """One caller's stubs and the metadata of its requests (the project header)."""

    ingest: grpc.Channel
    query: grpc.Channel
    metadata: tuple[tuple[str, str], ...]
    user_id: str = ""
    admin: grpc.Channel | None = None  # registers domain packs (default: ``ingest``)
    packs_enabled: set[str] = field(default_factory=set)

    def write(self, method: str, request: Any) -> Any:
        stub = memory_service_pb2_grpc.MemoryServiceStub(self.ingest)
        return getattr(stub, method)(request, timeout=120, metadata=self.metadata)

    def add(self, *items: dict[str, Any]) -> list[str]:
        request = json_format.ParseDict(
            {"memories": list(items), "userId": self.user_id}, memory_service_pb2.AddMemoriesRequest()
        )
        return [result.memory_id for result in self.write("AddMemories", request).results]

    def namespace_of(self, memory_id: str) -> str:
        scope = self.get(memory_id).scope
        return memory_namespace(scope.organization_id, scope.environment, scope.project_id)

    def get(self, memory_id: str) -> memory_record_pb2.Memory:
        stub = memory_query_service_pb2_grpc.MemoryQueryServiceStub(self.query)
        request = memory_query_service_pb2.GetMemoryRequest(memory_id=memory_id, user_id=self.user_id)
        return stub.GetMemory(request, timeout=60, metadata=self.metadata).memory

    def recall(self, query: str, **fields: Any) -> list[str]:
        stub = memory_query_service_pb2_grpc.MemoryQueryServiceStub(self.query)
        request = memory_query_service_pb2.RecallMemoriesRequest(
            query=query, user_id=self.user_id, top_k=20, touch=False, **fields
        )
        return [
            r.memory.memory_id
            for r in stub.RecallMemories(request, timeout=60, metadata=self.metadata).memories
        ]

    def listed(self, **fields: bool) -> set[str]:
        stub = memory_query_service_pb2_grpc.MemoryQueryServiceStub(self.query)
        request = memory_query_service_pb2.ListMemoriesRequest(user_id=self.user_id, page_size=100, **fields)
        return {m.memory_id for m in stub.ListMemories(request, timeout=60, metadata=self.metadata).memories}

    def search(self, namespace: str, query: str) -> set[str]:
        stub = retrieval_service_pb2_grpc.RetrievalServiceStub(self.query)
        request = retrieval_service_pb2.SearchRequest(namespace=namespace, query=query, top_k=50)
        return {hit.node_key for hit in stub.Search(request, timeout=60).hits}

    def context(self, namespace: str, query: str, anchors: list[str]) -> str:
        stub = context_service_pb2_grpc.ContextServiceStub(self.query)
        request = context_service_pb2.CompileContextRequest(
            namespace=namespace, query=query, anchors=anchors, token_budget=8000, dropped_limit=100
        )
        pack = stub.CompileContext(request, timeout=120).pack
        for candidate in [*pack.items, *pack.dropped]:  # a summary's lineage names its originals' ids
            candidate.provenance.ClearField("metadata")
        return str(pack)

    def context_keys(self, namespace: str, query: str, anchors: list[str]) -> tuple[set[str], str]:
        """CompileContext's node keys (items and dropped candidates) and all of its text."""
        stub = context_service_pb2_grpc.ContextServiceStub(self.query)
        request = context_service_pb2.CompileContextRequest(
            namespace=namespace, query=query, anchors=anchors, token_budget=8000, dropped_limit=100
        )
        pack = stub.CompileContext(request, timeout=120).pack
        candidates = [*pack.items, *pack.dropped]
        return {c.provenance.node_key for c in candidates}, "\n".join(
            [pack.text, *(c.text for c in candidates)]
        )

    def typed_keys(self, namespace: str, anchor: str) -> tuple[set[str], str]:
        """CompileTypedContext's node keys (items, their provenance and paths) and its text."""
        pack = self.typed_pack(namespace, anchor)
        keys = {i.natural_key for i in pack.items} | {i.provenance.node_key for i in pack.items}
        keys |= {step.node_key for i in pack.items for step in i.path}
        return keys, "\n".join([pack.text, *(i.text for i in pack.items)])

    def typed_context(self, namespace: str, anchor: str) -> str:
        return str(self.typed_pack(namespace, anchor))

    def typed_pack(self, namespace: str, anchor: str) -> Any:
        """CompileTypedContext from ``anchor`` over MENTIONS (a pack enabled first: it needs one)."""
        if namespace not in self.packs_enabled:
            self.enable_pack(namespace)
        stub = context_service_pb2_grpc.ContextServiceStub(self.query)
        request = context_service_pb2.CompileTypedContextRequest(
            namespace=namespace, anchors=[anchor], relations=["MENTIONS"], max_depth=2, token_budget=8000
        )
        return stub.CompileTypedContext(request, timeout=120).pack

    def enable_pack(self, namespace: str) -> None:
        """Enables the delivery pack of version `PACK_VERSION` in ``namespace`` (registered by the first
        call; the pack registry is shared and immutable, so every run reuses that one version)."""
        pack = delivery_pack(PACK_VERSION)
        register_pack(self.admin or self.ingest, pack)  # created, or the same content already registered
        enable_pack(self.admin or self.ingest, namespace, pack)
        self.packs_enabled.add(namespace)

    def facts(self, namespace: str, **filters: str) -> list[Any]:
        stub = fact_query_service_pb2_grpc.FactQueryServiceStub(self.query)
        request = fact_query_service_pb2.ListFactsRequest(
            namespace=namespace, include_history=True, **filters
        )
        return list(stub.ListFacts(request, timeout=60).facts)

    def source(self, namespace: str, key: str) -> grpc.StatusCode:
        return source_status(self.query, namespace, key)


def source_status(channel: grpc.Channel, namespace: str, key: str) -> grpc.StatusCode:
    """GetSource's status for node ``key``: OK, or the code it was refused with."""
    stub = source_service_pb2_grpc.SourceServiceStub(channel)
    try:
        stub.GetSource(source_service_pb2.GetSourceRequest(namespace=namespace, natural_key=key), timeout=60)
    except grpc.RpcError as error:
        return error.code()
    return grpc.StatusCode.OK


def enrich(settings: Settings, namespace: str, memory_id: str, version: int = 1) -> None:
    """The worker's enrichment job for one version, run here (the enqueue may race it: idempotent)."""
    database = Database(settings, prepare=migrations.apply)
    try:
        EnrichmentJob(database, RuleEnricher()).run(namespace, memory_id, version)
    finally:
        database.close()
