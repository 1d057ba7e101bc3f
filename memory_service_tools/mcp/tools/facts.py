"""The MCP tool that lists temporal facts (FactQueryService.ListFacts, every page up to a limit)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from memory_service_grpc_client import ServiceError
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2
from pydantic import Field

from common.grpc.proto_mapping import timestamp
from common.kernel.identifiers import parse_instant
from memory_service_tools.cli.terminal import error_lines
from memory_service_tools.mcp.arguments import Instant, Namespace, instant_argument
from memory_service_tools.mcp.results import as_json
from memory_service_tools.mcp.tool_calls import ToolCalls

__all__ = ["fact_tools"]


def fact_tools(calls: ToolCalls) -> list[Callable[..., Any]]:
    """The tools that read temporal facts: ``list_facts``."""

    def list_facts(
        ctx: Context,
        namespace: Namespace,
        subject: Annotated[
            str | None, Field(description="natural key of the subject, e.g. person:alice")
        ] = None,
        predicate: Annotated[str | None, Field(description="relation, e.g. WORKS_ON")] = None,
        object: Annotated[str | None, Field(description="natural key of the object")] = None,
        as_of: Instant = None,
        include_history: Annotated[
            bool, Field(description="also facts that were closed or superseded (with their validity)")
        ] = False,
        limit: Annotated[int, Field(ge=1, le=1000, description="most facts to return")] = 100,
    ) -> dict[str, Any]:
        """List temporal facts by subject, predicate and/or object: what was true at an instant.

        Without as_of: the facts valid now. Each fact has fact_id, subject, predicate, object,
        valid_from, valid_to (absent while it holds), evidence and confidence, the observation_ids
        backing it, supersedes / superseded_by, and conflict (another fact contradicts it).
        Returns {"facts": [...], "truncated": true when more than limit facts matched}.
        """
        when = instant_argument(as_of, "as_of")
        request = fact_query_service_pb2.ListFactsRequest(
            namespace=namespace,
            subject=subject or "",
            predicate=predicate or "",
            object=object or "",
            include_history=include_history,
            page_size=min(limit + 1, 1000),
            as_of=timestamp(parse_instant(when)) if when else None,
        )
        client = calls.client_for(ctx)
        try:
            found = list(client.iter_facts(request, limit=limit + 1))
        except ServiceError as exc:
            raise ToolError("\n".join(error_lines(exc))) from exc
        return {"facts": [as_json(fact) for fact in found[:limit]], "truncated": len(found) > limit}

    return [list_facts]
