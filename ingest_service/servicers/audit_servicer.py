"""AuditService transport: proto <-> domain mapping only (docs/explanation/architecture.md;
docs/explanation/knowledge-model.md)."""

from __future__ import annotations

import grpc

from common.domain.audit import AuditEventInput
from common.domain.audit import AuditTrail
from common.grpc.proto_mapping import audit_event_to_proto
from common.grpc.proto_mapping import struct_to_dict
from memory_service_grpc_client.memory.v1 import audit_service_pb2
from memory_service_grpc_client.memory.v1 import audit_service_pb2_grpc


class AuditServicer(audit_service_pb2_grpc.AuditServiceServicer):  # type: ignore[misc]
    """memory.v1.AuditService over an `AuditTrail`; domain errors become statuses in the server's interceptor."""

    def __init__(self, trail: AuditTrail) -> None:
        self.trail = trail

    def RecordAuditEvent(
        self, request: audit_service_pb2.RecordAuditEventRequest, context: grpc.ServicerContext
    ) -> audit_service_pb2.RecordAuditEventResponse:
        event = self.trail.record_requested(
            AuditEventInput(
                namespace=request.namespace,
                action=request.action,
                trace_id=request.trace_id,
                target_key=request.target_key,
                details=struct_to_dict(request.details),
                scopes=tuple(request.scopes),
                client_event_id=request.client_event_id,
            )
        )
        return audit_service_pb2.RecordAuditEventResponse(
            event=audit_event_to_proto(event), created=event.created
        )

    def ListAuditEvents(
        self, request: audit_service_pb2.ListAuditEventsRequest, context: grpc.ServicerContext
    ) -> audit_service_pb2.ListAuditEventsResponse:
        context.abort(grpc.StatusCode.UNIMPLEMENTED, "ListAuditEvents is a read: call it on query_service")
