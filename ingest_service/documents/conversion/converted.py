"""What a conversion gives: Markdown in parts that each know where they came from, and per-page status."""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field
from typing import Any

from ingest_service.documents.conversion.pdf_pages import joined

# Page status values (ConversionPage.status in the API).
PAGE_TEXT = "text"
PAGE_NO_TEXT_LAYER = "no_text_layer"
PAGE_OCR = "ocr"
PAGE_OCR_EMPTY = "ocr_empty"


@dataclass(frozen=True)
class Part:
    """A run of Markdown from one place of the original.

    Attributes:
        markdown: the text of that place, as Markdown (tables as Markdown tables).
        location: where it came from: ``{"page": 12}`` (PDF), ``{"slide": 3}`` (PPTX),
            ``{"sheet": "Q1", "cells": "A1:D20"}`` (XLSX), ``{"chapter": "ch01.xhtml"}`` (EPUB),
            ``{"message": 2}`` (MBOX); empty when the heading path is the place (HTML, DOCX, text).
        continues: the part's first paragraph continues the last paragraph of the part before (a PDF
            paragraph over a page break), so the chunker joins them.
    """

    markdown: str
    location: dict[str, Any] = field(default_factory=dict)
    continues: bool = False


@dataclass(frozen=True)
class Converted:
    """A document converted to Markdown.

    Attributes:
        media_type: the type it was converted as.
        converter: the library that made the Markdown (``"pypdf"``, ``"mammoth+markdownify"``, ...).
        converter_version: its version.
        parts: the Markdown in document order, each with its place.
        pages: per page of a PDF, ``{"page": n, "status": "text" | "no_text_layer" | "ocr" | "ocr_empty"}``.
    """

    media_type: str
    converter: str
    converter_version: str
    parts: tuple[Part, ...]
    pages: tuple[dict[str, Any], ...] = ()

    @property
    def markdown(self) -> str:
        """The whole document's Markdown: the parts joined by a blank line (into one paragraph where a part
        continues the paragraph of the part before, `pdf_pages.joined`)."""
        out = ""
        for part in self.parts:
            if part.markdown.strip():
                body = part.markdown.strip("\n")
                out = joined(out, body) if out and part.continues else (out + "\n\n" + body if out else body)
        return out

    def as_json(self) -> dict[str, Any]:
        """A JSON-able form, for the child process's answer."""
        return {
            "media_type": self.media_type,
            "converter": self.converter,
            "converter_version": self.converter_version,
            "parts": [
                {"markdown": p.markdown, "location": p.location, "continues": p.continues} for p in self.parts
            ],
            "pages": list(self.pages),
        }

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> Converted:
        """The inverse of `as_json`."""
        return cls(
            media_type=str(value["media_type"]),
            converter=str(value["converter"]),
            converter_version=str(value["converter_version"]),
            parts=tuple(
                Part(str(p["markdown"]), dict(p["location"]), bool(p.get("continues")))
                for p in value["parts"]
            ),
            pages=tuple(dict(p) for p in value.get("pages") or ()),
        )


class ConversionError(Exception):
    """The bytes cannot be converted; the message says why (shown to the caller as a field violation)."""

    def __init__(self, message: str, *, field_name: str = "original") -> None:
        super().__init__(message)
        self.field_name = field_name


__all__ = [
    "PAGE_NO_TEXT_LAYER",
    "PAGE_OCR",
    "PAGE_OCR_EMPTY",
    "PAGE_TEXT",
    "ConversionError",
    "Converted",
    "Part",
]
