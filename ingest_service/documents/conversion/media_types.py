"""The media types a document may arrive as, and the true one sniffed from its bytes (magic numbers, the
entries of a zip container), so that a declared type that lies is caught before any converter runs."""

from __future__ import annotations

import io
import re
import zipfile

PDF = "application/pdf"
DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
PPTX = "application/vnd.openxmlformats-officedocument.presentationml.presentation"
XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
EPUB = "application/epub+zip"
HTML = "text/html"
EML = "message/rfc822"
MBOX = "application/mbox"
MARKDOWN = "text/markdown"
PLAIN = "text/plain"
ZIP = "application/zip"
OLE = "application/x-ole-storage"  # legacy .doc/.xls/.ppt: not converted

SUPPORTED = (PDF, DOCX, PPTX, XLSX, EPUB, HTML, EML, MBOX, MARKDOWN, PLAIN)
# Formats whose bytes carry a signature: a declared one of these must match what the bytes are.
BINARY = (PDF, DOCX, PPTX, XLSX, EPUB)
TEXTUAL = (HTML, EML, MBOX, MARKDOWN, PLAIN)

# File name extensions, for clients that pick a media type from a file name (`cb retain`, `cb ingest`).
EXTENSIONS = {
    ".pdf": PDF,
    ".docx": DOCX,
    ".pptx": PPTX,
    ".xlsx": XLSX,
    ".epub": EPUB,
    ".html": HTML,
    ".htm": HTML,
    ".xhtml": HTML,
    ".eml": EML,
    ".mbox": MBOX,
    ".md": MARKDOWN,
    ".markdown": MARKDOWN,
    ".txt": PLAIN,
}

MEDIA_TYPE_PATTERN = re.compile(r"^[a-z0-9][a-z0-9!#$&^_.+-]{0,126}/[a-z0-9][a-z0-9!#$&^_.+-]{0,126}$")
_HTML_START = re.compile(
    rb"^\s*(?:<!--.*?-->\s*)*<(?:!doctype\s+html|html|head|body)\b", re.IGNORECASE | re.DOTALL
)
_MAIL_HEADER = re.compile(rb"^(?:[A-Za-z0-9-]+:[^\r\n]*\r?\n)+", re.DOTALL)
_ZIP_KINDS = (("word/document.xml", DOCX), ("ppt/presentation.xml", PPTX), ("xl/workbook.xml", XLSX))


def normalize(media_type: str) -> str:
    """``media_type`` in lower case without parameters (``"text/html; charset=utf-8"`` -> ``"text/html"``)."""
    return media_type.split(";", 1)[0].strip().lower()


def sniff(data: bytes) -> str:
    """The media type the bytes are, by their signature; `PLAIN` for bytes without one that are text.

    Zip containers are told apart by their entries (OOXML part names, the EPUB ``mimetype`` entry);
    a zip that is none of them is `ZIP`. Only the central directory is read, nothing is decompressed
    but EPUB's 20-byte ``mimetype`` entry.
    """
    head = data[:1024]
    if head.lstrip(b"\r\n\t \x00\xef\xbb\xbf")[:5] == b"%PDF-" or b"%PDF-" in data[:1024]:
        return PDF
    if head[:4] == b"PK\x03\x04":
        return _zip_kind(data)
    if head[:8] == b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1":
        return OLE
    text = head.lstrip(b"\xef\xbb\xbf")
    if _HTML_START.match(text):
        return HTML
    if text.startswith(b"From ") and b"\n" in text:
        return MBOX
    if _MAIL_HEADER.match(text) and re.search(
        rb"^(?:From|Subject|Message-ID|Date):", text, re.IGNORECASE | re.MULTILINE
    ):
        return EML
    return PLAIN


def _zip_kind(data: bytes) -> str:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            names = set(archive.namelist())
            if "mimetype" in names:
                info = archive.getinfo("mimetype")
                if info.file_size <= 64 and archive.read(info).strip() == EPUB.encode():
                    return EPUB
            for part, kind in _ZIP_KINDS:
                if part in names:
                    return kind
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        return ZIP
    return ZIP


def resolve(declared: str, data: bytes) -> tuple[str, str]:
    """The media type to convert ``data`` as, and ``""``; or ``""`` and why ``declared`` is refused.

    Decision (docs/decisions/0040-document-converters.md): the bytes decide. A declared binary format
    (PDF, DOCX, PPTX, XLSX, EPUB) must be what the bytes are, and bytes with a binary signature must be
    declared as that format: a mismatch is refused, never converted by the other type, since a lying
    type is a client bug or an attack and silently choosing would hide both. A textual type (HTML, mail,
    Markdown, plain text) is trusted as declared when the bytes carry no binary signature, since text
    has no reliable signature. An empty declared type takes the sniffed one.
    """
    declared = normalize(declared)
    actual = sniff(data)
    if not declared:
        if actual in SUPPORTED:
            return actual, ""
        return "", f"the bytes are {actual}, which is not converted; supported: {', '.join(SUPPORTED)}"
    if declared not in SUPPORTED:
        return "", f"{declared!r} is not converted; supported: {', '.join(SUPPORTED)}"
    if (declared in BINARY or actual in BINARY or actual in (ZIP, OLE)) and declared != actual:
        return "", f"declared {declared} but the bytes are {actual}"
    return declared, ""


__all__ = [
    "BINARY",
    "DOCX",
    "EML",
    "EPUB",
    "EXTENSIONS",
    "HTML",
    "MARKDOWN",
    "MBOX",
    "MEDIA_TYPE_PATTERN",
    "PDF",
    "PLAIN",
    "PPTX",
    "SUPPORTED",
    "TEXTUAL",
    "XLSX",
    "normalize",
    "resolve",
    "sniff",
]
