"""MemoryService transport: proto <-> domain mapping only.

The caller's scope comes from the token and the ``x-project-id`` metadata (`common.grpc.memory_mapping.
scope_of`); writing, validation and storage live in `ingest_service.memories.writer` and
`ingest_service.memories.summaries`.
"""

from __future__ import annotations

import grpc

from common.auth.principals import Right
from common.grpc.memory_mapping import filter_query
from common.grpc.memory_mapping import memory_to_proto
from common.grpc.memory_mapping import new_memory_input
from common.grpc.memory_mapping import scope_of
from common.grpc.proto_mapping import struct_to_dict
from ingest_service.memories.summaries import MemorySummarizer
from ingest_service.memories.summaries import SummaryInput
from ingest_service.memories.validation import NewMemoryInput
from ingest_service.memories.writer import MemoryWriter
from memory_service_grpc_client.memory.v1 import memory_service_pb2
from memory_service_grpc_client.memory.v1 import memory_service_pb2_grpc


class MemoryServicer(memory_service_pb2_grpc.MemoryServiceServicer):  # type: ignore[misc]
    """memory.v1.MemoryService over a `MemoryWriter` and a `MemorySummarizer`."""

    def __init__(self, writer: MemoryWriter, summarizer: MemorySummarizer) -> None:
        self.writer = writer
        self.summarizer = summarizer

    def AddMemories(
        self, request: memory_service_pb2.AddMemoriesRequest, context: grpc.ServicerContext
    ) -> memory_service_pb2.AddMemoriesResponse:
        scope = scope_of(context, request.user_id, Right.WRITE)
        items = [NewMemoryInput(**new_memory_input(item)) for item in request.memories]
        results = self.writer.add(scope, items)
        return memory_service_pb2.AddMemoriesResponse(
            results=[
                memory_service_pb2.AddMemoryResult(
                    memory_id=r.memory_id,
                    created=r.created,
                    status=r.status,
                    field_violations=list(r.field_violations),
                    error_code=r.error_code,
                    quota_limit=r.quota_limit,
                    quota_count=r.quota_count,
                )
                for r in results
            ]
        )

    def UpdateMemory(
        self, request: memory_service_pb2.UpdateMemoryRequest, context: grpc.ServicerContext
    ) -> memory_service_pb2.UpdateMemoryResponse:
        scope = scope_of(context, request.user_id, Right.WRITE)
        record = self.writer.update(
            scope,
            request.memory_id,
            NewMemoryInput(**new_memory_input(request.memory)),
            list(request.update_mask.paths),
        )
        return memory_service_pb2.UpdateMemoryResponse(memory=memory_to_proto(record))

    def DeleteMemory(
        self, request: memory_service_pb2.DeleteMemoryRequest, context: grpc.ServicerContext
    ) -> memory_service_pb2.DeleteMemoryResponse:
        scope = scope_of(context, request.user_id, Right.WRITE)
        event_id = self.writer.delete(scope, request.memory_id, request.reason)
        return memory_service_pb2.DeleteMemoryResponse(memory_id=request.memory_id, audit_event_id=event_id)

    def SummarizeMemories(
        self, request: memory_service_pb2.SummarizeMemoriesRequest, context: grpc.ServicerContext
    ) -> memory_service_pb2.SummarizeMemoriesResponse:
        scope = scope_of(context, request.user_id, Right.WRITE)
        record, created = self.summarizer.summarize(
            scope,
            SummaryInput(
                memory_ids=tuple(request.memory_ids),
                query=filter_query(scope, request.filter) if request.HasField("filter") else None,
                lossless=request.lossless,
                group_id=request.group_id,
                max_sentences=request.max_sentences,
                tags=tuple(request.tags),
                metadata=struct_to_dict(request.metadata),
            ),
        )
        return memory_service_pb2.SummarizeMemoriesResponse(summary=memory_to_proto(record), created=created)
