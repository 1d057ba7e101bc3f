"""Memories of a user: tiers, expiry, enrichment fields and summary lineage as a tree."""

from __future__ import annotations

from typing import Any

from memory_service_grpc_client.memory.v1 import memory_query_service_pb2
from memory_service_grpc_client.memory.v1 import memory_record_pb2
from memory_service_tools.console.page_view import PageView
from memory_service_tools.console.views import from_timestamp
from memory_service_tools.console.views import instant_text
from memory_service_tools.console.views import int_param

RECALL_TOP_K = 20


def lineage(memories: list[memory_record_pb2.Memory]) -> list[dict[str, Any]]:
    """The memories of one page as a forest: each summary above the memories it summarizes (those on
    this page; the ids of others are listed), everything else at the top."""
    by_id = {m.memory_id: m for m in memories}

    def node(memory: memory_record_pb2.Memory, seen: frozenset[str]) -> dict[str, Any]:
        children = [by_id[i] for i in memory.summarized_ids if i in by_id and i not in seen]
        return {
            "memory": memory,
            "tier": memory_record_pb2.MemoryTier.Name(memory.tier).removeprefix("MEMORY_TIER_").lower(),
            "type": memory_record_pb2.MemoryType.Name(memory.memory_type)
            .removeprefix("MEMORY_TYPE_")
            .lower(),
            "expires": instant_text(from_timestamp(memory.expire_time)),
            "created": instant_text(from_timestamp(memory.create_time)),
            "elsewhere": [i for i in memory.summarized_ids if i not in by_id],
            "children": [node(c, seen | {memory.memory_id}) for c in children],
        }

    tops = [m for m in memories if not (m.summary_id and m.summary_id in by_id)]
    return [node(m, frozenset()) for m in tops]


def build(view: PageView) -> dict[str, Any]:
    """Values of memories.html: one page of ListMemories (``page`` carries the next page's token) and, with a
    query ``q``, what RecallMemories ranks first with its score components."""
    user = view.param("user")
    project = view.param("project")
    page_size = int_param(view.request, "page_size", 50, 1, 200)
    values: dict[str, Any] = {"title": "Memories", "user": user, "project": project, "page_size": page_size}
    if not user:
        return {**values, "query": "", "recalled": [], "tree": [], "next_page": ""}
    response = view.gateway.call_rpc(
        view.gateway.client.list_memories,
        memory_query_service_pb2.ListMemoriesRequest(
            user_id=user,
            page_size=page_size,
            page_token=view.param("page"),
            include_expired=True,
            include_summarized=True,
        ),
        project_id=project,
    )
    memories = list(response.memories) if response else []
    recalled = []
    if query := view.param("q"):
        # touch=False: reading in the console leaves recall counts and times as they were.
        found = view.gateway.call_rpc(
            view.gateway.client.recall_memories,
            memory_query_service_pb2.RecallMemoriesRequest(
                query=query, user_id=user, top_k=RECALL_TOP_K, touch=False, expand_summaries=True
            ),
            project_id=project,
        )
        recalled = list(found.memories) if found else []
    return {
        **values,
        "query": query,
        "recalled": recalled,
        "tree": lineage(memories),
        "next_page": response.next_page_token if response else "",
    }
