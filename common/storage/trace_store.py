"""Reads of a trace (docs/explanation/knowledge-model.md; TraceService.GetTrace): which items named by the
context compilations of a trace a caller may still see. The compilations themselves are read by
`ContextStore.traces`, the audit events by `AuditStore.events_of_trace`.

Both look-ups take the caller's visibility predicate, so they are composed with `psycopg.sql` (no named
query of this store).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import sql

from common.storage.fact_store import fact_visibility
from common.storage.graph.store import GraphStore
from common.storage.visibility import Visibility


class TraceStore:
    """Visibility look-ups for the items a trace names."""

    def __init__(self, graph: GraphStore) -> None:
        self.graph = graph

    def visible_node_keys(
        self,
        conn: psycopg.Connection[Any],
        namespace: str,
        natural_keys: Sequence[str],
        visibility: Visibility,
    ) -> set[str]:
        """The keys among ``natural_keys`` whose node exists and ``visibility`` may see."""
        return set(
            self.graph.node_labels(conn, namespace, list(dict.fromkeys(natural_keys)), visibility=visibility)
        )

    def visible_fact_ids(
        self, conn: psycopg.Connection[Any], namespace: str, fact_ids: Sequence[str], visibility: Visibility
    ) -> set[str]:
        """The ids among ``fact_ids`` whose fact exists and ``visibility`` may see (its scopes and both ends)."""
        if not fact_ids:
            return set()
        statement = sql.SQL(
            "SELECT f.fact_id FROM facts f WHERE f.namespace = %(namespace)s AND f.fact_id = ANY(%(ids)s) AND {visible}"
        ).format(visible=sql.SQL(" AND ").join(fact_visibility(visibility, sql.SQL("f."))))
        rows = conn.execute(
            statement, {"namespace": namespace, "ids": list(dict.fromkeys(fact_ids)), **visibility.params}
        ).fetchall()
        return {str(row[0]) for row in rows}


__all__ = ["TraceStore"]
