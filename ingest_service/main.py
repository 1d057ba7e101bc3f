"""ingest_service process: wiring of the write side (docs/explanation/architecture.md).

`create_ingest_host` builds the server (used by `cb serve ingest` and by tests on port 0); `serve` runs
it in the foreground until SIGTERM/SIGINT.
"""

from __future__ import annotations

import logging

import grpc

from common.domain.audit import AuditTrail
from common.grpc.consistency import WriteTokenInterceptor
from common.grpc.server import ServiceHost
from common.grpc.server import build_server
from common.kernel.config import Settings
from common.packs.domain_packs import PackRegistry
from common.packs.kind_validation import KindValidator
from common.storage.database import Database
from common.storage.pool_metrics import register_database_metrics
from common.storage.replicas.wal_position import current_wal_position
from common.storage.schema import migrations
from common.text_models.embeddings.factory import build_embedding_provider
from ingest_service.change_feed.pruner import ChangeFeedPruner
from ingest_service.change_feed.subscriptions import WebhookSubscriptions
from ingest_service.data_protection.erasure import SubjectEraser
from ingest_service.data_protection.namespace_archive import NamespaceArchive
from ingest_service.data_protection.retention import RetentionEnforcer
from ingest_service.documents.node_deletion import NodeDeleter
from ingest_service.documents.writer import DocumentWriter
from ingest_service.embedding.episodes import EpisodeEmbedder
from ingest_service.embedding.tenant_indexes import TenantIndexWorker
from ingest_service.facts.assertions import FactAsserter
from ingest_service.memories.enrichment.queue import EnrichmentQueue
from ingest_service.memories.summaries import MemorySummarizer
from ingest_service.memories.writer import MemoryWriter
from ingest_service.observations.recorder import ObservationRecorder
from ingest_service.observations.removal import ObservationRemover
from ingest_service.servicers.audit_servicer import AuditServicer
from ingest_service.servicers.data_protection_servicer import DataProtectionServicer
from ingest_service.servicers.document_servicer import DocumentServiceServicer
from ingest_service.servicers.domain_pack_servicer import DomainPackServicer
from ingest_service.servicers.fact_servicer import FactServicer
from ingest_service.servicers.memory_servicer import MemoryServicer
from ingest_service.servicers.observation_servicer import ObservationServicer
from ingest_service.servicers.snapshot_servicer import SnapshotServicer
from ingest_service.servicers.vault_servicer import VaultServicer
from ingest_service.servicers.webhook_servicer import WebhookServicer
from ingest_service.snapshots.reconciler import SnapshotReconciler
from ingest_service.validation.legal_holds import LegalHolds
from ingest_service.vault.ingest import VaultIngestor
from memory_service_grpc_client.memory.v1 import audit_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import data_protection_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import document_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import domain_pack_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import fact_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import memory_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import observation_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import snapshot_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import vault_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import webhook_service_pb2_grpc


def create_ingest_host(
    settings: Settings,
    *,
    address: str | None = None,
    metrics_port: int | None = None,
    load_model: bool = False,
) -> ServiceHost:
    """Builds (does not start) the ingest server: ObservationService, FactService, DocumentService,
    DomainPackService, SnapshotService, AuditService and VaultService.

    Args:
        settings: process settings.
        address: ``host:port`` to bind (default ``settings.ingest_addr``; port 0 picks a free port).
        metrics_port: Prometheus port (default ``settings.ingest_metrics_port``; 0 disables).
        load_model: read the embedding model's weights before the port is bound (`EmbeddingProvider.load`;
            `serve` does), so that health turns SERVING only once no request has to wait for them.
    """
    provider = build_embedding_provider(settings)
    if load_model:
        provider.load()
    database = Database(settings, embedding_model=provider.model_id, prepare=migrations.apply)
    register_database_metrics("ingest_service", database)
    kinds = KindValidator(database)  # one per process: SetNamespaceKinds here invalidates its cache
    writer = DocumentWriter(database, provider, settings, kinds=kinds)
    embedder = EpisodeEmbedder(
        database,
        provider,
        batch_size=settings.episode_embedding_batch,
        max_deferral_seconds=settings.episode_embedding_max_deferral_seconds,
        workers=settings.episode_embedding_workers,
    )
    recorder = ObservationRecorder(
        database, encoder=provider, kinds=kinds, on_pending_embeddings=embedder.wake
    )
    embedder.busy = recorder.busy  # rounds give way to writes in flight (for at most 2 s)
    audit = AuditTrail(database)
    remover = ObservationRemover(database, audit, kinds=kinds)
    deleter = NodeDeleter(database, audit)
    asserter = FactAsserter(database, kinds=kinds)
    registry = PackRegistry(database)
    reconciler = SnapshotReconciler(database, kinds=kinds)
    vault = VaultIngestor(database, writer, deleter, audit)
    # Jobs are deferred right after each memory commit; the worker's sweep finds any the hook missed.
    enrichment = EnrichmentQueue(settings, max_connections=2)
    memories = MemoryWriter(database, provider, on_due=enrichment.defer_due)
    summarizer = MemorySummarizer(database, memories)
    webhooks = WebhookSubscriptions(database, settings)
    protection = DataProtectionServicer(
        SubjectEraser(database, remover, deleter, audit),
        LegalHolds(database, audit),
        RetentionEnforcer(database, remover, memories, audit),
        NamespaceArchive(database),
    )

    def register(server: grpc.Server) -> list[str]:
        observation_service_pb2_grpc.add_ObservationServiceServicer_to_server(
            ObservationServicer(recorder, remover, embedder), server
        )
        fact_service_pb2_grpc.add_FactServiceServicer_to_server(FactServicer(asserter), server)
        document_service_pb2_grpc.add_DocumentServiceServicer_to_server(
            DocumentServiceServicer(writer, deleter), server
        )
        audit_service_pb2_grpc.add_AuditServiceServicer_to_server(AuditServicer(audit), server)
        domain_pack_service_pb2_grpc.add_DomainPackServiceServicer_to_server(
            DomainPackServicer(registry, kinds), server
        )
        snapshot_service_pb2_grpc.add_SnapshotServiceServicer_to_server(SnapshotServicer(reconciler), server)
        vault_service_pb2_grpc.add_VaultServiceServicer_to_server(VaultServicer(vault), server)
        memory_service_pb2_grpc.add_MemoryServiceServicer_to_server(
            MemoryServicer(memories, summarizer), server
        )
        webhook_service_pb2_grpc.add_WebhookServiceServicer_to_server(WebhookServicer(webhooks), server)
        data_protection_service_pb2_grpc.add_DataProtectionServiceServicer_to_server(protection, server)
        return [
            "memory.v1.DataProtectionService",
            "memory.v1.ObservationService",
            "memory.v1.FactService",
            "memory.v1.DocumentService",
            "memory.v1.DomainPackService",
            "memory.v1.SnapshotService",
            "memory.v1.AuditService",
            "memory.v1.VaultService",
            "memory.v1.MemoryService",
            "memory.v1.WebhookService",
        ]

    return build_server(
        settings,
        service_name="ingest_service",
        address=address or settings.ingest_addr,
        metrics_port=settings.ingest_metrics_port if metrics_port is None else metrics_port,
        database=database,
        register=register,
        # Every write response carries the WAL position of its commit (read-after-write on replicas).
        interceptors=(WriteTokenInterceptor(lambda: current_wal_position(database)),),
        background=[embedder, TenantIndexWorker(settings), ChangeFeedPruner(database)],
    )


def serve(settings: Settings) -> None:
    """Runs the ingest service in the foreground until SIGTERM/SIGINT, then stops gracefully."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    create_ingest_host(settings, load_model=True).run()
