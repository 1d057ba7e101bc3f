"""What a new user meets in the first hour, with the `cb` CLI against real servers: one Markdown file
retained on its own, and links between the documents of one folder resolved in one run."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from common.grpc.server import ServiceHost
from common.tooling.cli import app

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def cli(ingest_channel: object, query_channel: object, ingest_host: ServiceHost, query_host: ServiceHost):  # type: ignore[no-untyped-def]
    runner = CliRunner()
    addresses = ["--ingest-addr", f"127.0.0.1:{ingest_host.port}", "--query-addr", f"127.0.0.1:{query_host.port}"]

    def run(*args: str, expect: int = 0) -> str:
        result = runner.invoke(app, [*addresses, *args])
        assert result.exit_code == expect, result.output
        return result.stdout

    return run


def test_a_single_file_is_retained(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    namespace = "first-" + uuid.uuid4().hex[:8]
    note = tmp_path / "note.md"
    note.write_text("# A note\n\nThe release moved to Monday.\n", encoding="utf-8")
    summary = json.loads(cli("retain", str(note), "--namespace", namespace, "--json"))
    assert (summary["created"], summary["failed"]) == (1, 0)
    source = json.loads(cli("source", "doc:note", "--namespace", namespace, "--json"))
    assert "The release moved to Monday." in json.dumps(source)


def test_links_inside_one_folder_resolve_in_one_run(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    namespace = "first-" + uuid.uuid4().hex[:8]
    folder = tmp_path / "vault"
    folder.mkdir()
    # a.md is sent first and links to b.md, not stored yet at that moment; b.md links back.
    (folder / "a.md").write_text("---\nlinks: [doc:b, doc:nowhere]\n---\n# A\n\nsee B\n", encoding="utf-8")
    (folder / "b.md").write_text("---\nlinks: [doc:a]\n---\n# B\n\nsee A\n", encoding="utf-8")
    summary = json.loads(
        cli("retain", str(folder), "--namespace", namespace, "--concurrency", "1", "--json")
    )
    assert (summary["created"], summary["failed"]) == (2, 0)
    # only the link to a document stored nowhere is left missing
    assert summary["missing_links"] == [{"from": "doc:a", "to": "doc:nowhere"}]
