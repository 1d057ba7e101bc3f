"""SourceService transport: proto <-> domain mapping only (docs/explanation/architecture.md); the reading is
`query_service.readers.sources`."""

from __future__ import annotations

import grpc

from memory_service_grpc_client.memory.v1 import source_service_pb2
from memory_service_grpc_client.memory.v1 import source_service_pb2_grpc
from query_service.provenance import Provenance
from query_service.readers.sources import SourceReader
from query_service.readers.sources import SourceView
from query_service.servicers.read_transport import caller_pii_policy
from query_service.servicers.read_transport import caller_visibility
from query_service.servicers.read_transport import provenance_to_proto


class SourceServicer(source_service_pb2_grpc.SourceServiceServicer):  # type: ignore[misc]
    """memory.v1.SourceService over a `SourceReader`; domain errors are mapped to status codes by the
    server's interceptor."""

    def __init__(self, reader: SourceReader) -> None:
        self.reader = reader

    def GetSource(
        self, request: source_service_pb2.GetSourceRequest, context: grpc.ServicerContext
    ) -> source_service_pb2.GetSourceResponse:
        view = self.reader.get_source(
            request.namespace,
            request.natural_key,
            visibility=caller_visibility(),
            pii=caller_pii_policy(self.reader.database.settings, "/memory.v1.SourceService/GetSource"),
            include_original=request.include_original,
        )
        provenance = Provenance(
            node_key=view.natural_key,
            source_path=view.source_path,
            observation_ids=view.observation_ids,
            metadata=view.provenance,
        )
        return source_service_pb2.GetSourceResponse(
            source=source_service_pb2.Source(
                natural_key=view.natural_key,
                title=view.title,
                content=view.content,
                content_source=view.content_source,
                type=view.node_type,
                chunk_count=view.chunk_count,
                provenance=provenance_to_proto(provenance),
                original=_original(view),
            )
        )


def _original(view: SourceView) -> source_service_pb2.SourceOriginal | None:
    """Source.original of a document converted from a file (None for text)."""
    file = view.original
    if file is None:
        return None
    return source_service_pb2.SourceOriginal(
        media_type=file.media_type,
        size_bytes=file.size_bytes,
        sha256=file.sha256,
        converter=file.converter,
        converter_version=file.converter_version,
        data=view.original_data or b"",
        page_status=list(file.page_status),
    )
