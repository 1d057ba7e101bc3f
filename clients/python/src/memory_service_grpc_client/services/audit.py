"""AuditService: events are recorded through ingest_service and listed through query_service."""

from __future__ import annotations

from collections.abc import Iterator

from memory_service_grpc_client.memory.v1 import audit_service_pb2, audit_service_pb2_grpc
from memory_service_grpc_client.pagination import iter_pages
from memory_service_grpc_client.service_calls import ServiceCalls

__all__ = ["AuditCalls"]


class AuditCalls(ServiceCalls):
    """The calls of AuditService on `MemoryClient`."""

    def record_audit_event(
        self, request: audit_service_pb2.RecordAuditEventRequest
    ) -> audit_service_pb2.RecordAuditEventResponse:
        """AuditService.RecordAuditEvent (retried only with a ``client_event_id``, which makes it
        idempotent)."""
        stub = audit_service_pb2_grpc.AuditServiceStub(self.ingest_channel)
        return self._write(stub.RecordAuditEvent, request, idempotent=bool(request.client_event_id))

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
