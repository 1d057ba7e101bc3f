"""The text of a text file's bytes, decoded the one way the server and the command line share
(docs/how-to/documents.md, "Formats")."""

from __future__ import annotations

# UTF-8 (a byte-order mark dropped), then cp1251, the legacy Windows code page of Russian text; latin-1
# last, since it decodes every byte.
TEXT_ENCODINGS = ("utf-8-sig", "cp1251", "latin-1")


class NotText(ValueError):
    """Bytes that are no text file (they hold NUL bytes: a binary file under a text file's name)."""


def decode_text(data: bytes) -> str:
    """``data`` decoded with the first of `TEXT_ENCODINGS` that takes it."""
    for encoding in TEXT_ENCODINGS[:-1]:
        try:
            return data.decode(encoding)
        except UnicodeDecodeError:
            continue
    return data.decode(TEXT_ENCODINGS[-1])


def markdown_text(data: bytes) -> str:
    """The text of a Markdown file: `decode_text`, after refusing bytes that cannot be text.

    Raises:
        NotText: ``data`` holds NUL bytes (for example a PDF or DOCX named ``*.md``).
    """
    if b"\x00" in data:
        raise NotText("not text: the file holds NUL bytes (a binary file under a Markdown name?)")
    return decode_text(data)


__all__ = ["TEXT_ENCODINGS", "NotText", "decode_text", "markdown_text"]
