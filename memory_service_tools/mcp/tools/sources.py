"""The MCP tool that reads a whole source (SourceService.GetSource)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from mcp.server.mcpserver import Context
from memory_service_grpc_client.memory.v1 import source_service_pb2
from pydantic import Field

from memory_service_tools.mcp.arguments import Namespace
from memory_service_tools.mcp.results import as_json
from memory_service_tools.mcp.tool_calls import ToolCalls

__all__ = ["source_tools"]


def source_tools(calls: ToolCalls) -> list[Callable[..., Any]]:
    """The tools that read a whole source: ``read_source``."""

    def read_source(
        ctx: Context,
        namespace: Namespace,
        natural_key: Annotated[
            str, Field(description="key of the document or node, e.g. doc:ledger (from search)")
        ],
    ) -> dict[str, Any]:
        """Read a whole source: the original text of a document (or its chunks re-assembled) and where
        it came from. Returns source.natural_key, title, type, content, content_source ("original" or
        "chunks") and provenance (source_path, metadata)."""
        request = source_service_pb2.GetSourceRequest(namespace=namespace, natural_key=natural_key)
        return as_json(calls.call(ctx, "get_source", request))

    return [read_source]
