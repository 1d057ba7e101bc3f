"""``cb mcp``: the MCP server for agents (`memory_service_tools.mcp`), over stdio or streamable HTTP."""

from __future__ import annotations

import dataclasses
from typing import Annotated
from typing import Any
from typing import Literal

import typer

from memory_service_grpc_client import MemoryClient
from memory_service_tools.cli.cli_state import cli_state
from memory_service_tools.cli.cli_state import traced
from memory_service_tools.cli.help_format import FlagsCommand
from memory_service_tools.cli.terminal import fail

MCP_RETRY_SECONDS = 10.0  # how long a tool call retries a service that answers UNAVAILABLE
TOOLS_PLACEHOLDER = "TOOLS"


class McpCommand(FlagsCommand):
    """``cb mcp``: its help names the registered tools (`memory_service_tools.mcp.TOOL_NAMES`), read
    only when the help is shown, so other commands do not import the MCP SDK."""

    def format_help(self, ctx: Any, formatter: Any) -> None:  # typer's own click types
        if self.help and TOOLS_PLACEHOLDER in self.help:
            from memory_service_tools.mcp import TOOL_NAMES

            self.help = self.help.replace(TOOLS_PLACEHOLDER, ", ".join(TOOL_NAMES))
        super().format_help(ctx, formatter)


def mcp(
    ctx: typer.Context,
    transport: Annotated[
        str,
        typer.Option(
            "--transport",
            help="stdio (a local agent starts cb mcp; calls carry --token / CB_TOKEN) or http "
            "(streamable HTTP on http://HOST:PORT/mcp; calls carry each request's bearer token)",
        ),
    ] = "stdio",
    host: Annotated[str, typer.Option("--host", help="address the HTTP transport binds")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="port of the HTTP transport")] = 8765,
) -> None:
    """Serve the memory to agents as MCP tools (docs/reference/mcp-tools.md).

    Tools: TOOLS. A client of the gRPC services (``--ingest-addr``, ``--query-addr``); their access rules
    hold for every call."""
    from common.grpc.telemetry import configure_tracing
    from memory_service_tools.mcp import run_mcp_server

    if transport not in ("stdio", "http"):
        raise typer.BadParameter(f"{transport!r}: expected stdio or http", param_hint="--transport")
    chosen: Literal["stdio", "http"] = "stdio" if transport == "stdio" else "http"
    state = cli_state(ctx)
    configure_tracing(state.settings(), "mcp_server")  # with CB_OTLP_ENDPOINT: calls carry traceparent
    security = state.security()
    if chosen == "http":
        # A shared server acts for many callers: only each request's own token is passed on.
        security = dataclasses.replace(security, token="")
    try:
        security.channel_credentials()
    except ValueError as exc:
        fail([f"error: {exc}"])
    # An agent waits for its tool call: retry an unavailable service for seconds, not minutes.
    client = MemoryClient(
        state.ingest(), state.query(), security=security, retry_seconds=MCP_RETRY_SECONDS, wrap_channel=traced
    )
    with client:
        run_mcp_server(client, transport=chosen, host=host, port=port)
