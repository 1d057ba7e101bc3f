"""What a new user meets in the first hour, with the `cb` CLI against real servers (development mode):
what is stored (`cb namespaces`, `cb stats`), a misspelt namespace named as such, one Markdown file
retained on its own, and links between the documents of one folder resolved in one run."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from memory_service_tools.cli import app

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def cli(ingest_channel: object, query_channel: object, cli_addresses: list[str]):  # type: ignore[no-untyped-def]
    runner = CliRunner()

    def run(*args: str, expect: int = 0) -> str:
        result = runner.invoke(app, [*cli_addresses, *args])
        assert result.exit_code == expect, result.output
        return result.stdout

    run.invoke = lambda *args: runner.invoke(app, [*cli_addresses, *args])  # type: ignore[attr-defined]
    return run


def test_a_single_file_is_retained(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    namespace = "first-" + uuid.uuid4().hex[:8]
    note = tmp_path / "note.md"
    note.write_text("# A note\n\nThe release moved to Monday.\n", encoding="utf-8")
    summary = json.loads(cli("retain", str(note), "--namespace", namespace, "--json"))
    assert (summary["created"], summary["failed"]) == (1, 0)
    source = json.loads(cli("source", "doc:note", "--namespace", namespace, "--json"))
    assert "The release moved to Monday." in json.dumps(source)


def test_retain_tags_every_document_with_meta_that_search_filters_by(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    namespace = "first-" + uuid.uuid4().hex[:8]
    note = tmp_path / "refunds.md"
    note.write_text("# Refunds\n\nRefunds take five working days.\n", encoding="utf-8")
    summary = json.loads(cli("retain", str(note), "-n", namespace, "--meta", "collection=faq", "--json"))
    assert (summary["created"], summary["failed"]) == (1, 0)
    tagged = json.loads(cli("search", "refunds", "-n", namespace, "--meta", "collection=faq", "--json"))
    other = json.loads(cli("search", "refunds", "-n", namespace, "--meta", "collection=manual", "--json"))
    assert [hit.get("nodeKey", hit.get("node_key")) for hit in tagged["hits"]] == ["doc:refunds"]
    assert other.get("hits", []) == []
    bad = cli.invoke("retain", str(note), "-n", namespace, "--meta", "collection")
    assert bad.exit_code == 2 and "expected key=value" in bad.output


def test_links_inside_one_folder_resolve_in_one_run(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    namespace = "first-" + uuid.uuid4().hex[:8]
    folder = tmp_path / "vault"
    folder.mkdir()
    # a.md is sent first and links to b.md, not stored yet at that moment; b.md links back.
    (folder / "a.md").write_text("---\nlinks: [doc:b, doc:nowhere]\n---\n# A\n\nsee B\n", encoding="utf-8")
    (folder / "b.md").write_text("---\nlinks: [doc:a]\n---\n# B\n\nsee A\n", encoding="utf-8")
    summary = json.loads(cli("retain", str(folder), "--namespace", namespace, "--concurrency", "1", "--json"))
    assert (summary["created"], summary["failed"]) == (2, 0)
    # only the link to a document stored nowhere is left missing
    assert summary["missing_links"] == [{"from": "doc:a", "to": "doc:nowhere"}]


@pytest.fixture(scope="module")
def stored(cli, tmp_path_factory: pytest.TempPathFactory) -> str:  # type: ignore[no-untyped-def]
    namespace = "firsthour-" + uuid.uuid4().hex[:8]
    folder = tmp_path_factory.mktemp("stored")
    (folder / "release.md").write_text(
        "# Release\n\nThe payment release moved to Monday.\n", encoding="utf-8"
    )
    cli("retain", str(folder), "--namespace", namespace)
    return namespace


def test_namespaces_and_stats_show_what_is_stored(cli, stored: str) -> None:  # type: ignore[no-untyped-def]
    listed = json.loads(cli("namespaces", "--json"))
    [mine] = [item for item in listed["namespaces"] if item["namespace"] == stored]
    assert (mine["nodeCount"], mine["chunkCount"]) == ("1", "1")
    stats = json.loads(cli("stats", stored, "--json"))
    assert stats["nodesByType"] == {"document": "1"} and stats["chunkCount"] == "1"
    assert stored in cli("namespaces") and "document" in cli("stats", stored)


@pytest.mark.parametrize(
    "command",
    [
        ["search", "payment release"],
        ["facts", "--subject", "doc:release"],
        ["context", "when is the payment release"],
        ["source", "doc:release"],
    ],
)
def test_a_misspelt_namespace_is_named_with_the_closest_one(cli, stored: str, command: list[str]) -> None:  # type: ignore[no-untyped-def]
    typo = stored.replace("firsthour", "firsthuor")
    result = cli.invoke(*command, "--namespace", typo)
    assert result.exit_code == 3, result.output
    assert f"namespace '{typo}' holds nothing you can see; did you mean '{stored}'?" in result.stderr
    if command[0] != "source":
        # --json keeps its output: the response as it came, the explanation on stderr only
        as_json = cli.invoke(*command, "--namespace", typo, "--json")
        assert as_json.exit_code == 3 and json.loads(as_json.stdout) is not None
    if command[0] == "search":
        assert "no hits" in result.stdout
        # the real namespace answers as before
        assert cli.invoke(*command, "--namespace", stored).exit_code == 0
