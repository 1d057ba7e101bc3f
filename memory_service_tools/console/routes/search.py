"""Search playground: the fused hits with each ranking's score and rank beside the fused score."""

from __future__ import annotations

from typing import Any

from memory_service_grpc_client.memory.v1 import retrieval_service_pb2
from memory_service_tools.console.page_view import PageView
from memory_service_tools.console.views import int_param

ARMS = (("vector", "vector_score"), ("text", "text_score"), ("trigram", "trigram_score"))


def arm_ranks(hits: list[retrieval_service_pb2.SearchHit]) -> list[dict[str, int | None]]:
    """Per hit, its rank (1 = best) in each ranking among the returned hits; None where that ranking
    did not score it."""
    ranks: list[dict[str, int | None]] = [dict.fromkeys((arm for arm, _ in ARMS)) for _ in hits]
    for arm, attribute in ARMS:
        scored = sorted(
            (i for i, hit in enumerate(hits) if getattr(hit, attribute) > 0),
            key=lambda i: -float(getattr(hits[i], attribute)),
        )
        for rank, index in enumerate(scored, start=1):
            ranks[index][arm] = rank
    return ranks


def build(view: PageView) -> dict[str, Any]:
    """Values of search.html."""
    query = view.param("q")
    preset = view.param("preset")
    types = [t for t in view.param("types").replace(",", " ").split() if t]
    top_k = int_param(view.request, "top_k", 10, 1, 100)
    rows: list[dict[str, Any]] = []
    if query and view.address.namespace:
        response = view.gateway.call_rpc(
            view.gateway.client.search,
            retrieval_service_pb2.SearchRequest(
                namespace=view.address.namespace, query=query, top_k=top_k, preset=preset, types=types
            ),
        )
        hits = list(response.hits) if response else []
        rows = [{"hit": hit, "ranks": ranks} for hit, ranks in zip(hits, arm_ranks(hits), strict=True)]
    return {
        "title": "Search",
        "query": query,
        "preset": preset,
        "types": " ".join(types),
        "top_k": top_k,
        "rows": rows,
        "searched": bool(query and view.address.namespace),
        "arms": [arm for arm, _ in ARMS],
    }
