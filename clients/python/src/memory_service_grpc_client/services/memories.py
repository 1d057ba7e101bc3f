"""MemoryService (ingest_service) and MemoryQueryService (query_service): memory records; ``project_id`` travels as the ``x-project-id`` metadata."""

from __future__ import annotations

from memory_service_grpc_client.memory.v1 import (
    memory_query_service_pb2,
    memory_query_service_pb2_grpc,
    memory_service_pb2,
    memory_service_pb2_grpc,
)
from memory_service_grpc_client.service_calls import ServiceCalls

__all__ = ["MemoryCalls"]


class MemoryCalls(ServiceCalls):
    """The calls of MemoryService and MemoryQueryService on `MemoryClient`."""

    def add_memories(
        self, request: memory_service_pb2.AddMemoriesRequest, *, project_id: str = ""
    ) -> memory_service_pb2.AddMemoriesResponse:
        """MemoryService.AddMemories (idempotent per item: retried on UNAVAILABLE)."""
        stub = memory_service_pb2_grpc.MemoryServiceStub(self.ingest_channel)
        return self._write(stub.AddMemories, request, idempotent=True, project_id=project_id)

    def update_memory(
        self, request: memory_service_pb2.UpdateMemoryRequest, *, project_id: str = ""
    ) -> memory_service_pb2.UpdateMemoryResponse:
        """MemoryService.UpdateMemory (sent once: a retried update would count its version twice)."""
        stub = memory_service_pb2_grpc.MemoryServiceStub(self.ingest_channel)
        return self._write(stub.UpdateMemory, request, idempotent=False, project_id=project_id)

    def delete_memory(
        self, request: memory_service_pb2.DeleteMemoryRequest, *, project_id: str = ""
    ) -> memory_service_pb2.DeleteMemoryResponse:
        """MemoryService.DeleteMemory."""
        stub = memory_service_pb2_grpc.MemoryServiceStub(self.ingest_channel)
        return self._write(stub.DeleteMemory, request, idempotent=False, project_id=project_id)

    def summarize_memories(
        self, request: memory_service_pb2.SummarizeMemoriesRequest, *, project_id: str = ""
    ) -> memory_service_pb2.SummarizeMemoriesResponse:
        """MemoryService.SummarizeMemories (idempotent per group: retried on UNAVAILABLE)."""
        stub = memory_service_pb2_grpc.MemoryServiceStub(self.ingest_channel)
        return self._write(stub.SummarizeMemories, request, idempotent=True, project_id=project_id)

    def recall_memories(
        self, request: memory_query_service_pb2.RecallMemoriesRequest, *, project_id: str = ""
    ) -> memory_query_service_pb2.RecallMemoriesResponse:
        """MemoryQueryService.RecallMemories."""
        stub = memory_query_service_pb2_grpc.MemoryQueryServiceStub(self.query_channel)
        return self._read(stub.RecallMemories, request, project_id=project_id)

    def get_memory(
        self, request: memory_query_service_pb2.GetMemoryRequest, *, project_id: str = ""
    ) -> memory_query_service_pb2.GetMemoryResponse:
        """MemoryQueryService.GetMemory."""
        stub = memory_query_service_pb2_grpc.MemoryQueryServiceStub(self.query_channel)
        return self._read(stub.GetMemory, request, project_id=project_id)

    def list_memories(
        self, request: memory_query_service_pb2.ListMemoriesRequest, *, project_id: str = ""
    ) -> memory_query_service_pb2.ListMemoriesResponse:
        """MemoryQueryService.ListMemories (one page; follow ``next_page_token``)."""
        stub = memory_query_service_pb2_grpc.MemoryQueryServiceStub(self.query_channel)
        return self._read(stub.ListMemories, request, project_id=project_id)
