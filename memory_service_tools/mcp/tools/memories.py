"""The MCP tools over memory records: the token's user is their scope, ``project`` becomes the ``x-project-id``
metadata (MemoryService.AddMemories, MemoryQueryService.RecallMemories)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated
from typing import Any

from mcp.server.mcpserver import Context
from pydantic import Field

from memory_service_grpc_client.memory.v1 import memory_query_service_pb2
from memory_service_grpc_client.memory.v1 import memory_record_pb2
from memory_service_grpc_client.memory.v1 import memory_service_pb2
from memory_service_tools.mcp.arguments import MemoryItem
from memory_service_tools.mcp.arguments import Project
from memory_service_tools.mcp.results import as_json
from memory_service_tools.mcp.results import failure_block
from memory_service_tools.mcp.results import refused_items
from memory_service_tools.mcp.tool_calls import ToolCalls

__all__ = ["memory_record_tools"]


def memory_record_tools(calls: ToolCalls) -> list[Callable[..., Any]]:
    """The tools over the memories of the user the agent acts for: ``add_memories`` and ``recall_memories``."""

    def add_memories(
        ctx: Context,
        memories: Annotated[
            list[MemoryItem], Field(min_length=1, max_length=100, description="the memories to store")
        ],
        project: Project = "",
    ) -> dict[str, Any]:
        """Remember short facts about the user you act for: preferences, incidents, decisions.

        Each memory is one self-contained sentence or two ("User prefers concise replies and dark mode").
        Give an idempotency key (e.g. the ticket or message id) so a retry never stores it twice, an
        importance in [0, 1] for what matters most, and a ttl_seconds for what is only true for a while.
        Returns one result per memory: memory_id, created (false for a retry) and any field violations.
        """
        request = memory_service_pb2.AddMemoriesRequest()
        for item in memories:
            message = request.memories.add(
                text=item.text, idempotency_key=item.key, source=item.source or "mcp", tags=item.tags
            )
            if item.importance is not None:
                message.importance = item.importance
            if item.ttl_seconds is not None:
                message.ttl.seconds = item.ttl_seconds
        response = calls.call(ctx, "add_memories", request, project_id=project)
        failures = [
            failure_block(
                f"error: {result.error_code or 'FAILED'}: memories[{index}] was not stored",
                list(result.field_violations),
            )
            for index, result in enumerate(response.results)
            if result.status == "failed"
        ]
        if failures:
            # The SDK passes a CallToolResult through as it is (the declared dict stays the output schema).
            return refused_items(as_json(response), failures)  # type: ignore[return-value]
        return as_json(response)

    def recall_memories(
        ctx: Context,
        query: Annotated[
            str, Field(description="the user's message or what you need to know about the user")
        ],
        top_k: Annotated[int, Field(ge=1, le=50, description="how many memories to return")] = 5,
        include_older: Annotated[
            bool, Field(description="also search memories not used for weeks (warm and cold tiers)")
        ] = False,
        project: Project = "",
    ) -> dict[str, Any]:
        """Recall what you remember about the user you act for, most relevant first.

        Call it at the start of a turn with the user's message. Ranked by similarity to the query,
        recency and importance; expired memories never come back. Returns memories with text, tags,
        importance, memory_id and the score components; a summary's originals are under "expanded".
        """
        tiers = [memory_record_pb2.MEMORY_TIER_HOT]
        if include_older:
            tiers += [memory_record_pb2.MEMORY_TIER_WARM, memory_record_pb2.MEMORY_TIER_COLD]
        request = memory_query_service_pb2.RecallMemoriesRequest(
            query=query,
            top_k=top_k,
            filter=memory_record_pb2.MemoryFilter(tiers=tiers),
            expand_summaries=True,
        )
        return as_json(calls.call(ctx, "recall_memories", request, project_id=project))

    return [add_memories, recall_memories]
