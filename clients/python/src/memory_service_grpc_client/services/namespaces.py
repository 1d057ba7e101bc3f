"""NamespaceService (query_service): the namespaces a token reads and their counts."""

from __future__ import annotations

from memory_service_grpc_client.memory.v1 import namespace_service_pb2, namespace_service_pb2_grpc
from memory_service_grpc_client.service_calls import ServiceCalls

__all__ = ["NamespaceCalls"]


class NamespaceCalls(ServiceCalls):
    """The calls of NamespaceService on `MemoryClient`."""

    def list_namespaces(
        self, request: namespace_service_pb2.ListNamespacesRequest | None = None
    ) -> namespace_service_pb2.ListNamespacesResponse:
        """NamespaceService.ListNamespaces: the namespaces this token can read that hold something it sees."""
        stub = namespace_service_pb2_grpc.NamespaceServiceStub(self.query_channel)
        return self._read(stub.ListNamespaces, request or namespace_service_pb2.ListNamespacesRequest())

    def get_namespace_stats(
        self, request: namespace_service_pb2.GetNamespaceStatsRequest
    ) -> namespace_service_pb2.GetNamespaceStatsResponse:
        """NamespaceService.GetNamespaceStats: one namespace's counts by kind, as this token sees them."""
        stub = namespace_service_pb2_grpc.NamespaceServiceStub(self.query_channel)
        return self._read(stub.GetNamespaceStats, request)
