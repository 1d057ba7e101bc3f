"""A corpus of real documents with known text: pages of the docs vault (shared/corpora/docs-vault)
converted to HTML, DOCX, EPUB (pandoc) and PDF (LibreOffice from the DOCX), so that the expected words of
every converted file are those of its Markdown. Built into a cache folder on first use.

Used by tests/e2e/test_document_formats.py and bench/bench_documents.py.
"""

from __future__ import annotations

import hashlib
import random
import re
import shutil
import subprocess
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VAULT = ROOT.parent / "shared" / "corpora" / "docs-vault"
if not VAULT.is_dir():  # a worktree sits one level deeper than a clone
    VAULT = Path("/work/shared/corpora/docs-vault")
CACHE = Path(tempfile.gettempdir()) / "memory-service-document-corpus"
NO_IMAGES = Path(__file__).resolve().parent / "data" / "pandoc_no_images.lua"
FORMATS = ("html", "docx", "epub", "pdf")
_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*", re.UNICODE)


@dataclass(frozen=True)
class CorpusDocument:
    """One vault page and its converted files.

    Attributes:
        key: the vault page's path without ``.md`` (``apt/README``).
        markdown: the page's Markdown file.
        files: the converted file per format (``"pdf"`` -> path).
    """

    key: str
    markdown: Path
    files: dict[str, Path]


def tools_missing() -> list[str]:
    """The converters of the corpus that are not installed (pandoc, soffice)."""
    return [tool for tool in ("pandoc", "soffice") if shutil.which(tool) is None]


def vault_pages(sample: int | None = None, seed: int = 20261206) -> list[Path]:
    """The vault's Markdown pages, sorted; ``sample`` of them drawn with ``seed`` when given."""
    pages = sorted(VAULT.rglob("*.md"))
    if sample is not None and sample < len(pages):
        pages = sorted(random.Random(seed).sample(pages, sample))
    return pages


def words(text: str) -> Counter[str]:
    """The words of ``text`` (letters and digits, lower case) with their counts."""
    return Counter(word.lower() for word in _WORD.findall(text))


def markdown_words(markdown: str) -> Counter[str]:
    """The words a reader sees in Markdown: the text of its rendering (markdown-it, CommonMark with
    tables), so front matter, HTML comments, link targets, reference definitions and the info strings
    of code fences do not count; code and table text do."""
    from bs4 import BeautifulSoup
    from markdown_it import MarkdownIt

    body = re.sub(r"\A---\n.*?\n(?:---|\.\.\.)\n", "", markdown, flags=re.DOTALL)
    html = MarkdownIt("commonmark").enable("table").render(body)
    return words(BeautifulSoup(html, "lxml").get_text(" "))


def recovered(expected: Counter[str], got: Counter[str]) -> float:
    """Fraction of the expected words (with multiplicity) found in ``got``."""
    total = sum(expected.values())
    if not total:
        return 1.0
    return sum(min(count, got[word]) for word, count in expected.items()) / total


SENTENCE = re.compile(r"[^.!?\n]{40,220}[.!?]")  # as the docs-vault search test draws its probes


def distinctive_sentences(documents: list[CorpusDocument], seed: int = 20261129) -> list[tuple[str, str]]:
    """(key, sentence) per document that has one: a sentence of at least 8 words of its Markdown body
    found in no other document of ``documents`` (the docs-vault sentence search's probes)."""
    texts = {d.key: d.markdown.read_text("utf-8") for d in documents}
    rng = random.Random(seed)
    return first_distinctive_sentences(texts, sorted(texts), rng)


def first_distinctive_sentences(
    texts: dict[str, str], keys: list[str], rng: random.Random, sample: int | None = None
) -> list[tuple[str, str]]:
    """(key, sentence) for the ``keys`` in their order, up to ``sample`` of them: a sentence of at least 8
    words of the key's text (below its front matter), drawn by ``rng``, found in no other of ``texts``."""
    chosen: list[tuple[str, str]] = []
    for key in keys:
        body = texts[key].split("\n---\n", 1)[-1]
        candidates = [s.strip() for s in SENTENCE.findall(body) if len(s.split()) >= 8]
        rng.shuffle(candidates)
        for sentence in candidates:
            if sum(sentence in other for other in texts.values()) == 1:
                chosen.append((key, sentence))
                break
        if len(chosen) == sample:
            break
    return chosen


def build(pages: list[Path], formats: tuple[str, ...] = FORMATS) -> list[CorpusDocument]:
    """The converted files of ``pages`` (cached by the page's hash), built with pandoc and LibreOffice.

    Raises:
        RuntimeError: a tool is missing or failed.
    """
    missing = tools_missing()
    if missing:
        raise RuntimeError(
            f"not installed: {', '.join(missing)} (Debian packages pandoc, libreoffice-writer-nogui)"
        )
    documents = []
    pdf_todo: list[tuple[Path, Path]] = []
    for page in pages:
        key = page.relative_to(VAULT).with_suffix("").as_posix()
        digest = hashlib.sha256(page.read_bytes()).hexdigest()[:16]
        folder = CACHE / digest
        folder.mkdir(parents=True, exist_ok=True)
        stem = f"{page.parent.name}-{page.stem}"  # unique in a LibreOffice batch's output folder
        files = {fmt: folder / f"{stem}.{fmt}" for fmt in formats}
        for fmt in ("html", "docx", "epub"):
            if fmt in files and not files[fmt].exists():
                _pandoc(page, files[fmt], fmt)
        if "pdf" in files and not files["pdf"].exists():
            docx = folder / f"{stem}.docx"
            if not docx.exists():
                _pandoc(page, docx, "docx")
            pdf_todo.append((docx, folder))
        documents.append(CorpusDocument(key, page, files))
    # One LibreOffice start per folder batch: starting it costs seconds, converting a page milliseconds.
    for start in range(0, len(pdf_todo), 50):
        batch = pdf_todo[start : start + 50]
        with tempfile.TemporaryDirectory() as out, tempfile.TemporaryDirectory() as profile:
            subprocess.run(
                [
                    "soffice",
                    f"-env:UserInstallation=file://{profile}",
                    "--headless",
                    "--convert-to",
                    "pdf",
                    "--outdir",
                    out,
                    *[str(docx) for docx, _ in batch],
                ],
                check=True,
                capture_output=True,
                timeout=1800,
            )
            for docx, folder in batch:
                produced = Path(out) / f"{docx.stem}.pdf"
                if not produced.exists():
                    raise RuntimeError(f"LibreOffice made no PDF of {docx}")
                shutil.move(str(produced), folder / f"{docx.stem}.pdf")
    return documents


def _pandoc(page: Path, target: Path, fmt: str) -> None:
    # Two passes: pandoc fetches the pictures of a DOCX or EPUB before a filter of the same run could drop
    # them, so the filter runs on the parsed document first (no picture fetched, none missing).
    parsed = subprocess.run(
        ["pandoc", "--from", "gfm", str(page), "--to", "json", "--lua-filter", str(NO_IMAGES)],
        check=True,
        capture_output=True,
        timeout=120,
    ).stdout
    command = ["pandoc", "--from", "json", "-o", str(target), "--standalone"]
    if fmt in ("html", "epub"):
        command += ["--metadata", f"title={page.stem}"]
    subprocess.run(command, input=parsed, check=True, capture_output=True, timeout=120)


__all__ = [
    "FORMATS",
    "CorpusDocument",
    "build",
    "distinctive_sentences",
    "first_distinctive_sentences",
    "markdown_words",
    "recovered",
    "tools_missing",
    "vault_pages",
    "words",
]
