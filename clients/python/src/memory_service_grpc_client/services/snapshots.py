"""SnapshotService (ingest_service): reconciling a namespace with a snapshot."""

from __future__ import annotations

from collections.abc import Iterable

from memory_service_grpc_client.memory.v1 import snapshot_service_pb2, snapshot_service_pb2_grpc
from memory_service_grpc_client.service_calls import ServiceCalls

__all__ = ["SnapshotCalls"]


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
