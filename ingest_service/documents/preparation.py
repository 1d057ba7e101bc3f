"""What a document write becomes before any check against the database or the model: the document node
and its chunks, cut from the Markdown body (`ingest_service.documents.chunking`) or from a converted
original file (`ingest_service.documents.conversion`), each chunk's meta carrying the scopes and the
personal data marks (docs/how-to/personal-data.md). `ingest_service.documents.writer` checks, embeds
and writes them.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

from common.kernel.config import Settings
from common.kernel.pii import PiiMarks
from common.storage.document_original_store import DocumentFile
from common.storage.graph.store import NodeWrite
from ingest_service.documents.chunking import bounded_chunks
from ingest_service.documents.chunking import chunk_markdown
from ingest_service.documents.conversion.citations import document_name
from ingest_service.documents.conversion.conversion import DocumentConverter
from ingest_service.documents.conversion.converted_chunks import converted_chunks
from ingest_service.documents.front_matter import strip_front_matter
from ingest_service.documents.model import PreparedChunk
from ingest_service.documents.validation import PutChunksInput
from ingest_service.documents.validation import RetainInput

__all__ = ["DEFAULT_TYPE", "chunk_meta", "document_node", "put_chunks_parts", "retain_parts"]

DEFAULT_TYPE = "document"


def retain_parts(
    request: RetainInput, settings: Settings, converter: DocumentConverter
) -> tuple[NodeWrite, list[PreparedChunk], tuple[DocumentFile, bytes] | None]:
    """The node (origin ``agent``), the chunks of a validated Retain request, and the original file
    to keep (a request with ``original``: converted here, in a child process)."""
    title = request.title or request.natural_key
    if request.original:
        return _file_parts(request, title, settings, converter)
    # Personal data marks (docs/how-to/personal-data.md): explicit ones plus, with CB_PII_PROTECTION,
    # what the detector finds; mirrored into every chunk's meta for the output masking.
    marks = PiiMarks.of(
        pii=request.pii,
        categories=request.pii_categories,
        values=(title, request.content, request.meta, request.provenance),
        protection=settings.pii_protection,
    )
    meta = chunk_meta(request.meta, request.scopes, marks)
    body = strip_front_matter(request.content)
    pieces = bounded_chunks(
        [(chunk.heading, chunk.text) for chunk in chunk_markdown(body, settings.chunk_max_chars)]
    )
    prepared = [PreparedChunk(order, heading, text, meta) for order, (heading, text) in enumerate(pieces)]
    props: dict[str, Any] = {
        "content": request.content,
        "provenance": dict(request.provenance),
        "scopes": list(request.scopes),
        "meta": dict(request.meta),
        **marks.as_props(),
        "trace_id": request.trace_id,
    }
    return document_node(request, props), prepared, None


def _file_parts(
    request: RetainInput, title: str, settings: Settings, converter: DocumentConverter
) -> tuple[NodeWrite, list[PreparedChunk], tuple[DocumentFile, bytes]]:
    """`retain_parts` of a request with ``original``: converted to Markdown (the node's content),
    chunked part by part, each chunk with its place and citation in its meta."""
    conversion = converter.convert(request.original, request.media_type)
    converted, original = conversion.converted, conversion.original
    markdown = converted.markdown
    marks = PiiMarks.of(
        pii=request.pii,
        categories=request.pii_categories,
        values=(title, markdown, request.meta, request.provenance),
        protection=settings.pii_protection,
    )
    meta = chunk_meta(request.meta, request.scopes, marks)
    name = document_name(request.source_path, request.title, request.natural_key)
    prepared = [
        PreparedChunk(order, heading, text, {**meta, **place})
        for order, (heading, text, place) in enumerate(
            converted_chunks(converted, name, settings.chunk_max_chars)
        )
    ]
    file = DocumentFile(
        sha256=original.sha256,
        media_type=original.media_type,
        size_bytes=original.size,
        converter=converted.converter,
        converter_version=converted.converter_version,
        page_status=tuple(str(page["status"]) for page in converted.pages),
    )
    props: dict[str, Any] = {
        "content": markdown,
        "original": {
            "sha256": file.sha256,
            "media_type": file.media_type,
            "size_bytes": file.size_bytes,
            "converter": file.converter,
            "converter_version": file.converter_version,
        },
        "provenance": dict(request.provenance),
        "scopes": list(request.scopes),
        "meta": dict(request.meta),
        **marks.as_props(),
        "trace_id": request.trace_id,
    }
    return document_node(request, props), prepared, (file, original.data)


def put_chunks_parts(
    request: PutChunksInput, held: PiiMarks, settings: Settings
) -> tuple[NodeWrite, list[PreparedChunk]]:
    """The node (origin ``agent``, no original text) and the chunks of a validated PutChunks request;
    ``held``: the personal data marks the node holds now."""
    title = request.title or request.natural_key
    base_meta = dict(request.meta)
    # Marks add up over calls (a document may come in several PutChunks calls): this call's explicit
    # and detected marks joined with those the node holds.
    marks = held.union(
        PiiMarks.of(
            pii=request.pii,
            categories=request.pii_categories,
            values=(
                title,
                request.meta,
                request.provenance,
                *((chunk.heading, chunk.text, chunk.meta) for chunk in request.chunks),
            ),
            protection=settings.pii_protection,
        )
    )
    prepared = [
        PreparedChunk(
            chunk.chunk_order,
            chunk.heading,
            chunk.text,
            chunk_meta({**base_meta, **chunk.meta}, request.scopes, marks),
        )
        for chunk in sorted(request.chunks, key=lambda c: c.chunk_order)
    ]
    props: dict[str, Any] = {
        "provenance": dict(request.provenance),
        "scopes": list(request.scopes),
        "meta": base_meta,
    }
    if marks.marked:
        props.update(marks.as_props())
    return document_node(request, props), prepared


def document_node(request: RetainInput | PutChunksInput, props: dict[str, Any]) -> NodeWrite:
    """The document node of a Retain or PutChunks request (type ``document`` and the key as title by
    default), holding ``props``."""
    return NodeWrite(
        namespace=request.namespace,
        natural_key=request.natural_key,
        node_type=request.type or DEFAULT_TYPE,
        title=request.title or request.natural_key,
        source_path=request.source_path,
        origin="agent",
        props=props,
    )


def chunk_meta(
    meta: Mapping[str, Any], scopes: Sequence[str], marks: PiiMarks | None = None
) -> dict[str, Any]:
    """Chunk meta: the request's consumer tags plus ``scopes`` (when there are any) and the node's
    personal data marks ``pii`` / ``pii_categories`` (when it has any)."""
    out = dict(meta)
    if scopes:
        out["scopes"] = list(scopes)
    if marks is not None and marks.marked:
        out.update(marks.as_props())
    return out
