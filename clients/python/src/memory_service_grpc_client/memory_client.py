"""`MemoryClient`: the Python client of both services, with one typed method per RPC.

The ``cb`` CLI and the MCP server of memory-service both call the services through it, so there is one
client. It owns the two channels (`memory_service_grpc_client.channels.make_channel`: TLS, the bearer
token) and adds, around every call:

* a deadline (``READ_TIMEOUT_SECONDS`` / ``WRITE_TIMEOUT_SECONDS`` of
  `memory_service_grpc_client.call_policy`);
* retries of idempotent calls on UNAVAILABLE with exponential backoff
  (`call_policy.retry_while_unavailable`): every read, and the writes that are idempotent by contract
  (RecordObservations: an observation with a known identity is a duplicate; Retain: an upsert by
  natural key; Reconcile: a repeated snapshot_id changes nothing). Other writes are sent once;
* errors as exceptions: a failed call raises the `memory_service_grpc_client.errors` class of its code
  (`InvalidArgument` carries the `BadRequest` field violations, ``.violations``), chained to the
  `grpc.RpcError` (``__cause__``), see `memory_service_grpc_client.errors.error_from_rpc`;
* the caller's token per call (`MemoryClient.with_token`), so a server that acts for several callers
  (the MCP server over HTTP) passes each caller's token through and every access rule holds.

Change feed: `watch_changes` is the raw stream of ChangeFeedService.WatchChanges; `iter_changes` yields its
changes and resumes after the last cursor received (of a change or a heartbeat) whenever the stream
breaks (UNAVAILABLE, a server restart, a network cut), so a subscriber sees every change once, in order.

Pagination: `iter_facts`, `iter_packages`, `iter_audit_events` and `iter_namespaces` follow
``next_page_token`` page by page (`memory_service_grpc_client.pagination.iter_pages`); `list_every_fact`
and `list_every_namespace` collect every page into one response.

Consistency tokens (read-after-write across replicas; docs/how-to/read-replicas.md): pass a
`memory_service_grpc_client.consistency_tokens.ConsistencyTokens` in ``interceptors`` and every read after a
write of this client carries that write's token (the CLI's ``--consistent`` does exactly this).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from typing import Any, Self, TypeVar

import grpc
from google.protobuf.message import Message

from memory_service_grpc_client import call_policy
from memory_service_grpc_client.channels import ChannelWrapper, ClientSecurity, ServiceChannels, health_status
from memory_service_grpc_client.errors import ServiceError, raise_for_status
from memory_service_grpc_client.memory.v1 import (
    audit_service_pb2,
    audit_service_pb2_grpc,
    change_feed_service_pb2,
    change_feed_service_pb2_grpc,
    context_service_pb2,
    context_service_pb2_grpc,
    data_protection_service_pb2,
    data_protection_service_pb2_grpc,
    document_service_pb2,
    document_service_pb2_grpc,
    domain_pack_service_pb2,
    domain_pack_service_pb2_grpc,
    fact_query_service_pb2,
    fact_query_service_pb2_grpc,
    fact_service_pb2,
    fact_service_pb2_grpc,
    knowledge_pb2,
    memory_query_service_pb2,
    memory_query_service_pb2_grpc,
    memory_service_pb2,
    memory_service_pb2_grpc,
    namespace_service_pb2,
    namespace_service_pb2_grpc,
    observation_query_service_pb2,
    observation_query_service_pb2_grpc,
    observation_service_pb2,
    observation_service_pb2_grpc,
    retrieval_service_pb2,
    retrieval_service_pb2_grpc,
    snapshot_service_pb2,
    snapshot_service_pb2_grpc,
    source_service_pb2,
    source_service_pb2_grpc,
    trace_service_pb2,
    trace_service_pb2_grpc,
    vault_service_pb2,
    vault_service_pb2_grpc,
    webhook_service_pb2,
    webhook_service_pb2_grpc,
)
from memory_service_grpc_client.pagination import iter_pages

__all__ = ["MemoryClient"]

ResponseT = TypeVar("ResponseT", bound=Message)
Metadata = tuple[tuple[str, str], ...]


class MemoryClient:
    """Typed calls to ingest_service and query_service.

    Use it as a context manager (or call `close`). Each method takes the RPC's request message and
    returns its response message (the generated types of ``memory.v1``).

    Args:
        ingest_addr: ``host:port`` of ingest_service (default ``127.0.0.1:50051``).
        query_addr: ``host:port`` of query_service (default ``127.0.0.1:50052``).
        security: bearer token and TLS files (`ClientSecurity`, e.g. `ClientSecurity.from_env`); None:
            plaintext, no token.
        retry_seconds: how long idempotent calls are retried on UNAVAILABLE; None:
            ``call_policy.RETRY_MAX_SECONDS`` (read at call time).
        retry_reads: False sends reads once (a command line reports an unreachable service at once);
            idempotent writes are retried either way.
        interceptors: gRPC client interceptors put on both channels, e.g. one
            `memory_service_grpc_client.consistency_tokens.ConsistencyTokens` for read-after-write.
        wrap_channel: applied to each channel after the token and before ``interceptors`` (the CLI puts
            OpenTelemetry's client layer here so calls carry ``traceparent``).

    Raises (every call method):
        InvalidArgument: INVALID_ARGUMENT, with the field violations of the `BadRequest`.
        NotFound, AlreadyExists, FailedPrecondition, PermissionDenied, Unauthenticated, Unavailable,
            DeadlineExceeded, ResourceExhausted, Internal: the matching status codes
            (`memory_service_grpc_client.errors`).
        ServiceError: any other code (the base class of all of them; ``.code`` tells which).
    """

    def __init__(
        self,
        ingest_addr: str = "127.0.0.1:50051",
        query_addr: str = "127.0.0.1:50052",
        *,
        security: ClientSecurity | None = None,
        retry_seconds: float | None = None,
        retry_reads: bool = True,
        interceptors: Sequence[Any] = (),
        wrap_channel: ChannelWrapper | None = None,
    ) -> None:
        self._channels = ServiceChannels(
            ingest_addr, query_addr, security or ClientSecurity(), tuple(interceptors), wrap_channel
        )
        self._retry_seconds = retry_seconds
        self._retry_reads = retry_reads
        self._token: str | None = None

    def with_token(self, token: str | None) -> MemoryClient:
        """A view of this client (same channels) whose calls carry ``token`` in their metadata, which wins
        over the channels' own token; ``""`` or None adds none (on a client built without a token, a
        call then carries no token at all). Closing the view closes nothing."""
        view = MemoryClient.__new__(MemoryClient)
        view._channels = self._channels
        view._retry_seconds = self._retry_seconds
        view._retry_reads = self._retry_reads
        view._token = token
        return view

    def close(self) -> None:
        """Closes both channels (a view from `with_token` shares them)."""
        self._channels.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- plumbing ---------------------------------------------------------------------------------

    @property
    def ingest_channel(self) -> grpc.Channel:
        """The channel to ingest_service (for bulk helpers such as `observation_loader`)."""
        return self._channels.ingest_channel()

    @property
    def query_channel(self) -> grpc.Channel:
        """The channel to query_service."""
        return self._channels.query_channel()

    def _call_metadata(self) -> Metadata:
        """Metadata of every call: the per-call token of a `with_token` view (consistency tokens travel
        through the channels' interceptors, see the module doc)."""
        if not self._token:
            return ()
        return (("authorization", f"Bearer {self._token}"),)

    def _call(
        self,
        method: Callable[..., ResponseT],
        request: Message,
        *,
        retry: bool,
        timeout: float,
        on_retry: Callable[[str], None] | None = None,
        project_id: str = "",
    ) -> ResponseT:
        metadata = self._call_metadata() + ((("x-project-id", project_id),) if project_id else ())

        def once() -> ResponseT:
            return method(request, timeout=timeout, metadata=metadata)

        try:
            if retry:
                return call_policy.retry_while_unavailable(
                    once, on_retry=on_retry, max_seconds=self._retry_seconds
                )
            return once()
        except grpc.RpcError as exc:
            raise_for_status(exc)

    def _read(self, method: Callable[..., ResponseT], request: Message, *, project_id: str = "") -> ResponseT:
        return self._call(
            method,
            request,
            retry=self._retry_reads,
            timeout=call_policy.READ_TIMEOUT_SECONDS,
            project_id=project_id,
        )

    def _write(
        self,
        method: Callable[..., ResponseT],
        request: Message,
        *,
        idempotent: bool,
        on_retry: Callable[[str], None] | None = None,
        timeout: float | None = None,
        project_id: str = "",
    ) -> ResponseT:
        return self._call(
            method,
            request,
            retry=idempotent,
            timeout=call_policy.WRITE_TIMEOUT_SECONDS if timeout is None else timeout,
            on_retry=on_retry,
            project_id=project_id,
        )

    def health(self) -> dict[str, str]:
        """grpc.health.v1 of both servers: ``{"ingest_service": status, "query_service": status}``, each
        ``SERVING``, ``NOT_SERVING`` (up, database not ready) or ``UNREACHABLE``."""
        return {
            "ingest_service": health_status(self.ingest_channel),
            "query_service": health_status(self.query_channel),
        }

    # -- memory records: project_id travels as the x-project-id metadata ------------------

    def add_memories(
        self, request: memory_service_pb2.AddMemoriesRequest, *, project_id: str = ""
    ) -> memory_service_pb2.AddMemoriesResponse:
        """MemoryService.AddMemories (idempotent per item: retried on UNAVAILABLE)."""
        stub = memory_service_pb2_grpc.MemoryServiceStub(self.ingest_channel)
        return self._write(stub.AddMemories, request, idempotent=True, project_id=project_id)

    def update_memory(
        self, request: memory_service_pb2.UpdateMemoryRequest, *, project_id: str = ""
    ) -> memory_service_pb2.UpdateMemoryResponse:
        """MemoryService.UpdateMemory (sent once: a retried update would count its version twice)."""
        stub = memory_service_pb2_grpc.MemoryServiceStub(self.ingest_channel)
        return self._write(stub.UpdateMemory, request, idempotent=False, project_id=project_id)

    def delete_memory(
        self, request: memory_service_pb2.DeleteMemoryRequest, *, project_id: str = ""
    ) -> memory_service_pb2.DeleteMemoryResponse:
        """MemoryService.DeleteMemory."""
        stub = memory_service_pb2_grpc.MemoryServiceStub(self.ingest_channel)
        return self._write(stub.DeleteMemory, request, idempotent=False, project_id=project_id)

    def summarize_memories(
        self, request: memory_service_pb2.SummarizeMemoriesRequest, *, project_id: str = ""
    ) -> memory_service_pb2.SummarizeMemoriesResponse:
        """MemoryService.SummarizeMemories (idempotent per group: retried on UNAVAILABLE)."""
        stub = memory_service_pb2_grpc.MemoryServiceStub(self.ingest_channel)
        return self._write(stub.SummarizeMemories, request, idempotent=True, project_id=project_id)

    def recall_memories(
        self, request: memory_query_service_pb2.RecallMemoriesRequest, *, project_id: str = ""
    ) -> memory_query_service_pb2.RecallMemoriesResponse:
        """MemoryQueryService.RecallMemories."""
        stub = memory_query_service_pb2_grpc.MemoryQueryServiceStub(self.query_channel)
        return self._read(stub.RecallMemories, request, project_id=project_id)

    def get_memory(
        self, request: memory_query_service_pb2.GetMemoryRequest, *, project_id: str = ""
    ) -> memory_query_service_pb2.GetMemoryResponse:
        """MemoryQueryService.GetMemory."""
        stub = memory_query_service_pb2_grpc.MemoryQueryServiceStub(self.query_channel)
        return self._read(stub.GetMemory, request, project_id=project_id)

    def list_memories(
        self, request: memory_query_service_pb2.ListMemoriesRequest, *, project_id: str = ""
    ) -> memory_query_service_pb2.ListMemoriesResponse:
        """MemoryQueryService.ListMemories (one page; follow ``next_page_token``)."""
        stub = memory_query_service_pb2_grpc.MemoryQueryServiceStub(self.query_channel)
        return self._read(stub.ListMemories, request, project_id=project_id)

    # -- write side (ingest_service) --------------------------------------------------------------

    def record_observations(
        self,
        request: observation_service_pb2.RecordObservationsRequest,
        *,
        on_retry: Callable[[str], None] | None = None,
    ) -> observation_service_pb2.RecordObservationsResponse:
        """ObservationService.RecordObservations (idempotent: retried on UNAVAILABLE)."""
        stub = observation_service_pb2_grpc.ObservationServiceStub(self.ingest_channel)
        return self._write(stub.RecordObservations, request, idempotent=True, on_retry=on_retry)

    def redact_observation(
        self, request: observation_service_pb2.RedactObservationRequest
    ) -> observation_service_pb2.RedactObservationResponse:
        """ObservationService.RedactObservation."""
        stub = observation_service_pb2_grpc.ObservationServiceStub(self.ingest_channel)
        return self._write(stub.RedactObservation, request, idempotent=False)

    def purge_observation(
        self, request: observation_service_pb2.PurgeObservationRequest
    ) -> observation_service_pb2.PurgeObservationResponse:
        """ObservationService.PurgeObservation."""
        stub = observation_service_pb2_grpc.ObservationServiceStub(self.ingest_channel)
        return self._write(stub.PurgeObservation, request, idempotent=False)

    def get_embedding_backlog(
        self, request: observation_service_pb2.GetEmbeddingBacklogRequest
    ) -> observation_service_pb2.GetEmbeddingBacklogResponse:
        """ObservationService.GetEmbeddingBacklog: episode chunks still waiting for their embedding (a
        read of ingest_service; poll it until ``pending_chunks`` is 0 to know vector search sees them)."""
        stub = observation_service_pb2_grpc.ObservationServiceStub(self.ingest_channel)
        return self._read(stub.GetEmbeddingBacklog, request)

    def assert_facts(
        self, request: fact_service_pb2.AssertFactsRequest
    ) -> fact_service_pb2.AssertFactsResponse:
        """FactService.AssertFacts."""
        stub = fact_service_pb2_grpc.FactServiceStub(self.ingest_channel)
        return self._write(stub.AssertFacts, request, idempotent=False)

    def close_fact(self, request: fact_service_pb2.CloseFactRequest) -> fact_service_pb2.CloseFactResponse:
        """FactService.CloseFact."""
        stub = fact_service_pb2_grpc.FactServiceStub(self.ingest_channel)
        return self._write(stub.CloseFact, request, idempotent=False)

    def retain(
        self,
        request: document_service_pb2.RetainRequest,
        *,
        on_retry: Callable[[str], None] | None = None,
    ) -> document_service_pb2.RetainResponse:
        """DocumentService.Retain (an upsert: retried on UNAVAILABLE)."""
        stub = document_service_pb2_grpc.DocumentServiceStub(self.ingest_channel)
        return self._write(stub.Retain, request, idempotent=True, on_retry=on_retry)

    def put_chunks(
        self, request: document_service_pb2.PutChunksRequest
    ) -> document_service_pb2.PutChunksResponse:
        """DocumentService.PutChunks."""
        stub = document_service_pb2_grpc.DocumentServiceStub(self.ingest_channel)
        return self._write(stub.PutChunks, request, idempotent=False)

    def delete_node(
        self, request: document_service_pb2.DeleteNodeRequest
    ) -> document_service_pb2.DeleteNodeResponse:
        """DocumentService.DeleteNode (sent once: a repeated delete is NOT_FOUND)."""
        stub = document_service_pb2_grpc.DocumentServiceStub(self.ingest_channel)
        return self._write(stub.DeleteNode, request, idempotent=False)

    def erase_subject(
        self, request: data_protection_service_pb2.EraseSubjectRequest
    ) -> data_protection_service_pb2.EraseSubjectResponse:
        """DataProtectionService.EraseSubject (all or nothing; a repeat finds nothing: retried on UNAVAILABLE)."""
        stub = data_protection_service_pb2_grpc.DataProtectionServiceStub(self.ingest_channel)
        return self._write(stub.EraseSubject, request, idempotent=True)

    def get_erasure_receipt(
        self, request: data_protection_service_pb2.GetErasureReceiptRequest
    ) -> data_protection_service_pb2.GetErasureReceiptResponse:
        """DataProtectionService.GetErasureReceipt."""
        stub = data_protection_service_pb2_grpc.DataProtectionServiceStub(self.ingest_channel)
        return self._write(stub.GetErasureReceipt, request, idempotent=True)

    def create_legal_hold(
        self, request: data_protection_service_pb2.CreateLegalHoldRequest
    ) -> data_protection_service_pb2.CreateLegalHoldResponse:
        """DataProtectionService.CreateLegalHold (sent once: a repeat places a second hold)."""
        stub = data_protection_service_pb2_grpc.DataProtectionServiceStub(self.ingest_channel)
        return self._write(stub.CreateLegalHold, request, idempotent=False)

    def lift_legal_hold(
        self, request: data_protection_service_pb2.LiftLegalHoldRequest
    ) -> data_protection_service_pb2.LiftLegalHoldResponse:
        """DataProtectionService.LiftLegalHold (sent once: a repeat is NOT_FOUND)."""
        stub = data_protection_service_pb2_grpc.DataProtectionServiceStub(self.ingest_channel)
        return self._write(stub.LiftLegalHold, request, idempotent=False)

    def list_legal_holds(
        self, request: data_protection_service_pb2.ListLegalHoldsRequest
    ) -> data_protection_service_pb2.ListLegalHoldsResponse:
        """DataProtectionService.ListLegalHolds."""
        stub = data_protection_service_pb2_grpc.DataProtectionServiceStub(self.ingest_channel)
        return self._write(stub.ListLegalHolds, request, idempotent=True)

    def set_retention_rule(
        self, request: data_protection_service_pb2.SetRetentionRuleRequest
    ) -> data_protection_service_pb2.SetRetentionRuleResponse:
        """DataProtectionService.SetRetentionRule (a replace: retried on UNAVAILABLE)."""
        stub = data_protection_service_pb2_grpc.DataProtectionServiceStub(self.ingest_channel)
        return self._write(stub.SetRetentionRule, request, idempotent=True)

    def delete_retention_rule(
        self, request: data_protection_service_pb2.DeleteRetentionRuleRequest
    ) -> data_protection_service_pb2.DeleteRetentionRuleResponse:
        """DataProtectionService.DeleteRetentionRule (sent once: a repeat is NOT_FOUND)."""
        stub = data_protection_service_pb2_grpc.DataProtectionServiceStub(self.ingest_channel)
        return self._write(stub.DeleteRetentionRule, request, idempotent=False)

    def preview_retention(
        self, request: data_protection_service_pb2.PreviewRetentionRequest
    ) -> data_protection_service_pb2.PreviewRetentionResponse:
        """DataProtectionService.PreviewRetention."""
        stub = data_protection_service_pb2_grpc.DataProtectionServiceStub(self.ingest_channel)
        return self._write(stub.PreviewRetention, request, idempotent=True)

    def reconcile(
        self, request: snapshot_service_pb2.ReconcileRequest
    ) -> snapshot_service_pb2.ReconcileResponse:
        """SnapshotService.Reconcile (a repeated snapshot_id changes nothing: retried on UNAVAILABLE)."""
        stub = snapshot_service_pb2_grpc.SnapshotServiceStub(self.ingest_channel)
        return self._write(stub.Reconcile, request, idempotent=True)

    def reconcile_stream(
        self, requests: Iterable[snapshot_service_pb2.ReconcileStreamRequest], *, timeout: float
    ) -> snapshot_service_pb2.ReconcileStreamResponse:
        """SnapshotService.ReconcileStream: header, parts, end message; sent once (an iterator cannot be
        replayed; the server keeps nothing of a broken stream, so the caller may send it again)."""
        stub = snapshot_service_pb2_grpc.SnapshotServiceStub(self.ingest_channel)
        try:
            response: snapshot_service_pb2.ReconcileStreamResponse = stub.ReconcileStream(
                iter(requests), timeout=timeout, metadata=self._call_metadata()
            )
        except grpc.RpcError as exc:
            raise_for_status(exc)
        return response

    def export_namespace(
        self, request: data_protection_service_pb2.ExportNamespaceRequest, *, timeout: float
    ) -> Iterator[bytes]:
        """DataProtectionService.ExportNamespace: the archive's bytes as the server streams them."""
        stub = data_protection_service_pb2_grpc.DataProtectionServiceStub(self.ingest_channel)
        try:
            for message in stub.ExportNamespace(request, timeout=timeout, metadata=self._call_metadata()):
                yield message.data
        except grpc.RpcError as exc:
            raise_for_status(exc)

    def import_namespace(
        self, requests: Iterable[data_protection_service_pb2.ImportNamespaceRequest], *, timeout: float
    ) -> data_protection_service_pb2.ImportNamespaceResponse:
        """DataProtectionService.ImportNamespace: the first message names the namespace; sent once (a
        failed import wrote nothing, and a repeated one writes nothing new)."""
        stub = data_protection_service_pb2_grpc.DataProtectionServiceStub(self.ingest_channel)
        try:
            response: data_protection_service_pb2.ImportNamespaceResponse = stub.ImportNamespace(
                iter(requests), timeout=timeout, metadata=self._call_metadata()
            )
        except grpc.RpcError as exc:
            raise_for_status(exc)
        return response

    def ingest_vault(
        self, requests: Iterable[vault_service_pb2.IngestVaultRequest], *, timeout: float
    ) -> vault_service_pb2.IngestVaultResponse:
        """VaultService.IngestVault: header, document batches, end message (docs/how-to/vault-ingest.md); sent
        once (an iterator cannot be replayed; a run cut short sweeps nothing, so the caller may send it
        again and unchanged documents are only marked seen). A KeyboardInterrupt while it runs cancels the
        call (the server then sweeps nothing) and is raised again."""
        stub = vault_service_pb2_grpc.VaultServiceStub(self.ingest_channel)
        call = stub.IngestVault.future(iter(requests), timeout=timeout, metadata=self._call_metadata())
        try:
            response: vault_service_pb2.IngestVaultResponse = call.result()
        except KeyboardInterrupt:
            call.cancel()  # the server ends the run as CANCELLED and sweeps nothing
            raise
        except grpc.RpcError as exc:
            raise_for_status(exc)
        return response

    def register_package(
        self, request: domain_pack_service_pb2.RegisterPackageRequest
    ) -> domain_pack_service_pb2.RegisterPackageResponse:
        """DomainPackService.RegisterPackage."""
        stub = domain_pack_service_pb2_grpc.DomainPackServiceStub(self.ingest_channel)
        return self._write(stub.RegisterPackage, request, idempotent=False)

    def get_package(
        self, request: domain_pack_service_pb2.GetPackageRequest
    ) -> domain_pack_service_pb2.GetPackageResponse:
        """DomainPackService.GetPackage (served by ingest_service)."""
        stub = domain_pack_service_pb2_grpc.DomainPackServiceStub(self.ingest_channel)
        return self._read(stub.GetPackage, request)

    def list_packages(
        self, request: domain_pack_service_pb2.ListPackagesRequest
    ) -> domain_pack_service_pb2.ListPackagesResponse:
        """DomainPackService.ListPackages (served by ingest_service)."""
        stub = domain_pack_service_pb2_grpc.DomainPackServiceStub(self.ingest_channel)
        return self._read(stub.ListPackages, request)

    def iter_packages(
        self, request: domain_pack_service_pb2.ListPackagesRequest, *, limit: int | None = None
    ) -> Iterator[domain_pack_service_pb2.DomainPackage]:
        """Every registered pack, page after page of ListPackages (as `iter_facts`)."""
        return iter_pages(self.list_packages, request, lambda page: page.packages, limit=limit)

    def set_namespace_kinds(
        self, request: domain_pack_service_pb2.SetNamespaceKindsRequest
    ) -> domain_pack_service_pb2.SetNamespaceKindsResponse:
        """DomainPackService.SetNamespaceKinds."""
        stub = domain_pack_service_pb2_grpc.DomainPackServiceStub(self.ingest_channel)
        return self._write(stub.SetNamespaceKinds, request, idempotent=False)

    def get_namespace_kinds(
        self, request: domain_pack_service_pb2.GetNamespaceKindsRequest
    ) -> domain_pack_service_pb2.GetNamespaceKindsResponse:
        """DomainPackService.GetNamespaceKinds."""
        stub = domain_pack_service_pb2_grpc.DomainPackServiceStub(self.ingest_channel)
        return self._read(stub.GetNamespaceKinds, request)

    def record_audit_event(
        self, request: audit_service_pb2.RecordAuditEventRequest
    ) -> audit_service_pb2.RecordAuditEventResponse:
        """AuditService.RecordAuditEvent (retried only with a ``client_event_id``, which makes it
        idempotent)."""
        stub = audit_service_pb2_grpc.AuditServiceStub(self.ingest_channel)
        return self._write(stub.RecordAuditEvent, request, idempotent=bool(request.client_event_id))

    # -- read side (query_service) ----------------------------------------------------------------

    def search(self, request: retrieval_service_pb2.SearchRequest) -> retrieval_service_pb2.SearchResponse:
        """RetrievalService.Search."""
        stub = retrieval_service_pb2_grpc.RetrievalServiceStub(self.query_channel)
        return self._read(stub.Search, request)

    def compile_context(
        self, request: context_service_pb2.CompileContextRequest
    ) -> context_service_pb2.CompileContextResponse:
        """ContextService.CompileContext."""
        stub = context_service_pb2_grpc.ContextServiceStub(self.query_channel)
        return self._read(stub.CompileContext, request)

    def compile_typed_context(
        self, request: context_service_pb2.CompileTypedContextRequest
    ) -> context_service_pb2.CompileTypedContextResponse:
        """ContextService.CompileTypedContext."""
        stub = context_service_pb2_grpc.ContextServiceStub(self.query_channel)
        return self._read(stub.CompileTypedContext, request)

    def get_source(
        self, request: source_service_pb2.GetSourceRequest
    ) -> source_service_pb2.GetSourceResponse:
        """SourceService.GetSource."""
        stub = source_service_pb2_grpc.SourceServiceStub(self.query_channel)
        return self._read(stub.GetSource, request)

    def list_facts(
        self, request: fact_query_service_pb2.ListFactsRequest
    ) -> fact_query_service_pb2.ListFactsResponse:
        """FactQueryService.ListFacts: one page (see `iter_facts` and `list_every_fact`)."""
        stub = fact_query_service_pb2_grpc.FactQueryServiceStub(self.query_channel)
        return self._read(stub.ListFacts, request)

    def iter_facts(
        self, request: fact_query_service_pb2.ListFactsRequest, *, limit: int | None = None
    ) -> Iterator[knowledge_pb2.Fact]:
        """Every fact of a ListFacts query, page after page (``page_size`` of ``request``), following
        ``next_page_token`` until it is empty (or repeats); stops after ``limit`` facts when given.
        ``request`` is not changed."""
        return iter_pages(self.list_facts, request, lambda page: page.facts, limit=limit)

    def list_every_fact(
        self, request: fact_query_service_pb2.ListFactsRequest
    ) -> fact_query_service_pb2.ListFactsResponse:
        """Every page of a ListFacts query collected into one response (no ``next_page_token``)."""
        return fact_query_service_pb2.ListFactsResponse(facts=list(self.iter_facts(request)))

    def get_observation(
        self, request: observation_query_service_pb2.GetObservationRequest
    ) -> observation_query_service_pb2.GetObservationResponse:
        """ObservationQueryService.GetObservation."""
        stub = observation_query_service_pb2_grpc.ObservationQueryServiceStub(self.query_channel)
        return self._read(stub.GetObservation, request)

    def get_trace(self, request: trace_service_pb2.GetTraceRequest) -> trace_service_pb2.GetTraceResponse:
        """TraceService.GetTrace."""
        stub = trace_service_pb2_grpc.TraceServiceStub(self.query_channel)
        return self._read(stub.GetTrace, request)

    def list_audit_events(
        self, request: audit_service_pb2.ListAuditEventsRequest
    ) -> audit_service_pb2.ListAuditEventsResponse:
        """AuditService.ListAuditEvents (served by query_service): one page, newest first."""
        stub = audit_service_pb2_grpc.AuditServiceStub(self.query_channel)
        return self._read(stub.ListAuditEvents, request)

    def iter_audit_events(
        self, request: audit_service_pb2.ListAuditEventsRequest, *, limit: int | None = None
    ) -> Iterator[audit_service_pb2.AuditEvent]:
        """Every event of a ListAuditEvents query, page after page, newest first; stops after ``limit``
        events when given. ``request`` is not changed."""
        return iter_pages(self.list_audit_events, request, lambda page: page.events, limit=limit)

    def list_namespaces(
        self, request: namespace_service_pb2.ListNamespacesRequest | None = None
    ) -> namespace_service_pb2.ListNamespacesResponse:
        """NamespaceService.ListNamespaces: one page of the namespaces this token can read that hold
        something it sees (see `iter_namespaces` and `list_every_namespace`)."""
        stub = namespace_service_pb2_grpc.NamespaceServiceStub(self.query_channel)
        return self._read(stub.ListNamespaces, request or namespace_service_pb2.ListNamespacesRequest())

    def iter_namespaces(
        self, request: namespace_service_pb2.ListNamespacesRequest | None = None, *, limit: int | None = None
    ) -> Iterator[namespace_service_pb2.NamespaceSummary]:
        """Every namespace of a ListNamespaces query, page after page, by name; stops after ``limit``
        namespaces when given. ``request`` is not changed."""
        return iter_pages(
            self.list_namespaces,
            request or namespace_service_pb2.ListNamespacesRequest(),
            lambda page: page.namespaces,
            limit=limit,
        )

    def list_every_namespace(
        self, request: namespace_service_pb2.ListNamespacesRequest | None = None
    ) -> namespace_service_pb2.ListNamespacesResponse:
        """Every page of a ListNamespaces query collected into one response (no ``next_page_token``)."""
        return namespace_service_pb2.ListNamespacesResponse(namespaces=list(self.iter_namespaces(request)))

    def get_namespace_stats(
        self, request: namespace_service_pb2.GetNamespaceStatsRequest
    ) -> namespace_service_pb2.GetNamespaceStatsResponse:
        """NamespaceService.GetNamespaceStats: one namespace's counts by kind, as this token sees them."""
        stub = namespace_service_pb2_grpc.NamespaceServiceStub(self.query_channel)
        return self._read(stub.GetNamespaceStats, request)

    # -- change feed (query_service) ----------------------------------------------------------------

    def watch_changes(
        self, request: change_feed_service_pb2.WatchChangesRequest, *, timeout: float | None = None
    ) -> Iterator[change_feed_service_pb2.WatchChangesResponse]:
        """ChangeFeedService.WatchChanges: the raw stream (changes and heartbeats), not resumed; ends
        after ``timeout`` seconds when given (DEADLINE_EXCEEDED), else when cancelled or broken.

        Raises:
            ServiceError: the stream failed (the subclass of its code).
        """
        stub = change_feed_service_pb2_grpc.ChangeFeedServiceStub(self.query_channel)
        responses = stub.WatchChanges(request, timeout=timeout, metadata=self._call_metadata())
        try:
            yield from responses
        except grpc.RpcError as exc:
            raise_for_status(exc)
        finally:
            responses.cancel()

    def iter_changes(
        self,
        namespace: str,
        *,
        resume_after: int = 0,
        event_types: Sequence[str] = (),
        key_prefixes: Sequence[str] = (),
        predicates: Sequence[str] = (),
        heartbeat_seconds: int = 0,
        on_heartbeat: Callable[[change_feed_service_pb2.Heartbeat], None] | None = None,
        on_resume: Callable[[int, str], None] | None = None,
        stop: Callable[[], bool] | None = None,
    ) -> Generator[change_feed_service_pb2.ChangeEvent, None, None]:
        """Every change of ``namespace`` after ``resume_after`` that the token may see, once, in cursor
        order, forever (or until ``stop()`` returns true, checked at every message): the stream is opened
        again after the last cursor received whenever it breaks with UNAVAILABLE, INTERNAL, CANCELLED
        by the server or DEADLINE_EXCEEDED, with backoff (`call_policy.backoff_wait`) while it keeps failing.

        Args:
            namespace: the namespace to watch.
            resume_after: the last cursor the caller processed (0: from the oldest change kept).
            event_types, key_prefixes, predicates, heartbeat_seconds: the request's filters and heartbeat.
            on_heartbeat: called with each heartbeat (its cursor is where a restart may resume).
            on_resume: called with (cursor, status name) before each reconnection.
            stop: polled at every message; true ends the iteration.

        Raises:
            FailedPrecondition: the cursor is older than the retention (``.failure.metadata
                ["oldest_cursor"]``); InvalidArgument, PermissionDenied, Unauthenticated: not retried.
        """
        cursor = resume_after
        failures = 0
        retried = {
            grpc.StatusCode.UNAVAILABLE,
            grpc.StatusCode.INTERNAL,
            grpc.StatusCode.CANCELLED,
            grpc.StatusCode.DEADLINE_EXCEEDED,
            grpc.StatusCode.UNKNOWN,
        }
        while True:
            request = change_feed_service_pb2.WatchChangesRequest(
                namespace=namespace,
                resume_after=cursor,
                event_types=list(event_types),
                key_prefixes=list(key_prefixes),
                predicates=list(predicates),
                heartbeat_seconds=heartbeat_seconds,
            )
            try:
                for response in self.watch_changes(request):
                    failures = 0
                    if response.HasField("change"):
                        cursor = response.change.cursor
                        yield response.change
                    else:
                        cursor = max(cursor, response.heartbeat.cursor)
                        if on_heartbeat is not None:
                            on_heartbeat(response.heartbeat)
                    if stop is not None and stop():
                        return
                code_name = "END"  # the server ended the stream (it is stopping): open it again
            except ServiceError as error:
                if error.code not in retried:
                    raise
                code_name = error.code.name
            if stop is not None and stop():
                return
            failures += 1
            if on_resume is not None:
                on_resume(cursor, code_name)
            time.sleep(call_policy.backoff_wait(failures) if failures > 1 else 0.05)

    # -- webhooks (ingest_service) ------------------------------------------------------------------

    def create_webhook_subscription(
        self, request: webhook_service_pb2.CreateWebhookSubscriptionRequest
    ) -> webhook_service_pb2.CreateWebhookSubscriptionResponse:
        """WebhookService.CreateWebhookSubscription (not idempotent: sent once)."""
        stub = webhook_service_pb2_grpc.WebhookServiceStub(self.ingest_channel)
        return self._write(stub.CreateWebhookSubscription, request, idempotent=False)

    def list_webhook_subscriptions(
        self, request: webhook_service_pb2.ListWebhookSubscriptionsRequest
    ) -> webhook_service_pb2.ListWebhookSubscriptionsResponse:
        """WebhookService.ListWebhookSubscriptions."""
        stub = webhook_service_pb2_grpc.WebhookServiceStub(self.ingest_channel)
        return self._read(stub.ListWebhookSubscriptions, request)

    def delete_webhook_subscription(
        self, request: webhook_service_pb2.DeleteWebhookSubscriptionRequest
    ) -> webhook_service_pb2.DeleteWebhookSubscriptionResponse:
        """WebhookService.DeleteWebhookSubscription."""
        stub = webhook_service_pb2_grpc.WebhookServiceStub(self.ingest_channel)
        return self._write(stub.DeleteWebhookSubscription, request, idempotent=False)

    def list_dead_letters(
        self, request: webhook_service_pb2.ListDeadLettersRequest
    ) -> webhook_service_pb2.ListDeadLettersResponse:
        """WebhookService.ListDeadLetters (admin)."""
        stub = webhook_service_pb2_grpc.WebhookServiceStub(self.ingest_channel)
        return self._read(stub.ListDeadLetters, request)

    def replay_dead_letters(
        self, request: webhook_service_pb2.ReplayDeadLettersRequest
    ) -> webhook_service_pb2.ReplayDeadLettersResponse:
        """WebhookService.ReplayDeadLetters (admin)."""
        stub = webhook_service_pb2_grpc.WebhookServiceStub(self.ingest_channel)
        return self._write(stub.ReplayDeadLetters, request, idempotent=False)
