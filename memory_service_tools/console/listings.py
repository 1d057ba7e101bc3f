"""The listings of the start page and the audit page, read through the services like every page.

`namespace_overviews` lists the namespaces a token can see (NamespaceService.ListNamespaces) with each
one's counts (GetNamespaceStats) and admitted kinds. `audit_events` lists a namespace's audit events with
the service's own filters and paging (AuditService.ListAuditEvents, admins only), or the events and
journaled compilations of one trace (TraceService.GetTrace, any reader of the namespace).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from dataclasses import field
from datetime import datetime

from memory_service_grpc_client.memory.v1 import audit_service_pb2
from memory_service_grpc_client.memory.v1 import domain_pack_service_pb2
from memory_service_grpc_client.memory.v1 import namespace_service_pb2
from memory_service_grpc_client.memory.v1 import trace_service_pb2
from memory_service_tools.console.gateway import INGEST
from memory_service_tools.console.gateway import QUERY
from memory_service_tools.console.gateway import Gateway
from memory_service_tools.console.trace_view import Compilation
from memory_service_tools.console.trace_view import compilation_of
from memory_service_tools.console.views import from_timestamp
from memory_service_tools.console.views import struct_dict
from memory_service_tools.console.views import to_timestamp

MAX_NAMESPACE_ROWS = 50
"""Namespaces the start page counts in detail (three reads each); a prefix narrows a longer list."""


@dataclass
class NamespaceOverview:
    """What the token can see of one namespace (every count covers only what its scopes reach).

    Attributes:
        namespace: the namespace.
        readable: False when the service refused the token (no read right on the namespace).
        counted: True when GetNamespaceStats answered (the counts below are then real).
        observations: observations by status.
        nodes: graph nodes by type.
        live_facts: facts valid now.
        closed_facts: facts whose interval has ended.
        chunks: searchable chunks.
        embedding_backlog: chunks still waiting for their embedding.
        memories: memory records by tier.
        kinds: the domain-pack kinds the namespace admits (empty: any).
    """

    namespace: str
    readable: bool = True
    counted: bool = False
    observations: dict[str, int] = field(default_factory=dict)
    nodes: dict[str, int] = field(default_factory=dict)
    live_facts: int = 0
    closed_facts: int = 0
    chunks: int = 0
    embedding_backlog: int = 0
    memories: dict[str, int] = field(default_factory=dict)
    kinds: list[str] = field(default_factory=list)


@dataclass
class NamespaceListing:
    """The start page's rows, how many listed namespaces did not fit, and whether the service has more
    namespaces after the first page it was asked for."""

    overviews: list[NamespaceOverview] = field(default_factory=list)
    not_shown: int = 0
    more: bool = False


def namespace_overviews(gateway: Gateway, also: Iterable[str], prefix: str = "") -> NamespaceListing:
    """The namespaces starting with ``prefix`` that the visitor's token can see, and the namespaces in
    ``also`` (shown even when they hold nothing, or nothing this token may read), by name.

    A namespace the token may not read is one row that says so, not a page of errors; a service that is
    down is named once at the top and the rows stay with unknown counts.
    """
    listed = gateway.call_rpc(
        gateway.client.list_namespaces,
        namespace_service_pb2.ListNamespacesRequest(prefix=prefix, page_size=MAX_NAMESPACE_ROWS),
    )
    seen = {item.namespace for item in listed.namespaces} if listed is not None else set()
    names = sorted(seen | set(also))
    listing = NamespaceListing(
        not_shown=max(0, len(names) - MAX_NAMESPACE_ROWS),
        more=listed is not None and bool(listed.next_page_token),
    )
    query_down = listed is None and QUERY in gateway.down_services()
    for name in names[:MAX_NAMESPACE_ROWS]:
        overview = NamespaceOverview(name)
        listing.overviews.append(overview)
        if query_down or _count(gateway, overview):
            _admitted_kinds(gateway, overview)
    return listing


def _admitted_kinds(gateway: Gateway, overview: NamespaceOverview) -> None:
    kinds = gateway.call_rpc(
        gateway.client.get_namespace_kinds,
        domain_pack_service_pb2.GetNamespaceKindsRequest(namespace=overview.namespace),
        service=INGEST,
    )
    if kinds is not None:
        overview.kinds = list(kinds.kinds)


def _count(gateway: Gateway, overview: NamespaceOverview) -> bool:
    """Fills ``overview`` from GetNamespaceStats. False when the token may not read the namespace or the
    service refused the name (nothing else is worth asking about it); True when counted, or when only
    query_service is down (ingest_service may still answer)."""
    failures_before = len(gateway.failures)
    stats = gateway.call_rpc(
        gateway.client.get_namespace_stats,
        namespace_service_pb2.GetNamespaceStatsRequest(namespace=overview.namespace),
    )
    if stats is None:
        refused = [f for f in gateway.failures[failures_before:] if f.code == "PERMISSION_DENIED"]
        if refused:
            overview.readable = False
            del gateway.failures[failures_before:]
            return False
        return any(f.down for f in gateway.failures[failures_before:])
    overview.counted = True
    overview.observations = dict(stats.observations_by_status)
    overview.nodes = dict(stats.nodes_by_type)
    overview.live_facts = stats.live_fact_count
    overview.closed_facts = stats.closed_fact_count
    overview.chunks = stats.chunk_count
    overview.embedding_backlog = stats.embedding_backlog
    overview.memories = dict(stats.memories_by_tier)
    return True


@dataclass(frozen=True)
class AuditFilter:
    """What the audit page narrows to; empty fields match everything.

    ``since`` is inclusive and ``until`` exclusive, as in ListAuditEvents. ``page_token`` is the
    ``next_page_token`` of the previous page (the service checks it was issued for the same filters).
    """

    trace_id: str = ""
    action: str = ""
    principal: str = ""
    node: str = ""
    since: datetime | None = None
    until: datetime | None = None
    page_size: int = 100
    page_token: str = ""


@dataclass
class AuditListing:
    """Audit events (rows as dicts for the template) and, for one trace, its journaled context
    compilations; ``next_page_token`` is empty on the last page."""

    events: list[dict[str, object]] = field(default_factory=list)
    compilations: list[Compilation] = field(default_factory=list)
    next_page_token: str = ""
    read: bool = False


def _event_row(event: audit_service_pb2.AuditEvent, when: datetime | None) -> dict[str, object]:
    return {
        "time": when,
        "action": event.action,
        "principal": event.principal,
        "target_key": event.target_key,
        "trace_id": event.trace_id,
        "scopes": list(event.scopes),
        "details": struct_dict(event.details),
        "event_id": event.event_id,
    }


def audit_events(gateway: Gateway, namespace: str, wanted: AuditFilter) -> AuditListing:
    """The audit events of ``namespace`` that match ``wanted``, newest first, one page at a time
    (ListAuditEvents: a token without the admin right gets its PERMISSION_DENIED on the page); with a
    trace id, the events and compilations of that trace, oldest first (GetTrace, filtered here)."""
    if wanted.trace_id:
        return _trace_events(gateway, namespace, wanted)
    listing = AuditListing()
    response = gateway.call_rpc(
        gateway.client.list_audit_events,
        audit_service_pb2.ListAuditEventsRequest(
            namespace=namespace,
            action=wanted.action,
            principal=wanted.principal,
            node_key=wanted.node,
            start_time=to_timestamp(wanted.since),
            end_time=to_timestamp(wanted.until),
            page_size=wanted.page_size,
            page_token=wanted.page_token,
        ),
    )
    if response is None:
        return listing
    listing.read = True
    listing.events = [_event_row(e, from_timestamp(e.record_time)) for e in response.events]
    listing.next_page_token = response.next_page_token
    return listing


def _trace_events(gateway: Gateway, namespace: str, wanted: AuditFilter) -> AuditListing:
    listing = AuditListing()
    response = gateway.call_rpc(
        gateway.client.get_trace,
        trace_service_pb2.GetTraceRequest(namespace=namespace, trace_id=wanted.trace_id),
    )
    if response is None:
        return listing
    listing.read = True
    for entry in response.trace.entries:
        when = from_timestamp(entry.time)
        if entry.HasField("audit_event"):
            event = entry.audit_event
            if wanted.action and event.action != wanted.action:
                continue
            if wanted.principal and event.principal != wanted.principal:
                continue
            if wanted.node and event.target_key != wanted.node:
                continue
            if when is not None and (
                (wanted.since and when < wanted.since) or (wanted.until and when >= wanted.until)
            ):
                continue
            listing.events.append(_event_row(event, when))
        elif entry.HasField("context_compilation"):
            compilation = entry.context_compilation
            listing.compilations.append(
                compilation_of(
                    when,
                    compilation.compilation_id,
                    struct_dict(compilation.request),
                    [struct_dict(d) for d in compilation.decisions],
                    compilation.hidden_decision_count,
                )
            )
    return listing
