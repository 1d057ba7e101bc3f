"""The two reads that wait on RPCs not yet served, each in one function so switching over is one edit.

`namespace_overview` shows what existing reads give (the embedding backlog, the domain-pack kinds); a NamespaceService with ListNamespaces/GetNamespaceStats
replaces its body. `audit_events` lists the audit events of one journaled trace (TraceService.GetTrace)
filtered here; AuditService.ListAuditEvents replaces its body with a paged, server-filtered listing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from memory_service_grpc_client.memory.v1 import (
    domain_pack_service_pb2,
    observation_service_pb2,
    trace_service_pb2,
)

from memory_service_tools.console.gateway import INGEST, QUERY, Gateway
from memory_service_tools.console.views import from_timestamp, struct_dict


@dataclass
class NamespaceOverview:
    """What the token can see of one namespace.

    Attributes:
        namespace: the namespace.
        readable: False when the services refused every read of it.
        live_facts: facts valid now (None: not served yet).
        all_facts: facts with their history, closed ones included (None: not served yet).
        pending_chunks: chunks waiting for their embedding (None: not readable).
        kinds: the domain-pack kinds the namespace admits (empty: any).
    """

    namespace: str
    readable: bool = True
    live_facts: int | None = None
    all_facts: int | None = None
    pending_chunks: int | None = None
    kinds: list[str] = field(default_factory=list)


def namespace_overview(gateway: Gateway, namespace: str) -> NamespaceOverview:
    """Counts of ``namespace`` as the visitor's token sees them (two reads of ingest_service).

    Fact, node and chunk counts wait for a namespace statistics RPC: ListFacts needs a subject, predicate
    or object, and the console reads nothing but RPCs, so they stay None here.
    """
    overview = NamespaceOverview(namespace)
    failures_before = len(gateway.failures)
    backlog = gateway.call(
        INGEST,
        "ObservationService.GetEmbeddingBacklog",
        lambda: gateway.client.get_embedding_backlog(
            observation_service_pb2.GetEmbeddingBacklogRequest(namespace=namespace)
        ),
    )
    if backlog is None:
        # A namespace the token cannot read is one row that says so, not a page of errors; a service
        # that is down stays on the page.
        if not any(f.down for f in gateway.failures[failures_before:]):
            overview.readable = False
            del gateway.failures[failures_before:]
        return overview
    overview.pending_chunks = backlog.pending_chunks
    kinds = gateway.call(
        INGEST,
        "DomainPackService.GetNamespaceKinds",
        lambda: gateway.client.get_namespace_kinds(
            domain_pack_service_pb2.GetNamespaceKindsRequest(namespace=namespace)
        ),
    )
    if kinds is not None:
        overview.kinds = list(kinds.kinds)
    return overview


@dataclass(frozen=True)
class AuditFilter:
    """What the audit page narrows to; empty fields match everything."""

    trace_id: str = ""
    action: str = ""
    principal: str = ""
    node: str = ""
    since: datetime | None = None
    until: datetime | None = None


@dataclass
class AuditListing:
    """Audit events and journaled context compilations of one listing (rows as dicts for the template)."""

    events: list[dict[str, object]] = field(default_factory=list)
    compilations: list[dict[str, object]] = field(default_factory=list)
    needs_trace: bool = False


def audit_events(gateway: Gateway, namespace: str, wanted: AuditFilter) -> AuditListing:
    """The audit events of ``namespace`` that match ``wanted`` (today: those of one trace)."""
    listing = AuditListing()
    if not wanted.trace_id:
        listing.needs_trace = True
        return listing
    response = gateway.call(
        QUERY,
        "TraceService.GetTrace",
        lambda: gateway.client.get_trace(
            trace_service_pb2.GetTraceRequest(namespace=namespace, trace_id=wanted.trace_id)
        ),
    )
    if response is None:
        return listing
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
                (wanted.since and when < wanted.since) or (wanted.until and when > wanted.until)
            ):
                continue
            listing.events.append(
                {
                    "time": when,
                    "action": event.action,
                    "principal": event.principal,
                    "target_key": event.target_key,
                    "scopes": list(event.scopes),
                    "details": struct_dict(event.details),
                    "event_id": event.event_id,
                }
            )
        elif entry.HasField("context_compilation"):
            compilation = entry.context_compilation
            listing.compilations.append(
                {
                    "time": when,
                    "compilation_id": compilation.compilation_id,
                    "request": struct_dict(compilation.request),
                    "decisions": [struct_dict(d) for d in compilation.decisions],
                    "hidden": compilation.hidden_decision_count,
                }
            )
    return listing
