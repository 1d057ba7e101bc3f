"""Markdown-aware chunking of document bodies (markdown-it-py, CommonMark plus GFM tables).

A document is cut into sections at its top-level headings (ATX ``#`` and setext ``===``/``---``);
headings inside block quotes or list items, and ``#`` lines inside code blocks, do not cut. Each
section is then packed, block by block, into chunks of at most ``max_chars`` characters:

* A chunk is made of whole top-level blocks (paragraph, fenced or indented code, table, list, block
  quote, HTML block, thematic break), never part of one. A block longer than ``max_chars`` becomes a
  chunk of its own, oversized; ``max_chars`` is therefore a soft bound.
* ``Chunk.text`` is the exact source text of its lines, sliced from the input with the line ranges
  (``Token.map``) that markdown-it reports; nothing is re-rendered. Only blank lines at the start and
  whitespace at the end of a chunk are trimmed. Lines that belong to no block (blank lines, link
  reference definitions) stay with the block above them.
* ``Chunk.heading`` is the heading *path* of the section: the texts of the enclosing headings joined
  with ``" / "`` (``"Install / From source"``), as plain text (inline markup such as emphasis, code
  spans and links reduced to their text). Text before the first heading has heading ``""``. A heading
  that skips levels simply nests under the nearest shallower one.
* The first chunk of a section starts with the section's heading line(s); the following chunks of the
  same section carry the heading only in ``Chunk.heading``.
* Empty sections produce no chunk: blank text before the first heading is dropped, and a heading with
  no body of its own (for example a title directly followed by a subheading) produces no chunk; its
  line is carried into the next chunk, so that no source line is lost. A body-less heading at the very
  end of the document is appended to the last chunk (or is the only chunk of a document made of it).

Together: the chunk texts, in order, hold every non-blank line of the input exactly once.

`bounded_chunks` then gives the soft bound a hard one: it cuts pieces longer than ``hard_chars`` (one
huge code block, a file without line breaks) at line boundaries where possible.

The caller strips a leading YAML front matter block (``---`` ... ``---``) before chunking; anything that
remains, including a second ``---`` block, is treated as Markdown (a thematic break followed by a setext
heading, typically).
"""

from __future__ import annotations

import re
from collections.abc import Collection
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from markdown_it import MarkdownIt
from markdown_it.token import Token

HEADING_SEPARATOR = " / "
# A chunk longer than this (one huge code block, a file without line breaks) is cut further, at line
# boundaries where possible: full-text vectors are limited to 1 MB and embedders read a few hundred tokens.
HARD_CHUNK_CHARS = 16000
_NEWLINES = re.compile(r"\r\n?")


@dataclass(frozen=True)
class Chunk:
    r"""One chunk of a document body.

    Attributes:
        order: position of the chunk in the document, from 0, without gaps.
        heading: heading path of the chunk's section (``"A / B"``), ``""`` before the first heading.
        text: exact source text of the chunk's lines (line endings normalised to ``\n``), without
            leading blank lines or trailing whitespace; never empty.
    """

    order: int
    heading: str
    text: str


@dataclass(frozen=True)
class _Block:
    """A top-level block: lines ``[start, end)`` of the source, extended down to the next block."""

    start: int
    end: int
    heading_level: int  # 1..6 for a heading, 0 otherwise
    heading_text: str


@lru_cache(maxsize=1)
def _parser() -> MarkdownIt:
    return MarkdownIt("commonmark").enable("table")


@lru_cache(maxsize=1)
def _block_parser() -> MarkdownIt:
    """`_parser` without its inline pass: the cut reads block tokens only (their line ranges), and the
    inline pass over every paragraph was about 40% of the parse of a long episode; headings
    are parsed inline one by one (`_heading_text`)."""
    return MarkdownIt("commonmark").enable("table").disable("inline")


def _heading_text(inline: Token, env: dict[str, object]) -> str:
    """`plain_text` of a heading's inline token from `_block_parser` (its children not parsed yet): its
    content parsed inline by `_parser` with the document's ``env`` (link reference definitions), as the
    full parse would have."""
    if not inline.children:
        inline = _parser().parseInline(inline.content, env)[0]
    return plain_text(inline)


def plain_text(inline: Token) -> str:
    """Plain text of an inline token (the content of a heading): emphasis, code spans and links reduced
    to their text, whitespace collapsed; the raw inline source when that leaves nothing."""
    parts: list[str] = []
    for child in inline.children or ():
        if child.type in ("text", "code_inline", "html_inline"):
            parts.append(child.content)
        elif child.type in ("softbreak", "hardbreak"):
            parts.append(" ")
        elif child.type == "image":
            parts.append(child.content)
    text = " ".join("".join(parts).split())
    return text or " ".join(inline.content.split())


def _blocks(tokens: Sequence[Token], line_count: int, env: dict[str, object]) -> list[_Block]:
    """Top-level blocks of ``tokens`` (parsed with ``env``) whose line ranges tile ``[first block
    start, line_count)``."""
    starts: list[tuple[int, int, str]] = []
    for index, token in enumerate(tokens):
        if token.level != 0 or token.nesting == -1 or token.map is None:
            continue
        level, text = 0, ""
        if token.type == "heading_open":
            level = int(token.tag[1])
            text = _heading_text(tokens[index + 1], env)
        starts.append((token.map[0], level, text))
    blocks: list[_Block] = []
    for position, (start, level, text) in enumerate(starts):
        end = starts[position + 1][0] if position + 1 < len(starts) else line_count
        blocks.append(_Block(start, end, level, text))
    return blocks


def _trim(text: str) -> str:
    """Drop leading blank lines and trailing whitespace; keep the first line's indentation."""
    text = text.rstrip()
    while text:
        newline = text.find("\n")
        if newline == -1 or text[:newline].strip():
            break
        text = text[newline + 1 :]
    return text


@dataclass
class _Section:
    heading: str
    start: int  # first line (the heading's, if any)
    body: list[tuple[int, int]]  # line ranges of the body blocks


def _sections(blocks: Sequence[_Block], leading_end: int) -> list[_Section]:
    """Group the blocks into sections at top-level headings; text before the first heading has ``""``."""
    sections = [_Section("", 0, [(0, leading_end)] if leading_end else [])]
    path: list[tuple[int, str]] = []
    for block in blocks:
        if block.heading_level:
            while path and path[-1][0] >= block.heading_level:
                path.pop()
            path.append((block.heading_level, block.heading_text))
            sections.append(_Section(HEADING_SEPARATOR.join(name for _, name in path), block.start, []))
        else:
            sections[-1].body.append((block.start, block.end))
    return sections


def chunk_markdown(text: str, max_chars: int, cuts: Collection[int] = ()) -> list[Chunk]:
    r"""Cut a Markdown document body into chunks along its headings and block boundaries.

    Args:
        text: the document body (front matter already removed); ``\r\n`` and ``\r`` line endings are
            read as ``\n``.
        max_chars: soft upper bound of one chunk's length in characters (``Settings.chunk_max_chars``);
            a single block longer than this becomes an oversized chunk of its own.
        cuts: line numbers (from 0) where a new chunk starts when a block starts there (the pages of
            a PDF: a chunk then cites one page).

    Returns:
        The chunks in document order (``order`` 0, 1, ...); ``[]`` for a blank document.

    Raises:
        ValueError: ``max_chars`` is not positive.
    """
    if max_chars <= 0:
        raise ValueError(f"max_chars must be > 0, got {max_chars}")
    source = _NEWLINES.sub("\n", text)
    # markdown-it numbers lines by "\n" only (str.splitlines would also break on \v, \f, \u2028, ...).
    lines = source.split("\n")
    lines = [line + "\n" for line in lines[:-1]] + ([lines[-1]] if lines[-1] else [])
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    env: dict[str, object] = {}
    blocks = _blocks(_block_parser().parse(source, env), len(lines), env)
    sections = _sections(blocks, blocks[0].start if blocks else len(lines))

    def span(start: int, end: int) -> str:
        return _trim(source[offsets[start] : offsets[end]])

    ranges: list[tuple[str, int, int]] = []  # (heading, first line, end line) of each chunk
    carried_from: int | None = None  # first line of body-less headings waiting for the next chunk
    for section in sections:
        body = [(start, end) for start, end in section.body if span(start, end)]
        if not body:
            if section.heading and carried_from is None:
                carried_from = section.start
            continue
        first = section.start if carried_from is None else carried_from
        carried_from = None
        chunk_start, chunk_end = first, body[0][1]
        for start, end in body[1:]:
            if start in cuts or len(span(chunk_start, end)) > max_chars:
                ranges.append((section.heading, chunk_start, chunk_end))
                chunk_start = start
            chunk_end = end
        ranges.append((section.heading, chunk_start, chunk_end))
    if carried_from is not None:
        if ranges:
            heading, start, _ = ranges[-1]
            ranges[-1] = (heading, start, len(lines))
        else:
            ranges.append((sections[-1].heading, carried_from, len(lines)))
    return [Chunk(order, heading, span(start, end)) for order, (heading, start, end) in enumerate(ranges)]


def bounded_chunks(
    pieces: Sequence[tuple[str, str]], hard_chars: int = HARD_CHUNK_CHARS
) -> list[tuple[str, str]]:
    """Cuts (heading, text) pieces longer than ``hard_chars`` at line boundaries (or hard, inside a line).

    Returns the pieces in order, each at most ``hard_chars`` characters, none blank.
    """
    out: list[tuple[str, str]] = []
    for heading, text in pieces:
        if len(text) <= hard_chars:
            out.append((heading, text))
            continue
        current = ""
        for line in text.splitlines(keepends=True):
            while len(line) > hard_chars:
                if current.strip():
                    out.append((heading, current.rstrip()))
                current = ""
                out.append((heading, line[:hard_chars]))
                line = line[hard_chars:]
            if len(current) + len(line) > hard_chars and current.strip():
                out.append((heading, current.rstrip()))
                current = ""
            current += line
        if current.strip():
            out.append((heading, current.rstrip()))
    return [(heading, text) for heading, text in out if text.strip()]
