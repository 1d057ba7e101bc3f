"""Audit events in the graph (docs/explanation/knowledge-model.md; docs/how-to/tokens-and-scopes.md).

An audit event is a vertex of type ``audit_event`` (key ``audit_event:<event_id>``) linked by an
``IN_TRACE`` edge to the anchor vertex of its trace, type ``pc_trace`` (key ``pc_trace:<trace_id>``, one
per (namespace, trace_id)), both in the namespace where the event happened. Both live in the ordinary
graph: a ``graph_nodes`` registry row (which serialises writers and carries the event's visibility
scopes) plus a vertex in the AGE label table, written through `GraphStore`.

Events are immutable: `AuditStore.insert_event` creates the vertex only when its key is new
(`GraphStore.insert_node_once`), so a retried event with the same key (a client event id) changes
nothing and returns the stored one.

Every event also gets a row in the relational index ``audit_events`` (``sql/0031_audit_event_index.sql``)
in the same transaction, which `AuditStore.list_events` filters and pages with B-tree indexes.

Who may read an event (`AuditReadAccess`): a namespace admin every event of the namespace; anyone else the
events it recorded itself (its principal) and those whose restricting scopes it holds (`Visibility`).

Its SQL and Cypher are static named queries (``sql/queries/audit.sql``: the anchor's node type, the events
of a trace, the index row), except the listing, whose filters and visibility predicate are composed at run
time from fixed fragments; the vertices and the edge are written through `GraphStore`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from common.kernel.errors import FailedPrecondition
from common.kernel.identifiers import graph_label
from common.storage.graph.store import GraphStore
from common.storage.graph.store import NodeWrite
from common.storage.named_queries import Queries
from common.storage.row_count import fetch_count
from common.storage.tables import table_identifiers
from common.storage.visibility import EVERYTHING
from common.storage.visibility import Visibility

AUDIT_EVENT_TYPE = "audit_event"
TRACE_TYPE = "pc_trace"
TRACE_EDGE = "IN_TRACE"
# Their labels (`graph_label`), also spelled out in the Cypher of ``audit_events_of_trace``
# (sql/queries/audit.sql; a unit test checks they agree). IN_TRACE is an internal edge: no fact
# predicate can produce its label.
AUDIT_EVENT_LABEL = graph_label("node_type", AUDIT_EVENT_TYPE)
TRACE_LABEL = graph_label("node_type", TRACE_TYPE)
TRACE_EDGE_LABEL = graph_label("internal_edge", TRACE_EDGE)


@dataclass(frozen=True)
class AuditReadAccess:
    """Which audit events of a namespace one caller may read.

    Attributes:
        visibility: the caller's visibility scopes (an event whose restricting scopes it holds is shown).
        principal: the caller's principal name: the events it recorded itself are shown whatever their
            scopes; empty for in-process and development callers.
        admin: the caller holds the admin right on the namespace: every event is shown.
    """

    visibility: Visibility = EVERYTHING
    principal: str = ""
    admin: bool = False

    @property
    def everything(self) -> bool:
        """True when no event of the namespace is hidden from the caller."""
        return self.admin or self.visibility.unrestricted

    def allows(self, event_scopes: list[str] | None, event_principal: str) -> bool:
        """True when the caller may read an event with these scopes recorded by ``event_principal``."""
        if self.everything or (self.principal and event_principal == self.principal):
            return True
        return self.visibility.allows(event_scopes)


ALL_AUDIT_EVENTS = AuditReadAccess()


@dataclass(frozen=True)
class AuditEventQuery:
    """Filters and position of one ListAuditEvents page (every set filter must hold).

    Attributes:
        namespace: the namespace listed.
        action: only this action; "" every action.
        principal: only events recorded by this principal; "" every principal.
        node_key: only events whose target_key is this key or whose ``details.natural_keys`` lists it.
        start: recorded at or after this instant (inclusive); None: no lower bound.
        end: recorded before this instant (exclusive); None: no upper bound.
        after: the (recorded_at, event_id) of the previous page's last event; None: the first page.
        limit: rows to fetch.
    """

    namespace: str
    action: str = ""
    principal: str = ""
    node_key: str = ""
    start: datetime | None = None
    end: datetime | None = None
    after: tuple[datetime, str] | None = None
    limit: int = 100


def event_key(event_id: str) -> str:
    """Natural key of an audit event vertex: ``audit_event:<event_id>``."""
    return f"{AUDIT_EVENT_TYPE}:{event_id}"


def trace_key(trace_id: str) -> str:
    """Natural key of a trace anchor vertex: ``pc_trace:<trace_id>``."""
    return f"{TRACE_TYPE}:{trace_id}"


def _trail_vertex(
    namespace: str, key: str, node_type: str, title: str, trace_id: str, props: dict[str, Any]
) -> NodeWrite:
    """A vertex of the audit trail (an event or a trace anchor): of origin ``audit``, sourced from its
    trace."""
    return NodeWrite(
        namespace=namespace,
        natural_key=key,
        node_type=node_type,
        title=title,
        source_id=trace_id,
        origin="audit",
        props=props,
    )


class AuditStore:
    """Writes and reads audit event vertices and their trace anchors."""

    def __init__(self, graph: GraphStore) -> None:
        self.graph = graph
        self.queries = Queries.for_settings("audit.sql", graph.database.settings)
        self.table = table_identifiers(graph.database.settings)["audit_events"]

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
        anchor_props = {"trace_id": trace_id}
        anchor = _trail_vertex(namespace, trace_key(trace_id), TRACE_TYPE, trace_id, trace_id, anchor_props)
        node = _trail_vertex(namespace, event_key(event_id), AUDIT_EVENT_TYPE, title, trace_id, properties)
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
        self.graph.create_edges(
            conn,
            namespace=namespace,
            edge_label=TRACE_EDGE_LABEL,
            edges=[(node.natural_key, anchor.natural_key, {"namespace": namespace, "trace_id": trace_id})],
        )
        conn.execute(
            self.queries["insert_audit_event_row"],
            (
                namespace,
                event_id,
                str(properties.get("action", "")),
                str(properties.get("principal", "")),
                str(properties.get("target_key", "")),
                trace_id,
                now,
                [str(scope) for scope in properties.get("scopes") or []],
                Jsonb(properties),
            ),
        )
        return True, properties

    def events_recorded_before(
        self, conn: psycopg.Connection[Any], namespace: str, before: datetime, limit: int
    ) -> list[tuple[str, str]]:
        """[(event_id, trace_id)] of at most ``limit`` events of ``namespace`` recorded before ``before``,
        oldest first (retention)."""
        rows = conn.execute(
            self.queries["audit_events_recorded_before"], (namespace, before, limit)
        ).fetchall()
        return [(str(event_id), str(trace_id)) for event_id, trace_id in rows]

    def count_events_recorded_before(
        self, conn: psycopg.Connection[Any], namespace: str, before: datetime
    ) -> int:
        """How many events of ``namespace`` were recorded before ``before`` (retention preview)."""
        return fetch_count(conn, self.queries["count_audit_events_recorded_before"], (namespace, before))

    def delete_events(
        self, conn: psycopg.Connection[Any], namespace: str, events: list[tuple[str, str]]
    ) -> int:
        """Deletes the events ``[(event_id, trace_id)]`` of ``namespace``: their vertices (with their
        IN_TRACE edges), registry and index rows, and the anchors of traces no event names any more.
        Returns how many events were deleted."""
        if not events:
            return 0
        event_ids = sorted({event_id for event_id, _ in events})
        gone = self.graph.delete_nodes(conn, namespace, [event_key(event_id) for event_id in event_ids])
        conn.execute(self.queries["delete_audit_event_rows"], (namespace, event_ids))
        traces = sorted({trace_id for _, trace_id in events})
        orphaned = [
            str(row[0]) for row in conn.execute(self.queries["traces_without_events"], (traces, namespace))
        ]
        self.graph.delete_nodes(conn, namespace, [trace_key(trace_id) for trace_id in orphaned])
        return len(gone)

    def list_events(
        self, conn: psycopg.Connection[Any], query: AuditEventQuery, *, access: AuditReadAccess
    ) -> list[dict[str, Any]]:
        """The ``props`` of up to ``query.limit`` events of ``query.namespace`` that ``access`` may read and
        every filter of ``query`` holds for, newest first (recorded_at, then event_id, descending), after
        ``query.after``."""
        conditions: list[sql.Composable] = [sql.SQL("namespace = %(namespace)s")]
        params: dict[str, Any] = {"namespace": query.namespace, "limit": query.limit}
        if query.action:
            conditions.append(sql.SQL("action = %(action)s"))
            params["action"] = query.action
        if query.principal:
            conditions.append(sql.SQL("principal = %(principal)s"))
            params["principal"] = query.principal
        if query.node_key:
            conditions.append(
                sql.SQL("(target_key = %(node_key)s OR props -> 'details' -> 'natural_keys' ? %(node_key)s)")
            )
            params["node_key"] = query.node_key
        if query.start is not None:
            conditions.append(sql.SQL("recorded_at >= %(start)s"))
            params["start"] = query.start
        if query.end is not None:
            conditions.append(sql.SQL("recorded_at < %(end)s"))
            params["end"] = query.end
        if query.after is not None:
            conditions.append(sql.SQL("(recorded_at, event_id) < (%(after_time)s, %(after_id)s)"))
            params["after_time"], params["after_id"] = query.after
        if not access.everything:
            visible = access.visibility.array_predicate(sql.SQL("scopes"))
            params.update(access.visibility.params)
            if access.principal:
                visible = sql.SQL("({} OR principal = %(reader)s)").format(visible)
                params["reader"] = access.principal
            conditions.append(visible)
        statement = sql.SQL(
            "SELECT props FROM {table} WHERE {where} ORDER BY recorded_at DESC, event_id DESC LIMIT %(limit)s"
        ).format(table=self.table, where=sql.SQL(" AND ").join(conditions))
        with conn.cursor(row_factory=dict_row) as cursor:
            rows = cursor.execute(statement, params).fetchall()
        return [dict(row["props"]) for row in rows]

    def events_of_trace(
        self,
        conn: psycopg.Connection[Any],
        namespace: str,
        trace_id: str,
        *,
        access: AuditReadAccess = ALL_AUDIT_EVENTS,
    ) -> list[dict[str, Any]]:
        """The ``props`` of the audit events linked to the trace's anchor that ``access`` may read, in
        no particular order (callers sort by ``recorded_at``)."""
        anchor = trace_key(trace_id)
        if not self.graph.node_labels(conn, namespace, [anchor]):
            return []
        rows = self.graph.cypher_rows(
            conn, self.queries["audit_events_of_trace"], {"namespace": namespace, "anchor": anchor}
        )
        found = {str(key): props for key, props in rows if isinstance(props, dict)}
        if access.everything:
            return list(found.values())
        visible = self.graph.node_labels(conn, namespace, list(found), visibility=access.visibility)
        return [
            props
            for key, props in found.items()
            if key in visible or (access.principal and props.get("principal") == access.principal)
        ]

    def ensure_labels(self) -> None:
        """Creates the audit labels before first use (outside any transaction; docs/explanation/architecture.md)."""
        self.graph.ensure_label(AUDIT_EVENT_LABEL, "vertex")
        self.graph.ensure_label(TRACE_LABEL, "vertex")
        self.graph.ensure_label(TRACE_EDGE_LABEL, "edge")


__all__ = [
    "ALL_AUDIT_EVENTS",
    "AUDIT_EVENT_LABEL",
    "AUDIT_EVENT_TYPE",
    "TRACE_EDGE",
    "TRACE_EDGE_LABEL",
    "TRACE_LABEL",
    "TRACE_TYPE",
    "AuditEventQuery",
    "AuditReadAccess",
    "AuditStore",
    "event_key",
    "trace_key",
]
