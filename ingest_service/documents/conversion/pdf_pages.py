"""A PDF's pages as Markdown that reads like the document, not like its print layout.

pdfplumber gives lines with their position and fonts; this module turns them into page texts that the
chunker can cut as it cuts Markdown (docs/decisions/0040-document-converters.md):

* running headers and footers (the same line, numbers aside, at the top or bottom of many pages: a
  book's title and folio "2 / 21") are dropped, so they neither enter the text nor part a paragraph that
  runs over a page break;
* headings are recovered: from the PDF's outline (bookmarks) where it has one, matched to the lines that
  carry the titles, else from font sizes larger than the body's; a heading becomes an ATX heading, so
  the chunker cuts sections and keeps the heading path as it does for Markdown;
* words in a monospaced font inside a line of text become code spans, words in a bold or italic font
  emphasis (``**bold**``, ``*italic*``, as the HTML converter writes them), as the source wrote them;
  a heading keeps its code spans but not the bold of its type; ligatures (``ﬁ``) are their letters;
* the lines of a paragraph are joined into one line (a word broken by a hyphen at a line's end is
  joined whole), as the paragraph's source had it: a sentence that wrapped at the page's margin is then
  found verbatim, as in the Markdown, HTML or DOCX of the same text; lines set in a monospaced font
  (code) keep their breaks in a fenced code block, unless such a line runs on from a line of text
  without a gap (a code span the margin wrapped);
* a page whose first paragraph continues the last one of the page before is marked (`PageText.continues`),
  so the chunker joins the paragraph instead of cutting it at the page break.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# A vertical gap between two lines larger than this share of a line's height starts a new paragraph.
PARAGRAPH_GAP = 0.5
# Two letters further apart than this fraction of their font size are two words. pdfplumber's default, a
# fixed 3 pt, glues the words of TeX-made PDFs (dvipdfmx, pdfTeX), whose spaces are gaps, not characters.
WORD_GAP_RATIO = 0.15
# A line at the top or bottom of at least this many pages (and this share of them), numbers aside, is a
# running header or footer.
RUNNING_MIN_PAGES = 3
RUNNING_MIN_SHARE = 0.2
# Without an outline, a line whose characters are this much larger than the body text's is a heading.
HEADING_SIZE_RATIO = 1.15
HEADING_MAX_CHARS = 200
# A paragraph ends with one of these (closing quotes and brackets aside); a page ending otherwise
# continues on the next.
_SENTENCE_END = re.compile(r"[.!?:;…][\"'”’»)\]]*$")
_DIGITS = re.compile(r"\d+")
# A heading's number before its title, which outlines often leave out: "1.2", "A.4", "Chapter 3".
_NUMBERING = re.compile(
    r"^(?:(?:chapter|appendix|part|section)\s+)?(?:\d+|[a-z])(?:\.\d+)*\.?\s+", re.IGNORECASE
)
# A line broken after a hyphen inside a word: "pack-" + "age", "command-" + "line" (the hyphen kept: the
# text cannot tell a hyphenated word from a compound; a soft hyphen is dropped).
_HYPHENATED = re.compile(r"(?:[^\W\d_]|-)[-\u2010\u00ad]$")
# Font names of monospaced faces (code): DejaVuSansMono, Courier and URW's NimbusMonL, LiberationMono,
# TeX's cmtt/lmtt, Consolas, Menlo, Monaco.
# A list item's first line: a bullet glyph (made a Markdown "-") or a number; it starts a line of its own.
_BULLETS = "•◦▪▫‣⁃●○■□∙·"
_BULLET = re.compile(rf"^\s*[{_BULLETS}]\s*")
_NUMBERED = re.compile(r"^\s*(?:\d{1,3}|[a-z])[.)]\s")
_ABSOLUTE = re.compile(r"(?:https?|ftp|mailto):", re.IGNORECASE)
# A link whose text is its target, and two halves of a link the margin broke.
_AUTOLINK = re.compile(r"\[([^\]]+)\]\(\1\)")
_BROKEN_LINK = re.compile(r"\]\(([^()\s]+)\) \[([^\]]*)\]\(\1\)")
_MONOSPACED = re.compile(
    r"mono|courier|nimbusmon|cmtt|lmtt|typewriter|consol|code|menlo|monaco", re.IGNORECASE
)
# Font names of bold and italic faces: DejaVuSerif-Bold, LiberationSans-BoldItalic, Arial-BoldMT, TeX's
# cmbx (bold extended), cmti (text italic) and cmsl (slanted).
_BOLD = re.compile(r"bold|black|heavy|cmbx", re.IGNORECASE)
_ITALIC = re.compile(r"italic|oblique|cmti|cmsl|lmri", re.IGNORECASE)
# The Unicode ligatures (ﬀ ﬁ ﬂ ﬃ ﬄ ﬅ ﬆ) as their letters: a reader searches "file", not "ﬁle".
LIGATURES = {code: unicodedata.normalize("NFKC", chr(code)) for code in range(0xFB00, 0xFB07)}


@dataclass
class Line:
    """A text line or a table of a page, top to bottom.

    Attributes:
        top: distance of its top from the page's top, in points.
        bottom: distance of its bottom from the page's top.
        text: its text as Markdown (a table: the whole Markdown table): code spans, emphasis, links.
        size: the commonest character size of the line (0 for a table).
        table: whether it is a table.
        heading: 1..6 once recognised as a heading, else 0.
        mono: whether most of its characters are in a monospaced font (code).
        raw: its text as printed, without Markdown (``text`` when not given): a line of code, and what
            titles and running headers are matched against.
        plain: its text as a heading (``text`` when not given): code spans and links, no emphasis (a
            heading's bold is its style, not the author's).
    """

    top: float
    bottom: float
    text: str
    size: float = 0.0
    table: bool = False
    heading: int = 0
    mono: bool = False
    raw: str = ""
    plain: str = ""

    def __post_init__(self) -> None:
        self.raw = self.raw or self.text
        self.plain = self.plain or self.text


@dataclass(frozen=True)
class PageText:
    """The Markdown of one page and whether its first paragraph continues the page before's last one."""

    markdown: str
    continues: bool


def _links(page: Any) -> list[tuple[float, float, float, float, str]]:
    """The page's links to absolute addresses (x0, top, x1, bottom, target); a relative target is the
    PDF writer's rewrite of the source's, not a place a reader can follow."""
    out = []
    for link in getattr(page, "hyperlinks", None) or ():
        target = str(link.get("uri") or "")
        if _ABSOLUTE.match(target):
            out.append((link["x0"], link["top"], link["x1"], link["bottom"], target))
    return out


def _target(char: dict[str, Any], links: Sequence[tuple[float, float, float, float, str]]) -> str:
    x = (float(char.get("x0", 0.0)) + float(char.get("x1", 0.0))) / 2
    y = (float(char.get("top", 0.0)) + float(char.get("bottom", 0.0))) / 2
    inside = (target for x0, top, x1, bottom, target in links if x0 <= x <= x1 and top <= y <= bottom)
    return next(inside, "")


def page_lines(page: Any, markdown_table: Any) -> list[Line]:
    """The lines of a pdfplumber page in reading order, its ruled tables as Markdown tables in their
    place (``markdown_table`` renders the rows of one)."""
    tables = page.find_tables()
    outside = page
    for table in tables:
        outside = outside.outside_bbox(table.bbox)
    links = _links(page)
    lines = [
        Line(
            table.bbox[1],
            table.bbox[3],
            markdown_table(table.extract(x_tolerance_ratio=WORD_GAP_RATIO)).strip(),
            table=True,
        )
        for table in tables
    ]
    for line in outside.extract_text_lines(x_tolerance_ratio=WORD_GAP_RATIO) or []:
        chars = line.get("chars") or ()
        sizes = Counter(round(float(char.get("size", 0.0)), 1) for char in chars)
        size = sizes.most_common(1)[0][0] if sizes else 0.0
        monospaced = sum(bool(_MONOSPACED.search(str(char.get("fontname", "")))) for char in chars)
        mono = monospaced >= 0.9 * len(chars) > 0  # a line of code; a few code words are code spans
        raw = str(line["text"]).translate(LIGATURES)
        text = code_spans(raw, chars, links, emphasis=True)
        plain = code_spans(raw, chars, links)
        lines.append(Line(line["top"], line["bottom"], text, size, mono=mono, raw=raw, plain=plain))
    lines.sort(key=lambda line: line.top)
    return [line for line in lines if line.text.strip()]


def _emphasis(fontname: str) -> str:
    """The Markdown emphasis of a font: ``***`` bold italic, ``**`` bold, ``*`` italic, else ``""``."""
    bold, italic = bool(_BOLD.search(fontname)), bool(_ITALIC.search(fontname))
    return "*" * (2 * bold + italic)


def code_spans(
    text: str,
    chars: Sequence[dict[str, Any]],
    links: Sequence[tuple[float, float, float, float, str]] = (),
    emphasis: bool = False,
) -> str:
    """``text`` (a line of ``chars``) with its runs in a monospaced font as Markdown code spans, as the
    document's source wrote them (``see `config` for more``); ``text`` as it is when its letters cannot
    be matched to those of ``chars``, or it holds a backtick. Runs inside ``links`` (absolute targets)
    become Markdown links, ``[text](target)``, unless their text is the target. With ``emphasis``, runs
    in a bold or italic font become ``**bold**``, ``*italic*`` or ``***both***``. Links hold emphasis,
    emphasis holds code spans."""
    glyphs: list[tuple[str, bool, str, str]] = []
    for char in chars:
        glyph = str(char.get("text", "")).translate(LIGATURES)
        font = str(char.get("fontname", ""))
        mono = bool(_MONOSPACED.search(font))
        target = _target(char, links) if links else ""
        stress = _emphasis(font) if emphasis else ""
        if glyph and glyph in _BULLETS:  # a list's bullet is no word of the text, whatever its font
            mono, stress = False, ""
        glyphs += [(letter, mono, target, stress) for letter in glyph if not letter.isspace()]
    if not any(mono or target or stress for _, mono, target, stress in glyphs) or "`" in text:
        return text
    # The text's letters against the glyphs' (a ligature can come as the ligature and its letters too,
    # which the text has once): each letter takes the next glyph that is that letter, a few at most ahead.
    flags: list[tuple[bool, str, str]] = []
    at = 0
    for letter in "".join(text.split()):
        near = range(at, min(at + 4, len(glyphs)))
        ahead = next((index for index in near if glyphs[index][0] == letter), None)
        if ahead is None:
            return text
        flags.append(glyphs[ahead][1:])
        at = ahead + 1
    out: list[str] = []

    def close(mark: str) -> None:  # before the spaces that end the run
        spaces = 0
        while spaces < len(out) and out[len(out) - 1 - spaces].isspace():
            spaces += 1
        out.insert(len(out) - spaces, mark)

    index, open_span, open_link, open_stress = 0, False, "", ""
    for letter in text:
        if letter.isspace():
            out.append(letter)
            continue
        mono, target, stress = flags[index]
        # a change closes the marks inside the one that changes, innermost first, and opens them again
        if target != open_link or stress != open_stress or mono != open_span:
            if open_span and (mono != open_span or target != open_link or stress != open_stress):
                close("`")
                open_span = False
            if open_stress and (stress != open_stress or target != open_link):
                close(open_stress)
                open_stress = ""
            if open_link and target != open_link:
                close(f"]({open_link})")
            if target and target != open_link:
                out.append("[")
            open_link = target
            if stress and stress != open_stress:
                out.append(stress)
                open_stress = stress
            if mono and not open_span:
                out.append("`")
                open_span = True
        out.append(letter)
        index += 1
    if open_span:
        out.append("`")
    if open_stress:
        out.append(open_stress)
    if open_link:
        out.append(f"]({open_link})")
    return _AUTOLINK.sub(r"\1", "".join(out))


def _running_key(text: str) -> str:
    return _DIGITS.sub("#", " ".join(text.split())).casefold()


def drop_running_lines(pages: list[list[Line]]) -> None:
    """Removes, in place, the first and last lines of pages that repeat (numbers aside) at the top or
    bottom of at least `RUNNING_MIN_PAGES` pages and `RUNNING_MIN_SHARE` of them; a page's only line
    is kept (a document of one-line pages has no running header)."""
    edges: Counter[str] = Counter()
    for lines in pages:
        text_lines = [line for line in lines if not line.table]
        if len(text_lines) >= 2:  # a page's only line is its text, whatever repeats
            edges.update({_running_key(line.raw) for line in text_lines[:1] + text_lines[-1:]})
    needed = max(RUNNING_MIN_PAGES, RUNNING_MIN_SHARE * len(pages))
    running = {key for key, count in edges.items() if count >= needed}
    if not running:
        return
    for lines in pages:
        for index in (0, -1):
            if len(lines) >= 2 and not lines[index].table and _running_key(lines[index].raw) in running:
                del lines[index]


def _plain(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text).split()).casefold()


def outline_titles(pdf: Any) -> list[tuple[int, str, int | None]]:
    """(level, title, page index or None) of the PDF's outline entries in order; ``[]`` without one or
    when it cannot be read (a broken outline costs the headings, not the conversion)."""
    document = pdf.doc
    try:
        if "Outlines" not in document.catalog:
            return []
        page_of = {page.page_obj.pageid: index for index, page in enumerate(pdf.pages)}
        out = []
        for level, title, dest, action, _ in document.get_outlines():
            out.append((int(level), str(title or ""), _outline_page(document, dest, action, page_of)))
        return out
    except Exception:  # noqa: BLE001 - pdfminer raises many private error types for broken outlines
        return []


def _outline_page(document: Any, dest: Any, action: Any, page_of: dict[int, int]) -> int | None:
    from pdfminer.pdftypes import resolve1

    try:
        if dest is None and action is not None:
            action = resolve1(action)
            dest = action.get("D") if isinstance(action, dict) else None
        dest = resolve1(dest)
        if isinstance(dest, (bytes, str)) or hasattr(dest, "name"):
            name = dest if isinstance(dest, (bytes, str)) else dest.name
            dest = resolve1(document.get_dest(name))
        if isinstance(dest, dict):
            dest = resolve1(dest.get("D"))
        if isinstance(dest, list) and dest:
            target = dest[0]
            objid = getattr(target, "objid", None)
            return page_of.get(objid) if objid is not None else None
    except Exception:  # noqa: BLE001 - an unresolvable destination: the title is matched on any later page
        return None
    return None


def _titled(text: str, title: str) -> bool:
    """Whether ``text`` is the (plain) ``title``, with or without a number before it."""
    text = _plain(text)
    return text == title or _NUMBERING.sub("", text, count=1) == title


def mark_outline_headings(pages: list[list[Line]], titles: Sequence[tuple[int, str, int | None]]) -> int:
    """Marks the lines that carry the outline's titles as headings of the outline's level (in document
    order: each title is looked for after the previous one found, on its page when the outline says
    which); a title wrapped over two lines marks both. Returns how many titles were found."""
    flat = [(number, line) for number, lines in enumerate(pages) for line in lines if not line.table]
    cursor = found = 0
    for level, title, page in titles:
        wanted = _plain(title)
        if not wanted:
            continue
        for index in range(cursor, len(flat)):
            number, line = flat[index]
            if page is not None and number < page:
                continue
            if page is not None and number > page:
                break
            span = 0
            if _titled(line.raw, wanted):
                span = 1
            elif index + 1 < len(flat) and flat[index + 1][0] == number:
                after = flat[index + 1][1].raw
                # a wrapped title is two lines neither of which is the title alone: a page number above
                # "4 Function reference" reads "8 4 Function reference", numbered like a heading
                wrapped = not _titled(after, wanted) and _titled(line.raw + " " + after, wanted)
                span = 2 if wrapped else 0
            if span:
                for _, marked in flat[index : index + span]:
                    marked.heading = min(max(level, 1), 6)
                cursor = index + span
                found += 1
                break
    return found


def mark_size_headings(pages: list[list[Line]]) -> None:
    """Marks as headings the short lines set larger than the body text (the commonest size by characters);
    the largest size is level 1, the next level 2, and so on."""
    sizes: Counter[float] = Counter()
    for lines in pages:
        for line in lines:
            if not line.table:
                sizes[line.size] += len(line.raw)
    if not sizes:
        return
    body = sizes.most_common(1)[0][0]
    candidates = [
        line
        for lines in pages
        for line in lines
        if not line.table and line.size >= body * HEADING_SIZE_RATIO and len(line.raw) <= HEADING_MAX_CHARS
    ]
    ranked = sorted({line.size for line in candidates}, reverse=True)
    levels = {size: rank for rank, size in enumerate(ranked, 1)}
    for line in candidates:
        line.heading = min(levels[line.size], 6)


def _continues(previous: list[Line], lines: list[Line]) -> bool:
    """Whether the first line of ``lines`` continues the paragraph that ends ``previous``."""
    if not previous or not lines:
        return False
    last, first = previous[-1], lines[0]
    if last.table or first.table or last.heading or first.heading or last.mono or first.mono:
        return False  # a code block over the page break is two blocks, each fenced
    text = first.raw.lstrip()
    return not _SENTENCE_END.search(last.raw.rstrip()) or (text[:1].isalpha() and text[:1].islower())


def joined(text: str, line: str) -> str:
    """``line`` appended to the paragraph ``text``: after a space, or directly after a hyphen that
    broke a word (a soft hyphen dropped)."""
    text, line = text.rstrip(), line.lstrip()
    if text.endswith("`") and line.startswith("`") and text[:-1].rstrip("`"):
        # a code span the margin broke: one span again ("`--`" + "`allow`" is "`--allow`")
        inner = joined(text[:-1], line[1:])
        return inner
    closing = len(text) - len(text.rstrip("*"))
    if 0 < closing <= 3 and len(line) - len(line.lstrip("*")) == closing and text[:-closing].strip():
        # emphasis the margin broke: "**two**" + "**lines**" is "**two lines**"
        if not text[-closing - 1].isspace() and not line[closing : closing + 1].isspace():
            return joined(text[:-closing], line[closing:])
    if _HYPHENATED.search(text) and (line[:1].isalpha() or line[:1] == "-"):
        return (text.removesuffix("\u00ad")) + line
    return _BROKEN_LINK.sub(r" \2](\1)", f"{text} {line}")


def _fenced(code: str) -> str:
    """``code`` as a fenced code block, its fence longer than any run of backticks inside it."""
    fence = "`" * max(3, 1 + max((len(run) for run in re.findall(r"`+", code)), default=0))
    return f"{fence}\n{code}\n{fence}"


def page_texts(pages: list[list[Line]]) -> list[PageText]:
    """The Markdown of each page: paragraphs apart (a blank line where the gap between two lines exceeds
    half a line's height), headings as ATX headings and tables as Markdown tables, each its own block;
    lines of code as printed, in a fenced code block."""
    out = []
    previous: list[Line] = []
    for lines in pages:
        blocks: list[str] = []
        last: Line | None = None
        last_code = False
        for line in lines:
            height = max(line.bottom - line.top, 1.0)
            near = last is not None and line.top - last.bottom <= PARAGRAPH_GAP * height
            prose = last is not None and near and not (last.heading or last.table or last_code)
            # a monospaced line right under a line of text is a code span the margin wrapped, not code
            code = line.mono and not (prose or line.heading or line.table)
            if last_code and not code:
                blocks[-1] = _fenced(blocks[-1])  # the code block ends
            if line.heading:
                if last is not None and last.heading == line.heading and near and len(blocks) >= 2:
                    blocks[-2] += " " + line.plain.strip()  # the next line of a wrapped heading
                else:
                    blocks += ["", "#" * line.heading + " " + line.plain.strip(), ""]
            elif line.table:
                blocks += ["", line.text, ""]
            elif prose and not code:
                if _BULLET.match(line.raw) or _NUMBERED.match(line.raw):
                    blocks[-1] += "\n" + _BULLET.sub("- ", line.text)  # the next item of a list
                else:
                    blocks[-1] = joined(blocks[-1], line.text)  # the next line of the same paragraph
            elif code and last_code:
                blocks[-1] += ("\n" if near else "\n\n") + line.raw  # the next line of the code block
            else:
                if last is not None and (not near or last.heading or last.table or last_code):
                    blocks.append("")
                if code:  # fenced, as its source had it: a "# comment" line is no heading
                    blocks += ["", line.raw]
                else:
                    blocks.append(_BULLET.sub("- ", line.text))
            last, last_code = line, code
        if last_code:
            blocks[-1] = _fenced(blocks[-1])
        markdown = re.sub(r"\n{3,}", "\n\n", "\n".join(blocks)).strip("\n")
        out.append(PageText(markdown, _continues(previous, lines)))
        if lines:
            previous = lines
    return out


__all__ = [
    "LIGATURES",
    "PARAGRAPH_GAP",
    "WORD_GAP_RATIO",
    "Line",
    "PageText",
    "code_spans",
    "drop_running_lines",
    "joined",
    "mark_outline_headings",
    "mark_size_headings",
    "outline_titles",
    "page_lines",
    "page_texts",
]
