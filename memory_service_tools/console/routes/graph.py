"""Graph: the neighbourhood of a node to a chosen depth, from the live facts around it (ListFacts by
subject and by object, breadth first), typed by the kind each key names (``person:alice`` is a person)."""

from __future__ import annotations

import json
from datetime import UTC
from datetime import datetime
from typing import Any

from memory_service_grpc_client.memory.v1 import fact_query_service_pb2
from memory_service_tools.console.page_view import PageView
from memory_service_tools.console.views import int_param
from memory_service_tools.console.views import to_timestamp

MAX_NODES = 80  # a neighbourhood larger than this is cut (the page says so)
EDGES_PER_CALL = 100


def script_json(value: object) -> str:
    """``value`` as JSON safe inside a ``<script type="application/json">`` block: ``<``, ``>`` and ``&``
    escaped, so a key such as ``</script><script>...`` cannot end the block."""
    return (
        json.dumps(value, ensure_ascii=False)
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
    )


def kind_of(key: str) -> str:
    """The kind a natural key names: the part before its first colon (``doc:ledger`` -> ``doc``)."""
    return key.split(":", 1)[0] if ":" in key else "node"


def build(view: PageView) -> dict[str, Any]:
    """Values of graph.html: cytoscape elements as JSON and the same edges as a table."""
    key = view.param("key")
    depth = int_param(view.request, "depth", 1, 1, 3)
    ns = view.address.namespace
    values: dict[str, Any] = {"title": f"Graph of {key}" if key else "Graph", "key": key, "depth": depth}
    if not (key and ns):
        return {**values, "elements": "[]", "edges": [], "cut": False}
    as_of = to_timestamp(view.address.as_of or datetime.now(UTC))
    nodes: dict[str, int] = {key: 0}
    edges: dict[str, dict[str, str]] = {}
    frontier, cut = [key], False
    for level in range(1, depth + 1):
        following: list[str] = []
        for current in frontier:
            for direction in ("subject", "object"):
                request = fact_query_service_pb2.ListFactsRequest(
                    namespace=ns, page_size=EDGES_PER_CALL, as_of=as_of, **{direction: current}
                )
                response = view.gateway.call_rpc(view.gateway.client.list_facts, request)
                for fact in response.facts if response else []:
                    edges[fact.fact_id] = {
                        "id": fact.fact_id,
                        "source": fact.subject,
                        "target": fact.object,
                        "label": fact.predicate,
                    }
                    for end in (fact.subject, fact.object):
                        if end in nodes:
                            continue
                        if len(nodes) >= MAX_NODES:
                            cut = True
                            continue
                        nodes[end] = level
                        following.append(end)
        frontier = following
    kept = [edge for edge in edges.values() if edge["source"] in nodes and edge["target"] in nodes]
    elements = [
        {"data": {"id": name, "label": name, "kind": kind_of(name), "depth": level}}
        for name, level in nodes.items()
    ] + [{"data": edge} for edge in kept]
    return {
        **values,
        "elements": script_json(elements),
        "edges": kept,
        "kinds": sorted({kind_of(name) for name in nodes}),
        "cut": cut,
    }
