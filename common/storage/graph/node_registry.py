"""The ``graph_nodes`` registry: one row per vertex, keyed by (namespace, natural_key) (docs/explanation/architecture.md).

AGE has no unique property constraint and MERGE does not serialise across sessions, so every vertex has a
row in ``graph_nodes`` (primary key namespace + natural_key). A writer inserts that row first (``ON
CONFLICT DO NOTHING`` waits for a concurrent inserter of the same key) or locks it (``FOR UPDATE``), and
only then touches the vertex: one vertex per key, even under concurrency. The row also records the
vertex's label, visibility scopes and AGE id (``vertex_id``, migration 0006); rows written before 0006
get their id on first use (`NodeRegistry._registered`).

Static registry SQL is in ``sql/queries/graph.sql``; the look-ups that take a caller's visibility
predicate (`node_labels`, `hidden_keys`, `lock_node`) and the id recording of legacy rows (a label
table) are composed here.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from common.storage.graph.age import AgeGraph
from common.storage.graph.age import agtype_text
from common.storage.visibility import EVERYTHING
from common.storage.visibility import Visibility


def vertex_parameters(namespace: str, natural_key: str) -> dict[str, Any]:
    """The named parameters of `NodeRegistry._vertex_id`'s expression for the vertex of one key."""
    return {
        "vertex_namespace": namespace,
        "vertex_key": natural_key,
        "vertex_match": agtype_text({"namespace": namespace, "natural_key": natural_key}),
    }


class NodeRegistry(AgeGraph):
    """Look-ups and locks of registry rows; the base of `common.storage.graph.edges.GraphEdges`."""

    def _vertex_id(self, label: str) -> sql.Composed:
        """The AGE id of one key's vertex in ``label`` as an SQL expression (parameters:
        `vertex_parameters`): the id its graph_nodes row recorded (a primary-key look-up), else, for a
        row written before migration 0006, the vertex found by its properties. NULL when there is none.

        Not the look-up by properties alone: the label table holds every namespace's vertices with their
        full properties (a document's whole text), and for a few hundred documents the planner scans
        them all rather than use the GIN index: 16.8 ms against 0.25 ms per look-up for the docs vault's
        398 documents (EXPLAIN ANALYZE, bench/RESULTS.md (git history)); with the GIN index the cost still
        grows with the namespace (the posting list of its name).
        """
        return sql.SQL(
            "COALESCE((SELECT vertex_id FROM graph_nodes WHERE namespace = %(vertex_namespace)s"
            " AND natural_key = %(vertex_key)s),"
            " (SELECT id FROM {} WHERE properties @> %(vertex_match)s::ag_catalog.agtype LIMIT 1))"
        ).format(self._table(label))

    def _registered(self, conn: psycopg.Connection[Any], namespace: str, keys: list[str]) -> dict[str, str]:
        """Labels of the registered keys among ``keys``; rows without a ``vertex_id`` (written before
        migration 0006) get it now, from a GIN look-up of their vertex.

        Set-based look-ups of graph_nodes go through a fenced lateral subquery (``CROSS JOIN LATERAL
        (... OFFSET 0)``), one primary-key look-up per key. As a plain join, the planner, whose statistics
        cannot see the rows the current transaction wrote, believes a namespace being filled is nearly
        empty and scans all of it for every batch: a hash join over 100,000 rows (232 ms per 1,000 keys,
        EXPLAIN ANALYZE), or, with the namespace taken from the rows, a nested loop re-scanning the
        namespace per key (28 s per 1,000 edges, auto_explain), against 14 ms for 1,000 key look-ups.
        Arrays are sent in binary (``%b``): psycopg's text form escapes every element with a regular
        expression, which was 40 % of the time of a bulk write.

        The rows found are locked ``FOR KEY SHARE`` until the transaction ends: writers do not block each
        other (key share conflicts with neither key share nor the ``last_seen`` update of an upsert), but
        DeleteNode's ``FOR UPDATE`` (`lock_node`) waits for every transaction that is about to hang a fact
        on the node, and then deletes those facts too; a writer that comes after the delete finds the key
        gone and makes a placeholder. Without the lock a fact committed next to a concurrent delete kept
        its row but lost its edge.
        """
        rows = conn.execute(
            self.queries["registered_nodes"], {"namespace": namespace, "keys": keys}
        ).fetchall()
        for natural_key, label, unrecorded in rows:
            if unrecorded:
                conn.execute(
                    sql.SQL(
                        "UPDATE graph_nodes SET vertex_id = (SELECT id FROM {} WHERE properties @> %s::ag_catalog.agtype"
                        " LIMIT 1) WHERE namespace = %s AND natural_key = %s"
                    ).format(self._table(str(label))),
                    (
                        agtype_text({"namespace": namespace, "natural_key": natural_key}),
                        namespace,
                        natural_key,
                    ),
                )
        return {str(natural_key): str(label) for natural_key, label, _ in rows}

    def node_labels(
        self,
        conn: psycopg.Connection[Any],
        namespace: str,
        natural_keys: list[str],
        *,
        visibility: Visibility = EVERYTHING,
    ) -> dict[str, str]:
        """Labels of the existing vertices among ``natural_keys`` that ``visibility`` may see (missing and
        hidden keys are absent)."""
        if not natural_keys:
            return {}
        rows = _visible_registry_rows(
            conn,
            "SELECT natural_key, label FROM graph_nodes WHERE namespace = %(namespace)s"
            " AND natural_key = ANY(%(keys)s) AND {visible}",
            {"namespace": namespace, "keys": natural_keys},
            visibility,
        )
        return {str(key): str(label) for key, label in rows}

    def hidden_keys(
        self,
        conn: psycopg.Connection[Any],
        namespace: str,
        natural_keys: list[str],
        *,
        visibility: Visibility,
        placeholders: bool = True,
    ) -> set[str]:
        """The keys among ``natural_keys`` whose node exists but ``visibility`` may not see (write-side
        checks: such a node must be neither overwritten nor extended, `common.domain.write_access`);
        ``placeholders=False`` leaves out placeholders (they hold nothing but the key)."""
        if visibility.unrestricted or not natural_keys:
            return set()
        rows = _visible_registry_rows(
            conn,
            "SELECT natural_key FROM graph_nodes WHERE namespace = %(namespace)s"
            " AND natural_key = ANY(%(keys)s) AND NOT {visible}"
            + ("" if placeholders else " AND NOT placeholder"),
            {"namespace": namespace, "keys": sorted(set(natural_keys))},
            visibility,
        )
        return {str(row[0]) for row in rows}

    def registry_scopes(
        self, conn: psycopg.Connection[Any], namespace: str, natural_keys: list[str]
    ) -> dict[str, tuple[bool, list[str]]]:
        """``natural_key -> (placeholder, scopes)`` of the registered keys among ``natural_keys`` (what
        `common.domain.scope_inheritance` compares a write with)."""
        if not natural_keys:
            return {}
        rows = _visible_registry_rows(
            conn,
            "SELECT natural_key, placeholder, scopes FROM graph_nodes WHERE namespace = %(namespace)s"
            " AND natural_key = ANY(%(keys)s) AND {visible}",
            {"namespace": namespace, "keys": sorted(set(natural_keys))},
            EVERYTHING,
        )
        return {
            str(key): (bool(placeholder), [str(s) for s in scopes or []]) for key, placeholder, scopes in rows
        }

    def lock_node(
        self,
        conn: psycopg.Connection[Any],
        namespace: str,
        natural_key: str,
        *,
        visibility: Visibility = EVERYTHING,
    ) -> dict[str, Any] | None:
        """The registry row of a key locked FOR UPDATE until the transaction ends, as ``{natural_key,
        node_type, label, placeholder, origin, scopes}``; None when missing or hidden from ``visibility``."""
        rows = _visible_registry_rows(
            conn,
            "SELECT natural_key, node_type, label, placeholder, origin, scopes FROM graph_nodes"
            " WHERE namespace = %(namespace)s AND natural_key = %(key)s AND {visible} FOR UPDATE",
            {"namespace": namespace, "key": natural_key},
            visibility,
        )
        if not rows:
            return None
        names = ("natural_key", "node_type", "label", "placeholder", "origin", "scopes")
        return dict(zip(names, rows[0], strict=True))


def _visible_registry_rows(
    conn: psycopg.Connection[Any], template: str, params: dict[str, Any], visibility: Visibility
) -> list[tuple[Any, ...]]:
    """Rows of a read of ``graph_nodes`` whose ``template`` names ``{visible}``: the predicate
    "``visibility`` may see the node" over its ``scopes``, composed per call."""
    statement = sql.SQL(template).format(visible=visibility.array_predicate(sql.SQL("scopes")))  # type: ignore[arg-type]
    return conn.execute(statement, {**params, **visibility.params}).fetchall()


__all__ = ["NodeRegistry"]
