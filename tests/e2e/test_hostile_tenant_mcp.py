"""Hostile-tenant and careless-user attacks on the MCP server (``cb mcp`` over HTTP and stdio) against the
real services started with bearer tokens: isError for refused and partly refused items, the token's
namespaces, ``supersedes`` of a hidden fact answering like that of a fact not arrived yet
(docs/reference/mcp-tools.md)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from common.kernel.config import Settings
from common.storage.database import Database
from memory_service_grpc_client.memory.v1 import document_service_pb2
from memory_service_grpc_client.memory.v1 import document_service_pb2_grpc
from tests.e2e.hostile_tenant_world import World
from tests.e2e.hostile_tenant_world import ns_counts
from tests.e2e.hostile_tenant_world import running_world
from tests.e2e.hostile_tenant_world import table_counts
from tests.e2e.mcp_http import free_port
from tests.e2e.mcp_http import http_tool_calls
from tests.e2e.mcp_http import mcp_over_http
from tests.e2e.mcp_http import tool_text

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def world(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with running_world(settings, tmp_path_factory) as world:
        yield world


@pytest.fixture(scope="module")
def mcp_url(world: World) -> Iterator[str]:
    with world.ingest(world.m_scoped) as channel:
        document_service_pb2_grpc.DocumentServiceStub(channel).Retain(
            document_service_pb2.RetainRequest(
                namespace=world.m, natural_key="doc:mcp-hidden", scopes=["workspace:hr"],
                content="# Hidden\n\nOnly HR reads this.\n",
            ),
            timeout=120,
        )
    with world.ingest(world.m_writer) as channel:
        document_service_pb2_grpc.DocumentServiceStub(channel).Retain(
            document_service_pb2.RetainRequest(
                namespace=world.m, natural_key="doc:mcp-open", content="# Open\n\nThe billing month closes on day three.\n",
            ),
            timeout=120,
        )
    with mcp_over_http(world.ingest_addr, world.query_addr) as url:
        yield url


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _namespace_tools(ns: str) -> list[tuple[str, dict[str, Any]]]:
    return [
        ("record_observation", {"namespace": ns, "content": "intruder was here", "external_id": "atk-1"}),
        ("search", {"namespace": ns, "query": "billing"}),
        ("compile_context", {"namespace": ns, "task": "billing"}),
        ("list_facts", {"namespace": ns, "subject": "person:alice"}),
        ("read_source", {"namespace": ns, "natural_key": "doc:mcp-open"}),
    ]


@pytest.mark.parametrize("who", ["m_other", "m_reader_writes", "no_token", "garbage_header"])
def test_mcp_tools_honour_the_tokens_namespaces(world: World, mcp_url: str, database: Database, who: str) -> None:
    before = ns_counts(database, world.m)
    if who == "m_other":
        headers, calls, code = _bearer(world.m_other), _namespace_tools(world.m), "PERMISSION_DENIED"
    elif who == "m_reader_writes":
        headers, calls, code = _bearer(world.m_reader), _namespace_tools(world.m)[:1], "PERMISSION_DENIED"
    elif who == "no_token":
        headers, calls, code = {}, _namespace_tools(world.m), "UNAUTHENTICATED"
    else:
        headers, calls, code = {"Authorization": f"Bearer {world.m_reader} {world.m_writer}"}, _namespace_tools(world.m)[:1], "UNAUTHENTICATED"
    results = http_tool_calls(mcp_url, headers, calls)
    wrong = [
        f"{name}: isError={r.is_error} {tool_text(r)[:300]}"
        for (name, _), r in zip(calls, results, strict=True)
        if not (r.is_error and code in tool_text(r))
    ]
    assert not wrong, "\n".join(wrong)
    assert ns_counts(database, world.m) == before


def test_mcp_is_error_is_consistent_for_refused_items(world: World, mcp_url: str, database: Database) -> None:
    tag = uuid.uuid4().hex[:6]
    cases: list[tuple[str, str, dict[str, Any], bool]] = [
        # (label, tool, arguments, refused?)
        ("scope not held", "record_observation",
         {"namespace": world.m, "content": "x", "scopes": ["workspace:hr"], "external_id": f"s-{tag}"}, True),
        ("fact about a hidden node", "record_observation",
         {"namespace": world.m, "content": "The hidden doc is outdated.", "external_id": f"hid-{tag}",
          "facts": [{"subject": "doc:mcp-hidden", "predicate": "STATUS", "object": "state:outdated"}]}, True),
        ("U+0000 in content", "record_observation",
         {"namespace": world.m, "content": "a\u0000b", "external_id": f"nul-{tag}"}, True),
        ("bad predicate", "record_observation",
         {"namespace": world.m, "content": "x y", "external_id": f"pred-{tag}",
          "facts": [{"subject": "person:alice", "predicate": "works on", "object": "project:zeta"}]}, True),
        ("overflowing as_of", "compile_context",
         {"namespace": world.m, "task": "billing", "as_of": "0001-01-01T00:00:00+01:00"}, True),
        ("hidden source", "read_source", {"namespace": world.m, "natural_key": "doc:mcp-hidden"}, True),
        ("nothing found is not an error", "search", {"namespace": world.m, "query": "zzqx-nothing-" + tag}, False),
        ("a clean write", "record_observation",
         {"namespace": world.m, "content": "Billing closed on time.", "external_id": f"ok-{tag}"}, False),
    ]
    results = http_tool_calls(mcp_url, _bearer(world.m_writer), [(tool, args) for _, tool, args, _ in cases])
    wrong = []
    for (label, tool, _args, refused), result in zip(cases, results, strict=True):
        if bool(result.is_error) != refused:
            wrong.append(f"{label} ({tool}): isError={result.is_error}, expected {refused}: {tool_text(result)[:600]}")
        elif refused and "INTERNAL" in tool_text(result):
            wrong.append(f"{label} ({tool}): refused as INTERNAL: {tool_text(result)[:300]}")
        elif refused and "error: " not in tool_text(result):
            # (the SDK prefixes "Error executing tool NAME: "; what matters is the documented error line)
            wrong.append(f"{label} ({tool}): refused without an 'error: CODE: message' line: {tool_text(result)[:300]}")
    assert not wrong, "\n".join(wrong)


def test_mcp_memory_tools_project_and_batch(world: World, mcp_url: str, database: Database) -> None:
    before = table_counts(database)["memories"]
    good, colon, empty_batch_bad = http_tool_calls(
        mcp_url,
        _bearer(world.m_user),
        [
            ("add_memories", {"memories": [{"text": "User likes tea.", "key": "tea"}], "project": "prj_8f3a"}),
            ("add_memories", {"memories": [{"text": "User likes coffee.", "key": "coffee"}], "project": "prj:8f3a"}),
            ("add_memories", {"memories": [{"text": "   "}, {"text": "a\u0000b"}]}),
        ],
    )
    assert not good.is_error, tool_text(good)
    assert colon.is_error and "x-project-id" in tool_text(colon), tool_text(colon)
    assert empty_batch_bad.is_error and "INTERNAL" not in tool_text(empty_batch_bad), tool_text(empty_batch_bad)
    assert table_counts(database)["memories"] == before + 1
    # a namespace token without a memory scope may not touch memories
    (refused,) = http_tool_calls(mcp_url, _bearer(world.m_writer), [("recall_memories", {"query": "tea"})])
    assert refused.is_error and "PERMISSION_DENIED" in tool_text(refused), tool_text(refused)


def test_cb_mcp_http_never_lends_its_own_token(world: World, database: Database) -> None:
    """``cb mcp --transport http`` started with CB_TOKEN of an admin of every namespace: a request
    without a token (or with a bad one) must not borrow it."""
    port = free_port()
    cb = str(Path(sys.executable).with_name("cb"))
    env = {**os.environ, "CB_TOKEN": world.m_admin_all, "CB_INGEST_ADDR": world.ingest_addr, "CB_QUERY_ADDR": world.query_addr}
    process = subprocess.Popen(
        [cb, "mcp", "--transport", "http", "--port", str(port)], env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                time.sleep(0.2)
        before = ns_counts(database, world.m)
        url = f"http://127.0.0.1:{port}/mcp"
        for headers in ({}, {"Authorization": "Bearer"}, {"Authorization": "Basic Zm9vOmJhcg=="}):
            search, record = http_tool_calls(url, headers, _namespace_tools(world.m)[1:2] + _namespace_tools(world.m)[:1])
            assert search.is_error and "UNAUTHENTICATED" in tool_text(search), (headers, tool_text(search))
            assert record.is_error and "UNAUTHENTICATED" in tool_text(record), (headers, tool_text(record))
        assert ns_counts(database, world.m) == before
    finally:
        process.terminate()
        process.wait(10)


def test_cb_mcp_stdio_honours_the_process_tokens_namespaces(world: World) -> None:
    env = {**os.environ, "CB_TOKEN": world.m_other, "CB_INGEST_ADDR": world.ingest_addr, "CB_QUERY_ADDR": world.query_addr}
    cb = str(Path(sys.executable).with_name("cb"))

    async def run() -> list[Any]:
        async with Client(StdioServerParameters(command=cb, args=["mcp"], env=env), read_timeout_seconds=120) as client:
            return [await client.call_tool(n, a) for n, a in _namespace_tools(world.m)[:2]]

    for result in anyio.run(run):
        assert result.is_error and "PERMISSION_DENIED" in tool_text(result), tool_text(result)


def test_a_supersedes_naming_no_fact_is_a_pending_supersession(world: World, mcp_url: str, database: Database) -> None:
    """A supersedes naming a fact that does not exist (yet) is stored as a pending supersession and answered
    like any accepted fact (docs/explanation/knowledge-model.md: delivery order does not matter)."""
    # (changed from "not silently ignored": a supersession whose target has not arrived is legitimate by design)
    tag = uuid.uuid4().hex[:6]
    (result,) = http_tool_calls(
        mcp_url,
        _bearer(world.m_writer),
        [("record_observation", {
            "namespace": world.m, "content": "Alice moved to project Zeta.", "external_id": f"sup-{tag}",
            "facts": [{"subject": "person:alice", "predicate": "WORKS_ON", "object": "project:zeta",
                       "supersedes": "fact-" + "0" * 24}],
        })],
    )
    content = dict(result.structured_content or {})
    assert not result.is_error and content.get("status") == "processed", tool_text(result)
    assert not content.get("field_violations"), tool_text(result)
    with database.connection() as conn:
        row = conn.execute(
            "SELECT supersedes, valid_to FROM facts WHERE namespace = %s AND subject_key = %s"
            " AND object_key = %s", (world.m, "person:alice", "project:zeta"),
        ).fetchone()
    assert row is not None and row[0] == "fact-" + "0" * 24 and row[1] is None, row


def test_a_hostile_writer_cannot_supersede_a_hidden_fact(world: World, mcp_url: str, database: Database) -> None:
    """A fact scoped workspace:hr (written by the HR token) must stay open when a writer without that scope
    names it in ``supersedes``, and the answer must look like the one for a fact id that does not exist."""
    tag = uuid.uuid4().hex[:6]
    (hidden,) = http_tool_calls(
        mcp_url,
        _bearer(world.m_scoped),
        [("record_observation", {
            "namespace": world.m, "content": "Bob is on the layoff list.", "external_id": f"hr-{tag}",
            "scopes": ["workspace:hr"], "occurred_at": "2026-01-01T00:00:00Z",
            "facts": [{"subject": f"person:bob-{tag}", "predicate": "STATUS", "object": "state:leaving"}],
        })],
    )
    assert not hidden.is_error, tool_text(hidden)
    with database.connection() as conn:
        row = conn.execute(
            "SELECT fact_id FROM facts WHERE namespace = %s AND subject_key = %s", (world.m, f"person:bob-{tag}")
        ).fetchone()
    assert row is not None
    fact_id = str(row[0])
    answers = []
    for target in (fact_id, "fact-" + "1" * 24):
        (result,) = http_tool_calls(
            mcp_url,
            _bearer(world.m_writer),
            [("record_observation", {
                "namespace": world.m, "content": f"Bob stays ({target[-4:]}).", "external_id": f"sup-{tag}-{target[-4:]}",
                "occurred_at": "2026-02-01T00:00:00Z",
                "facts": [{"subject": f"person:bob-{tag}", "predicate": "STATUS", "object": "state:staying",
                           "supersedes": target}],
            })],
        )
        content = dict(result.structured_content or {})
        answers.append((result.is_error, content.get("status"), [v.replace(target, "<F>") for v in content.get("field_violations", [])]))
    with database.connection() as conn:
        still = conn.execute("SELECT valid_to, superseded_by FROM facts WHERE fact_id = %s", (fact_id,)).fetchone()
    assert still is not None and still[0] is None and still[1] is None, f"the hidden fact was closed: {still}"
    assert answers[0] == answers[1], f"a hidden fact answers unlike a missing one: {answers}"
