"""The calls that keep a namespace in step with a source or a subscriber: snapshots, vault ingest, the
change feed and webhooks (one mixin a service)."""

from __future__ import annotations

import time
from collections.abc import Callable
from collections.abc import Generator
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Sequence

import grpc

from memory_service_grpc_client import call_policy
from memory_service_grpc_client.errors import ServiceError
from memory_service_grpc_client.errors import raise_for_status
from memory_service_grpc_client.memory.v1 import change_feed_service_pb2
from memory_service_grpc_client.memory.v1 import change_feed_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import snapshot_service_pb2
from memory_service_grpc_client.memory.v1 import snapshot_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import vault_service_pb2
from memory_service_grpc_client.memory.v1 import vault_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import webhook_service_pb2
from memory_service_grpc_client.memory.v1 import webhook_service_pb2_grpc
from memory_service_grpc_client.service_calls import ServiceCalls

__all__ = ["ChangeFeedCalls", "SnapshotCalls", "VaultCalls", "WebhookCalls"]


class SnapshotCalls(ServiceCalls):
    """The calls of SnapshotService on `MemoryClient`."""

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
        return self._send_stream(stub.ReconcileStream, requests, timeout=timeout)


class VaultCalls(ServiceCalls):
    """The calls of VaultService on `MemoryClient`."""

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


class ChangeFeedCalls(ServiceCalls):
    """The calls of ChangeFeedService on `MemoryClient`."""

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


class WebhookCalls(ServiceCalls):
    """The calls of WebhookService on `MemoryClient`."""

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
