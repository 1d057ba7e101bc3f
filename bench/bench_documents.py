"""Documents as files: conversion speed and fidelity per format, next to the embedding model's own
throughput on the same text, and the docs-vault sentence search on the PDF and DOCX versions.

The corpus is the docs vault's pages converted to HTML, DOCX, EPUB (pandoc) and PDF (LibreOffice from the
DOCX) by tests/document_corpus.py, so the expected words of every file are those of its Markdown.

Measured in one run:

* per format, every file converted as the service converts it (`DocumentConverter`: a child process
  with limits per file): documents/s, MB/s of input, and the word recovery (fraction of the Markdown's
  rendered words found in the converted text; word-weighted over the set, and the worst file);
* the embedding model (the configured provider) on the chunks of the same converted text, cut as the
  server cuts them: documents/s, MB/s of text and texts/s, in the same run;
* with ``--candidates``: the converters not chosen, in this process, on the same files (PDF: pypdf,
  pdfminer.six, pypdfium2; HTML: html2text, trafilatura), for docs/decisions/0040-document-converters.md;
* with ``--retrieval``: the Markdown, PDF, DOCX, HTML and EPUB versions retained through real service
  processes in an empty database, and a distinctive sentence per page searched (hit@5) in each.

Results: printed and written to bench/results/documents-<UTC time>.json.

Usage: ``.venv/bin/python bench/bench_documents.py [--sample N] [--candidates] [--retrieval]
[--shared-database]`` (needs pandoc and LibreOffice; ``--retrieval`` needs the database: ``make db``).
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.service_results import load_average
from bench.service_results import machine
from bench.service_results import tree_commit
from common.kernel.config import Settings
from common.storage.chunks.store import embedding_input
from ingest_service.documents.conversion import media_types as mt
from ingest_service.documents.conversion.conversion import DocumentConverter
from ingest_service.documents.conversion.converted_chunks import converted_chunks
from ingest_service.documents.conversion.formats import convert
from ingest_service.documents.conversion.limits import ConversionLimits
from tests.document_corpus import FORMATS
from tests.document_corpus import CorpusDocument
from tests.document_corpus import build
from tests.document_corpus import distinctive_sentences
from tests.document_corpus import markdown_words
from tests.document_corpus import recovered
from tests.document_corpus import vault_pages
from tests.document_corpus import words

TYPES = {"pdf": mt.PDF, "docx": mt.DOCX, "html": mt.HTML, "epub": mt.EPUB}
MB = 1_000_000


def _pdf_pypdf(data: bytes) -> str:
    import pypdf

    return "\n".join(page.extract_text() or "" for page in pypdf.PdfReader(io.BytesIO(data)).pages)


def _pdf_pdfminer(data: bytes) -> str:
    from pdfminer.high_level import extract_text

    return str(extract_text(io.BytesIO(data)))


def _pdf_pdfium(data: bytes) -> str:
    import pypdfium2

    document = pypdfium2.PdfDocument(data)
    try:
        return "\n".join(page.get_textpage().get_text_range() for page in document)
    finally:
        document.close()


def _html_html2text(data: bytes) -> str:
    import html2text

    converter = html2text.HTML2Text()
    converter.body_width = 0
    return str(converter.handle(data.decode("utf-8")))


def _html_trafilatura(data: bytes) -> str:
    import trafilatura

    return trafilatura.extract(data.decode("utf-8"), output_format="markdown", include_tables=True) or ""


def _chosen(media_type: str) -> Callable[[bytes], str]:
    return lambda data: convert(data, media_type, ConversionLimits()).markdown


CANDIDATES: dict[str, dict[str, Callable[[bytes], str]]] = {
    "pdf": {
        "pdfplumber (chosen)": _chosen(mt.PDF),
        "pypdf": _pdf_pypdf,
        "pdfminer.six": _pdf_pdfminer,
        "pypdfium2": _pdf_pdfium,
    },
    "html": {
        "bs4+markdownify (chosen)": _chosen(mt.HTML),
        "html2text": _html_html2text,
        "trafilatura": _html_trafilatura,
    },
}


def _fidelity(expected: list[Any], texts: list[str]) -> dict[str, float]:
    total = found = 0.0
    worst = 1.0
    for want, text in zip(expected, texts):
        score = recovered(want, words(text))
        weight = sum(want.values())
        total += weight
        found += score * weight
        worst = min(worst, score)
    return {"recovery": round(found / total, 4), "worst_file": round(worst, 4)}


def measure_formats(
    corpus: list[CorpusDocument],
    settings: Settings,
    formats: list[str],
    results: dict[str, Any],
    save: Callable[[], None],
) -> dict[str, Any]:
    """Per format: the service's conversion (child process per file) and the model on its chunks;
    ``results`` is filled and ``save`` called after each format."""
    from common.text_models.embeddings.factory import build_embedding_provider

    provider = build_embedding_provider(settings)
    provider.encode_passages(["warm-up: the model loads on first use, not in the first format's time"])
    converter = DocumentConverter()
    expected = [markdown_words(d.markdown.read_text("utf-8")) for d in corpus]
    for fmt in formats:
        media_type = TYPES[fmt]
        files = [d.files[fmt].read_bytes() for d in corpus]
        started = time.perf_counter()
        converted = [converter.convert(data, media_type).converted for data in files]
        seconds = time.perf_counter() - started
        texts = [c.markdown for c in converted]
        inputs = [
            [
                embedding_input(d.key, heading, text)
                for heading, text, _ in converted_chunks(c, d.key, settings.chunk_max_chars)
            ]
            for d, c in zip(corpus, converted)
        ]
        flat = [text for batch in inputs for text in batch]
        started = time.perf_counter()
        for batch in range(0, len(flat), 128):
            provider.encode_passages(flat[batch : batch + 128])
        model_seconds = time.perf_counter() - started
        text_bytes = sum(len(t.encode("utf-8")) for t in flat)
        results[fmt] = {
            "files": len(files),
            "input_mb": round(sum(map(len, files)) / MB, 3),
            "conversion_seconds": round(seconds, 2),
            "conversion_documents_per_s": round(len(files) / seconds, 2),
            "conversion_mb_per_s": round(sum(map(len, files)) / MB / seconds, 3),
            **_fidelity(expected, texts),
            "model_texts": len(flat),
            "model_seconds": round(model_seconds, 2),
            "model_documents_per_s": round(len(files) / model_seconds, 2),
            "model_mb_per_s": round(text_bytes / MB / model_seconds, 3),
            "model_texts_per_s": round(len(flat) / model_seconds, 1),
            "load_average": load_average(),
        }
        print(fmt, json.dumps(results[fmt]), flush=True)
        save()
    return results


def measure_candidates(corpus: list[CorpusDocument]) -> dict[str, Any]:
    """Every candidate converter in this process on the same files: recovery and seconds per file."""
    expected = [markdown_words(d.markdown.read_text("utf-8")) for d in corpus]
    results: dict[str, Any] = {}
    for fmt, candidates in CANDIDATES.items():
        files = [d.files[fmt].read_bytes() for d in corpus]
        for name, run in candidates.items():
            started = time.perf_counter()
            texts = [run(data) for data in files]
            seconds = time.perf_counter() - started
            results[f"{fmt}: {name}"] = {
                **_fidelity(expected, texts),
                "seconds_per_file": round(seconds / len(files), 3),
            }
            print(fmt, name, json.dumps(results[f"{fmt}: {name}"]), flush=True)
    return results


def measure_retrieval(
    corpus: list[CorpusDocument], arguments: argparse.Namespace, out: dict[str, Any], save: Callable[[], None]
) -> dict[str, Any]:
    """hit@5 of a distinctive sentence per page, on the Markdown, PDF, DOCX, HTML and EPUB versions, each
    in a namespace of its own; ``out`` is filled and ``save`` called after each version."""
    import grpc

    from bench.run_bench import run_in_database
    from bench.run_bench import services
    from memory_service_grpc_client.memory.v1 import document_service_pb2
    from memory_service_grpc_client.memory.v1 import document_service_pb2_grpc
    from memory_service_grpc_client.memory.v1 import retrieval_service_pb2
    from memory_service_grpc_client.memory.v1 import retrieval_service_pb2_grpc

    formats = {
        fmt: media_type
        for fmt, media_type in {"md": mt.MARKDOWN, **TYPES}.items()
        if fmt in arguments.retrieval_formats.split(",")
    }
    probes = distinctive_sentences(corpus)
    out["probes"] = len(probes)

    def run(args: argparse.Namespace, stamp: str) -> int:
        with services() as (ingest_addr, query_addr):
            ingest = document_service_pb2_grpc.DocumentServiceStub(grpc.insecure_channel(ingest_addr))
            search = retrieval_service_pb2_grpc.RetrievalServiceStub(grpc.insecure_channel(query_addr))
            for fmt, media_type in formats.items():
                started = time.perf_counter()
                for document in corpus:
                    path = document.markdown if fmt == "md" else document.files[fmt]
                    ingest.Retain(
                        document_service_pb2.RetainRequest(
                            namespace=f"bench-{fmt}",
                            natural_key=f"doc:{document.key}",
                            original=path.read_bytes(),
                            media_type=media_type,
                            source_path=f"{document.key}.{fmt}",
                        ),
                        timeout=600,
                    )
                retain_seconds = time.perf_counter() - started
                hits = 0
                missed = []
                started = time.perf_counter()
                for key, sentence in probes:
                    found = search.Search(
                        retrieval_service_pb2.SearchRequest(
                            namespace=f"bench-{fmt}", query=sentence, top_k=5
                        ),
                        timeout=60,
                    ).hits
                    found_it = f"doc:{key}" in [hit.node_key for hit in found]
                    hits += found_it
                    if not found_it:
                        missed.append(key)
                search_seconds = time.perf_counter() - started
                out[fmt] = {
                    "hit_at_5": round(hits / len(probes), 4),
                    "retain_seconds": round(retain_seconds, 1),
                    "retain_documents_per_s": round(len(corpus) / retain_seconds, 2),
                    "retain_mb_per_s": round(
                        sum(
                            (d.markdown if fmt == "md" else d.files[fmt]).stat().st_size for d in corpus
                        )
                        / MB
                        / retain_seconds,
                        3,
                    ),
                    "search_seconds_per_query": round(search_seconds / len(probes), 3),
                    "load_average": load_average(),
                    "missed": missed,  # the pages whose sentence was not in the top 5
                }
                if "md" in out and fmt != "md":
                    out[fmt]["hit_at_5_minus_md"] = round(out[fmt]["hit_at_5"] - out["md"]["hit_at_5"], 4)
                print("retrieval", fmt, json.dumps(out[fmt]), flush=True)
                save()
        return 0

    run_in_database(run, arguments, "bench_documents")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sample", type=int, help="pages of the vault drawn at random (default: all 398)")
    parser.add_argument("--candidates", action="store_true", help="also measure the converters not chosen")
    parser.add_argument(
        "--retrieval", action="store_true", help="also run the sentence search (needs the database)"
    )
    parser.add_argument("--shared-database", action="store_true", help="use CB_DATABASE_URL itself")
    parser.add_argument(
        "--formats", default="pdf,docx,html,epub", help="formats converted and embedded (pdf,docx,html,epub)"
    )
    parser.add_argument(
        "--retrieval-formats",
        default="md,pdf,docx,html,epub",
        help="versions searched (md,pdf,docx,html,epub)",
    )
    parser.add_argument("--note", default="", help="a note kept with the results")
    parser.add_argument(
        "--parallel",
        action="store_true",
        help="run the sentence search beside the conversion figures (shorter run; both share the CPU)",
    )
    parser.add_argument("--only-retrieval", action="store_true", help="skip the conversion and model figures")
    arguments = parser.parse_args()
    settings = Settings()
    started = time.perf_counter()
    # --only-retrieval converts only the versions it searches (the Markdown needs no conversion).
    searched = arguments.retrieval_formats.split(",")
    needed = tuple(fmt for fmt in FORMATS if fmt in searched) if arguments.only_retrieval else FORMATS
    corpus = build(vault_pages(arguments.sample), formats=needed)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    results: dict[str, Any] = {
        "time": stamp,
        "commit": tree_commit(ROOT),
        "machine": machine(),
        "pages": len(corpus),
        "corpus_build_seconds": round(time.perf_counter() - started, 1),
        "embedding_provider": settings.embedding_provider,
        "note": arguments.note,
        "parallel": arguments.parallel,
    }
    path = ROOT / "bench" / "results" / f"documents-{stamp}.json"
    path.parent.mkdir(parents=True, exist_ok=True)

    lock = threading.Lock()

    def save() -> None:  # after every step, so a run cut short still leaves what it measured
        with lock:
            for _ in range(5):  # the other thread may add a figure while this one serialises
                try:
                    text = json.dumps(results, indent=2) + "\n"
                    break
                except RuntimeError:
                    time.sleep(0.1)
            path.write_text(text)

    retrieval = None
    if arguments.retrieval:
        results["retrieval"] = {}
        retrieval = threading.Thread(
            target=measure_retrieval, args=(corpus, arguments, results["retrieval"], save), daemon=True
        )
        if arguments.parallel:
            retrieval.start()
    if not arguments.only_retrieval:
        results["formats"] = {}
        measure_formats(corpus, settings, arguments.formats.split(","), results["formats"], save)
    if arguments.candidates:
        results["candidates"] = measure_candidates(corpus)
    if retrieval is not None:
        if not arguments.parallel:
            retrieval.start()
        retrieval.join()
    save()
    print(f"written bench/results/documents-{stamp}.json")
    print("retrieval probes", results.get("retrieval", {}).get("probes"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
