"""One converter per media type: bytes to `Converted` Markdown parts with their places.

Run inside the child process of `sandbox` (these libraries parse hostile bytes); each imports its
library when called, so a child loads only what its format needs. The choices and their measured
word recovery are in docs/decisions/0040-document-converters.md.
"""

from __future__ import annotations

import email
import email.policy
import io
import mailbox
import posixpath
import re
import tempfile
import zipfile
from collections.abc import Callable
from email.message import EmailMessage
from importlib.metadata import version
from typing import Any
from xml.etree import ElementTree

from ingest_service.documents.conversion import media_types as mt
from ingest_service.documents.conversion import pdf_pages
from ingest_service.documents.conversion.converted import PAGE_NO_TEXT_LAYER
from ingest_service.documents.conversion.converted import PAGE_OCR
from ingest_service.documents.conversion.converted import PAGE_OCR_EMPTY
from ingest_service.documents.conversion.converted import PAGE_TEXT
from ingest_service.documents.conversion.converted import ConversionError
from ingest_service.documents.conversion.converted import Converted
from ingest_service.documents.conversion.converted import Part
from ingest_service.documents.conversion.limits import ConversionLimits
from ingest_service.documents.conversion.limits import check_zip
from ingest_service.documents.conversion.text_encoding import decode_text

# HTML elements whose content is never document text: scripts, styles, trackers, embedded frames, forms.
STRIPPED_ELEMENTS = (
    "script",
    "style",
    "noscript",
    "iframe",
    "frame",
    "object",
    "embed",
    "template",
    "svg",
    "canvas",
    "form",
    "link",
    "meta",
)
# A page with fewer non-blank characters than this is taken as having no text layer (a scan).
MIN_PAGE_TEXT_CHARS = 8


def _clean(text: str) -> str:
    """Text without NUL and other C0 controls the database and the chunker do not take."""
    return re.sub(r"[\x00-\x08\x0b\x0c\x0e-\x1f]", "", text)


# -- HTML ------------------------------------------------------------------------------------------


def html_to_markdown(html: str) -> str:
    """Markdown of an HTML page: scripts, styles, trackers and frames removed (BeautifulSoup), then
    markdownify with ATX headings; tables stay tables, images keep only their alt text."""
    import warnings

    from bs4 import BeautifulSoup
    from bs4 import Comment
    from bs4 import XMLParsedAsHTMLWarning
    from markdownify import MarkdownConverter

    with warnings.catch_warnings():  # EPUB chapters are XHTML; the HTML parser reads them as it should
        warnings.simplefilter("ignore", XMLParsedAsHTMLWarning)
        soup = BeautifulSoup(html, "lxml")
    for element in soup(list(STRIPPED_ELEMENTS)):
        element.decompose()
    for comment in soup.find_all(string=lambda s: isinstance(s, Comment)):
        comment.extract()
    for image in soup("img"):  # tracking pixels and remote images: keep the words, drop the fetch
        alt = image.get("alt") or ""
        image.replace_with(alt)
    body = soup.body or soup
    # wrap with no width: a paragraph's line breaks (insignificant in HTML; pandoc wraps at 72 columns)
    # become spaces, so a sentence reads as one line, as in its source. Underscores are not escaped: they
    # never emphasise inside a word (CommonMark), and ``node\\_modules`` is not the text that was written.
    markdown = MarkdownConverter(
        heading_style="ATX",
        bullets="-",
        escape_misc=False,
        escape_underscores=False,
        wrap=True,
        wrap_width=None,
    ).convert_soup(body)
    return _clean(re.sub(r"\n{3,}", "\n\n", markdown)).strip()


def convert_html(data: bytes, limits: ConversionLimits) -> Converted:
    markdown = html_to_markdown(decode_text(data))
    return Converted(mt.HTML, "markdownify", version("markdownify"), (Part(markdown),))


# -- PDF -------------------------------------------------------------------------------------------


def convert_pdf(data: bytes, limits: ConversionLimits) -> Converted:
    """Per page with pdfplumber: words in reading order, tables as Markdown tables, running headers and
    footers dropped, headings recovered (outline, else font sizes), and each page marked when its first
    paragraph continues the page before's (`pdf_pages`); a page without a text layer is reported (and
    read by Tesseract when ``limits.ocr`` is on)."""
    import pdfplumber
    from pdfminer.pdfparser import PDFSyntaxError

    parts: list[Part] = []
    pages: list[dict[str, Any]] = []
    try:
        declared = _declared_page_count(data)
        if declared > limits.max_pages:
            raise ConversionError(
                f"the PDF declares {declared} pages, more than the limit of {limits.max_pages}"
            )
        with pdfplumber.open(io.BytesIO(data)) as pdf:
            count = len(pdf.pages)
            if count > limits.max_pages:
                raise ConversionError(f"the PDF has {count} pages, more than the limit of {limits.max_pages}")
            lines = []
            for page in pdf.pages:
                lines.append(pdf_pages.page_lines(page, _markdown_table))
                page.close()
            bare = [sum(len(line.text.strip()) for line in page) < MIN_PAGE_TEXT_CHARS for page in lines]
            pdf_pages.drop_running_lines(lines)
            if not pdf_pages.mark_outline_headings(lines, pdf_pages.outline_titles(pdf)):
                pdf_pages.mark_size_headings(lines)
            texts = pdf_pages.page_texts(lines)
        for number, (page_text, no_text) in enumerate(zip(texts, bare), start=1):
            text, continues, status = page_text.markdown, page_text.continues, PAGE_TEXT
            if no_text:
                text, continues, status = "", False, PAGE_NO_TEXT_LAYER
                if limits.ocr:
                    text = _ocr_page(data, number - 1, limits.ocr_languages)
                    status = PAGE_OCR if text.strip() else PAGE_OCR_EMPTY
            pages.append({"page": number, "status": status})
            if text.strip():
                parts.append(Part(_clean(text), {"page": number}, continues=continues))
    except ConversionError:
        raise
    except (PDFSyntaxError, RecursionError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise ConversionError(f"not a readable PDF: {type(error).__name__}: {error}"[:500]) from error
    except Exception as error:  # pdfminer raises many private error types for broken files
        raise ConversionError(f"not a readable PDF: {type(error).__name__}: {error}"[:500]) from error
    converter = "pdfplumber" + ("+tesseract" if any(p["status"] == PAGE_OCR for p in pages) else "")
    return Converted(mt.PDF, converter, version("pdfplumber"), tuple(parts), tuple(pages))


def _declared_page_count(data: bytes) -> int:
    """The /Count of the PDF's root page tree (0 when absent): read before any page is walked, so a
    million-page tree is refused at once."""
    from pdfminer.pdfdocument import PDFDocument
    from pdfminer.pdfparser import PDFParser
    from pdfminer.pdftypes import resolve1

    document = PDFDocument(PDFParser(io.BytesIO(data)))
    pages = resolve1(document.catalog.get("Pages"))
    count = resolve1(pages.get("Count")) if isinstance(pages, dict) else 0
    return count if isinstance(count, int) else 0


def _markdown_table(rows: list[list[Any]]) -> str:
    """A GitHub Markdown table of ``rows`` (the first row is the header); pipes escaped."""
    cells = [[_cell(value) for value in row] for row in rows if row is not None]
    if not cells:
        return ""
    width = max(len(row) for row in cells)
    cells = [row + [""] * (width - len(row)) for row in cells]
    lines = ["| " + " | ".join(cells[0]) + " |", "|" + "---|" * width]
    lines += ["| " + " | ".join(row) + " |" for row in cells[1:]]
    return "\n\n" + "\n".join(lines) + "\n\n"


def _cell(value: Any) -> str:
    return "" if value is None else re.sub(r"\s+", " ", str(value)).replace("|", "\\|").strip()


def _ocr_page(data: bytes, index: int, languages: str) -> str:
    """Tesseract's text of page ``index`` rendered at 300 dpi (pypdfium2, which pdfplumber brings)."""
    import pypdfium2
    import pytesseract

    document = pypdfium2.PdfDocument(data)
    try:
        image = document[index].render(scale=300 / 72).to_pil()
    finally:
        document.close()
    try:
        return str(pytesseract.image_to_string(image, lang=languages))
    except pytesseract.TesseractNotFoundError as error:
        raise ConversionError("OCR is on but the tesseract program is not installed") from error


# -- Office ------------------------------------------------------------------------------------------


# Code in DOCX is a style, which mammoth's default map does not know: pandoc's ("Verbatim Char",
# "Source Code") and Word's ("HTML Code", "HTML Preformatted") code styles as code spans and blocks, so
# code reads as it does in the Markdown or HTML of the same text.
DOCX_STYLE_MAP = """
r[style-name='Verbatim Char'] => code
r[style-name='HTML Code'] => code
p[style-name='Source Code'] => pre:separator('\\n')
p[style-name='HTML Preformatted'] => pre:separator('\\n')
"""


def convert_docx(data: bytes, limits: ConversionLimits) -> Converted:
    """mammoth's semantic HTML (headings, lists, tables, code) to Markdown: the heading path is the place."""
    import mammoth

    check_zip(data, limits)
    try:
        html = mammoth.convert_to_html(io.BytesIO(data), style_map=DOCX_STYLE_MAP).value
    except (zipfile.BadZipFile, KeyError, ValueError, ElementTree.ParseError) as error:
        raise ConversionError(f"not a readable DOCX: {type(error).__name__}: {error}"[:500]) from error
    return Converted(
        mt.DOCX,
        "mammoth+markdownify",
        f"{version('mammoth')}+{version('markdownify')}",
        (Part(html_to_markdown(html)),),
    )


def convert_pptx(data: bytes, limits: ConversionLimits) -> Converted:
    """One part per slide (python-pptx): title as a heading, text frames, tables, notes."""
    from pptx import Presentation

    check_zip(data, limits)
    try:
        deck = Presentation(io.BytesIO(data))
    except (zipfile.BadZipFile, KeyError, ValueError) as error:
        raise ConversionError(f"not a readable PPTX: {type(error).__name__}: {error}"[:500]) from error
    parts = []
    for number, slide in enumerate(deck.slides, start=1):
        lines: list[str] = []
        title = slide.shapes.title
        if title is not None and title.has_text_frame and title.text_frame.text.strip():
            lines.append(f"## {title.text_frame.text.strip()}")
        for shape in slide.shapes:
            if title is not None and shape.shape_id == title.shape_id:
                continue
            if shape.has_text_frame and shape.text_frame.text.strip():
                lines.append(shape.text_frame.text.strip())
            if getattr(shape, "has_table", False) and shape.has_table:
                rows = [[cell.text for cell in row.cells] for row in shape.table.rows]
                lines.append(_markdown_table(rows).strip())
        if slide.has_notes_slide and slide.notes_slide.notes_text_frame is not None:
            notes = slide.notes_slide.notes_text_frame.text.strip()
            if notes:
                lines.append(f"Notes: {notes}")
        if lines:
            parts.append(Part(_clean("\n\n".join(lines)), {"slide": number}))
    return Converted(mt.PPTX, "python-pptx", version("python-pptx"), tuple(parts))


def convert_xlsx(data: bytes, limits: ConversionLimits) -> Converted:
    """One part per sheet (openpyxl, cached values): a Markdown table of the used range, with the range."""
    import openpyxl
    from openpyxl.utils import get_column_letter

    check_zip(data, limits)
    try:
        book = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    except (zipfile.BadZipFile, KeyError, ValueError, TypeError) as error:
        raise ConversionError(f"not a readable XLSX: {type(error).__name__}: {error}"[:500]) from error
    parts = []
    cells_seen = 0
    for sheet in book.worksheets:
        rows: list[list[Any]] = []
        first_row = last_row = 0
        first_col, last_col = 1 << 20, 0
        for row_number, row in enumerate(sheet.iter_rows(values_only=True), start=1):
            cells_seen += len(row)
            if cells_seen > limits.max_cells:
                raise ConversionError(f"the workbook has more than {limits.max_cells} cells")
            if any(value is not None and str(value).strip() for value in row):
                first_row = first_row or row_number
                last_row = row_number
                used = [i for i, value in enumerate(row, start=1) if value is not None and str(value).strip()]
                first_col, last_col = min(first_col, used[0]), max(last_col, used[-1])
            if first_row:
                rows.append(list(row))
        if not first_row:
            continue
        rows = [row[first_col - 1 : last_col] for row in rows[: last_row - first_row + 1]]
        cells = f"{get_column_letter(first_col)}{first_row}:{get_column_letter(last_col)}{last_row}"
        table = _markdown_table(rows).strip()
        parts.append(Part(_clean(f"## {sheet.title}\n\n{table}"), {"sheet": sheet.title, "cells": cells}))
    book.close()
    return Converted(mt.XLSX, "openpyxl", version("openpyxl"), tuple(parts))


# -- EPUB ------------------------------------------------------------------------------------------

_OPF = "{http://www.idpf.org/2007/opf}"
_CONTAINER = "{urn:oasis:names:tc:opendocument:xmlns:container}"


def convert_epub(data: bytes, limits: ConversionLimits) -> Converted:
    """The spine's XHTML documents in reading order (the stdlib zip and XML readers: the EPUB library on
    the index is AGPL), each converted as HTML; the chapter file is the place."""
    check_zip(data, limits)
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            container = ElementTree.fromstring(archive.read("META-INF/container.xml"))
            rootfile = container.find(f".//{_CONTAINER}rootfile")
            if rootfile is None:
                raise ConversionError("EPUB without a rootfile in META-INF/container.xml")
            opf_path = rootfile.attrib["full-path"]
            opf = ElementTree.fromstring(archive.read(opf_path))
            base = posixpath.dirname(opf_path)
            items = {
                item.attrib["id"]: item.attrib["href"]
                for item in opf.iter(f"{_OPF}item")
                if "id" in item.attrib and "href" in item.attrib
            }
            parts = []
            for ref in opf.iter(f"{_OPF}itemref"):
                href = items.get(ref.attrib.get("idref", ""))
                if href is None:
                    continue
                name = posixpath.normpath(posixpath.join(base, href))
                markdown = html_to_markdown(decode_text(archive.read(name)))
                if markdown.strip():
                    parts.append(Part(markdown, {"chapter": name}))
    except ConversionError:
        raise
    except (zipfile.BadZipFile, KeyError, ElementTree.ParseError, ValueError) as error:
        raise ConversionError(f"not a readable EPUB: {type(error).__name__}: {error}"[:500]) from error
    return Converted(mt.EPUB, "zipfile+markdownify", version("markdownify"), tuple(parts))


# -- mail and text -----------------------------------------------------------------------------------


# A forwarded message inside a forwarded message ... is followed this deep, no deeper.
ENCLOSED_DEPTH = 5


def _message_markdown(message: EmailMessage, depth: int = 0) -> str:
    """A mail as Markdown: the subject as a heading, From/To/Date lines, the body (HTML converted), the
    attachments named (by file name, else by content type), and each enclosed message (a forward,
    ``message/rfc822``) in full below it."""
    subject = str(message.get("Subject") or "(no subject)")
    lines = [f"{'#' * min(2 + depth, 6)} {subject}", ""]
    for header in ("From", "To", "Date"):
        if message.get(header):
            lines.append(f"{header}: {message.get(header)}  ")
    body = message.get_body(preferencelist=("plain", "html"))
    text = ""
    if body is not None:
        content = body.get_content()
        text = html_to_markdown(content) if body.get_content_type() == "text/html" else str(content)
    enclosed = _enclosed(message)
    attachments = [
        str(part.get_filename() or part.get_content_type())
        for part in message.iter_attachments()
        if part.get_content_type() != "message/rfc822"
    ]
    if attachments:
        lines.append(f"Attachments: {', '.join(attachments)}  ")
    out = "\n".join(lines) + "\n\n" + text.strip()
    for part in enclosed if depth < ENCLOSED_DEPTH else []:
        inner = part.get_content()
        if isinstance(inner, EmailMessage):
            out += "\n\nEnclosed message:\n\n" + _message_markdown(inner, depth + 1)
    return _clean(out)


def _enclosed(part: EmailMessage) -> list[EmailMessage]:
    """The ``message/rfc822`` parts of ``part`` (itself when it is one), not those inside them."""
    if part.get_content_type() == "message/rfc822":
        return [part]
    if part.is_multipart():
        return [found for sub in part.iter_parts() for found in _enclosed(sub)]  # type: ignore[arg-type]
    return []


def convert_eml(data: bytes, limits: ConversionLimits) -> Converted:
    message = email.message_from_bytes(data, policy=email.policy.default)
    assert isinstance(message, EmailMessage)
    return Converted(mt.EML, "email", "stdlib", (Part(_message_markdown(message)),))


def convert_mbox(data: bytes, limits: ConversionLimits) -> Converted:
    """One part per message of the mailbox (the stdlib mailbox reader needs a file)."""
    with tempfile.NamedTemporaryFile(suffix=".mbox") as handle:
        handle.write(data)
        handle.flush()
        box = mailbox.mbox(handle.name, factory=None, create=False)
        parts = []
        for number, raw in enumerate(box, start=1):
            message = email.message_from_bytes(raw.as_bytes(), policy=email.policy.default)
            assert isinstance(message, EmailMessage)
            parts.append(Part(_message_markdown(message), {"message": number}))
        box.close()
    return Converted(mt.MBOX, "mailbox", "stdlib", tuple(parts))


def convert_text(data: bytes, limits: ConversionLimits) -> Converted:
    return Converted(mt.PLAIN, "text", "stdlib", (Part(_clean(decode_text(data))),))


def convert_markdown(data: bytes, limits: ConversionLimits) -> Converted:
    return Converted(mt.MARKDOWN, "text", "stdlib", (Part(_clean(decode_text(data))),))


CONVERTERS: dict[str, Callable[[bytes, ConversionLimits], Converted]] = {
    mt.PDF: convert_pdf,
    mt.DOCX: convert_docx,
    mt.PPTX: convert_pptx,
    mt.XLSX: convert_xlsx,
    mt.EPUB: convert_epub,
    mt.HTML: convert_html,
    mt.EML: convert_eml,
    mt.MBOX: convert_mbox,
    mt.PLAIN: convert_text,
    mt.MARKDOWN: convert_markdown,
}


def convert(data: bytes, media_type: str, limits: ConversionLimits) -> Converted:
    """``data`` converted as ``media_type`` (one of `media_types.SUPPORTED`), in this process.

    Raises:
        ConversionError: the bytes cannot be read as that type, or exceed a limit.
    """
    try:
        return CONVERTERS[media_type](data, limits)
    except (ConversionError, MemoryError, RecursionError):
        raise
    except Exception as error:  # parsers of hostile bytes raise every kind of error
        raise ConversionError(
            f"not a readable {media_type} file: {type(error).__name__}: {error}"[:500]
        ) from error


__all__ = ["CONVERTERS", "STRIPPED_ELEMENTS", "convert", "html_to_markdown"]
