"""``cb memory ...`` against the real servers (development mode: ``--user`` selects the user)."""

from __future__ import annotations

import json
import uuid

import pytest
from typer.testing import CliRunner

from common.grpc.server import ServiceHost
from memory_service_tools.cli import app

pytestmark = pytest.mark.e2e


def test_memory_commands_add_recall_get_list_summarize_with_json(
    ingest_channel: object, query_channel: object, ingest_host: ServiceHost, query_host: ServiceHost
) -> None:
    runner = CliRunner()
    user = "cli-" + uuid.uuid4().hex[:8]
    base = ["--ingest-addr", f"127.0.0.1:{ingest_host.port}", "--query-addr", f"127.0.0.1:{query_host.port}"]

    def run(*args: str, expect: int = 0) -> str:
        result = runner.invoke(app, [*base, "memory", *args, "--user", user, "--project", "support"])
        assert result.exit_code == expect, result.output
        return result.output

    alice = ["User Alice prefers concise replies and uses dark mode.", "--key", "9421", "--tag", "preference"]
    added = json.loads(run("add", *alice, "--importance", "0.7", "--memory-type", "fact", "--json"))
    memory_id = added["results"][0]["memoryId"]
    assert added["results"][0]["created"] is True
    assert memory_id in run("add", *alice) and "duplicate" in run("add", *alice)
    incident = json.loads(
        run("add", "Customer 8821 reported login failures after MFA reset.", "--key", "18420", "--json")
    )["results"][0]["memoryId"]
    recalled = json.loads(run("recall", "how should I answer Alice?", "--json"))
    assert recalled["memories"][0]["memory"]["memoryId"] == memory_id and recalled["preset"] == "balanced"
    record = json.loads(run("get", memory_id, "--json"))["memory"]
    assert record["memoryType"] == "MEMORY_TYPE_FACT" and record["scope"]["projectId"] == "support"
    listed = json.loads(run("list", "--tag", "preference", "--json"))
    assert [m["memoryId"] for m in listed["memories"]] == [memory_id]
    summary = json.loads(run("summarize", memory_id, incident, "--lossless", "--json"))
    assert summary["summary"]["summarizedIds"] == [memory_id, incident]
    assert "memories[0].text" in run("add", " ", expect=1)  # a blank text fails with its field path


def test_memory_maintain_confined_to_a_namespace_touches_nothing_else() -> None:
    namespace = "org:cli" + uuid.uuid4().hex[:8] + ":env:production"  # a namespace holding nothing
    result = CliRunner().invoke(app, ["memory", "maintain", "--namespace", namespace, "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report == {"movedToWarm": 0, "movedToCold": 0, "expiredDeleted": 0, "auditEventIds": []}
