"""query_service process: wiring of the read side (docs/explanation/architecture.md): one servicer per service
(``*_servicer.py``, transport only) over its domain reader or compiler, and `SERVICE_NAMES`.

`create_query_host` builds the server (used by `cb serve query` and by tests on port 0); `serve` runs it
in the foreground until SIGTERM/SIGINT, then stops gracefully (health NOT_SERVING first, in-flight calls
finish, the pool closes).
"""

from __future__ import annotations

import functools
import logging

import grpc

from common.grpc.consistency import ReadTokenInterceptor
from common.grpc.server import ServiceHost
from common.grpc.server import build_server
from common.grpc.telemetry import configure_logging
from common.grpc.telemetry import configure_tracing
from common.grpc.worker_processes import claim_address
from common.grpc.worker_processes import run_worker_processes
from common.kernel.config import Settings
from common.packs.kind_validation import KindValidator
from common.storage.pool_metrics import register_database_metrics
from common.storage.replicas.read_routing import RoutedDatabase
from common.storage.schema import migrations
from common.text_models.embeddings.factory import build_embedding_provider
from common.text_models.embeddings.provider import EmbeddingProvider
from common.text_models.tokenizer import TokenCounter
from memory_service_grpc_client.memory.v1 import audit_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import change_feed_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import context_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import memory_query_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import namespace_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import observation_query_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import source_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import trace_service_pb2_grpc
from query_service.audit_reader import AuditReader
from query_service.change_feed.notifier import ChangeNotifier
from query_service.change_feed.watcher import ChangeWatcher
from query_service.context.compiler import ContextCompiler
from query_service.context.compiler import context_preset
from query_service.context.typed_context import TypedContextCompiler
from query_service.namespace_reader import NamespaceReader
from query_service.readers.facts import FactReader
from query_service.readers.memory_recall import MemoryReader
from query_service.readers.observations import ObservationReader
from query_service.readers.sources import SourceReader
from query_service.readers.traces import TraceReader
from query_service.retrieval.hybrid_search import HybridSearcher
from query_service.retrieval.hybrid_search import search_preset
from query_service.servicers.audit_query_servicer import AuditQueryServicer
from query_service.servicers.change_feed_servicer import ChangeFeedServicer
from query_service.servicers.context_servicer import ContextServicer
from query_service.servicers.fact_query_servicer import FactQueryServicer
from query_service.servicers.memory_query_servicer import MemoryQueryServicer
from query_service.servicers.namespace_servicer import NamespaceServicer
from query_service.servicers.observation_query_servicer import ObservationQueryServicer
from query_service.servicers.retrieval_servicer import RetrievalServicer
from query_service.servicers.source_servicer import SourceServicer
from query_service.servicers.trace_servicer import TraceServicer

SERVICE_NAMES = (
    "memory.v1.RetrievalService",
    "memory.v1.FactQueryService",
    "memory.v1.SourceService",
    "memory.v1.ContextService",
    "memory.v1.ObservationQueryService",
    "memory.v1.TraceService",
    "memory.v1.MemoryQueryService",
    "memory.v1.AuditService",
    "memory.v1.NamespaceService",
    "memory.v1.ChangeFeedService",
)


def create_query_host(
    settings: Settings,
    address: str | None = None,
    *,
    metrics_port: int | None = None,
    reuse_port: bool = False,
    load_model: bool = False,
) -> ServiceHost:
    """Builds (does not start) the query server: Retrieval, FactQuery, Source, Context, ObservationQuery
    and Trace services.

    Args:
        settings: process settings.
        address: ``host:port`` to bind (default ``settings.query_addr``; port 0 picks a free port, see
            ``ServiceHost.port``).
        metrics_port: Prometheus port (default ``settings.query_metrics_port``; 0 disables).
        reuse_port: share the port with the other worker processes (`serve` with ``query_processes`` > 1).
        load_model: read the embedding model's weights before the port is bound (`EmbeddingProvider.load`;
            `serve` and `serve_worker` do), so that health turns SERVING only once the first Search need
            not wait for them.

    Raises:
        ValueError: unknown embedding provider or tokenizer encoding, or a dimension mismatch.
        RuntimeError: the address cannot be bound.
    """
    provider = query_embedding_provider(settings)
    if load_model:
        provider.load()
    tokens = TokenCounter(settings.tokenizer_encoding)
    # Reads on the replicas of CB_READ_DATABASE_URL (consistency tokens honoured), writes on the primary.
    database = RoutedDatabase(settings, embedding_model=provider.model_id, prepare=migrations.apply)
    register_database_metrics("query_service", database)
    searcher = HybridSearcher(database, provider, search_preset("default"))
    compiler = ContextCompiler(database, searcher, tokens, context_preset("default"))
    typed = TypedContextCompiler(database, tokens, KindValidator(database))
    notifier = ChangeNotifier(settings.database_url)
    watcher = ChangeWatcher(database, notifier, poll_seconds=settings.change_feed_poll_seconds)

    def register(server: grpc.Server) -> list[str]:
        memory_query_service_pb2_grpc.add_MemoryQueryServiceServicer_to_server(
            MemoryQueryServicer(MemoryReader(database, provider)), server
        )
        retrieval_service_pb2_grpc.add_RetrievalServiceServicer_to_server(RetrievalServicer(searcher), server)
        fact_query_service_pb2_grpc.add_FactQueryServiceServicer_to_server(
            FactQueryServicer(FactReader(database)), server
        )
        source_service_pb2_grpc.add_SourceServiceServicer_to_server(
            SourceServicer(SourceReader(database)), server
        )
        context_service_pb2_grpc.add_ContextServiceServicer_to_server(
            ContextServicer(compiler, typed), server
        )
        observation_query_service_pb2_grpc.add_ObservationQueryServiceServicer_to_server(
            ObservationQueryServicer(ObservationReader(database)), server
        )
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(
            TraceServicer(TraceReader(database)), server
        )
        audit_service_pb2_grpc.add_AuditServiceServicer_to_server(
            AuditQueryServicer(AuditReader(database)), server
        )
        namespace_service_pb2_grpc.add_NamespaceServiceServicer_to_server(
            NamespaceServicer(NamespaceReader(database)), server
        )
        change_feed_service_pb2_grpc.add_ChangeFeedServiceServicer_to_server(
            ChangeFeedServicer(watcher), server
        )
        return list(SERVICE_NAMES)

    return build_server(
        settings,
        service_name="query_service",
        address=address or settings.query_addr,
        metrics_port=settings.query_metrics_port if metrics_port is None else metrics_port,
        database=database,
        register=register,
        interceptors=(ReadTokenInterceptor(),),
        reuse_port=reuse_port,
        background=(notifier,),
    )


def query_embedding_provider(settings: Settings) -> EmbeddingProvider:
    """The query service's embedding provider: the configured model with the read side's own (small)
    BLAS thread count, ``query_embedding_threads`` (it encodes one query per call, see the setting).

    Raises:
        ValueError: unknown embedding provider.
    """
    return build_embedding_provider(
        settings.model_copy(update={"embedding_threads": settings.query_embedding_threads})
    )


def serve(settings: Settings) -> None:
    """Runs the query service in the foreground until SIGTERM/SIGINT, then stops gracefully.

    With ``settings.query_processes`` N > 1, N worker processes serve ``settings.query_addr`` together
    (`common.grpc.worker_processes`; worker i serves metrics on ``query_metrics_port + i``); this
    process only supervises them and exits 1 when they keep dying.

    Raises:
        RuntimeError: the address cannot be bound (in use by another server).
        SystemExit: 1, the workers died too often.
    """
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if settings.query_processes == 1:
        create_query_host(settings, load_model=True).run()
        return
    address = claim_address(settings.query_addr, service_name="query_service")
    exit_code = run_worker_processes(
        service_name="query_service",
        count=settings.query_processes,
        target=functools.partial(serve_worker, settings, address),
        stop_seconds=settings.shutdown_drain_seconds + settings.shutdown_grace_seconds + 10,
    )
    if exit_code:
        raise SystemExit(exit_code)


def serve_worker(settings: Settings, address: str, index: int) -> None:
    """One of `serve`'s worker processes: the query server on the shared ``address`` until SIGTERM.

    Args:
        settings: the parent's settings.
        address: ``host:port`` already checked by `claim_address`.
        index: 0..N-1; the metrics endpoint is ``query_metrics_port + index`` (none when that is 0).
    """
    configure_logging(settings.log_level, settings.log_format)
    configure_tracing(settings, "query_service")
    metrics_port = settings.query_metrics_port + index if settings.query_metrics_port else 0
    create_query_host(settings, address, metrics_port=metrics_port, reuse_port=True, load_model=True).run()
