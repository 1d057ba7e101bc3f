"""A node: its original text, its chunks, and the facts in and out on a time line of validity intervals."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC
from datetime import datetime
from datetime import timedelta
from typing import Any

from memory_service_grpc_client.memory.v1 import fact_query_service_pb2
from memory_service_grpc_client.memory.v1 import knowledge_pb2
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2
from memory_service_grpc_client.memory.v1 import source_service_pb2
from memory_service_tools.console.page_view import PageView
from memory_service_tools.console.views import BadAddress
from memory_service_tools.console.views import from_timestamp
from memory_service_tools.console.views import instant_text
from memory_service_tools.console.views import int_param

FACT_PAGE = 100  # facts per direction per page
CHUNK_LIMIT = 50  # chunks shown per node (Search's top_k within the node)


def _facts(view: PageView, direction: str, key: str, page_token: str) -> tuple[list[knowledge_pb2.Fact], str]:
    request = fact_query_service_pb2.ListFactsRequest(
        namespace=view.address.namespace,
        include_history=True,
        include_lost=True,
        page_size=FACT_PAGE,
        page_token=page_token,
        **{direction: key},
    )
    response = view.gateway.call_rpc(view.gateway.client.list_facts, request)
    return (list(response.facts), response.next_page_token) if response else ([], "")


MAX_TEXT_FROM = 2**31 - 1


@dataclass(frozen=True)
class TextPage:
    """The part of a node's text one page shows: characters ``start`` to ``end`` (exclusive) of
    ``total``; ``previous`` and ``next`` are the starts of the neighbouring parts (None at either end)."""

    text: str
    start: int
    end: int
    total: int
    previous: int | None
    next: int | None


def text_page(content: str, start: int, size: int) -> TextPage:
    """The part of ``content`` from ``start``, ``size`` characters at most.

    Raises:
        BadAddress: ``start`` is past the end of a non-empty text.
    """
    if content and start >= len(content):
        raise BadAddress("text_from", f"{start} is past the end of the text ({len(content)} characters)")
    end = min(len(content), start + size)
    return TextPage(
        text=content[start:end],
        start=start,
        end=end,
        total=len(content),
        previous=max(0, start - size) if start > 0 else None,
        next=end if end < len(content) else None,
    )


def live_at(fact: knowledge_pb2.Fact, instant: datetime) -> bool:
    """Whether ``fact`` is valid at ``instant``: from ``valid_from`` (inclusive) to ``valid_to`` (exclusive)."""
    start, end = from_timestamp(fact.valid_from), from_timestamp(fact.valid_to)
    return (start is None or start <= instant) and (end is None or instant < end)


def timeline(
    facts: list[knowledge_pb2.Fact], as_of: datetime
) -> tuple[datetime, datetime, list[dict[str, Any]]]:
    """The span the time line covers and, per fact, its bar (left and width in percent of the span)."""
    starts = [s for f in facts if (s := from_timestamp(f.valid_from))]
    ends = [e for f in facts if (e := from_timestamp(f.valid_to))]
    low = min([*starts, as_of]) - timedelta(days=1)
    high = max([*ends, *starts, as_of]) + timedelta(days=1)
    span = (high - low).total_seconds()
    rows = []
    for fact in facts:
        start = from_timestamp(fact.valid_from) or low
        closed = from_timestamp(fact.valid_to)
        end = closed or high
        rows.append(
            {
                "fact": fact,
                "from": instant_text(from_timestamp(fact.valid_from)),
                "to": instant_text(from_timestamp(fact.valid_to)),
                "from_epoch": int(start.timestamp()),
                "to_epoch": int(closed.timestamp()) if closed else 0,
                "left": round(100 * (start - low).total_seconds() / span, 2),
                "width": max(0.5, round(100 * (end - start).total_seconds() / span, 2)),
                "live": live_at(fact, as_of),
            }
        )
    return low, high, rows


def build(view: PageView) -> dict[str, Any]:
    """Values of node.html."""
    key = view.param("key")
    ns = view.address.namespace
    as_of = view.address.as_of or datetime.now(UTC).replace(microsecond=0)
    values: dict[str, Any] = {"title": f"Node {key}" if key else "Node", "key": key, "source": None}
    if not (key and ns):
        return values
    source_response = view.gateway.call_rpc(
        view.gateway.client.get_source,
        source_service_pb2.GetSourceRequest(namespace=ns, natural_key=key),
    )
    source = source_response.source if source_response else None
    text = text_page(
        source.content if source is not None else "",
        int_param(view.request, "text_from", 0, 0, MAX_TEXT_FROM),
        view.config.text_page_chars,
    )
    chunks: list[retrieval_service_pb2.SearchHit] = []
    if source is not None and source.chunk_count:
        found = view.gateway.call_rpc(
            view.gateway.client.search,
            retrieval_service_pb2.SearchRequest(
                namespace=ns,
                query=source.title or key,
                node_keys=[key],
                top_k=min(source.chunk_count, CHUNK_LIMIT),
            ),
        )
        chunks = sorted(found.hits, key=lambda hit: hit.chunk_order) if found else []
    outgoing, next_out = _facts(view, "subject", key, view.param("out_page"))
    incoming, next_in = _facts(view, "object", key, view.param("in_page"))
    low, high, out_rows = timeline(outgoing + incoming, as_of)
    rows_out, rows_in = out_rows[: len(outgoing)], out_rows[len(outgoing) :]
    # Each fact's row id on the page (a fact in both tables, subject and object alike, keeps the first).
    anchors: dict[str, str] = {}
    for direction, facts in (("out", outgoing), ("in", incoming)):
        for fact in facts:
            anchors.setdefault(fact.fact_id, f"{direction}-{fact.fact_id}")
    return {
        **values,
        "source": source,
        "text": text,
        "chunks": chunks,
        "rows_out": rows_out,
        "rows_in": rows_in,
        "anchors": anchors,
        "next_out": next_out,
        "next_in": next_in,
        "low": int(low.timestamp()),
        "high": int(high.timestamp()),
        "low_text": instant_text(low),
        "high_text": instant_text(high),
        "slider": int(as_of.timestamp()),
        "slider_text": instant_text(as_of),
    }
