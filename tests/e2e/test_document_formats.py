"""Conversion fidelity, page citations and retrieval on real documents: a sample of the docs vault's
pages converted to PDF, DOCX, HTML and EPUB with pandoc and LibreOffice (tests/document_corpus.py), so
the expected text of every file is its Markdown. Each file is retained through the real service.

* fidelity: the fraction of the Markdown's words found in the converted text (GetSource content), over
  the sample: >= 0.97 for PDF and DOCX, >= 0.99 for HTML and EPUB;
* pages: a chunk cited "p. N" holds words of page N as another PDF library (pypdf) reads that page (a
  chunk cited "pp. N–N+1", a paragraph over a page break, words of the two pages);
* retrieval: the docs-vault sentence search (a distinctive sentence per document, hit@5) on the PDF,
  DOCX and HTML versions within 0.02 of the Markdown versions.

bench/bench_documents.py runs the same over the whole vault (398 pages).
"""

from __future__ import annotations

import io
import re
from collections import Counter
from collections.abc import Iterator

import grpc
import pypdf
import pytest

from memory_service_grpc_client.memory.v1 import document_service_pb2
from memory_service_grpc_client.memory.v1 import document_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import source_service_pb2
from memory_service_grpc_client.memory.v1 import source_service_pb2_grpc
from tests.document_corpus import CorpusDocument
from tests.document_corpus import build
from tests.document_corpus import distinctive_sentences
from tests.document_corpus import markdown_words
from tests.document_corpus import recovered
from tests.document_corpus import tools_missing
from tests.document_corpus import vault_pages
from tests.document_corpus import words

SAMPLE = 16
TYPES = {
    "md": "text/markdown",
    "pdf": "application/pdf",
    "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "html": "text/html",
    "epub": "application/epub+zip",
}
TARGETS = {"pdf": 0.97, "docx": 0.97, "html": 0.99, "epub": 0.99}
MARKDOWN_LINK = re.compile(r"\[([^\]]*)\]\([^()\s]*\)")
CITED_PAGES = re.compile(r"(?P<name>.+), pp?\. (?P<first>\d+)(?:–(?P<last>\d+))?")


@pytest.fixture(scope="module")
def corpus() -> list[CorpusDocument]:
    assert tools_missing() == [], "install the Debian packages pandoc and libreoffice-writer-nogui"
    return build(vault_pages(SAMPLE))


@pytest.fixture(scope="module")
def retained(corpus: list[CorpusDocument], ingest_channel: grpc.Channel) -> Iterator[str]:
    """Every format of every sample page retained, each format in a namespace of its own."""
    stub = document_service_pb2_grpc.DocumentServiceStub(ingest_channel)
    prefix = "formats-" + __import__("uuid").uuid4().hex[:8]
    for document in corpus:
        for fmt, media_type in TYPES.items():
            path = document.markdown if fmt == "md" else document.files[fmt]
            response = stub.Retain(
                document_service_pb2.RetainRequest(
                    namespace=f"{prefix}-{fmt}",
                    natural_key=f"doc:{document.key}",
                    original=path.read_bytes(),
                    media_type=media_type,
                    source_path=f"{document.key}.{fmt}",
                ),
                timeout=300,
            )
            assert response.chunk_count >= 1
    yield prefix


def _content(channel: grpc.Channel, namespace: str, key: str) -> str:
    stub = source_service_pb2_grpc.SourceServiceStub(channel)
    return stub.GetSource(
        source_service_pb2.GetSourceRequest(namespace=namespace, natural_key=key), timeout=30
    ).source.content


def test_fidelity_per_format(
    corpus: list[CorpusDocument], retained: str, query_channel: grpc.Channel
) -> None:
    scores: dict[str, float] = {}
    for fmt in TARGETS:
        expected_total = found_total = 0.0
        for document in corpus:
            expected = markdown_words(document.markdown.read_text("utf-8"))
            got = words(_content(query_channel, f"{retained}-{fmt}", f"doc:{document.key}"))
            total = sum(expected.values())
            expected_total += total
            found_total += recovered(expected, got) * total
        scores[fmt] = found_total / expected_total
    print("fidelity", {fmt: round(score, 4) for fmt, score in scores.items()})
    assert all(scores[fmt] >= target for fmt, target in TARGETS.items()), scores


def test_page_citations_match_the_pages(
    corpus: list[CorpusDocument], retained: str, query_channel: grpc.Channel
) -> None:
    search = retrieval_service_pb2_grpc.RetrievalServiceStub(query_channel)
    checked = 0
    for document in corpus[:10]:
        reader = pypdf.PdfReader(io.BytesIO(document.files["pdf"].read_bytes()))
        page_words = [words(page.extract_text() or "") for page in reader.pages]
        for key, sentence in distinctive_sentences([document]):
            hits = search.Search(
                retrieval_service_pb2.SearchRequest(namespace=f"{retained}-pdf", query=sentence, top_k=3),
                timeout=30,
            ).hits
            for hit in hits:
                if hit.node_key != f"doc:{key}":
                    continue
                cited = CITED_PAGES.fullmatch(hit.provenance.citation)
                assert cited and cited["name"] == f"{key.rsplit('/', 1)[-1]}.pdf", hit.provenance.citation
                first = int(cited["first"])
                last = int(cited["last"] or first)
                assert 1 <= first <= last <= min(first + 1, len(reader.pages))
                # the cited page (or the two of a paragraph over a page break), as pypdf reads it, holds the
                # chunk's words
                # (its text as printed: a link's target is in the PDF's link annotation, not on the page)
                printed = MARKDOWN_LINK.sub(r"\1", hit.text)
                assert recovered(words(printed), sum(page_words[first - 1 : last], Counter())) >= 0.9, (
                    hit.provenance.citation,
                    hit.text[:200],
                )
                checked += 1
    assert checked >= 5


def test_sentence_search_on_pdf_docx_and_html_is_within_two_points_of_markdown(
    corpus: list[CorpusDocument], retained: str, query_channel: grpc.Channel
) -> None:
    search = retrieval_service_pb2_grpc.RetrievalServiceStub(query_channel)
    probes = distinctive_sentences(corpus)
    assert len(probes) >= SAMPLE * 3 // 4
    rates = {}
    for fmt in ("md", "pdf", "docx", "html"):
        hits = 0
        for key, sentence in probes:
            response = search.Search(
                retrieval_service_pb2.SearchRequest(namespace=f"{retained}-{fmt}", query=sentence, top_k=5),
                timeout=30,
            )
            hits += f"doc:{key}" in [hit.node_key for hit in response.hits]
        rates[fmt] = hits / len(probes)
    print("hit@5", rates, "probes", len(probes))
    assert all(rates[fmt] >= rates["md"] - 0.02 for fmt in ("pdf", "docx", "html")), rates
