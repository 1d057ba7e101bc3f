"""The start page: the namespaces the token can see (and those the console or the address names), each
with its counts (`listings.namespace_overviews`)."""

from __future__ import annotations

from typing import Any

from memory_service_tools.console.listings import MAX_NAMESPACE_ROWS
from memory_service_tools.console.listings import namespace_overviews
from memory_service_tools.console.page_view import PageView


def build(view: PageView) -> dict[str, Any]:
    """Values of namespaces.html: one `NamespaceOverview` per namespace, by name."""
    prefix = view.param("prefix")
    also = [
        name
        for name in (*view.config.namespaces, view.address.namespace)
        if name and (name.startswith(prefix) or name == view.address.namespace)
    ]
    listing = namespace_overviews(view.gateway, also, prefix)
    return {
        "title": "Namespaces",
        "prefix": prefix,
        "overviews": listing.overviews,
        "not_shown": listing.not_shown,
        "more": listing.more,
        "max_rows": MAX_NAMESPACE_ROWS,
    }
