"""A sentence of a document reads whole in its PDF, DOCX and HTML versions, as in its Markdown: real vault
pages converted by pandoc and LibreOffice (tests/document_corpus.py), retained through the real service,
and their sentences searched.

The docs-vault sentence search found fewer pages in the PDF, DOCX and HTML versions than in the Markdown
because the converted text did not hold the sentence as written: the PDF broke it at every printed line
and cut it at page breaks into two chunks, pandoc's HTML wrapped it at 72 columns, and the DOCX lost its
code spans. Here:

* a sentence that crosses a page break of the PDF (found with another PDF library, pypdf: on neither page
  alone, on the two together) is in one chunk, verbatim, cited with both pages ("x.pdf, pp. 1–2");
* every plain sentence of the Markdown (no links or emphasis; code spans kept, which the PDF's text
  gets back from its monospaced font) is verbatim in a top-5 hit of its own page in the PDF, DOCX and
  HTML versions.
"""

from __future__ import annotations

import io
import re
import uuid

import grpc
import pypdf
import pytest

from memory_service_grpc_client.memory.v1 import document_service_pb2
from memory_service_grpc_client.memory.v1 import document_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2_grpc
from tests.document_corpus import SENTENCE
from tests.document_corpus import CorpusDocument
from tests.document_corpus import build
from tests.document_corpus import tools_missing
from tests.document_corpus import vault_pages

SAMPLE = 24
TYPES = {
    "pdf": "application/pdf",
    "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "html": "text/html",
}
# Plain prose: no link, emphasis, HTML or table syntax, whose text differs from its rendering.
PLAIN = re.compile(r"[^\[\]()*_<>|#\\!]+")


def _flat(text: str) -> str:
    return " ".join(text.split())


def _plain_sentences(document: CorpusDocument) -> list[str]:
    """The Markdown body's sentences (as the sentence search draws its probes) that are plain prose of
    at least 8 words, on one source line."""
    body = document.markdown.read_text("utf-8").split("\n---\n", 1)[-1]
    out = []
    for found in SENTENCE.findall(body):
        sentence = found.strip()
        if len(sentence.split()) >= 8 and PLAIN.fullmatch(sentence) and sentence.count("`") % 2 == 0:
            out.append(sentence)
    return out


def _crossing(document: CorpusDocument) -> list[tuple[str, int]]:
    """(sentence, page) for the plain sentences of ``document`` that pypdf reads on neither page alone but
    on ``page`` and the next one together."""
    reader = pypdf.PdfReader(io.BytesIO(document.files["pdf"].read_bytes()))
    pages = [_flat(page.extract_text() or "") for page in reader.pages]
    out = []
    for sentence in _plain_sentences(document):
        flat = _flat(sentence.replace("`", ""))
        if any(flat in page for page in pages):
            continue
        for number in range(1, len(pages)):
            if flat in pages[number - 1] + " " + pages[number]:
                out.append((sentence, number))
                break
    return out


@pytest.fixture(scope="module")
def corpus() -> list[CorpusDocument]:
    assert tools_missing() == [], "install the Debian packages pandoc and libreoffice-writer-nogui"
    return build(vault_pages(SAMPLE), formats=("docx", "html", "pdf"))


@pytest.fixture(scope="module")
def retained(corpus: list[CorpusDocument], ingest_channel: grpc.Channel) -> str:
    """Every sample page retained in each format, a namespace per format; returns the prefix."""
    stub = document_service_pb2_grpc.DocumentServiceStub(ingest_channel)
    prefix = "sentences-" + uuid.uuid4().hex[:8]
    for document in corpus:
        for fmt, media_type in TYPES.items():
            stub.Retain(
                document_service_pb2.RetainRequest(
                    namespace=f"{prefix}-{fmt}",
                    natural_key=f"doc:{document.key}",
                    original=document.files[fmt].read_bytes(),
                    media_type=media_type,
                    source_path=f"{document.key}.{fmt}",
                ),
                timeout=300,
            )
    return prefix


def _hits(channel: grpc.Channel, namespace: str, query: str) -> list[retrieval_service_pb2.SearchHit]:
    search = retrieval_service_pb2_grpc.RetrievalServiceStub(channel)
    request = retrieval_service_pb2.SearchRequest(namespace=namespace, query=query, top_k=5)
    return list(search.Search(request, timeout=60).hits)


def test_a_sentence_over_a_page_break_is_one_chunk_citing_both_pages(
    corpus: list[CorpusDocument], retained: str, query_channel: grpc.Channel
) -> None:
    checked = 0
    for document in corpus:
        name = f"{document.key.rsplit('/', 1)[-1]}.pdf"  # the file name of the retained source_path
        for sentence, page in _crossing(document):
            hits = _hits(query_channel, f"{retained}-pdf", sentence)
            holding = [hit for hit in hits if hit.node_key == f"doc:{document.key}" and sentence in hit.text]
            assert holding, (document.key, sentence, [(h.provenance.citation, h.text[:300]) for h in hits])
            cited = holding[0].provenance.citation
            assert cited == f"{name}, pp. {page}–{page + 1}", (sentence, holding[0].text)
            checked += 1
    assert checked >= 2, f"only {checked} sentences of the sample cross a page break"


@pytest.mark.parametrize("fmt", list(TYPES))
def test_every_plain_sentence_is_verbatim_in_a_hit(
    fmt: str, corpus: list[CorpusDocument], retained: str, query_channel: grpc.Channel
) -> None:
    sentences = [(d.key, sentence) for d in corpus for sentence in _plain_sentences(d)[:3]]
    assert len(sentences) >= 30
    missed = []
    for key, sentence in sentences:
        hits = _hits(query_channel, f"{retained}-{fmt}", sentence)
        if not any(hit.node_key == f"doc:{key}" and sentence in hit.text for hit in hits):
            missed.append((key, sentence))
    print(fmt, "verbatim in a top-5 hit:", len(sentences) - len(missed), "of", len(sentences))
    # a few sentences are not the text a reader sees (a code span's escaped backtick, a line of a list
    # the converter numbers differently); the Markdown's own text finds them all
    assert len(missed) <= len(sentences) // 20, missed
