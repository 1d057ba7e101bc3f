"""Edges of the AGE graph, written and counted with plain SQL over the label tables.

Writes go to AGE's label tables with an agtype map as a bound parameter (this is what AGE itself stores
for CREATE/SET), without Cypher's planning of anonymous end nodes across every vertex label, which made a
SET on one fact edge cost milliseconds. The ends' vertex ids come from the ``graph_nodes`` registry
(`common.storage.graph.node_registry`). Every statement here names a label table (``{graph}.<label>``), so
all are composed with `psycopg.sql`; there is no named query of edges.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from common.kernel.identifiers import INTERNAL_EDGES
from common.kernel.identifiers import graph_label
from common.storage.graph.age import agtype_text
from common.storage.graph.node_registry import NodeRegistry
from common.storage.graph.node_registry import vertex_parameters

LINKS_TO_LABEL = graph_label("internal_edge", "LINKS_TO")

# The ends of edges ``(source_key, target_key, properties)`` with their vertex ids, one fenced primary-key
# look-up each (see `NodeRegistry._registered` for why not a join), in input order.
_EDGE_ENDS = (
    "SELECT (SELECT vertex_id FROM graph_nodes WHERE namespace = %(namespace)s AND natural_key = x.source_key) AS start_id,"
    " (SELECT vertex_id FROM graph_nodes WHERE namespace = %(namespace)s AND natural_key = x.target_key) AS end_id,"
    " x.properties::ag_catalog.agtype AS properties, x.position"
    " FROM unnest(%(sources)b::text[], %(targets)b::text[], %(properties)b::text[])"
    " WITH ORDINALITY AS x(source_key, target_key, properties, position) OFFSET 0"
)


def _edge_ends_params(namespace: str, ends: list[tuple[str, str, dict[str, Any]]]) -> dict[str, Any]:
    """The parameters of `_EDGE_ENDS` for edges ``(source_key, target_key, properties)``."""
    return {
        "namespace": namespace,
        "sources": [source for source, _, _ in ends],
        "targets": [target for _, target, _ in ends],
        "properties": [agtype_text(properties) for _, _, properties in ends],
    }


class GraphEdges(NodeRegistry):
    """Edge writes and counts; the base of `common.storage.graph.store.GraphStore`."""

    def edge_counts(
        self, conn: psycopg.Connection[Any], namespace: str, natural_key: str, label: str
    ) -> dict[str, int]:
        """Edge name -> number of edges touching the vertex of ``natural_key`` (either direction; a loop
        counts once). The name is the fact's predicate (its ``facts`` row) for a fact edge, else the
        internal edge's name (``LINKS_TO``, ``IN_TRACE``), never a label. Plain SQL over
        AGE's parent edge table: each edge label has B-tree indexes on ``start_id`` and ``end_id`` (a
        Cypher match with an anonymous end plans across every label)."""
        rows = conn.execute(
            sql.SQL(
                "WITH v AS (SELECT {vertex} AS id)"
                " SELECT f.predicate, c.relname, count(*) FROM {edges} e JOIN pg_class c ON c.oid = e.tableoid"
                " JOIN v ON e.start_id = v.id OR e.end_id = v.id"
                " LEFT JOIN facts f ON f.namespace = %(vertex_namespace)s"
                " AND f.fact_id = (ag_catalog.agtype_out(e.properties)::text)::jsonb ->> 'fact_id'"
                " GROUP BY f.predicate, c.relname"
            ).format(vertex=self._vertex_id(label), edges=self._table("_ag_label_edge")),
            vertex_parameters(namespace, natural_key),
        ).fetchall()
        internal = {graph_label("internal_edge", name): name for name in INTERNAL_EDGES}
        counts: dict[str, int] = {}
        for predicate, relname, count in rows:
            name = str(predicate) if predicate is not None else internal.get(str(relname), str(relname))
            counts[name] = counts.get(name, 0) + int(count)
        return counts

    def replace_links(
        self,
        conn: psycopg.Connection[Any],
        namespace: str,
        source_key: str,
        source_label: str,
        targets: dict[str, str],
    ) -> None:
        """Makes the LINKS_TO edges of ``source_key`` exactly ``targets`` (natural key -> label)."""
        self.ensure_label(LINKS_TO_LABEL, "edge")
        conn.execute(
            sql.SQL("DELETE FROM {} WHERE start_id = {}").format(
                self._table(LINKS_TO_LABEL), self._vertex_id(source_label)
            ),
            vertex_parameters(namespace, source_key),
        )
        self.create_edges(
            conn,
            namespace=namespace,
            edge_label=LINKS_TO_LABEL,
            edges=[(source_key, target_key, {"namespace": namespace}) for target_key in targets],
        )

    def create_edges(
        self,
        conn: psycopg.Connection[Any],
        *,
        namespace: str,
        edge_label: str,
        edges: list[tuple[str, str, dict[str, Any]]],
    ) -> None:
        """Creates the edges ``(source_key, target_key, properties)`` of ``edge_label`` with one statement.

        The ends' vertex ids come from graph_nodes (primary-key look-ups, no GIN look-up of the vertices);
        an edge whose end has no vertex is not created. Uniqueness of edges is the caller's: fact edges
        are created only by the writer whose facts row was inserted (one edge per fact_id).
        """
        if not edges:
            return
        self.ensure_label(edge_label, "edge")
        statement = sql.SQL(
            "INSERT INTO {} (start_id, end_id, properties)"
            f" SELECT e.start_id, e.end_id, e.properties FROM ({_EDGE_ENDS}) AS e"
            " WHERE e.start_id IS NOT NULL AND e.end_id IS NOT NULL ORDER BY e.position RETURNING 1"
        ).format(self._table(edge_label))
        pending = edges
        for attempt in range(2):
            created = conn.execute(statement, _edge_ends_params(namespace, pending)).fetchall()
            if len(created) == len(pending) or attempt:
                return
            # Some end has no recorded vertex id (a row written before migration 0006): record the ids
            # of the ends, then create the edges that were left out.
            labels = self._registered(conn, namespace, sorted({k for s, t, _ in pending for k in (s, t)}))
            pending = [edge for edge in pending if edge[0] in labels and edge[1] in labels]
            pending = self._without_edges(conn, namespace, edge_label, pending)
            if not pending:
                return

    def _without_edges(
        self,
        conn: psycopg.Connection[Any],
        namespace: str,
        edge_label: str,
        edges: list[tuple[str, str, dict[str, Any]]],
    ) -> list[tuple[str, str, dict[str, Any]]]:
        """The edges among ``edges`` that do not exist yet (same ends, same properties)."""
        rows = conn.execute(
            sql.SQL(
                f"SELECT e.position FROM ({_EDGE_ENDS}) AS e WHERE EXISTS (SELECT 1 FROM {{}} edge"
                " WHERE edge.start_id = e.start_id AND edge.end_id = e.end_id AND edge.properties = e.properties)"
            ).format(self._table(edge_label)),
            _edge_ends_params(namespace, edges),
        ).fetchall()
        present = {int(row[0]) for row in rows}
        return [edge for position, edge in enumerate(edges, start=1) if position not in present]

    def replace_fact_edge_properties(
        self,
        conn: psycopg.Connection[Any],
        *,
        namespace: str,
        edge_label: str,
        edges: list[tuple[str, str, str, dict[str, Any]]],
    ) -> None:
        """Replaces the property maps of fact edges ``(source_key, target_key, fact_id, properties)`` of
        ``edge_label`` in one statement (``properties`` holds the same ``fact_id``).

        Each edge is found from its ends' vertex ids (graph_nodes primary key, then the label's B-tree
        index on ``start_id``) and its ``fact_id`` property, instead of a GIN look-up of
        ``{namespace, fact_id}`` per edge, whose cost grows with the namespace (5 ms per edge at 50,000
        facts).
        """
        if not edges:
            return
        self.ensure_label(edge_label, "edge")
        # Legacy rows (before migration 0006) get their vertex ids first; one look-up per batch.
        self._registered(
            conn, namespace, sorted({key for source, target, _, _ in edges for key in (source, target)})
        )
        conn.execute(
            sql.SQL(
                "UPDATE {} edge SET properties = e.properties FROM ({}) AS e"
                " WHERE edge.start_id = e.start_id AND edge.end_id = e.end_id"
                " AND edge.properties ->> '\"fact_id\"'::ag_catalog.agtype = e.properties ->> '\"fact_id\"'::ag_catalog.agtype"
            ).format(self._table(edge_label), sql.SQL(_EDGE_ENDS)),
            _edge_ends_params(
                namespace, [(source, target, properties) for source, target, _, properties in edges]
            ),
        )


__all__ = ["LINKS_TO_LABEL", "GraphEdges"]
