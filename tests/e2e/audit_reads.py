"""The audit trail over a real channel: an event recorded, one page of ListAuditEvents, every page of it,
and the audit events of a trace (GetTrace)."""

from __future__ import annotations

from typing import Any

import grpc
from google.protobuf import json_format

from memory_service_grpc_client import iter_pages
from memory_service_grpc_client.memory.v1 import audit_service_pb2
from memory_service_grpc_client.memory.v1 import audit_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import trace_service_pb2
from memory_service_grpc_client.memory.v1 import trace_service_pb2_grpc


def record_audit_event(
    channel: grpc.Channel, namespace: str, action: str, trace_id: str, **fields: Any
) -> audit_service_pb2.AuditEvent:
    """RecordAuditEvent of ``action`` on ``trace_id`` with the request's other ``fields``; the event filed."""
    request = audit_service_pb2.RecordAuditEventRequest(
        namespace=namespace, action=action, trace_id=trace_id, **fields
    )
    return audit_service_pb2_grpc.AuditServiceStub(channel).RecordAuditEvent(request, timeout=60).event


def list_audit_events(channel: grpc.Channel, **fields: Any) -> audit_service_pb2.ListAuditEventsResponse:
    """One page of ListAuditEvents with the request's ``fields``."""
    stub = audit_service_pb2_grpc.AuditServiceStub(channel)
    return stub.ListAuditEvents(audit_service_pb2.ListAuditEventsRequest(**fields), timeout=60)


def every_audit_event(channel: grpc.Channel, **fields: Any) -> list[audit_service_pb2.AuditEvent]:
    """Every page of a listing, following next_page_token (`iter_pages`)."""
    return list(
        iter_pages(
            lambda request: list_audit_events(channel, **{**fields, "page_token": request.page_token}),
            audit_service_pb2.ListAuditEventsRequest(),
            lambda page: page.events,
        )
    )


def trace_audit_events(channel: grpc.Channel, namespace: str, trace_id: str) -> list[audit_service_pb2.AuditEvent]:
    """The audit events among a trace's entries (GetTrace), in the trace's order."""
    trace = trace_service_pb2_grpc.TraceServiceStub(channel).GetTrace(
        trace_service_pb2.GetTraceRequest(namespace=namespace, trace_id=trace_id), timeout=60
    )
    return [entry.audit_event for entry in trace.trace.entries if entry.HasField("audit_event")]


def get_trace(channel: grpc.Channel, namespace: str, trace_id: str) -> trace_service_pb2.Trace:
    """The trace ``trace_id`` of ``namespace`` (GetTrace)."""
    stub = trace_service_pb2_grpc.TraceServiceStub(channel)
    return stub.GetTrace(trace_service_pb2.GetTraceRequest(namespace=namespace, trace_id=trace_id), timeout=60).trace


def details_of(event: audit_service_pb2.AuditEvent) -> dict[str, Any]:
    """An audit event's details as a dict."""
    return json_format.MessageToDict(event.details)
