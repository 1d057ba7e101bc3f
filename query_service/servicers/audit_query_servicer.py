"""AuditService on query_service: ListAuditEvents, proto <-> domain mapping only; the reading is
`query_service.audit_reader`. RecordAuditEvent is a write, served by ingest_service."""

from __future__ import annotations

import grpc

from common.grpc.proto_mapping import audit_event_to_proto
from common.grpc.proto_mapping import optional_instant
from memory_service_grpc_client.memory.v1 import audit_service_pb2
from memory_service_grpc_client.memory.v1 import audit_service_pb2_grpc
from query_service.audit_reader import AuditListInput
from query_service.audit_reader import AuditReader
from query_service.servicers.read_transport import caller_audit_access
from query_service.servicers.read_transport import caller_pii_policy

LIST_METHOD = "/memory.v1.AuditService/ListAuditEvents"


class AuditQueryServicer(audit_service_pb2_grpc.AuditServiceServicer):  # type: ignore[misc]
    """memory.v1.AuditService (its read method) over an `AuditReader`; domain errors are mapped to status
    codes by the server's interceptor."""

    def __init__(self, reader: AuditReader) -> None:
        self.reader = reader

    def ListAuditEvents(
        self, request: audit_service_pb2.ListAuditEventsRequest, context: grpc.ServicerContext
    ) -> audit_service_pb2.ListAuditEventsResponse:
        page = self.reader.list_events(
            AuditListInput(
                namespace=request.namespace,
                action=request.action,
                principal=request.principal,
                node_key=request.node_key,
                start=optional_instant(request, "start_time"),
                end=optional_instant(request, "end_time"),
                page_size=request.page_size,
                page_token=request.page_token,
            ),
            access=caller_audit_access(request.namespace),
            pii=caller_pii_policy(self.reader.database.settings, LIST_METHOD),
        )
        return audit_service_pb2.ListAuditEventsResponse(
            events=[audit_event_to_proto(event) for event in page.events],
            next_page_token=page.next_page_token,
        )

    def RecordAuditEvent(
        self, request: audit_service_pb2.RecordAuditEventRequest, context: grpc.ServicerContext
    ) -> audit_service_pb2.RecordAuditEventResponse:
        context.abort(grpc.StatusCode.UNIMPLEMENTED, "RecordAuditEvent is a write: call it on ingest_service")
