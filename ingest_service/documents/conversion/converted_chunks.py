"""A converted document cut into chunks by the Markdown chunker, part by part, so that no chunk spans two
pages, slides or sheets and each carries its place (``meta.location``) and citation (``meta.citation``)."""

from __future__ import annotations

from typing import Any

from common.kernel.config import Settings
from ingest_service.documents.chunking import bounded_chunks, chunk_markdown
from ingest_service.documents.conversion.citations import citation
from ingest_service.documents.conversion.conversion import DocumentConverter
from ingest_service.documents.conversion.converted import Converted
from ingest_service.documents.conversion.limits import MIB, ConversionLimits


def converted_chunks(
    converted: Converted, name: str, max_chars: int
) -> list[tuple[str, str, dict[str, Any]]]:
    """(heading, text, meta) of each chunk of ``converted``, in order; ``name`` starts each citation.

    A part's headings nest under the headings of the parts before it (a PDF page that continues a
    section keeps its heading path), so the chunker sees the whole document's outline.
    """
    out: list[tuple[str, str, dict[str, Any]]] = []
    outline = ""
    for part in converted.parts:
        text = part.markdown.strip("\n")
        if not text.strip():
            continue
        for chunk_heading, chunk_text in bounded_chunks(
            [(chunk.heading, chunk.text) for chunk in chunk_markdown(text, max_chars)]
        ):
            heading = chunk_heading or outline
            meta: dict[str, Any] = {"citation": citation(name, part.location, heading)}
            if part.location:
                meta["location"] = dict(part.location)
            out.append((heading, chunk_text, meta))
            outline = heading
    return out


def converter_of(settings: Settings) -> DocumentConverter:
    """The `DocumentConverter` with the operator's ``CB_DOCUMENT_*`` limits and OCR setting."""
    limits = ConversionLimits(
        max_bytes=settings.document_max_bytes,
        max_pages=settings.document_max_pages,
        cpu_seconds=settings.document_cpu_seconds,
        memory_bytes=settings.document_memory_mb * MIB,
        wall_seconds=settings.document_wall_seconds,
        ocr=settings.document_ocr,
        ocr_languages=settings.document_ocr_languages,
    )
    return DocumentConverter(limits, parallel=settings.document_parallel)


__all__ = ["converted_chunks", "converter_of"]
