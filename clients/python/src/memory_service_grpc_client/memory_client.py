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

The methods are grouped by service in `memory_service_grpc_client.services` (one mixin a service over
`memory_service_grpc_client.service_calls.ServiceCalls`, the call plumbing; the modules `knowledge`,
`administration` and `sync` hold them), composed here.

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

from collections.abc import Sequence
from typing import Any
from typing import Self

from memory_service_grpc_client.channels import ChannelWrapper
from memory_service_grpc_client.channels import ClientSecurity
from memory_service_grpc_client.channels import ServiceChannels
from memory_service_grpc_client.channels import health_status
from memory_service_grpc_client.services.administration import AuditCalls
from memory_service_grpc_client.services.administration import DataProtectionCalls
from memory_service_grpc_client.services.administration import DomainPackCalls
from memory_service_grpc_client.services.administration import NamespaceCalls
from memory_service_grpc_client.services.knowledge import DocumentCalls
from memory_service_grpc_client.services.knowledge import FactCalls
from memory_service_grpc_client.services.knowledge import MemoryCalls
from memory_service_grpc_client.services.knowledge import ObservationCalls
from memory_service_grpc_client.services.knowledge import RetrievalCalls
from memory_service_grpc_client.services.sync import ChangeFeedCalls
from memory_service_grpc_client.services.sync import SnapshotCalls
from memory_service_grpc_client.services.sync import VaultCalls
from memory_service_grpc_client.services.sync import WebhookCalls

__all__ = ["MemoryClient"]


class MemoryClient(
    MemoryCalls,
    ObservationCalls,
    FactCalls,
    DocumentCalls,
    DataProtectionCalls,
    SnapshotCalls,
    VaultCalls,
    DomainPackCalls,
    AuditCalls,
    RetrievalCalls,
    NamespaceCalls,
    ChangeFeedCalls,
    WebhookCalls,
):
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
        self._token = None

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

    def health(self) -> dict[str, str]:
        """grpc.health.v1 of both servers: ``{"ingest_service": status, "query_service": status}``, each
        ``SERVING``, ``NOT_SERVING`` (up, database not ready) or ``UNREACHABLE``."""
        return {
            "ingest_service": health_status(self.ingest_channel),
            "query_service": health_status(self.query_channel),
        }
