"""The README's walk-through: the `cb` CLI against real servers, on the example data set."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from memory_service_tools.cli import app

pytestmark = pytest.mark.e2e

EXAMPLE = Path(__file__).resolve().parents[1] / "data" / "example"


@pytest.fixture(scope="module")
def cli(ingest_channel: object, query_channel: object, cli_addresses: list[str]):  # type: ignore[no-untyped-def]
    runner = CliRunner()

    def run(*args: str, expect: int = 0, stdout: bool = False) -> str:
        result = runner.invoke(app, [*cli_addresses, *args])
        assert result.exit_code == expect, result.output
        return result.stdout if stdout else result.output

    run("observe", "--file", str(EXAMPLE / "observations.jsonl"))
    run("retain", str(EXAMPLE / "docs"), "--namespace", "example")
    return run


def test_facts_history_and_as_of(cli) -> None:  # type: ignore[no-untyped-def]
    history = json.loads(
        cli("facts", "--namespace", "example", "--subject", "person:alice", "--include-history", "--json")
    )
    facts = history["facts"]
    assert [f["object"] for f in facts] == ["project:alpha", "project:beta"]
    assert facts[0]["validTo"] == "2026-10-15T12:00:00Z" and facts[0]["supersededBy"] == facts[1]["factId"]
    then = json.loads(
        cli(
            "facts",
            "--namespace",
            "example",
            "--subject",
            "person:alice",
            "--as-of",
            "2026-09-01T00:00:00Z",
            "--json",
        )
    )
    assert [f["object"] for f in then["facts"]] == ["project:alpha"]


def test_rerunning_the_loads_is_safe(cli) -> None:  # type: ignore[no-untyped-def]
    output = cli("observe", "--file", str(EXAMPLE / "observations.jsonl"))
    assert "3 duplicate" in output.replace(",", "") or "duplicate" in output
    before = cli("facts", "--namespace", "example", "--subject", "person:alice", "--history", "--json")
    cli("retain", str(EXAMPLE / "docs"), "--namespace", "example")
    assert (
        cli("facts", "--namespace", "example", "--subject", "person:alice", "--history", "--json") == before
    )


def test_search_source_and_context(cli) -> None:  # type: ignore[no-untyped-def]
    hits = json.loads(cli("search", "когда закрывается месяц", "--namespace", "example", "--json"))["hits"]
    assert hits[0]["nodeKey"] == "doc:billing-runbook"
    exact = json.loads(cli("search", "BILL-42", "--namespace", "example", "--json"))["hits"]
    assert exact and all("BILL-42" in hit["text"] for hit in exact[:2])
    source = json.loads(cli("source", "doc:ledger", "--namespace", "example", "--json"))["source"]
    assert source["content"] == (EXAMPLE / "docs" / "ledger.md").read_text("utf-8")
    assert source["contentSource"] == "original"
    pack = json.loads(
        cli(
            "context",
            "who works on billing?",
            "--namespace",
            "example",
            "--anchor",
            "person:alice",
            "--budget",
            "800",
            "--json",
        )
    )["pack"]
    assert 0 < pack["tokenCount"] <= 800
    assert any(item["kind"] == "fact" and "project:beta" in item["text"] for item in pack["items"])
    assert all(item["provenance"] for item in pack["items"])
    assert all(item["selection"]["rule"] for item in pack["items"]), "every item says why it is there"
    small = json.loads(
        cli("context", "who works on billing?", "-n", "example", "--budget", "60", "--dropped", "3", "--json")
    )["pack"]
    assert 1 <= len(small["dropped"]) <= 3
    assert all(candidate["dropReason"] for candidate in small["dropped"])
    table = cli("context", "who works on billing?", "-n", "example", "--budget", "60", "--dropped", "3")
    assert "left out" in table and "rule" in table


def test_server_errors_are_reported_with_the_field(cli) -> None:  # type: ignore[no-untyped-def]
    output = cli("facts", "--namespace", "example", expect=1)
    assert "INVALID_ARGUMENT" in output
    missing = cli("source", "doc:nope", "--namespace", "example", expect=1)
    assert "NOT_FOUND" in missing


DELIVERY = Path(__file__).resolve().parents[1] / "data" / "delivery"


def test_the_delivery_walkthrough_with_a_domain_pack(cli) -> None:  # type: ignore[no-untyped-def]
    """docs/how-to/domain-packs.md: register the shipped pack, enable it,
    load the delivery observations, then the three typed-context examples and the MENTIONS link."""
    cli("pack", "register", "--file", str(DELIVERY / "pack.json"))
    again = cli("pack", "register", "--file", str(DELIVERY / "pack.json"), "--json")
    assert json.loads(again).get("created", False) is False  # same content: a no-op
    cli("pack", "enable", "software-delivery@1.0.0", "--namespace", "delivery", "--strict")
    cli("pack", "enable", "software-delivery", "--namespace", "delivery", expect=2)  # not name@version
    cli("observe", "--file", str(DELIVERY / "observations.jsonl"))

    def keys(*args: str) -> set[str]:
        pack = json.loads(cli("typed-context", *args, "--namespace", "delivery", "--json"))["pack"]
        return {item["naturalKey"] for item in pack["items"] if item.get("naturalKey")}

    assert {"issue:PROJ-123", "person:ann"} <= keys("who is on PROJ-123?")
    near = keys("--anchor", "svc:checkout", "--depth", "1")
    assert {"service:checkout-svc", "service:payments", "service:fraud", "team:web"} <= near
    assert "person:ann" not in near  # two steps away
    before = keys("--anchor", "svc:checkout", "--relation", "DEPENDS_ON", "--as-of", "2025-06-01")
    assert "service:payments" in before and "service:fraud" not in before
    mentions = json.loads(
        cli(
            "facts",
            "--namespace",
            "delivery",
            "--object",
            "issue:PROJ-123",
            "--predicate",
            "MENTIONS",
            "--json",
        )
    )["facts"]
    assert mentions and all(fact["evidence"] == "extracted" for fact in mentions)


def test_retain_again_reports_unchanged_documents_from_the_servers_answer(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "one.md").write_text("# One\n\nThe first runbook.\n")
    (docs / "two.md").write_text("# Two\n\nThe second runbook.\n")
    namespace = "retain-again-" + uuid.uuid4().hex[:8]

    def retain() -> dict[str, object]:
        return json.loads(cli("retain", str(docs), "--namespace", namespace, "--json", stdout=True))  # type: ignore[no-any-return]

    first = retain()
    again = retain()
    (docs / "two.md").write_text("# Two\n\nThe second runbook, revised.\n")
    changed = retain()
    counts = [(run["created"], run["updated"], run["unchanged"]) for run in (first, again, changed)]
    assert counts == [(2, 0, 0), (0, 0, 2), (0, 1, 1)]
    text = cli("retain", str(docs), "--namespace", namespace)
    assert "documents: 0 created, 0 updated, 2 unchanged, 0 failed" in text
