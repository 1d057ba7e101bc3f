"""`cb retain` and `cb ingest` of a folder of mixed formats (Markdown, PDF, PPTX, XLSX, HTML, text) against
the real services: every file becomes a document, an unchanged file is found unchanged by the original's
hash, a changed one is converted again and a removed one is swept."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import grpc
from typer.testing import CliRunner

from memory_service_grpc_client.memory.v1 import source_service_pb2
from memory_service_grpc_client.memory.v1 import source_service_pb2_grpc
from memory_service_tools.cli import app
from tests.document_files import HOSTILE_HTML
from tests.document_files import pdf
from tests.document_files import pptx
from tests.document_files import xlsx


def _folder(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "guide.md").write_text("# Guide\n\nStart with the manual.\n", "utf-8")
    (root / "manuals").mkdir()
    (root / "manuals" / "pump.pdf").write_bytes(
        pdf(["Prime the pump before the first start.", "Check the seal weekly."])
    )
    (root / "deck.pptx").write_bytes(pptx([("Overview", "Quarterly maintenance plan")]))
    (root / "stock.xlsx").write_bytes(xlsx({"Spares": [["Part", "Count"], ["Seal kit", 3]]}))
    (root / "page.html").write_bytes(HOSTILE_HTML.encode())
    (root / "notes.txt").write_text("Plain notes about the pump.", "utf-8")
    (root / "picture.png").write_bytes(b"\x89PNG\r\n\x1a\n")  # not a document format: not sent
    return root


def _source(channel: grpc.Channel, namespace: str, key: str) -> Any:
    stub = source_service_pb2_grpc.SourceServiceStub(channel)
    return stub.GetSource(
        source_service_pb2.GetSourceRequest(namespace=namespace, natural_key=key), timeout=30
    ).source


def test_cb_ingest_of_a_mixed_folder(
    tmp_path: Path, ingest_host: Any, query_channel: grpc.Channel, namespace: str
) -> None:
    root = _folder(tmp_path / "vault")

    def run(*args: str) -> dict[str, Any]:
        result = CliRunner().invoke(
            app,
            [
                "--ingest-addr",
                f"127.0.0.1:{ingest_host.port}",
                "ingest",
                str(root),
                "--namespace",
                namespace,
                "--json",
                *args,
            ],
        )
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    first = run()
    assert first["counts"]["documentsNew"] == 6, first
    pump = _source(query_channel, namespace, "doc:manuals/pump.pdf")
    assert "Prime the pump" in pump.content and pump.original.media_type == "application/pdf"
    assert "Seal kit" in _source(query_channel, namespace, "doc:stock.xlsx").content
    again = run()
    assert again["counts"]["documentsUnchanged"] == 6 and again["counts"].get("chunksEmbedded", 0) == 0
    (root / "deck.pptx").write_bytes(pptx([("Overview", "Yearly maintenance plan")]))
    (root / "notes.txt").unlink()
    changed = run()
    assert changed["counts"]["documentsChanged"] == 1 and changed["counts"]["documentsSwept"] == 1
    assert "Yearly" in _source(query_channel, namespace, "doc:deck.pptx").content


def test_cb_retain_of_a_mixed_folder(
    tmp_path: Path, ingest_host: Any, query_channel: grpc.Channel, namespace: str
) -> None:
    root = _folder(tmp_path / "docs")
    result = CliRunner().invoke(
        app,
        [
            "--ingest-addr",
            f"127.0.0.1:{ingest_host.port}",
            "retain",
            str(root),
            "--namespace",
            namespace,
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["created"] == 6 and summary["failed"] == 0, summary
    page = _source(query_channel, namespace, "doc:page.html")
    assert "Open the valve" in page.content and "tracker" not in page.content


def test_a_file_that_cannot_be_converted_is_rejected_with_its_violation(
    tmp_path: Path, ingest_host: Any, namespace: str
) -> None:
    root = tmp_path / "vault"
    root.mkdir()
    (root / "guide.md").write_text("# Guide\n\nText.\n", "utf-8")
    (root / "fake.pdf").write_bytes(b"PK\x03\x04 this is no PDF")
    result = CliRunner().invoke(
        app,
        [
            "--ingest-addr",
            f"127.0.0.1:{ingest_host.port}",
            "ingest",
            str(root),
            "--namespace",
            namespace,
            "--json",
        ],
    )
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)
    rejected = [d for d in report["documents"] if d.get("status") == "VAULT_DOCUMENT_STATUS_REJECTED"]
    assert [d["path"] for d in rejected] == ["fake.pdf"]
    assert rejected[0]["detail"] == "media_type: declared application/pdf but the bytes are application/zip"
    assert report["counts"]["documentsNew"] == 1 and not report.get("swept")


def test_the_cli_shows_the_page_and_writes_the_original_back(
    tmp_path: Path, ingest_host: Any, query_host: Any, namespace: str
) -> None:
    root = _folder(tmp_path / "docs")
    addresses = [
        "--ingest-addr",
        f"127.0.0.1:{ingest_host.port}",
        "--query-addr",
        f"127.0.0.1:{query_host.port}",
    ]

    def cb(*args: str) -> Any:
        return CliRunner().invoke(app, [*addresses, *args, "--namespace", namespace])

    assert cb("retain", str(root)).exit_code == 0
    hits = cb("search", "Prime the pump before the first start", "--top-k", "1")
    assert hits.exit_code == 0 and "pump.pdf, p. 1" in hits.stdout, hits.output
    copy = tmp_path / "copy.pdf"
    written = cb("source", "doc:manuals/pump.pdf", "--original", str(copy))
    assert written.exit_code == 0, written.output
    assert copy.read_bytes() == (root / "manuals" / "pump.pdf").read_bytes()
    assert "Prime the pump" in written.stdout  # the Markdown still goes to standard output
    none = cb("source", "doc:guide", "--original", str(tmp_path / "none"))
    assert none.exit_code == 1 and not (tmp_path / "none").exists()
    assert "doc:guide was stored as text, not converted from a file" in none.stderr
