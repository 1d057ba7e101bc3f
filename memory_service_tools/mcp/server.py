"""The MCP server (official ``mcp`` SDK): its tools in order, its ``initialize`` answer, and running it
over stdio or streamable HTTP (the rules it follows: `memory_service_tools.mcp`)."""

from __future__ import annotations

from collections.abc import Callable
from importlib import metadata
from typing import Any
from typing import Literal

from mcp.server import MCPServer
from mcp.server.mcpserver.tools import Tool

from memory_service_grpc_client import MemoryClient
from memory_service_tools.mcp.arguments import closed_tool
from memory_service_tools.mcp.tool_calls import ToolCalls
from memory_service_tools.mcp.tools.knowledge import knowledge_tools
from memory_service_tools.mcp.tools.memories import memory_record_tools

__all__ = [
    "DISTRIBUTION",
    "TOOL_NAMES",
    "Transport",
    "build_mcp_server",
    "memory_tools",
    "run_mcp_server",
    "server_version",
]

DISTRIBUTION = "memory-service"  # whose version ``initialize`` reports (pyproject.toml [project].name)

INSTRUCTIONS = """\
Long-term memory of this team: observations (immutable records of what happened), temporal facts
(subject -[PREDICATE]-> object, valid from/to, each backed by evidence), and documents (searchable
chunks with their original text). Everything lives in a namespace: pass the namespace the user works
in to every tool. Keys of things are natural keys "type:id" (person:alice, service:billing,
doc:runbooks/deploy). To prepare for a task, call compile_context first (it ranks chunks and facts and
fits them into a token budget); use search for passages, list_facts for what is true at an instant,
read_source for a whole document, record_observation to remember something new.
Personal memories of the user you act for (preferences, incidents, decisions) need no namespace: call
recall_memories at the start of a turn and add_memories for what is worth remembering about the user."""


def server_version() -> str:
    """The installed version of the `DISTRIBUTION` (``serverInfo.version`` of ``initialize``)."""
    return metadata.version(DISTRIBUTION)


def build_mcp_server(client: MemoryClient, *, token_from_request: bool) -> MCPServer:
    """The MCP server with the memory tools, calling the services through ``client``.

    Args:
        client: the services' client; over stdio it carries the process's token.
        token_from_request: True for streamable HTTP: each call carries the ``Authorization`` bearer
            token of its HTTP request instead (none when the request has none).

    Returns:
        An `MCPServer`; run it with ``run("stdio")`` or serve ``streamable_http_app()``.
    """
    return MCPServer(
        "memory-service",
        version=server_version(),
        instructions=INSTRUCTIONS,
        tools=memory_tools(client, token_from_request=token_from_request),
    )


def memory_tools(client: MemoryClient | None, *, token_from_request: bool) -> list[Tool]:
    """The tools, in order, bound to ``client`` (None: only to read their names and schemas)."""
    calls = ToolCalls(client, token_from_request=token_from_request)
    functions: list[Callable[..., Any]] = [*knowledge_tools(calls), *memory_record_tools(calls)]
    return [closed_tool(Tool.from_function(function)) for function in functions]


TOOL_NAMES = tuple(tool.name for tool in memory_tools(None, token_from_request=False))
"""The registered tools' names, in order (``cb mcp --help`` lists them)."""

Transport = Literal["stdio", "http"]


def run_mcp_server(
    client: MemoryClient, *, transport: Transport, host: str = "127.0.0.1", port: int = 8765
) -> None:
    """Runs the MCP server until it is stopped: over stdio (the process's token) or over streamable HTTP
    on ``http://host:port/mcp`` (each request's bearer token)."""
    server = build_mcp_server(client, token_from_request=transport == "http")
    if transport == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host=host, port=port)
