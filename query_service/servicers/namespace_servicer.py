"""NamespaceService transport: proto <-> domain mapping only (docs/explanation/architecture.md); the counting is
`query_service.namespace_reader`."""

from __future__ import annotations

import grpc

from common.auth.principals import Right
from common.auth.principals import current_principal
from memory_service_grpc_client.memory.v1 import namespace_service_pb2
from memory_service_grpc_client.memory.v1 import namespace_service_pb2_grpc
from query_service.namespace_reader import NamespaceReader
from query_service.servicers.read_transport import caller_visibility


class NamespaceServicer(namespace_service_pb2_grpc.NamespaceServiceServicer):  # type: ignore[misc]
    """memory.v1.NamespaceService over a `NamespaceReader`; domain errors are mapped to status codes by
    the server's interceptor."""

    def __init__(self, reader: NamespaceReader) -> None:
        self.reader = reader

    def ListNamespaces(
        self, request: namespace_service_pb2.ListNamespacesRequest, context: grpc.ServicerContext
    ) -> namespace_service_pb2.ListNamespacesResponse:
        principal = current_principal()
        page = self.reader.list_namespaces(
            request.prefix,
            page_size=request.page_size,
            page_token=request.page_token,
            visibility=caller_visibility(),
            readable=None if principal is None else lambda namespace: principal.allows(namespace, Right.READ),
        )
        return namespace_service_pb2.ListNamespacesResponse(
            namespaces=[
                namespace_service_pb2.NamespaceSummary(
                    namespace=counts.namespace,
                    observation_count=counts.observations,
                    node_count=counts.nodes,
                    fact_count=counts.facts,
                    chunk_count=counts.chunks,
                )
                for counts in page.namespaces
            ],
            next_page_token=page.next_page_token,
        )

    def GetNamespaceStats(
        self, request: namespace_service_pb2.GetNamespaceStatsRequest, context: grpc.ServicerContext
    ) -> namespace_service_pb2.GetNamespaceStatsResponse:
        detail = self.reader.namespace_stats(request.namespace, visibility=caller_visibility())
        return namespace_service_pb2.GetNamespaceStatsResponse(
            namespace=detail.namespace,
            observations_by_status=detail.observations_by_status,
            nodes_by_type=detail.nodes_by_type,
            live_fact_count=detail.live_facts,
            closed_fact_count=detail.closed_facts,
            chunk_count=detail.chunks,
            embedding_backlog=detail.embedding_backlog,
            memories_by_tier=detail.memories_by_tier,
        )
