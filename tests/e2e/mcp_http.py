"""The MCP server over streamable HTTP for the e2e tests: served in a thread on a free port, and tool calls
over one MCP session to it (`tests/e2e/test_mcp_server.py`, `tests/e2e/test_hostile_tenant_audit_and_guards.py`)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import httpx2
import uvicorn
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from memory_service_grpc_client import ClientSecurity
from memory_service_grpc_client import MemoryClient
from memory_service_tools.mcp import build_mcp_server


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def mcp_over_http(ingest_addr: str, query_addr: str) -> Iterator[str]:
    """The MCP server over streamable HTTP (each call carries its request's token); yields its URL.

    The server's client has no token of its own: only the callers' tokens reach the services."""
    client = MemoryClient(ingest_addr, query_addr, security=ClientSecurity(), retry_seconds=5.0)
    port = free_port()
    app = build_mcp_server(client, token_from_request=True).streamable_http_app()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, "the MCP HTTP server did not start"
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.should_exit = True
        thread.join(10)
        client.close()


def http_tool_calls(url: str, headers: dict[str, str], calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    """Runs the tool calls in order over one MCP session to ``url``; returns their results."""

    async def run() -> list[Any]:
        async with (
            httpx2.AsyncClient(headers=headers, timeout=120) as http,
            Client(streamable_http_client(url, http_client=http)) as client,
        ):
            return [await client.call_tool(name, arguments) for name, arguments in calls]

    return anyio.run(run)


def tool_text(result: Any) -> str:
    """The text of a tool result (its text parts joined by newlines)."""
    return "\n".join(getattr(part, "text", "") for part in result.content)
