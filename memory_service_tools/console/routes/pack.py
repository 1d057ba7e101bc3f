"""Context pack: the pack as the agent gets it, why each item is in it, the best dropped candidates."""

from __future__ import annotations

from typing import Any

from memory_service_grpc_client.memory.v1 import context_service_pb2
from memory_service_tools.console.page_view import PageView
from memory_service_tools.console.views import int_param
from memory_service_tools.console.views import to_timestamp


def build(view: PageView) -> dict[str, Any]:
    """Values of pack.html."""
    task = view.param("task")
    anchors = [a for a in view.param("anchors").replace(",", " ").split() if a]
    budget = int_param(view.request, "budget", 400, 1, 100_000)
    dropped_limit = int_param(view.request, "dropped", 5, 0, 50)
    pack = None
    if task and view.address.namespace:
        request = context_service_pb2.CompileContextRequest(
            namespace=view.address.namespace,
            query=task,
            anchors=anchors,
            token_budget=budget,
            dropped_limit=dropped_limit,
        )
        as_of = to_timestamp(view.address.as_of)
        if as_of is not None:
            request.as_of.CopyFrom(as_of)
        response = view.gateway.call_rpc(view.gateway.client.compile_context, request)
        pack = response.pack if response else None
    used = pack.token_count if pack else 0
    limit = pack.token_budget if pack and pack.token_budget else budget
    return {
        "title": "Context pack",
        "task": task,
        "anchors": " ".join(anchors),
        "budget": budget,
        "dropped_limit": dropped_limit,
        "pack": pack,
        "used": used,
        "limit": limit,
        "percent": min(100, round(100 * used / limit)) if limit else 0,
    }
