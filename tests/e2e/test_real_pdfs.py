"""Real PDFs, made by their authors' own tool chains (DocBook through dblatex and xdvipdfmx), from Debian's
documentation packages: each retained through the real service (a sandboxed conversion child, real
PostgreSQL), its pages reported, and for hand-checked phrases the chunk that holds the phrase cites the
page the phrase is printed on (with the page before or after when the chunk is a paragraph that runs over
a page break: "pp. 14–15").

The files come from the Debian packages debian-history (``A Brief History of Debian`` in English and in
Russian, DFSG free) and maint-guide (``Debian New Maintainers' Guide``, GPL 2+); .ci/run and
``make test-documents-data`` install them when missing.
"""

from __future__ import annotations

import io
import re
import unicodedata
import uuid
from pathlib import Path

import grpc
import pypdf
import pytest

from memory_service_grpc_client.memory.v1 import document_service_pb2
from memory_service_grpc_client.memory.v1 import document_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2_grpc

HISTORY_EN = Path("/usr/share/doc/debian-history/docs/project-history.en.pdf")
HISTORY_RU = Path("/usr/share/doc/debian-history/docs/project-history.ru.pdf")
MAINT_GUIDE = Path("/usr/share/doc/maint-guide/maint-guide.en.pdf")
PACKAGES = {HISTORY_EN: "debian-history", HISTORY_RU: "debian-history", MAINT_GUIDE: "maint-guide"}

# Phrase -> the physical page (from 1, as a PDF viewer counts) it is printed on. Verified by hand: each
# page was read with `pdftotext -layout -f N -l N FILE -` (poppler-utils 22.02, debian-history 2.28,
# maint-guide 1.2.53) and the phrase picked from it; then every page of the file was extracted the same
# way to check that the phrase (whitespace collapsed) is on that page and on no other. The printed folio
# differs from the physical page (page 8 of the English history is folio "2 / 21"): citations count
# physical pages.
PHRASES: dict[Path, dict[str, int]] = {
    HISTORY_EN: {
        "Bruce Perens led Debian from April 1996 until December 1997": 8,
        "Hartmut Koptein started the first port for": 12,
        "Debian 5.0 (lenny) was released February 14th, 2009": 16,
        "the first DebConf in Asia": 20,
        "Ray Dassen (jdassen) died on May 18th": 24,
        "Frans Pop (fjp) died on August 20th": 24,
    },
    HISTORY_RU: {
        "Брюс Пиренс возглавлял Debian с апреля 1996 по декабрь 1997": 8,
        "Разработка Debian была начата в августе 1993 Иэном Мэрдоком": 12,
        "Debian 4.0 (etch) был выпущен 8 апреля, 2007": 16,
        "The seventh DebConf, Debconf6 was held in Oaxtepec, Mexico": 16,
        "Debian 11.0 (Bullseye) was released August 14th, 2021": 22,
    },
    MAINT_GUIDE: {
        "The most important package to install on your development system is the build-essential package": 9,
        "fabricando fit faber (practice makes perfect)": 15,
        "Now you have a series of patches.": 22,
        "Newer dh_make generates a very simple but powerful default rules file using the dh command": 30,
        "The ucf package provides a conffile-like handling infrastructure": 41,
        "This process can be automated using the uupdate(1) command as follows": 55,
    },
}


def _flat(text: str) -> str:
    """The text a reader sees: whitespace collapsed, compatibility forms folded (the ``ﬁ`` ligature of a
    TeX font is ``fi``), code-span backticks and emphasis marks dropped and links reduced to their text (a
    chunk's Markdown marks the book's monospaced words as code, its bold and italic words as emphasis and
    its links as links)."""
    text = re.sub(r"\[([^\]]*)\]\([^()\s]*\)", r"\1", unicodedata.normalize("NFKC", text))
    return " ".join(text.replace("`", "").replace("*", "").split())


@pytest.fixture(scope="module")
def retained(ingest_channel: grpc.Channel) -> dict[Path, tuple[str, document_service_pb2.RetainResponse]]:
    """Each PDF retained in a namespace of its own: path -> (namespace, response)."""
    missing = [f"{path} (Debian package {PACKAGES[path]})" for path in PHRASES if not path.exists()]
    assert not missing, f"install the documentation packages (make test-documents-data): {missing}"
    stub = document_service_pb2_grpc.DocumentServiceStub(ingest_channel)
    out = {}
    for path in PHRASES:
        namespace = "realpdf-" + uuid.uuid4().hex[:10]
        response = stub.Retain(
            document_service_pb2.RetainRequest(
                namespace=namespace,
                natural_key=f"doc:{path.name}",
                original=path.read_bytes(),
                media_type="application/pdf",
                source_path=f"debian/{path.name}",
            ),
            timeout=600,
        )
        out[path] = (namespace, response)
    return out


@pytest.mark.parametrize("path", list(PHRASES), ids=lambda p: p.name)
def test_the_pdf_converts_with_every_page_reported(
    path: Path, retained: dict[Path, tuple[str, document_service_pb2.RetainResponse]]
) -> None:
    _, response = retained[path]
    page_count = len(pypdf.PdfReader(io.BytesIO(path.read_bytes())).pages)  # another library's count
    assert response.conversion.media_type == "application/pdf"
    assert response.conversion.converter.startswith("pdfplumber")
    assert [page.page for page in response.conversion.pages] == list(range(1, page_count + 1))
    # born-digital books: every page has a text layer, none was left to OCR
    assert {page.status for page in response.conversion.pages} == {"text"}
    assert response.chunk_count >= page_count // 2


@pytest.mark.parametrize("path", list(PHRASES), ids=lambda p: p.name)
def test_the_chunk_holding_a_phrase_cites_its_page(
    path: Path,
    retained: dict[Path, tuple[str, document_service_pb2.RetainResponse]],
    query_channel: grpc.Channel,
) -> None:
    namespace, _ = retained[path]
    search = retrieval_service_pb2_grpc.RetrievalServiceStub(query_channel)
    for phrase, page in PHRASES[path].items():
        hits = search.Search(
            retrieval_service_pb2.SearchRequest(namespace=namespace, query=phrase, top_k=10), timeout=60
        ).hits
        holding = [hit for hit in hits if _flat(phrase) in _flat(hit.text)]
        assert holding, (phrase, [hit.provenance.citation for hit in hits])
        for hit in holding:
            assert hit.node_key == f"doc:{path.name}"
            # one page, or the two pages of a paragraph that runs over the page break
            assert hit.provenance.citation in (
                f"{path.name}, p. {page}",
                f"{path.name}, pp. {page - 1}–{page}",
                f"{path.name}, pp. {page}–{page + 1}",
            ), (phrase, hit.text[:300])
