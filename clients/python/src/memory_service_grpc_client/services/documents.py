"""DocumentService (ingest_service) and SourceService (query_service): documents and their sources."""

from __future__ import annotations

from collections.abc import Callable

from memory_service_grpc_client.memory.v1 import (
    document_service_pb2,
    document_service_pb2_grpc,
    source_service_pb2,
    source_service_pb2_grpc,
)
from memory_service_grpc_client.service_calls import ServiceCalls

__all__ = ["DocumentCalls"]


class DocumentCalls(ServiceCalls):
    """The calls of DocumentService and SourceService on `MemoryClient`."""

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

    def get_source(
        self, request: source_service_pb2.GetSourceRequest
    ) -> source_service_pb2.GetSourceResponse:
        """SourceService.GetSource."""
        stub = source_service_pb2_grpc.SourceServiceStub(self.query_channel)
        return self._read(stub.GetSource, request)
