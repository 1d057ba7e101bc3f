"""The MCP tools that search and compile context (RetrievalService.Search, ContextService.CompileContext)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from mcp.server.mcpserver import Context
from memory_service_grpc_client.memory.v1 import context_service_pb2, retrieval_service_pb2
from pydantic import Field

from common.grpc.proto_mapping import timestamp
from common.kernel.identifiers import parse_instant
from memory_service_tools.mcp.arguments import Instant, Namespace, bad_argument, instant_argument
from memory_service_tools.mcp.results import as_json
from memory_service_tools.mcp.tool_calls import ToolCalls

__all__ = ["retrieval_tools"]


def retrieval_tools(calls: ToolCalls) -> list[Callable[..., Any]]:
    """The tools that find what to read: ``search`` and ``compile_context``."""

    def search(
        ctx: Context,
        namespace: Namespace,
        query: Annotated[
            str, Field(description="words, a question, or an exact identifier such as PROJ-1234")
        ],
        top_k: Annotated[int, Field(ge=1, le=100, description="how many passages to return")] = 10,
        types: Annotated[
            list[str] | None, Field(description="keep only these node types, e.g. ['document', 'episode']")
        ] = None,
    ) -> dict[str, Any]:
        """Find passages (document chunks and recorded observations) that match a query.

        Hybrid search: meaning (multilingual vectors), words (full text) and exact identifiers
        (trigrams), fused. Returns hits, best first, each with node_key (use it with read_source),
        title, heading, text, source_path, score and its vector/text/trigram components.
        """
        request = retrieval_service_pb2.SearchRequest(
            namespace=namespace, query=query, top_k=top_k, types=types or []
        )
        return as_json(calls.call(ctx, "search", request))

    def compile_context(
        ctx: Context,
        namespace: Namespace,
        query: Annotated[str, Field(description="the task or question you need context for")] = "",
        anchors: Annotated[
            list[str] | None,
            Field(
                description="natural keys the task is about, e.g. ['person:alice'] (their facts rank first)"
            ),
        ] = None,
        token_budget: Annotated[
            int, Field(ge=1, le=100000, description="most tokens the pack may use (cl100k tokens)")
        ] = 2000,
        as_of: Instant = None,
        trace_id: Annotated[str | None, Field(description="your id to find this compilation later")] = None,
        dropped_limit: Annotated[
            int,
            Field(
                ge=0,
                le=100,
                description="also list this many of the best candidates left out, with why (0: none)",
            ),
        ] = 0,
        task: Annotated[
            str | None, Field(description="deprecated: the former name of query, accepted for one release")
        ] = None,
    ) -> dict[str, Any]:
        """Prepare context for a task: the passages and facts most worth reading, within a token budget.

        Call this first when starting work on a question. The pack ranks search hits, the turns next to
        them, recent observations, current facts about the anchors, their neighbours and what the hits
        mention; conflicting facts are flagged. Returns pack.text (ready to read, fits token_budget),
        pack.items (kind, text, score, provenance: where each item came from, selection: the rule that
        brought it and its score components, conflict), pack.token_count, pack.trace_id and, with
        dropped_limit, pack.dropped (the best candidates left out and why).
        """
        if task is not None and query and task != query:
            raise bad_argument("task", "query and its deprecated name task differ: pass query only")
        query = query or task or ""
        if not query:
            raise bad_argument("query", "required (the task or question you need context for)")
        when = instant_argument(as_of, "as_of")
        request = context_service_pb2.CompileContextRequest(
            namespace=namespace,
            query=query,
            anchors=anchors or [],
            token_budget=token_budget,
            trace_id=trace_id or "",
            as_of=timestamp(parse_instant(when)) if when else None,
            dropped_limit=dropped_limit,
        )
        return as_json(calls.call(ctx, "compile_context", request))

    return [search, compile_context]
