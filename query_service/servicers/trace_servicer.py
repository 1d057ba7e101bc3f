"""TraceService transport: proto <-> domain mapping only (docs/explanation/architecture.md;
docs/explanation/knowledge-model.md); the reading is `query_service.readers.traces`."""

from __future__ import annotations

import grpc

from common.grpc.proto_mapping import audit_event_to_proto
from common.grpc.proto_mapping import dict_to_struct
from common.grpc.proto_mapping import timestamp
from memory_service_grpc_client.memory.v1 import trace_service_pb2
from memory_service_grpc_client.memory.v1 import trace_service_pb2_grpc
from query_service.readers.traces import TraceEntry
from query_service.readers.traces import TraceReader
from query_service.servicers.read_transport import caller_audit_access
from query_service.servicers.read_transport import caller_pii_policy
from query_service.servicers.read_transport import caller_visibility


def _entry_to_proto(entry: TraceEntry) -> trace_service_pb2.TraceEntry:
    if entry.audit_event is not None:
        return trace_service_pb2.TraceEntry(
            time=timestamp(entry.time), audit_event=audit_event_to_proto(entry.audit_event)
        )
    compilation = entry.compilation
    assert compilation is not None
    return trace_service_pb2.TraceEntry(
        time=timestamp(entry.time),
        context_compilation=trace_service_pb2.ContextCompilation(
            compilation_id=compilation.compilation_id,
            request=dict_to_struct(compilation.request),
            decisions=[dict_to_struct(decision) for decision in compilation.decisions],
            hidden_decision_count=compilation.hidden_decision_count,
        ),
    )


class TraceServicer(trace_service_pb2_grpc.TraceServiceServicer):  # type: ignore[misc]
    """memory.v1.TraceService over a `TraceReader`; the caller's visibility scopes filter the trail; domain
    errors are mapped to status codes by the server's interceptor."""

    def __init__(self, reader: TraceReader) -> None:
        self.reader = reader

    def GetTrace(
        self, request: trace_service_pb2.GetTraceRequest, context: grpc.ServicerContext
    ) -> trace_service_pb2.GetTraceResponse:
        view = self.reader.get_trace(
            request.namespace,
            request.trace_id,
            visibility=caller_visibility(),
            audit_access=caller_audit_access(request.namespace),
            pii=caller_pii_policy(self.reader.database.settings, "/memory.v1.TraceService/GetTrace"),
        )
        return trace_service_pb2.GetTraceResponse(
            trace=trace_service_pb2.Trace(
                namespace=view.namespace,
                trace_id=view.trace_id,
                entries=[_entry_to_proto(entry) for entry in view.entries],
            )
        )
