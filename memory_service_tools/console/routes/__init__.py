"""One module per page; `PAGES` maps each address to its template and builder."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from memory_service_tools.console.page_view import PageView
from memory_service_tools.console.routes import audit
from memory_service_tools.console.routes import graph
from memory_service_tools.console.routes import health
from memory_service_tools.console.routes import memories
from memory_service_tools.console.routes import namespaces
from memory_service_tools.console.routes import node
from memory_service_tools.console.routes import observation
from memory_service_tools.console.routes import pack
from memory_service_tools.console.routes import search

PAGES: tuple[tuple[str, str, Callable[[PageView], dict[str, Any]]], ...] = (
    ("/", "namespaces.html", namespaces.build),
    ("/search", "search.html", search.build),
    ("/pack", "pack.html", pack.build),
    ("/node", "node.html", node.build),
    ("/graph", "graph.html", graph.build),
    ("/observation", "observation.html", observation.build),
    ("/audit", "audit.html", audit.build),
    ("/memories", "memories.html", memories.build),
    ("/health", "health.html", health.build),
)
