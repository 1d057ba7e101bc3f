"""Audit: events by action, principal, node and time (`listings.audit_events`)."""

from __future__ import annotations

from typing import Any

from memory_service_tools.console.listings import AuditFilter, audit_events
from memory_service_tools.console.page_view import PageView
from memory_service_tools.console.views import parse_instant


def build(view: PageView) -> dict[str, Any]:
    """Values of audit.html."""
    wanted = AuditFilter(
        trace_id=view.param("trace_id"),
        action=view.param("action"),
        principal=view.param("principal"),
        node=view.param("node"),
        since=parse_instant(view.param("since"), "since"),
        until=parse_instant(view.param("until"), "until"),
    )
    listing = audit_events(view.gateway, view.address.namespace, wanted) if view.address.namespace else None
    return {
        "title": "Audit",
        "wanted": wanted,
        "listing": listing,
        "since": view.param("since"),
        "until": view.param("until"),
    }
