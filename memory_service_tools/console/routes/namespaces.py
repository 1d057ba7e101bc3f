"""The start page: the namespaces the console lists and the one in the address, with their counts."""

from __future__ import annotations

from typing import Any

from memory_service_tools.console.listings import namespace_overview
from memory_service_tools.console.page_view import PageView


def build(view: PageView) -> dict[str, Any]:
    """Values of namespaces.html: one `NamespaceOverview` per namespace."""
    names = list(
        dict.fromkeys(
            [*view.config.namespaces, *([view.address.namespace] if view.address.namespace else [])]
        )
    )
    return {
        "title": "Namespaces",
        "overviews": [namespace_overview(view.gateway, name) for name in names],
    }
