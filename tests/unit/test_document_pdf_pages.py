"""The PDF page layout rules (ingest_service/documents/conversion/pdf_pages.py) on lines as pdfplumber
gives them: paragraphs joined over printed lines and page breaks, running headers dropped, headings
recovered. tests/e2e/test_converted_sentences.py checks the same on real PDFs made by LibreOffice."""

from __future__ import annotations

from ingest_service.documents.conversion.pdf_pages import LIGATURES
from ingest_service.documents.conversion.pdf_pages import Line
from ingest_service.documents.conversion.pdf_pages import code_spans
from ingest_service.documents.conversion.pdf_pages import drop_running_lines
from ingest_service.documents.conversion.pdf_pages import joined
from ingest_service.documents.conversion.pdf_pages import mark_outline_headings
from ingest_service.documents.conversion.pdf_pages import mark_size_headings
from ingest_service.documents.conversion.pdf_pages import page_texts


def _page(*texts: str, size: float = 10.0, top: float = 100.0) -> list[Line]:
    """Lines 12 pt apart (one paragraph); an empty text leaves a paragraph gap instead."""
    lines, y = [], top
    for text in texts:
        if text:
            lines.append(Line(y, y + 10, text, size))
        y += 12
    return lines


def test_the_lines_of_a_paragraph_are_one_line_and_a_broken_word_is_joined() -> None:
    (page,) = page_texts([_page("A sentence that the margin", "broke in two, and a hyphen-", "ated word.")])
    assert page.markdown == "A sentence that the margin broke in two, and a hyphen-ated word."
    assert joined("soft\u00ad", "ware") == "software"
    assert joined("end.", "Next") == "end. Next"


def test_a_gap_parts_paragraphs_and_bullets_stay_items() -> None:
    (page,) = page_texts([_page("First paragraph.", "", "• one item", "• two", "items")])
    assert page.markdown == "First paragraph.\n\n- one item\n- two items"


def test_a_page_continues_the_paragraph_of_the_page_before_unless_it_ended() -> None:
    pages = page_texts(
        [
            _page("The paragraph runs on to the"),
            _page("next page, where it ends."),
            _page("A new paragraph starts here."),
            _page("lower case continues it even after a period"),
            _page("## not a heading line", "but the next page is a table"),
        ]
    )
    assert [page.continues for page in pages] == [False, True, False, True, True]
    table = [Line(100, 140, "| a | b |\n|---|---|\n| 1 | 2 |", table=True)]
    assert page_texts([_page("A page ending without a period"), table])[1].continues is False


def test_running_headers_and_folios_are_dropped() -> None:
    pages = [_page(f"The Guide {n} / 4", f"Text of page {n} that is its own.", f"{n}") for n in range(1, 5)]
    drop_running_lines(pages)
    assert [[line.text for line in page] for page in pages] == [
        [f"Text of page {n} that is its own."] for n in range(1, 5)
    ]


def test_two_pages_keep_their_edge_lines_and_a_page_its_only_line() -> None:
    pages = [_page("Same first line", "Body one."), _page("Same first line", "Body two.")]
    drop_running_lines(pages)  # two pages are too few to tell a running header from text
    assert [len(page) for page in pages] == [2, 2]
    pages = [_page(f"Page {n} of the manual describes step {n}.") for n in range(1, 6)]
    drop_running_lines(pages)
    assert [len(page) for page in pages] == [1] * 5


def test_outline_titles_mark_numbered_and_wrapped_heading_lines() -> None:
    pages = [
        _page("Contents", "1.2 Programs . . . . 3"),
        _page("1.2 Programs needed", "for development", "", "Body text of the section."),
    ]
    found = mark_outline_headings(pages, [(2, "Programs needed for development", 1), (1, "Missing", None)])
    assert found == 1
    assert [line.heading for line in pages[1]] == [2, 2, 0]
    assert [line.heading for line in pages[0]] == [0, 0]
    markdown = page_texts(pages)[1].markdown
    assert markdown == "## 1.2 Programs needed for development\n\nBody text of the section."


def test_a_page_number_above_a_numbered_title_is_no_part_of_it() -> None:
    pages = [_page("8", "", "", "4 Function reference", "", "Body text of the chapter.")]
    assert mark_outline_headings(pages, [(1, "4 Function reference", 0)]) == 1
    assert [line.heading for line in pages[0]] == [0, 1, 0]


def test_without_an_outline_larger_type_is_a_heading_by_size() -> None:
    pages = [
        _page("Title", size=20.0)
        + _page("Section", size=14.0, top=130.0)
        + _page("Body text set in the common size, long enough to be the body.", top=160.0)
    ]
    mark_size_headings(pages)
    assert [line.heading for line in pages[0]] == [1, 2, 0]


def _chars(text: str, mono: bool) -> list[dict[str, str]]:
    font = "ABCDEF+DejaVuSansMono" if mono else "ABCDEF+DejaVuSerif"
    return [{"text": letter, "fontname": font} for letter in text]


def test_monospaced_runs_are_code_spans_and_a_span_broken_by_the_margin_is_one() -> None:
    chars = _chars("see(", False) + _chars("pkg:", True)
    assert code_spans("see (pkg:", chars) == "see (`pkg:`"
    chars = _chars("x", False) + _chars("true", True) + _chars("y", False)
    assert code_spans("x true y", chars) == "x `true` y"
    assert joined("see (`pkg:`", "`true`) and") == "see (`pkg: true`) and"
    assert joined("under `--`", "`allow-scripts`") == "under `--allow-scripts`"
    # a ligature the text spells out, and a glyph given twice, still match the letters
    chars = _chars("confifig", False) + _chars("use", True)
    assert code_spans("config use", chars) == "config `use`"
    assert code_spans("other words", _chars("different", False) + _chars("x", True)) == "other words"


def test_links_to_absolute_targets_are_markdown_links() -> None:
    def chars(text: str, mono: bool, x0: float) -> list[dict[str, object]]:
        font = "DejaVuSansMono" if mono else "DejaVuSerif"
        return [
            {"text": c, "fontname": font, "x0": x0 + 5 * i, "x1": x0 + 5 * i + 4, "top": 0, "bottom": 10}
            for i, c in enumerate(text)
        ]

    line = chars("see", False, 0) + chars("libssh2", True, 20) + chars("now", False, 60)
    assert code_spans("see libssh2 now", line, [(18, 0, 56, 10, "https://www.libssh2.org/")]) == (
        "see [`libssh2`](https://www.libssh2.org/) now"
    )
    # a link whose text is its address stays text; a relative target is no address a reader can follow
    autolink = chars("athttps://a.b", False, 0)
    assert code_spans("at https://a.b", autolink, [(9, 0, 80, 10, "https://a.b")]) == "at https://a.b"
    assert joined("[original](https://g.example/p)", "[PR](https://g.example/p) interesting") == (
        "[original PR](https://g.example/p) interesting"
    )


def _fonted(*runs: tuple[str, str]) -> tuple[str, list[dict[str, str]]]:
    """A line's text and chars from (text, font) runs; spaces are gaps, not chars."""
    text = "".join(run for run, _ in runs)
    return text, [{"text": c, "fontname": font} for run, font in runs for c in run if not c.isspace()]


def test_bold_and_italic_runs_are_emphasis_and_headings_keep_only_code_spans() -> None:
    text, chars = _fonted(
        ("It ", "DejaVuSerif"),
        ("must", "DejaVuSerif-Bold"),
        (" have ", "DejaVuSerif"),
        ("one", "DejaVuSerif-Italic"),
        (" ", "DejaVuSerif"),
        ("NOT EVER.", "LiberationSerif-BoldItalic"),
    )
    assert code_spans(text, chars, emphasis=True) == "It **must** have *one* ***NOT EVER.***"
    assert code_spans(text, chars) == text  # without emphasis: as printed
    # a bold code span is bold outside, code inside; a bold bullet is no emphasis
    text, chars = _fonted(("• ", "Serif-Bold"), ("url", "Serif-Bold"), (" ", "Serif"), ("URL", "Mono"))
    assert code_spans(text, chars, emphasis=True) == "• **url** `URL`"
    text, chars = _fonted(("a ", "Serif"), ("[--otp", "DejaVuSansMono"))  # a bracket is no obstacle
    assert code_spans(text, chars) == "a `[--otp`"
    assert joined("the **protocol, hostname,**", "**and port**.") == "the **protocol, hostname, and port**."
    assert joined("`a` is *x*", "and so") == "`a` is *x* and so"


def test_a_mark_closes_before_the_spaces_even_after_a_link() -> None:
    def chars(text: str, font: str, x0: float) -> list[dict[str, object]]:
        return [
            {"text": c, "fontname": font, "x0": x0 + 5 * i, "x1": x0 + 5 * i + 4, "top": 0, "bottom": 10}
            for i, c in enumerate(text)
        ]

    line = chars("at", "Serif", 0) + chars("g.org", "Mono", 15) + chars("see", "Serif", 50)
    line += chars("C.md", "Mono", 70) + chars("for", "Serif", 100)
    text = code_spans("at g.org see C.md for", line, [(14, 0, 40, 10, "https://g.org/x")])
    assert text == "at [`g.org`](https://g.org/x) see `C.md` for"


def test_a_monospaced_line_under_text_continues_it_and_code_is_fenced() -> None:
    lines = [
        Line(100, 112, "• has `package-lock.json` or `npm-`", 12, raw="• has package-lock.json or npm-"),
        Line(114, 126, "`shrinkwrap.json`.", 12, mono=True, raw="shrinkwrap.json."),
        Line(140, 151, "$ npm ci", 11, mono=True, raw="$ npm ci"),
        Line(153, 164, "added 154 packages", 11, mono=True, raw="added 154 packages"),
    ]
    (page,) = page_texts([lines])
    assert page.markdown == (
        "- has `package-lock.json` or `npm-shrinkwrap.json`.\n\n```\n$ npm ci\nadded 154 packages\n```"
    )
    # a comment line of code is no heading, and a fence is longer than the backticks inside
    code = [Line(100, 111, "# keep ``` here", 11, mono=True), Line(113, 124, "x", 11, mono=True)]
    assert page_texts([code])[0].markdown == "````\n# keep ``` here\nx\n````"


def test_outline_titles_match_lines_whatever_their_markup_and_ligatures_are_letters() -> None:
    heading = Line(100, 112, "**Parameter:** `PoolOptions`", 14, raw="Parameter: PoolOptions")
    heading.plain = "Parameter: `PoolOptions`"
    pages = [[heading, Line(120, 132, "Body.", 10)]]
    assert mark_outline_headings(pages, [(3, "Parameter: PoolOptions", 0)]) == 1
    assert page_texts(pages)[0].markdown == "### Parameter: `PoolOptions`\n\nBody."
    text, chars = _fonted(("the ", "Serif"), ("\ufb01le", "Mono"))
    assert code_spans("the \ufb01le".translate(LIGATURES), chars) == "the `file`"
