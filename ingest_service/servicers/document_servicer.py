"""DocumentService transport: proto <-> domain mapping only (docs/explanation/architecture.md).

Validation, chunking, embedding and storage live in `ingest_service.documents.writer`; domain errors raised there
become gRPC statuses in the server's error interceptor (`common.grpc.interceptors`).
"""

from __future__ import annotations

import grpc

from common.grpc.proto_mapping import struct_to_dict
from common.storage.document_original_store import DocumentFile
from ingest_service.documents.node_deletion import DeleteNodeInput
from ingest_service.documents.node_deletion import NodeDeleter
from ingest_service.documents.validation import ChunkInput
from ingest_service.documents.validation import PutChunksInput
from ingest_service.documents.validation import RetainInput
from ingest_service.documents.writer import DocumentWriter
from memory_service_grpc_client.memory.v1 import document_service_pb2
from memory_service_grpc_client.memory.v1 import document_service_pb2_grpc


def _conversion(file: DocumentFile | None) -> document_service_pb2.Conversion | None:
    """RetainResponse.conversion of a document retained from a file (None for text)."""
    if file is None:
        return None
    return document_service_pb2.Conversion(
        media_type=file.media_type,
        sha256=file.sha256,
        size_bytes=file.size_bytes,
        converter=file.converter,
        converter_version=file.converter_version,
        pages=[
            document_service_pb2.ConversionPage(page=number, status=status)
            for number, status in enumerate(file.page_status, start=1)
        ],
    )


class DocumentServiceServicer(document_service_pb2_grpc.DocumentServiceServicer):  # type: ignore[misc]
    """memory.v1.DocumentService over a `DocumentWriter`."""

    def __init__(self, writer: DocumentWriter, deleter: NodeDeleter) -> None:
        self.writer = writer
        self.deleter = deleter

    def Retain(
        self, request: document_service_pb2.RetainRequest, context: grpc.ServicerContext
    ) -> document_service_pb2.RetainResponse:
        result = self.writer.retain(
            RetainInput(
                namespace=request.namespace,
                natural_key=request.natural_key,
                content=request.content,
                type=request.type,
                title=request.title,
                links=tuple(request.links),
                source_path=request.source_path,
                provenance=struct_to_dict(request.provenance),
                scopes=tuple(request.scopes),
                meta=struct_to_dict(request.meta),
                pii=request.pii,
                pii_categories=tuple(request.pii_categories),
                trace_id=request.trace_id,
                original=request.original,
                media_type=request.media_type,
            )
        )
        return document_service_pb2.RetainResponse(
            natural_key=result.natural_key,
            created=result.created,
            chunk_count=result.chunk_count,
            linked=list(result.linked),
            missing_links=list(result.missing_links),
            unchanged=result.unchanged,
            conversion=_conversion(result.original),
        )

    def PutChunks(
        self, request: document_service_pb2.PutChunksRequest, context: grpc.ServicerContext
    ) -> document_service_pb2.PutChunksResponse:
        result = self.writer.put_chunks(
            PutChunksInput(
                namespace=request.namespace,
                natural_key=request.natural_key,
                chunks=tuple(
                    ChunkInput(
                        chunk_order=chunk.chunk_order,
                        heading=chunk.heading,
                        text=chunk.text,
                        meta=struct_to_dict(chunk.meta),
                    )
                    for chunk in request.chunks
                ),
                type=request.type,
                title=request.title,
                source_path=request.source_path,
                provenance=struct_to_dict(request.provenance),
                scopes=tuple(request.scopes),
                meta=struct_to_dict(request.meta),
                links=tuple(request.links),
                pii=request.pii,
                pii_categories=tuple(request.pii_categories),
            )
        )
        return document_service_pb2.PutChunksResponse(
            natural_key=result.natural_key, created=result.created, chunk_count=result.chunk_count
        )

    def DeleteNode(
        self, request: document_service_pb2.DeleteNodeRequest, context: grpc.ServicerContext
    ) -> document_service_pb2.DeleteNodeResponse:
        result = self.deleter.delete(
            DeleteNodeInput(
                namespace=request.namespace,
                natural_key=request.natural_key,
                reason=request.reason,
                trace_id=request.trace_id,
            )
        )
        return document_service_pb2.DeleteNodeResponse(
            natural_key=result.natural_key,
            type=result.node_type,
            chunks_deleted=result.chunks_deleted,
            facts_deleted=result.facts_deleted,
            edges_deleted=result.edges_deleted,
            audit_event_id=result.audit_event_id,
            trace_id=result.trace_id,
        )
