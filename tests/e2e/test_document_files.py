"""Documents retained as files over real gRPC and PostgreSQL: converted on the server, the original kept
byte for byte (GetSource include_original), citations on Search hits and ContextPack items, a lying
media type and a zip bomb refused with nothing written, the service responsive during a conversion, and
DeleteNode taking the original with it."""

from __future__ import annotations

import hashlib
import threading
import time

import grpc
import psycopg
import pytest

from common.kernel.config import Settings
from memory_service_grpc_client import rpc_failure
from memory_service_grpc_client.memory.v1 import context_service_pb2
from memory_service_grpc_client.memory.v1 import context_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import document_service_pb2
from memory_service_grpc_client.memory.v1 import document_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import source_service_pb2
from memory_service_grpc_client.memory.v1 import source_service_pb2_grpc
from tests.document_files import docx_bomb
from tests.document_files import pdf
from tests.document_files import pptx
from tests.document_files import xlsx

PAGES = [
    "The pump manual covers installation and daily care.",
    None,  # a scanned page: no text layer
    "Torque the flange bolts of the centrifugal pump to 25 newton metres.",
]


def _violations(error: grpc.RpcError) -> list[tuple[str, str]]:
    return [(v.field, v.description) for v in rpc_failure(error).violations]


def _retain(
    channel: grpc.Channel, namespace: str, key: str, data: bytes, **fields: str
) -> document_service_pb2.RetainResponse:
    stub = document_service_pb2_grpc.DocumentServiceStub(channel)
    return stub.Retain(
        document_service_pb2.RetainRequest(namespace=namespace, natural_key=key, original=data, **fields),
        timeout=120,
    )


def test_a_pdf_is_converted_kept_and_cited_to_the_page(
    ingest_channel: grpc.Channel, query_channel: grpc.Channel, namespace: str
) -> None:
    data = pdf(PAGES)
    response = _retain(ingest_channel, namespace, "doc:manual", data, source_path="manuals/manual.pdf")
    assert response.created and response.chunk_count == 2
    conversion = response.conversion
    assert conversion.media_type == "application/pdf" and conversion.converter == "pdfplumber"
    assert conversion.sha256 == hashlib.sha256(data).hexdigest() and conversion.size_bytes == len(data)
    assert [(p.page, p.status) for p in conversion.pages] == [(1, "text"), (2, "no_text_layer"), (3, "text")]

    sources = source_service_pb2_grpc.SourceServiceStub(query_channel)
    source = sources.GetSource(
        source_service_pb2.GetSourceRequest(
            namespace=namespace, natural_key="doc:manual", include_original=True
        ),
        timeout=30,
    ).source
    assert source.original.data == data
    assert source.original.sha256 == conversion.sha256 and source.original.media_type == "application/pdf"
    assert source.original.converter == "pdfplumber" and source.original.converter_version
    assert list(source.original.page_status) == ["text", "no_text_layer", "text"]
    assert "flange bolts" in source.content and source.content_source == "original"
    without = sources.GetSource(
        source_service_pb2.GetSourceRequest(namespace=namespace, natural_key="doc:manual"), timeout=30
    ).source
    assert without.original.data == b"" and without.original.sha256 == conversion.sha256

    search = retrieval_service_pb2_grpc.RetrievalServiceStub(query_channel)
    hits = search.Search(
        retrieval_service_pb2.SearchRequest(namespace=namespace, query="flange bolt torque", top_k=5),
        timeout=30,
    ).hits
    assert hits[0].node_key == "doc:manual" and hits[0].provenance.citation == "manual.pdf, p. 3"

    pack = (
        context_service_pb2_grpc.ContextServiceStub(query_channel)
        .CompileContext(
            context_service_pb2.CompileContextRequest(
                namespace=namespace, query="flange bolt torque", token_budget=500
            ),
            timeout=60,
        )
        .pack
    )
    citations = [item.provenance.citation for item in pack.items if item.kind == "chunk"]
    assert "manual.pdf, p. 3" in citations

    again = _retain(ingest_channel, namespace, "doc:manual", data, source_path="manuals/manual.pdf")
    assert again.unchanged


def test_slides_and_sheets_are_cited_by_slide_and_cell_range(
    ingest_channel: grpc.Channel, query_channel: grpc.Channel, namespace: str
) -> None:
    _retain(
        ingest_channel,
        namespace,
        "doc:deck",
        pptx([("Intro", "Welcome"), ("Valves", "Gate valves seal with a wedge")]),
        source_path="deck.pptx",
    )
    _retain(
        ingest_channel,
        namespace,
        "doc:stock",
        xlsx({"Spares": [["Part", "Count"], ["Impeller gasket", 12]]}),
        source_path="stock.xlsx",
    )
    search = retrieval_service_pb2_grpc.RetrievalServiceStub(query_channel)
    deck = search.Search(
        retrieval_service_pb2.SearchRequest(namespace=namespace, query="gate valves wedge", top_k=1),
        timeout=30,
    ).hits[0]
    assert deck.provenance.citation == "deck.pptx, slide 2"
    sheet = search.Search(
        retrieval_service_pb2.SearchRequest(namespace=namespace, query="impeller gasket", top_k=1), timeout=30
    ).hits[0]
    assert sheet.provenance.citation == "stock.xlsx, sheet Spares, B2:C3"
    assert "| Impeller gasket | 12 |" in sheet.text


def test_a_lying_media_type_and_a_zip_bomb_write_nothing(
    ingest_channel: grpc.Channel, query_channel: grpc.Channel, namespace: str
) -> None:
    with pytest.raises(grpc.RpcError) as lying:
        _retain(
            ingest_channel,
            namespace,
            "doc:lie",
            pdf(["text"]),
            media_type="application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        )
    assert lying.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert _violations(lying.value) == [
        (
            "media_type",
            "declared application/vnd.openxmlformats-officedocument.wordprocessingml.document but the bytes are application/pdf",
        )
    ]
    with pytest.raises(grpc.RpcError) as bomb:
        _retain(ingest_channel, namespace, "doc:bomb", docx_bomb(600))
    assert bomb.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert _violations(bomb.value) == [
        ("original", "the zip container expands to 629145608 bytes, more than the limit of 536870912")
    ]
    with pytest.raises(grpc.RpcError) as both:
        _retain(ingest_channel, namespace, "doc:both", b"text", content="text")
    assert _violations(both.value) == [
        ("content", "must be empty when original is sent (the text is converted from it)")
    ]
    sources = source_service_pb2_grpc.SourceServiceStub(query_channel)
    for key in ("doc:lie", "doc:bomb", "doc:both"):
        with pytest.raises(grpc.RpcError) as missing:
            sources.GetSource(
                source_service_pb2.GetSourceRequest(namespace=namespace, natural_key=key), timeout=30
            )
        assert missing.value.code() == grpc.StatusCode.NOT_FOUND


def test_the_service_answers_while_a_conversion_runs_and_delete_takes_the_original(
    ingest_channel: grpc.Channel, query_channel: grpc.Channel, namespace: str, settings: Settings
) -> None:
    big = pdf([f"Page {n} of the long manual describes step {n} of the overhaul." for n in range(1, 301)])
    done: list[document_service_pb2.RetainResponse] = []
    worker = threading.Thread(target=lambda: done.append(_retain(ingest_channel, namespace, "doc:long", big)))
    worker.start()
    time.sleep(0.5)
    started = time.monotonic()
    _retain(
        ingest_channel, namespace, "doc:short", b"A short note about the overhaul.", media_type="text/plain"
    )
    answered = time.monotonic() - started
    worker.join(120)
    assert done and done[0].chunk_count >= 1
    assert answered < 30  # a second conversion ran beside the first one, not after it
    stub = document_service_pb2_grpc.DocumentServiceStub(ingest_channel)
    deleted = stub.DeleteNode(
        document_service_pb2.DeleteNodeRequest(namespace=namespace, natural_key="doc:long"), timeout=30
    )
    assert deleted.chunks_deleted == done[0].chunk_count
    with psycopg.connect(settings.database_url) as conn:
        kept = conn.execute(
            "SELECT sha256 FROM document_originals WHERE namespace = %s ORDER BY sha256", (namespace,)
        ).fetchall()
    # The PDF's bytes went with its only document; the note's stay.
    assert kept == [(hashlib.sha256(b"A short note about the overhaul.").hexdigest(),)]
    again = _retain(ingest_channel, namespace, "doc:long-again", big)
    assert again.created  # the same bytes under a new key: kept again after the first copy went
