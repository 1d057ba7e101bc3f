"""RetrievalService, ContextService and TraceService (query_service): search, context compilation and the trace of a retrieval."""

from __future__ import annotations

from memory_service_grpc_client.memory.v1 import (
    context_service_pb2,
    context_service_pb2_grpc,
    retrieval_service_pb2,
    retrieval_service_pb2_grpc,
    trace_service_pb2,
    trace_service_pb2_grpc,
)
from memory_service_grpc_client.service_calls import ServiceCalls

__all__ = ["RetrievalCalls"]


class RetrievalCalls(ServiceCalls):
    """The calls of RetrievalService, ContextService and TraceService on `MemoryClient`."""

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

    def get_trace(self, request: trace_service_pb2.GetTraceRequest) -> trace_service_pb2.GetTraceResponse:
        """TraceService.GetTrace."""
        stub = trace_service_pb2_grpc.TraceServiceStub(self.query_channel)
        return self._read(stub.GetTrace, request)
