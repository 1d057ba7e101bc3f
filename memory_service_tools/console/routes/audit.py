"""Audit: a namespace's events by action, principal, node and time, paged (`listings.audit_events`)."""

from __future__ import annotations

from typing import Any

from memory_service_tools.console.listings import AuditFilter
from memory_service_tools.console.listings import audit_events
from memory_service_tools.console.page_view import PageView
from memory_service_tools.console.views import int_param
from memory_service_tools.console.views import parse_instant

MAX_PAGE_SIZE = 1000  # ListAuditEvents' own bound


def build(view: PageView) -> dict[str, Any]:
    """Values of audit.html; ``page`` carries the previous page's next_page_token."""
    wanted = AuditFilter(
        trace_id=view.param("trace_id"),
        action=view.param("action"),
        principal=view.param("principal"),
        node=view.param("node"),
        since=parse_instant(view.param("since"), "since"),
        until=parse_instant(view.param("until"), "until"),
        page_size=int_param(view.request, "page_size", 100, 1, MAX_PAGE_SIZE),
        page_token=view.param("page"),
    )
    listing = audit_events(view.gateway, view.address.namespace, wanted) if view.address.namespace else None
    kept = {
        "ns": view.address.namespace,
        "action": wanted.action,
        "principal": wanted.principal,
        "node": wanted.node,
        "since": view.param("since"),
        "until": view.param("until"),
        "page_size": str(wanted.page_size),
    }
    filters = {name: value for name, value in kept.items() if value}
    return {
        "title": "Audit",
        "wanted": wanted,
        "listing": listing,
        "since": view.param("since"),
        "until": view.param("until"),
        "next_page": (
            {**filters, "page": listing.next_page_token} if listing and listing.next_page_token else None
        ),
    }
