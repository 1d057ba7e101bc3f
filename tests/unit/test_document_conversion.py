"""Document conversion in its child process: formats to Markdown with their places, media types that lie,
and hostile files (zip bomb, million-page and looping PDFs, oversize, CPU, memory and wall limits), each
refused with a precise violation or converted to a bounded result."""

from __future__ import annotations

import pytest

from common.kernel.errors import InvalidArgument
from ingest_service.documents.conversion import media_types as mt
from ingest_service.documents.conversion.conversion import DocumentConverter
from ingest_service.documents.conversion.converted_chunks import converted_chunks
from ingest_service.documents.conversion.limits import MIB
from ingest_service.documents.conversion.limits import ConversionLimits
from tests.document_files import HOSTILE_HTML
from tests.document_files import docx_bomb
from tests.document_files import looping_pdf
from tests.document_files import million_page_pdf
from tests.document_files import pdf
from tests.document_files import pptx
from tests.document_files import scanned_pdf
from tests.document_files import xlsx


def _refusal(converter: DocumentConverter, data: bytes, media_type: str = "") -> tuple[str, str]:
    with pytest.raises(InvalidArgument) as raised:
        converter.convert(data, media_type)
    (violation,) = raised.value.violations
    return violation.field, violation.description


def test_pdf_pages_are_parts_and_a_page_without_text_is_reported() -> None:
    converted = DocumentConverter().convert(pdf(["Open the valve first.", None, "Close it after use."]), "")
    assert converted.original.media_type == mt.PDF
    assert [p.location for p in converted.converted.parts] == [{"page": 1}, {"page": 3}]
    assert [p["status"] for p in converted.converted.pages] == ["text", "no_text_layer", "text"]
    chunks = converted_chunks(converted.converted, "manual.pdf", 1500)
    assert [meta["citation"] for _, _, meta in chunks] == ["manual.pdf, p. 1", "manual.pdf, p. 3"]
    assert "Close it after use." in chunks[1][1]


def test_slides_and_sheets_carry_their_place() -> None:
    deck = DocumentConverter().convert(pptx([("Intro", "Hello slide"), ("Plan", "Step two")]), "").converted
    assert deck.media_type == mt.PPTX
    assert [p.location for p in deck.parts] == [{"slide": 1}, {"slide": 2}]
    assert deck.parts[1].markdown == "## Plan\n\nStep two"
    book = DocumentConverter().convert(xlsx({"Q1": [["Part", "Qty"], ["Bolt", 4]]}), "").converted
    assert book.parts[0].location == {"sheet": "Q1", "cells": "B2:C3"}
    assert "| Part | Qty |\n|---|---|\n| Bolt | 4 |" in book.parts[0].markdown
    chunks = converted_chunks(book, "stock.xlsx", 1500)
    assert chunks[0][2]["citation"] == "stock.xlsx, sheet Q1, B2:C3"


def test_html_loses_scripts_and_trackers_and_keeps_its_table() -> None:
    markdown = DocumentConverter().convert(HOSTILE_HTML.encode(), "text/html").converted.markdown
    assert "Open the valve before starting the pump." in markdown
    assert "| Bolt M8 | 25 Nm |" in markdown
    for hostile in ("tracker", "fetch(", "secretTrackerCall", "color: red", "ads.example", "cdn.example"):
        assert hostile not in markdown


def test_a_lying_media_type_is_refused_naming_the_field() -> None:
    converter = DocumentConverter()
    assert _refusal(converter, pdf(["text"]), mt.DOCX) == (
        "media_type",
        f"declared {mt.DOCX} but the bytes are {mt.PDF}",
    )
    assert _refusal(converter, b"just text", mt.PDF) == (
        "media_type",
        f"declared {mt.PDF} but the bytes are {mt.PLAIN}",
    )
    assert _refusal(converter, pptx([("a", "b")]), mt.XLSX)[0] == "media_type"
    assert _refusal(converter, b"x", "image/png")[1].startswith("'image/png' is not converted")


def test_a_zip_bomb_is_refused_before_it_is_opened() -> None:
    bomb = docx_bomb(600)  # 600 MiB of zeros in about 600 KB
    field, description = _refusal(DocumentConverter(), bomb)
    assert field == "original"
    assert description == "the zip container expands to 629145608 bytes, more than the limit of 536870912"


def test_a_document_that_needs_too_much_memory_meets_the_memory_limit() -> None:
    # 33 MB of HTML, three million elements: the parser's tree needs far more than 300 MiB.
    page = b"<html><body>" + b"<p>word</p>" * 3_000_000 + b"</body></html>"
    limits = ConversionLimits(memory_bytes=300 * MIB)
    assert _refusal(DocumentConverter(limits), page, "text/html") == (
        "original",
        f"the conversion needed more than {300 * MIB} bytes of memory",
    )


def test_a_million_page_pdf_is_refused_by_its_declared_count() -> None:
    assert _refusal(DocumentConverter(), million_page_pdf()) == (
        "original",
        "the PDF declares 1000000 pages, more than the limit of 5000",
    )


def test_cpu_and_wall_limits_stop_a_conversion_that_runs_long() -> None:
    # Walking a million page references takes the parser seconds of CPU: with the page limit lifted,
    # the CPU-time limit (or the wall limit) ends it.
    cpu = DocumentConverter(ConversionLimits(max_pages=10**7, cpu_seconds=1, wall_seconds=60))
    assert _refusal(cpu, million_page_pdf()) == (
        "original",
        "the conversion used more than the limit of 1 s of CPU time",
    )
    wall = DocumentConverter(ConversionLimits(max_pages=10**7, cpu_seconds=60, wall_seconds=1.0))
    assert _refusal(wall, million_page_pdf()) == (
        "original",
        "the conversion took longer than the limit of 1 s",
    )


def test_a_page_tree_that_loops_gives_a_bounded_result() -> None:
    converted = DocumentConverter().convert(looping_pdf(), "").converted
    assert len(converted.pages) <= 2


def test_an_oversize_file_is_refused_before_conversion() -> None:
    big = b"%PDF-1.4\n" + b"0" * (200 * MIB)
    assert _refusal(DocumentConverter(), big) == ("original", f"at most {48 * MIB} bytes, got {len(big)}")


def test_garbage_declared_as_pdf_gets_a_precise_error() -> None:
    field, description = _refusal(DocumentConverter(), b"%PDF-1.7\n" + bytes(range(256)) * 40)
    assert field == "original"
    assert description.startswith(("not a readable PDF", "no text found"))


def test_a_scanned_page_is_reported_and_read_by_tesseract_when_ocr_is_on() -> None:
    scan = scanned_pdf(["Replace the impeller seal every year.", "Замените уплотнение крыльчатки."])
    off = DocumentConverter().convert(scan, "application/pdf").converted
    assert off.pages == ({"page": 1, "status": "no_text_layer"},) and off.markdown == ""
    on = DocumentConverter(ConversionLimits(ocr=True)).convert(scan, "application/pdf").converted
    assert on.pages == ({"page": 1, "status": "ocr"},) and on.converter == "pdfplumber+tesseract"
    assert "Replace the impeller seal every year." in on.markdown
    assert "Замените уплотнение крыльчатки." in on.markdown
    assert on.parts[0].location == {"page": 1}


def test_mail_converts_with_its_headers_and_messages() -> None:
    from email.message import EmailMessage

    message = EmailMessage()
    message["From"], message["To"], message["Subject"] = "ops@example.org", "team@example.org", "Pump outage"
    message.set_content("The pump in hall 3 stops at noon for the seal change.")
    eml = DocumentConverter().convert(message.as_bytes(), "").converted
    assert eml.media_type == mt.EML
    assert eml.markdown.startswith("## Pump outage\n\nFrom: ops@example.org")
    assert "stops at noon" in eml.markdown
    mbox = b"From ops@example.org Mon Jan  5 10:00:00 2026\n" + message.as_bytes() + b"\n"
    mbox += b"From ops@example.org Mon Jan  5 11:00:00 2026\nSubject: Back up\n\nThe pump runs again.\n"
    box = DocumentConverter().convert(mbox, "").converted
    assert box.media_type == mt.MBOX and [p.location for p in box.parts] == [{"message": 1}, {"message": 2}]
    assert "The pump runs again." in box.parts[1].markdown


def test_html_and_docx_chunks_are_cited_by_their_heading_path() -> None:
    page = b"<html><body><h1>Pump</h1><p>Intro text.</p><h2>Install</h2><p>Bolt it down.</p></body></html>"
    converted = DocumentConverter().convert(page, "text/html").converted
    chunks = converted_chunks(converted, "pump.html", 1500)
    assert [(heading, meta) for heading, _, meta in chunks] == [
        ("Pump", {"citation": "pump.html, Pump"}),
        ("Pump / Install", {"citation": "pump.html, Pump / Install"}),
    ]


def test_a_markdown_file_is_chunked_without_its_front_matter_which_stays_in_its_content() -> None:
    note = (
        b'---\ntitle: "Pump"\nnatural_key: "doc:pump"\n---\n# Pump\n\nBolt it down.\n\n---\n\nThen test it.\n'
    )
    converted = DocumentConverter().convert(note, mt.MARKDOWN).converted
    chunks = converted_chunks(converted, "pump.md", 1500)
    assert [(heading, text) for heading, text, _ in chunks] == [
        ("Pump", "# Pump\n\nBolt it down.\n\n---\n\nThen test it.")
    ]
    assert converted.markdown.startswith('---\ntitle: "Pump"')  # the node's content is the whole file
