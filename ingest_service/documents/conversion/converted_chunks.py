"""A converted document cut into chunks by the Markdown chunker, each chunk with its place
(``meta.location``) and citation (``meta.citation``).

Slides, sheets, chapters and messages are cut part by part: no chunk spans two of them. A PDF's pages are
joined and cut as one document, as its Markdown would be: a page break is a layout accident, not a
boundary of the text, and cutting at it parted sentences, paragraphs and sections' heading paths
(docs/decisions/0040-document-converters.md). Chunks still start at each new page except where a
paragraph runs over the page break: such a chunk cites the page it starts on and the page it ends on
("manual.pdf, pp. 4–5"), every other chunk one page ("manual.pdf, p. 4").
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Any

from common.kernel.config import Settings
from ingest_service.documents.chunking import bounded_chunks
from ingest_service.documents.chunking import chunk_markdown
from ingest_service.documents.conversion import media_types
from ingest_service.documents.conversion.citations import citation
from ingest_service.documents.conversion.conversion import DocumentConverter
from ingest_service.documents.conversion.converted import Converted
from ingest_service.documents.conversion.converted import Part
from ingest_service.documents.conversion.limits import MIB
from ingest_service.documents.conversion.limits import ConversionLimits
from ingest_service.documents.conversion.pdf_pages import joined
from ingest_service.documents.front_matter import strip_front_matter


def converted_chunks(
    converted: Converted, name: str, max_chars: int
) -> list[tuple[str, str, dict[str, Any]]]:
    """(heading, text, meta) of each chunk of ``converted``, in order; ``name`` starts each citation.

    A part's headings nest under the headings of the parts before it (a PDF page that continues a
    section keeps its heading path), so the chunker sees the whole document's outline. A Markdown file's
    leading YAML front matter is not chunked (`ingest_service.documents.front_matter`).
    """
    if any("page" in part.location for part in converted.parts):
        return _paged_chunks(converted.parts, name, max_chars)
    out: list[tuple[str, str, dict[str, Any]]] = []
    outline = ""
    for part in converted.parts:
        text = part.markdown
        if converted.media_type == media_types.MARKDOWN:
            # Its front matter is the file's metadata, not its text, as for Markdown retained as content.
            text = strip_front_matter(text)
        text = text.strip("\n")
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


def _paged_chunks(
    parts: tuple[Part, ...], name: str, max_chars: int
) -> list[tuple[str, str, dict[str, Any]]]:
    """`converted_chunks` of paged parts: the pages joined (a continued paragraph into one, else by a
    blank line) and cut as one Markdown text (so sections keep their heading path over pages), a new
    chunk at each page that does not continue a paragraph; each chunk located on the pages its text
    came from."""
    text = ""
    offsets: list[int] = []  # where each page's text starts in ``text``
    numbers: list[int] = []
    cuts: set[int] = set()  # the lines that start a page not continuing the page before
    for part in parts:
        body = part.markdown.replace("\r\n", "\n").replace("\r", "\n").strip("\n")
        if not body.strip():
            continue
        if text and part.continues:
            text = joined(text, body)  # a paragraph over the page break: one paragraph, as printed
        else:
            text += "\n\n" + body if text else body
            cuts.add(text.count("\n", 0, len(text) - len(body)))
        offsets.append(len(text) - len(body.lstrip()))
        numbers.append(int(part.location["page"]))
    out: list[tuple[str, str, dict[str, Any]]] = []
    cursor = 0
    for heading, chunk_text in bounded_chunks(
        [(chunk.heading, chunk.text) for chunk in chunk_markdown(text, max_chars, cuts)]
    ):
        start = text.find(chunk_text, cursor)  # chunk texts are slices of ``text``, in order
        if start < 0:
            start = cursor
        cursor = start + len(chunk_text)
        first = numbers[max(bisect_right(offsets, start) - 1, 0)]
        last = numbers[max(bisect_right(offsets, cursor - 1) - 1, 0)]
        location: dict[str, Any] = {"page": first}
        if last != first:
            location["last_page"] = last
        meta = {"citation": citation(name, location, heading), "location": location}
        out.append((heading, chunk_text, meta))
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
