"""RetrievalService transport: proto <-> domain mapping only (docs/explanation/architecture.md); the search is
`query_service.retrieval.hybrid_search`."""

from __future__ import annotations

import grpc

from common.grpc.proto_mapping import struct_to_dict
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2_grpc
from query_service.retrieval.hybrid_search import HybridSearcher
from query_service.retrieval.hybrid_search import SearchHit
from query_service.retrieval.hybrid_search import SearchQuery
from query_service.servicers.read_transport import caller_pii_policy
from query_service.servicers.read_transport import caller_visibility
from query_service.servicers.read_transport import provenance_to_proto


def hit_to_proto(hit: SearchHit) -> retrieval_service_pb2.SearchHit:
    """memory.v1.SearchHit of a (disclosed) hit."""
    chunk = hit.chunk
    return retrieval_service_pb2.SearchHit(
        node_key=chunk.node_key,
        chunk_order=chunk.chunk_order,
        title=chunk.title,
        heading=chunk.heading,
        text=chunk.text,
        source_path=chunk.source_path,
        score=hit.score,
        vector_score=hit.vector_score,
        text_score=hit.text_score,
        trigram_score=hit.trigram_score,
        node_type=chunk.node_type,
        provenance=provenance_to_proto(hit.provenance),
    )


class RetrievalServicer(retrieval_service_pb2_grpc.RetrievalServiceServicer):  # type: ignore[misc]
    """memory.v1.RetrievalService over a `HybridSearcher`; domain errors are mapped to status codes by the
    server's interceptor."""

    def __init__(self, searcher: HybridSearcher) -> None:
        self.searcher = searcher

    def Search(
        self, request: retrieval_service_pb2.SearchRequest, context: grpc.ServicerContext
    ) -> retrieval_service_pb2.SearchResponse:
        hits = self.searcher.search(
            SearchQuery(
                namespace=request.namespace,
                query=request.query,
                top_k=request.top_k,
                node_types=tuple(request.types),
                meta=struct_to_dict(request.meta),
                node_keys=tuple(request.node_keys),
                visibility=caller_visibility(),
                pii=caller_pii_policy(self.searcher.database.settings, "/memory.v1.RetrievalService/Search"),
                preset=request.preset,
            )
        )
        return retrieval_service_pb2.SearchResponse(hits=[hit_to_proto(hit) for hit in hits])
