"""The MCP server (`cb mcp`) driven by the MCP SDK's own client against the real services with tokens.

Streamable HTTP: the server runs in-process (uvicorn on a free port) and passes each HTTP request's
bearer token through to the services, so a call without a token or with another namespace's token is
refused by the services themselves. Stdio: ``cb mcp`` runs as a subprocess, as a desktop agent starts
it, with ``CB_TOKEN`` in its environment.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from common.auth.principals import Right
from common.kernel.config import Settings
from common.kernel.memory_names import memory_namespace
from memory_service_grpc_client import ClientSecurity
from memory_service_grpc_client import MemoryClient
from memory_service_grpc_client.memory.v1 import document_service_pb2
from memory_service_tools.mcp import TOOL_NAMES
from memory_service_tools.token_writer import add_token
from tests.e2e.conftest import token_secured_services
from tests.e2e.mcp_http import http_tool_calls
from tests.e2e.mcp_http import mcp_over_http
from tests.e2e.mcp_http import tool_text

pytestmark = pytest.mark.e2e


@dataclass
class World:
    namespace: str
    other_namespace: str
    writer: str
    other: str
    ingest_addr: str
    query_addr: str
    mcp_url: str
    memory_user: str = ""


@pytest.fixture(scope="module")
def world(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tokens_file = tmp_path_factory.mktemp("mcp") / "tokens.yaml"
    namespace = "mcp-" + uuid.uuid4().hex[:10]
    other_namespace = "mcp-other-" + uuid.uuid4().hex[:10]
    writer, _ = add_token(tokens_file, principal="agent", namespaces={namespace: [Right.WRITE]})
    other, _ = add_token(tokens_file, principal="stranger", namespaces={other_namespace: [Right.WRITE]})
    organization = "mcp" + uuid.uuid4().hex[:10]
    memory_user, _ = add_token(
        tokens_file,
        principal="chat-app",
        namespaces={memory_namespace(organization, "production"): [Right.READ, Right.WRITE]},
        memory_scope=(organization, "production", "8821"),
    )
    with (
        token_secured_services(settings, tokens_file) as (ingest_addr, query_addr),
        mcp_over_http(ingest_addr, query_addr) as mcp_url,
    ):
        yield World(
            namespace,
            other_namespace,
            writer,
            other,
            ingest_addr,
            query_addr,
            mcp_url,
            memory_user,
        )


def _http_calls(world: World, token: str | None, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    """Runs the tool calls in order over one MCP session to the HTTP server; returns their results."""
    return http_tool_calls(world.mcp_url, {"Authorization": f"Bearer {token}"} if token else {}, calls)


def test_tools_record_search_compile_list_and_read_with_the_callers_token(world: World) -> None:
    with MemoryClient(
        world.ingest_addr, world.query_addr, security=ClientSecurity(token=world.writer)
    ) as client:
        client.retain(
            document_service_pb2.RetainRequest(
                namespace=world.namespace,
                natural_key="doc:mcp-runbook",
                title="Billing runbook",
                content="# Billing\n\nThe billing month closes on the third working day.\n",
            )
        )
    record, search, context, small, facts, source = _http_calls(
        world,
        world.writer,
        [
            (
                "record_observation",
                {
                    "namespace": world.namespace,
                    "content": "Alice moved from project Alpha to project Zephyrine-billing today.",
                    "kind": "note",
                    "subject": "person:alice",
                    "occurred_at": "2026-10-15T09:00:00Z",
                    "external_id": "mcp-e2e-1",
                    "facts": [
                        {"subject": "person:alice", "predicate": "WORKS_ON", "object": "project:zephyrine"}
                    ],
                },
            ),
            ("search", {"namespace": world.namespace, "query": "Zephyrine-billing", "top_k": 5}),
            (
                "compile_context",
                {
                    "namespace": world.namespace,
                    "query": "what does alice work on?",
                    "anchors": ["person:alice"],
                    "token_budget": 500,
                },
            ),
            (
                "compile_context",
                {
                    "namespace": world.namespace,
                    "task": "what does alice work on and when does billing close?",  # the deprecated name still works
                    "anchors": ["person:alice"],
                    "token_budget": 30,
                    "dropped_limit": 2,
                },
            ),
            ("list_facts", {"namespace": world.namespace, "subject": "person:alice"}),
            ("read_source", {"namespace": world.namespace, "natural_key": "doc:mcp-runbook"}),
        ],
    )
    for result in (record, search, context, small, facts, source):
        assert not result.is_error, tool_text(result)
    recorded = record.structured_content
    assert recorded["created"] is True and recorded["observation_id"].startswith("obs-")
    assert recorded["facts_created"] == 1
    assert any("Zephyrine-billing" in hit["text"] for hit in search.structured_content["hits"])
    pack = context.structured_content["pack"]
    assert "project:zephyrine" in pack["text"] and pack["token_count"] <= 500
    assert all(item["selection"]["rule"] for item in pack["items"])
    dropped = small.structured_content["pack"].get("dropped", [])
    assert 1 <= len(dropped) <= 2, "a 30-token pack leaves candidates out and lists the best of them"
    assert all(candidate["drop_reason"] for candidate in dropped)
    listed = facts.structured_content
    assert [(f["predicate"], f["object"]) for f in listed["facts"]] == [("WORKS_ON", "project:zephyrine")]
    assert listed["facts"][0]["valid_from"] == "2026-10-15T09:00:00Z" and listed["truncated"] is False
    assert source.structured_content["source"]["content"].startswith("# Billing\n\nThe billing month")
    # The same observation again is a duplicate.
    (again,) = _http_calls(
        world,
        world.writer,
        [
            (
                "record_observation",
                {
                    "namespace": world.namespace,
                    "content": "Alice moved from project Alpha to project Zephyrine-billing today.",
                    "subject": "person:alice",
                    "occurred_at": "2026-10-15T09:00:00Z",
                    "external_id": "mcp-e2e-1",
                },
            )
        ],
    )
    assert not again.is_error and again.structured_content["created"] is False


def test_a_call_without_a_token_is_refused_by_the_services_and_writes_nothing(world: World) -> None:
    search, record = _http_calls(
        world,
        None,
        [
            ("search", {"namespace": world.namespace, "query": "billing"}),
            (
                "record_observation",
                {"namespace": world.namespace, "content": "no token", "external_id": "x-1"},
            ),
        ],
    )
    assert search.is_error and "UNAUTHENTICATED" in tool_text(search)
    assert record.is_error and "UNAUTHENTICATED" in tool_text(record)
    (listed,) = _http_calls(
        world, world.writer, [("search", {"namespace": world.namespace, "query": "no token"})]
    )
    assert all(hit["text"] != "no token" for hit in listed.structured_content.get("hits", []))


def test_another_namespaces_token_is_denied(world: World) -> None:
    (search,) = _http_calls(
        world, world.other, [("search", {"namespace": world.namespace, "query": "billing"})]
    )
    assert search.is_error and "PERMISSION_DENIED" in tool_text(search)


def test_field_violations_reach_the_agent(world: World) -> None:
    (record,) = _http_calls(
        world,
        world.writer,
        [("record_observation", {"namespace": world.namespace, "content": "x", "occurred_at": "yesterday"})],
    )
    assert record.is_error and "occurred_at: 'yesterday' is not an ISO 8601 instant" in tool_text(record)
    (record,) = _http_calls(
        world,
        world.writer,
        [("record_observation", {"namespace": world.namespace, "content": "x", "kind": " " * 3})],
    )
    text = tool_text(record)
    assert record.is_error and "error: INVALID_ARGUMENT: observations[0].kind: " in text, text
    assert "  - observations[0].kind: " not in text  # the message is that one violation, said once
    # An argument the tool does not have (a misspelt one) is refused by name, nothing is recorded.
    (record,) = _http_calls(
        world,
        world.writer,
        [("record_observation", {"namespace": world.namespace, "content": "x", "ocurred_at": "2026-01-01"})],
    )
    text = tool_text(record)
    assert record.is_error and "ocurred_at\n  Extra inputs are not permitted" in text, text


def _stdio_session(
    world: World, token: str, calls: list[tuple[str, dict[str, Any]]]
) -> tuple[list[str], list[Any]]:
    environment = {
        **os.environ,
        "CB_TOKEN": token,
        "CB_INGEST_ADDR": world.ingest_addr,
        "CB_QUERY_ADDR": world.query_addr,
    }
    cb = str(Path(sys.executable).with_name("cb"))

    async def run() -> tuple[list[str], list[Any]]:
        params = StdioServerParameters(command=cb, args=["mcp"], env=environment)
        async with Client(params, read_timeout_seconds=120) as client:
            tools = [tool.name for tool in (await client.list_tools()).tools]
            return tools, [await client.call_tool(name, arguments) for name, arguments in calls]

    return anyio.run(run)


def test_stdio_server_carries_the_process_token(world: World) -> None:
    tools, (facts,) = _stdio_session(
        world, world.writer, [("list_facts", {"namespace": world.namespace, "subject": "person:alice"})]
    )
    assert sorted(tools) == sorted(TOOL_NAMES)
    assert not facts.is_error, tool_text(facts)
    assert json.loads(tool_text(facts))["facts"][0]["object"] == "project:zephyrine"
    _tools, (refused,) = _stdio_session(
        world, "not-a-token", [("list_facts", {"namespace": world.namespace, "subject": "person:alice"})]
    )
    assert refused.is_error and "UNAUTHENTICATED" in tool_text(refused)


def test_memory_tools_add_and_recall_the_callers_memories(world: World) -> None:
    memory = {"text": "User Alice prefers concise replies and uses dark mode.", "key": "9421", "tags": ["ui"]}
    added, retried, recalled, other_project = _http_calls(
        world,
        world.memory_user,
        [
            ("add_memories", {"memories": [memory], "project": "support"}),
            ("add_memories", {"memories": [memory], "project": "support"}),
            ("recall_memories", {"query": "how should I answer Alice?", "project": "support"}),
            ("recall_memories", {"query": "how should I answer Alice?"}),
        ],
    )
    assert not added.is_error, tool_text(added)
    first = json.loads(tool_text(added))["results"][0]
    assert first["created"] and first["memory_id"].startswith("mem-")
    again = json.loads(tool_text(retried))["results"][0]
    assert again["memory_id"] == first["memory_id"] and not again.get("created", False)
    memories = json.loads(tool_text(recalled))["memories"]
    assert memories[0]["memory"]["memory_id"] == first["memory_id"]
    assert memories[0]["memory"]["scope"]["user_id"] == "8821"
    assert json.loads(tool_text(other_project)).get("memories", []) == []  # another project, nothing
    (refused,) = _http_calls(world, world.writer, [("recall_memories", {"query": "Alice"})])
    assert refused.is_error and "PERMISSION_DENIED" in tool_text(refused)


def test_one_is_error_rule_a_partly_refused_batch_is_a_tool_error_with_every_result(world: World) -> None:
    stored = {"text": "User Bob reads the weekly digest on Mondays.", "key": "digest-" + uuid.uuid4().hex[:6]}
    refused = {"text": "   ", "key": "blank"}
    (added,) = _http_calls(
        world, world.memory_user, [("add_memories", {"memories": [stored, refused], "project": "support"})]
    )
    assert added.is_error, tool_text(added)
    results = added.structured_content["results"]
    assert [r["status"] for r in results] == ["created", "failed"]
    assert results[0]["memory_id"].startswith("mem-") and results[1]["error_code"] == "INVALID_ARGUMENT"
    text = tool_text(added)
    assert text.startswith("error: INVALID_ARGUMENT: memories[1] was not stored\n  - memories[1].text"), text
    assert json.loads(text[text.index("{") :]) == added.structured_content
    # A wholly refused call is a tool error too, with the error text only.
    (record,) = _http_calls(
        world,
        world.writer,
        [("record_observation", {"namespace": world.namespace, "content": "x", "kind": " " * 3})],
    )
    assert record.is_error and record.structured_content is None, tool_text(record)
    # Nothing refused: not an error.
    (clean,) = _http_calls(
        world, world.memory_user, [("add_memories", {"memories": [stored], "project": "support"})]
    )
    assert not clean.is_error and clean.structured_content["results"][0]["status"] == "duplicate"


def test_initialize_reports_the_package_version_and_help_names_every_tool(world: World) -> None:
    from importlib import metadata

    from typer.testing import CliRunner

    from memory_service_tools.cli import app

    async def run() -> tuple[Any, list[str]]:
        async with (
            httpx2.AsyncClient(timeout=60) as http,
            Client(streamable_http_client(world.mcp_url, http_client=http)) as client,
        ):
            return client.server_info, [tool.name for tool in (await client.list_tools()).tools]

    info, listed = anyio.run(run)
    assert info is not None and info.version == metadata.version("memory-service") != ""
    assert list(TOOL_NAMES) == listed and len(listed) == 7
    shown = CliRunner().invoke(app, ["mcp", "--help"], env={"COLUMNS": "400"})
    assert shown.exit_code == 0, shown.output
    for name in listed:
        assert name in shown.output, (name, shown.output)
