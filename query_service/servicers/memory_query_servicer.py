"""MemoryQueryService transport: proto <-> domain mapping only.

The caller's scope comes from the token and the ``x-project-id`` metadata (`common.grpc.memory_mapping.
scope_of`); ranking and reads live in `query_service.readers.memory_recall`.
"""

from __future__ import annotations

import grpc

from common.auth.principals import Right
from common.grpc.memory_mapping import filter_query
from common.grpc.memory_mapping import memory_to_proto
from common.grpc.memory_mapping import scope_of
from memory_service_grpc_client.memory.v1 import memory_query_service_pb2
from memory_service_grpc_client.memory.v1 import memory_query_service_pb2_grpc
from query_service.readers.memory_recall import MemoryReader
from query_service.readers.memory_recall import RecallInput


class MemoryQueryServicer(memory_query_service_pb2_grpc.MemoryQueryServiceServicer):  # type: ignore[misc]
    """memory.v1.MemoryQueryService over a `MemoryReader`."""

    def __init__(self, reader: MemoryReader) -> None:
        self.reader = reader

    def RecallMemories(
        self, request: memory_query_service_pb2.RecallMemoriesRequest, context: grpc.ServicerContext
    ) -> memory_query_service_pb2.RecallMemoriesResponse:
        scope = scope_of(context, request.user_id, Right.READ)
        recalled, preset = self.reader.recall(
            RecallInput(
                query=request.query,
                query_filter=filter_query(scope, request.filter),
                top_k=request.top_k,
                preset=request.preset,
                expand_summaries=request.expand_summaries,
                touch=request.touch if request.HasField("touch") else True,
            )
        )
        return memory_query_service_pb2.RecallMemoriesResponse(
            memories=[
                memory_query_service_pb2.RecalledMemory(
                    memory=memory_to_proto(item.memory),
                    score=item.score,
                    similarity=item.similarity,
                    recency=item.recency,
                    importance=item.memory.importance,
                    expanded=[memory_to_proto(original) for original in item.expanded],
                )
                for item in recalled
            ],
            preset=preset,
        )

    def GetMemory(
        self, request: memory_query_service_pb2.GetMemoryRequest, context: grpc.ServicerContext
    ) -> memory_query_service_pb2.GetMemoryResponse:
        scope = scope_of(context, request.user_id, Right.READ)
        return memory_query_service_pb2.GetMemoryResponse(
            memory=memory_to_proto(self.reader.get(scope, request.memory_id))
        )

    def ListMemories(
        self, request: memory_query_service_pb2.ListMemoriesRequest, context: grpc.ServicerContext
    ) -> memory_query_service_pb2.ListMemoriesResponse:
        scope = scope_of(context, request.user_id, Right.READ)
        query = filter_query(
            scope,
            request.filter,
            include_expired=request.include_expired,
            include_hidden=request.include_summarized,
        )
        records, token = self.reader.list(query, page_size=request.page_size, page_token=request.page_token)
        return memory_query_service_pb2.ListMemoriesResponse(
            memories=[memory_to_proto(r) for r in records], next_page_token=token
        )
