"""Audit events in the graph (docs/explanation/knowledge-model.md; docs/how-to/tokens-and-scopes.md).

An audit event is a vertex of type ``audit_event`` (key ``audit_event:<event_id>``) linked by an
``IN_TRACE`` edge to the anchor vertex of its trace, type ``pc_trace`` (key ``pc_trace:<trace_id>``, one
per (namespace, trace_id)), both in the namespace where the event happened. Both live in the ordinary
graph: a ``graph_nodes`` registry row (which serialises writers and carries the event's visibility
scopes) plus a vertex in the AGE label table, written through `GraphStore`.

Events are immutable: `AuditStore.insert_event` creates the vertex only when its key is new
(`GraphStore.insert_node_once`), so a retried event with the same key (a client event id) changes
nothing and returns the stored one.

Its SQL and Cypher are static named queries (``sql/queries/audit.sql``: the anchor's node type, the events
of a trace); the vertices and the edge are written through `GraphStore`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg

from common.kernel.errors import FailedPrecondition
from common.kernel.identifiers import graph_label
from common.storage.graph_store import GraphStore, NodeWrite
from common.storage.named_queries import Queries
from common.storage.visibility import EVERYTHING, Visibility

AUDIT_EVENT_TYPE = "audit_event"
TRACE_TYPE = "pc_trace"
TRACE_EDGE = "IN_TRACE"
# Their labels (`graph_label`), also spelled out in the Cypher of ``audit_events_of_trace``
# (sql/queries/audit.sql; a unit test checks they agree). IN_TRACE is an internal edge: no fact
# predicate can produce its label.
AUDIT_EVENT_LABEL = graph_label("node_type", AUDIT_EVENT_TYPE)
TRACE_LABEL = graph_label("node_type", TRACE_TYPE)
TRACE_EDGE_LABEL = graph_label("internal_edge", TRACE_EDGE)


def event_key(event_id: str) -> str:
    """Natural key of an audit event vertex: ``audit_event:<event_id>``."""
    return f"{AUDIT_EVENT_TYPE}:{event_id}"


def trace_key(trace_id: str) -> str:
    """Natural key of a trace anchor vertex: ``pc_trace:<trace_id>``."""
    return f"{TRACE_TYPE}:{trace_id}"


class AuditStore:
    """Writes and reads audit event vertices and their trace anchors."""

    def __init__(self, graph: GraphStore) -> None:
        self.graph = graph
        self.queries = Queries.for_settings("audit.sql", graph.database.settings)

    def insert_event(
        self,
        conn: psycopg.Connection[Any],
        *,
        namespace: str,
        event_id: str,
        trace_id: str,
        title: str,
        properties: dict[str, Any],
        now: datetime,
    ) -> tuple[bool, dict[str, Any]]:
        """Writes one event vertex, its trace anchor (created on first use) and the IN_TRACE edge.

        Args:
            properties: the event's ``props`` (action, details, scopes, ...); ``props.scopes`` becomes the
                registry's visibility scopes.

        Returns:
            (created, props): created False when the event key existed already (nothing was written); props
            are the stored event's ``props``.
        """
        anchor = NodeWrite(
            namespace=namespace,
            natural_key=trace_key(trace_id),
            node_type=TRACE_TYPE,
            title=trace_id,
            source_id=trace_id,
            origin="audit",
            props={"trace_id": trace_id},
        )
        node = NodeWrite(
            namespace=namespace,
            natural_key=event_key(event_id),
            node_type=AUDIT_EVENT_TYPE,
            title=title,
            source_id=trace_id,
            origin="audit",
            props=properties,
        )
        created = self.graph.insert_node_once(conn, node, now=now)
        if not created:
            stored = self.graph.get_node(conn, namespace, node.natural_key)
            props = stored.get("props") if isinstance(stored, dict) else None
            return False, dict(props) if isinstance(props, dict) else {}
        if not self.graph.insert_node_once(conn, anchor, now=now):
            existing = conn.execute(
                self.queries["node_type_of_key"], (namespace, anchor.natural_key)
            ).fetchone()
            if existing is None or existing[0] != TRACE_TYPE:
                # Another write path took the anchor's key: refuse rather than lose the event silently.
                raise FailedPrecondition(
                    f"the key {anchor.natural_key!r} belongs to a node that is not a trace anchor; use another trace_id",
                    reason="TRACE_KEY_TAKEN",
                )
        self.graph.create_edge(
            conn,
            namespace=namespace,
            edge_label=TRACE_EDGE_LABEL,
            source=(node.natural_key, AUDIT_EVENT_LABEL),
            target=(anchor.natural_key, TRACE_LABEL),
            properties={"namespace": namespace, "trace_id": trace_id},
        )
        return True, properties

    def events_of_trace(
        self,
        conn: psycopg.Connection[Any],
        namespace: str,
        trace_id: str,
        *,
        visibility: Visibility = EVERYTHING,
    ) -> list[dict[str, Any]]:
        """The ``props`` of the audit events linked to the trace's anchor that ``visibility`` may see, in
        no particular order (callers sort by ``recorded_at``)."""
        anchor = trace_key(trace_id)
        if not self.graph.node_labels(conn, namespace, [anchor]):
            return []
        rows = self.graph.cypher_rows(
            conn, self.queries["audit_events_of_trace"], {"namespace": namespace, "anchor": anchor}
        )
        found = {str(key): props for key, props in rows if isinstance(props, dict)}
        visible = self.graph.node_labels(conn, namespace, list(found), visibility=visibility)
        return [props for key, props in found.items() if key in visible]

    def ensure_labels(self) -> None:
        """Creates the audit labels before first use (outside any transaction; ARCHITECTURE.md)."""
        self.graph.ensure_label(AUDIT_EVENT_LABEL, "vertex")
        self.graph.ensure_label(TRACE_LABEL, "vertex")
        self.graph.ensure_label(TRACE_EDGE_LABEL, "edge")


__all__ = [
    "AUDIT_EVENT_LABEL",
    "AUDIT_EVENT_TYPE",
    "TRACE_EDGE",
    "TRACE_EDGE_LABEL",
    "TRACE_LABEL",
    "TRACE_TYPE",
    "AuditStore",
    "event_key",
    "trace_key",
]
