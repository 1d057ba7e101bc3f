"""Markdown chunker: targeted cases plus the coverage property over the real docs vault."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from ingest_service.documents.chunking import Chunk
from ingest_service.documents.chunking import chunk_markdown
from ingest_service.documents.front_matter import strip_front_matter

VAULT_FILES = 398


def _corpora_dir() -> Path | None:
    """``shared/corpora`` beside the repository (developer machines and CI), else None."""
    root = Path(__file__).resolve().parents[2]
    for candidate in (root.parent / "shared" / "corpora", Path("/work/shared/corpora")):
        if candidate.is_dir():
            return candidate
    return None


def assert_covers(source: str, chunks: list[Chunk]) -> None:
    """Every non-blank line exactly once, in order; each chunk an exact slice of the source."""
    normalised = source.replace("\r\n", "\n").replace("\r", "\n")
    want = [line.rstrip() for line in normalised.split("\n") if line.strip()]
    got = [line.rstrip() for chunk in chunks for line in chunk.text.split("\n") if line.strip()]
    assert got == want
    position = 0
    for order, chunk in enumerate(chunks):
        assert chunk.order == order
        assert chunk.text.strip()
        assert chunk.text == chunk.text.rstrip()
        found = normalised.find(chunk.text, position)
        assert found >= position, f"chunk {order} is not an exact slice of the source in order"
        position = found + len(chunk.text)


def test_heading_paths_atx_and_setext() -> None:
    source = (
        "Preamble text.\n\n"
        "Install\n=======\n\nIntro to install.\n\n"
        "From source\n-----------\n\nRun make.\n\n"
        "### Details *here*\n\nMore.\n\n"
        "## From `pip` [index](https://example.invalid)\n\npip install x\n\n"
        "# Usage\n\nUse it.\n"
    )
    chunks = chunk_markdown(source, 10_000)
    assert [c.heading for c in chunks] == [
        "",
        "Install",
        "Install / From source",
        "Install / From source / Details here",
        "Install / From pip index",
        "Usage",
    ]
    assert chunks[0].text == "Preamble text."
    assert chunks[1].text == "Install\n=======\n\nIntro to install."
    assert chunks[2].text.startswith("From source\n-----------\n")
    assert_covers(source, chunks)


def test_skipped_heading_levels_nest_under_the_nearest() -> None:
    source = "# A\n\na\n\n### C\n\nc\n\n## B\n\nb\n\n#### D\n\nd\n"
    assert [c.heading for c in chunk_markdown(source, 1000)] == ["A", "A / C", "A / B", "A / B / D"]


def test_hash_lines_inside_code_do_not_cut() -> None:
    source = (
        "# Build\n\n"
        "```sh\n# configure first\n./configure\n\n# then build\nmake\n```\n\n"
        "~~~\n## not a heading either\n~~~\n\n"
        "    # indented code\n    ## still code\n\n"
        "After.\n"
    )
    chunks = chunk_markdown(source, 10_000)
    assert len(chunks) == 1
    assert chunks[0].heading == "Build"
    assert chunks[0].text == source.rstrip()


def test_headings_inside_quotes_and_lists_do_not_cut() -> None:
    source = "# Top\n\n> # quoted heading\n> text\n\n- item\n\n  ## heading in item\n"
    chunks = chunk_markdown(source, 10_000)
    assert [c.heading for c in chunks] == ["Top"]


def test_long_section_splits_at_block_boundaries_with_same_heading() -> None:
    paragraphs = [f"Paragraph {i} " + "word " * 30 for i in range(10)]
    source = "## Long\n\n" + "\n\n".join(paragraphs) + "\n"
    chunks = chunk_markdown(source, 400)
    assert len(chunks) > 3
    assert {c.heading for c in chunks} == {"Long"}
    assert chunks[0].text.startswith("## Long\n\nParagraph 0")
    assert all(len(c.text) <= 400 for c in chunks)
    for chunk in chunks[1:]:
        assert chunk.text.startswith("Paragraph")
    assert_covers(source, chunks)


def test_huge_code_block_is_one_oversized_chunk() -> None:
    code = "\n".join(f"line {i}  # comment {i}" for i in range(500))
    source = f"# Code\n\nBefore.\n\n```python\n{code}\n```\n\nAfter.\n"
    chunks = chunk_markdown(source, 300)
    fence = [c for c in chunks if c.text.startswith("```python")]
    assert len(fence) == 1
    assert fence[0].text == f"```python\n{code}\n```"
    assert len(fence[0].text) > 300
    assert chunks[0].text == "# Code\n\nBefore."
    assert chunks[-1].text == "After."
    assert_covers(source, chunks)


def test_unclosed_fence_runs_to_the_end() -> None:
    source = "# A\n\ntext\n\n```\n# inside\n\n# still inside\n"
    chunks = chunk_markdown(source, 10)
    assert [c.heading for c in chunks] == ["A", "A"]
    assert chunks[1].text == "```\n# inside\n\n# still inside"


def test_tables_and_lists_are_never_split() -> None:
    rows = "\n".join(f"| key{i} | value {i} |" for i in range(60))
    items = "\n".join(f"- item {i}\n  continued {i}" for i in range(60))
    source = f"# Data\n\n| key | value |\n|---|---|\n{rows}\n\n{items}\n\n1. one\n2. two\n"
    chunks = chunk_markdown(source, 200)
    table = [c for c in chunks if "| key | value |" in c.text]
    assert len(table) == 1 and table[0].text.startswith("# Data\n\n| key |")
    assert table[0].text.endswith("| key59 | value 59 |")
    lists = [c for c in chunks if "- item 0" in c.text]
    assert len(lists) == 1 and lists[0].text.endswith("continued 59")
    assert_covers(source, chunks)


def test_body_less_headings_are_carried_not_dropped() -> None:
    source = "# Title\n\n## Part\n\nBody.\n\n## Empty one\n\n## Next\n\nNext body.\n\n## Trailing\n"
    chunks = chunk_markdown(source, 10_000)
    assert [(c.heading, c.text) for c in chunks] == [
        ("Title / Part", "# Title\n\n## Part\n\nBody."),
        ("Title / Next", "## Empty one\n\n## Next\n\nNext body.\n\n## Trailing"),
    ]
    assert chunk_markdown("# Only\n## Headings\n", 100) == [
        Chunk(0, "Only / Headings", "# Only\n## Headings")
    ]


def test_blank_documents_and_blank_preamble() -> None:
    assert chunk_markdown("", 100) == []
    assert chunk_markdown("\n \n\t\n", 100) == []
    assert [c.heading for c in chunk_markdown("\n\n# H\n\ntext\n", 100)] == ["H"]


def test_second_front_matter_block_in_body_does_not_crash() -> None:
    source = "---\ntitle: again\ntags: [a, b]\n---\nBody text.\n"
    chunks = chunk_markdown(source, 1000)
    assert_covers(source, chunks)
    assert chunk_markdown("---\n", 100) == [Chunk(0, "", "---")]
    assert chunk_markdown("---\n---\n---\n", 100)


def test_link_reference_definitions_are_kept() -> None:
    source = (
        "[top]: https://example.invalid/top\n\n# A\n\nSee [x][ref].\n\n[ref]: https://example.invalid/x\n"
    )
    chunks = chunk_markdown(source, 1000)
    assert chunks[0] == Chunk(0, "", "[top]: https://example.invalid/top")
    assert chunks[1].text.endswith("[ref]: https://example.invalid/x")
    assert_covers(source, chunks)


def test_heading_markup_is_read_with_the_documents_references() -> None:
    # The cut parses blocks only and each heading inline on its own: a reference link in a heading
    # resolves to its text only with the document's definitions (at the end here), and escapes and
    # entities read as the full parse reads them.
    source = (
        "# Use [the guide][guide] \\*now\\* &amp; [undefined][nowhere]\n\nBody.\n\n"
        "[guide]: https://example.invalid/guide\n"
    )
    chunks = chunk_markdown(source, 1000)
    assert chunks[0].heading == "Use the guide *now* & [undefined][nowhere]"
    assert_covers(source, chunks)


def test_russian_text_and_crlf() -> None:
    source = (
        "# Установка\r\n\r\nСкачайте пакет и запустите установщик.\r\n\r\n"
        "Сборка из исходников\r\n--------------------\r\n\r\nВыполните `make` и `make install`.\r\n"
    )
    chunks = chunk_markdown(source, 1000)
    assert [c.heading for c in chunks] == ["Установка", "Установка / Сборка из исходников"]
    assert (
        chunks[1].text == "Сборка из исходников\n--------------------\n\nВыполните `make` и `make install`."
    )
    assert_covers(source, chunks)


def test_unicode_line_separators_do_not_shift_lines() -> None:
    source = "# A\n\nfirst\u2028still first\x0cand form feed\n\n# B\n\nsecond\n"
    chunks = chunk_markdown(source, 1000)
    assert [c.text for c in chunks] == ["# A\n\nfirst\u2028still first\x0cand form feed", "# B\n\nsecond"]


def test_chunk_is_frozen_and_max_chars_validated() -> None:
    chunk = chunk_markdown("text\n", 100)[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        chunk.text = "changed"  # type: ignore[misc]
    with pytest.raises(ValueError, match="max_chars"):
        chunk_markdown("text", 0)


def test_every_vault_file_is_covered_exactly_once() -> None:
    corpora = _corpora_dir()
    assert corpora is not None, "shared/corpora is not beside the repository"
    files = sorted((corpora / "docs-vault").rglob("*.md"))
    assert len(files) == VAULT_FILES
    total = 0
    for path in files:
        body = strip_front_matter(path.read_text(encoding="utf-8"))
        chunks = chunk_markdown(body, 1500)
        try:
            assert_covers(body, chunks)
        except AssertionError as exc:
            raise AssertionError(f"{path}: {exc}") from exc
        for chunk in chunks:
            if len(chunk.text) > 1500:
                # An oversized chunk holds one block (after its section's heading lines, if any).
                blocks = [
                    token.type
                    for token in MarkdownIt("commonmark").enable("table").parse(chunk.text)
                    if token.level == 0 and token.nesting >= 0 and token.type != "heading_open"
                ]
                assert len(blocks) == 1, f"{path}: oversized chunk {chunk.order} holds {blocks}"
        total += len(chunks)
    assert total > VAULT_FILES
