"""Migration 0009: every vertex and edge moves to the label `graph_label` gives it.

Before 0009 a label was the sanitised type or predicate itself (docs/explanation/knowledge-model.md), shared
by every namespace and by both kinds, so one namespace could take a name as a vertex label that another needed
as an edge label. This step (run by `common.storage.schema.migrations.apply` in the migration's transaction, under
the migration advisory lock) moves the graph to the new mapping:

1. legacy labels whose name is a new label of the other kind (a legacy vertex type ``p_x`` against the
   new edge label of predicate ``x``) are renamed out of the way first (table and catalogue entry);
2. each vertex goes to ``graph_label("node_type", <its type property>)``: a vertex already there stays
   (same id); the others are copied into their new label with a new id from that label's sequence (an
   AGE id carries its label), recorded in a temporary old -> new map;
3. every edge end, every ``graph_nodes.vertex_id`` and ``graph_nodes.label`` follows the map;
4. each edge goes to ``graph_label("predicate", <the predicate of its facts row>)`` (fact edges), or to
   the internal label of ``LINKS_TO`` / ``IN_TRACE`` (edges without a fact): nothing references edge
   ids, so a moved edge gets a new id;
5. legacy labels left empty that the mapping cannot produce (`GRAPH_LABEL_PATTERN`) are dropped.

It is idempotent: on a graph already under the new mapping nothing moves and nothing is dropped (the
journal runs it once anyway). Types, predicates, natural keys, properties and fact rows are unchanged.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING
from typing import Any

import psycopg
from psycopg import sql

from common.kernel.identifiers import GRAPH_LABEL_PATTERN
from common.kernel.identifiers import INTERNAL_EDGES
from common.kernel.identifiers import graph_label
from common.storage.graph.age import AgeGraph
from common.storage.named_queries import Queries
from common.storage.tables import query_placeholders

if TYPE_CHECKING:
    from common.storage.database import Database

MIGRATION_NAME = "0009_namespace_safe_labels"
# Step 3: edge ends and registry rows follow the moved vertices (``relabel_moved_ids``, a temporary table
# of the migration's transaction, so these are not named queries: those must prepare without it).
_FOLLOW_MOVED_VERTICES = (
    "UPDATE {graph}._ag_label_edge e SET start_id = m.new_id FROM relabel_moved_ids m WHERE e.start_id = m.old_id",
    "UPDATE {graph}._ag_label_edge e SET end_id = m.new_id FROM relabel_moved_ids m WHERE e.end_id = m.old_id",
    "UPDATE {graph_nodes} g SET vertex_id = m.new_id, label = m.label FROM relabel_moved_ids m WHERE g.vertex_id = m.old_id",
)
_AGTYPE_JSON = "(ag_catalog.agtype_out({}.properties)::text)::jsonb"
# Ids are matched as text against an unnest (a hashed semi-join), not with ``= ANY(array)``, which is
# quadratic on a large label.


def migrate_labels(database: Database, conn: psycopg.Connection[Any]) -> None:
    """Moves every vertex and edge of the graph to its `graph_label` label on ``conn`` (the caller's
    transaction, under the migration lock); see the module doc for the steps.

    Raises:
        psycopg.Error: the database refuses a statement (the caller's transaction then rolls back).
    """
    graph = AgeGraph(database)
    queries = Queries.for_settings("label_migration.sql", database.settings)
    labels = _labels(conn, queries, graph.graph)
    conn.execute(queries["record_unrecorded_vertex_ids"])
    conn.execute(queries["create_moved_ids"])
    vertex_targets = _vertex_targets(conn, graph, [name for name, kind in labels.items() if kind == "v"])
    edge_targets = _edge_targets(conn, graph, [name for name, kind in labels.items() if kind == "e"])
    wanted = {target: "v" for rows in vertex_targets.values() for target in rows.values()}
    wanted.update({target: "e" for rows in edge_targets.values() for target in rows.values()})
    for name, kind in list(labels.items()):  # step 1
        if name in wanted and wanted[name] != kind:
            renamed = _free_name(labels, f"legacy_{kind}_{name}"[:63])
            conn.execute(
                sql.SQL("ALTER TABLE {} RENAME TO {}").format(graph._table(name), sql.Identifier(renamed))
            )
            conn.execute(queries["rename_label_entry"], (renamed, graph.graph, name))
            # Its sequence and indexes are named after the old name, which the new label needs.
            sequence = f"{renamed[:56]}_id_seq"
            row = conn.execute(queries["label_sequence"], (graph.graph, renamed)).fetchone()
            assert row is not None
            conn.execute(
                sql.SQL("ALTER SEQUENCE {} RENAME TO {}").format(
                    sql.Identifier(graph.graph, str(row[0])), sql.Identifier(sequence)
                )
            )
            conn.execute(queries["rename_label_sequence_entry"], (sequence, graph.graph, renamed))
            for (index,) in conn.execute(queries["label_indexes"], (graph.graph, renamed)).fetchall():
                conn.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(graph.graph, str(index))))
            labels[renamed] = labels.pop(name)
            for targets in (vertex_targets, edge_targets):
                if name in targets:
                    targets[renamed] = targets.pop(name)
    for target, kind in sorted(wanted.items()):
        graph.create_label_in(conn, target, "vertex" if kind == "v" else "edge")
    label_ids = _label_ids(conn, queries, graph.graph)
    for label, rows in vertex_targets.items():  # step 2
        for target, ids in _moving(label, rows).items():
            _move_vertices(conn, graph, label, (target, *label_ids[target]), ids)
    placeholders = query_placeholders(database.settings)
    for statement in _FOLLOW_MOVED_VERTICES:  # step 3
        conn.execute(sql.SQL(statement).format(**placeholders))  # type: ignore[arg-type]
    for label, rows in edge_targets.items():  # step 4
        for target, ids in _moving(label, rows).items():
            _move_edges(conn, graph, label, target, ids)
    for name in _labels(conn, queries, graph.graph):  # step 5
        if name not in wanted and not GRAPH_LABEL_PATTERN.match(name) and _is_empty(conn, graph, name):
            conn.execute(queries["drop_label"], (graph.graph, name))


def _labels(conn: psycopg.Connection[Any], queries: Queries, graph: str) -> dict[str, str]:
    """Label name -> kind ('v' or 'e') of every label but AGE's parents."""
    return {str(row[0]): str(row[1]) for row in conn.execute(queries["graph_labels"], (graph,)).fetchall()}


def _label_ids(conn: psycopg.Connection[Any], queries: Queries, graph: str) -> dict[str, tuple[int, str]]:
    """Label name -> (AGE label id, qualified id sequence) of every label but AGE's parents."""
    rows = conn.execute(queries["graph_labels"], (graph,)).fetchall()
    return {str(row[0]): (int(row[2]), str(row[3])) for row in rows}


def _free_name(labels: dict[str, str], wanted: str) -> str:
    name, number = wanted, 0
    while name in labels:
        number += 1
        name = f"{wanted[:55]}_{number}"
    return name


def _vertex_targets(
    conn: psycopg.Connection[Any], graph: AgeGraph, labels: list[str]
) -> dict[str, dict[str, str]]:
    """Vertex label -> {vertex id: new label}: the label of the vertex's ``type`` property (the type it
    was written with; the legacy label's name when the property is missing)."""
    found: dict[str, dict[str, str]] = {}
    for label in labels:
        rows = conn.execute(
            sql.SQL("SELECT v.id::text, {} ->> 'type' FROM ONLY {} v").format(
                sql.SQL(_AGTYPE_JSON.format("v")), graph._table(label)
            )
        ).fetchall()
        found[label] = {
            str(vid): graph_label("node_type", str(t) if t is not None else label) for vid, t in rows
        }
    return found


def _edge_targets(
    conn: psycopg.Connection[Any], graph: AgeGraph, labels: list[str]
) -> dict[str, dict[str, str]]:
    """Edge label -> {edge id: new label}: the predicate of the edge's facts row (by namespace and
    fact_id); an edge without a fact in a label of an internal edge (``LINKS_TO``, ``IN_TRACE``, old or
    new label) goes to that edge's label; any other edge without a fact stays where it is."""
    internal = {name: name for name in INTERNAL_EDGES}
    internal.update({graph_label("internal_edge", name): name for name in INTERNAL_EDGES})
    found: dict[str, dict[str, str]] = {}
    for label in labels:
        properties = sql.SQL(_AGTYPE_JSON.format("e"))
        rows = conn.execute(
            sql.SQL(
                "SELECT e.id::text, f.predicate FROM ONLY {} e LEFT JOIN facts f"
                " ON f.namespace = {props} ->> 'namespace' AND f.fact_id = {props} ->> 'fact_id'"
            ).format(graph._table(label), props=properties)
        ).fetchall()
        targets: dict[str, str] = {}
        for edge_id, predicate in rows:
            if predicate is not None:
                targets[str(edge_id)] = graph_label("predicate", str(predicate))
            elif label in internal:
                targets[str(edge_id)] = graph_label("internal_edge", internal[label])
            else:  # a fact edge without its row: nothing tells its predicate, it stays
                targets[str(edge_id)] = label
        found[label] = targets
    return found


def _moving(label: str, rows: dict[str, str]) -> dict[str, list[str]]:
    """New label -> ids of the rows of ``label`` that must move there (rows already there stay)."""
    moving: dict[str, list[str]] = defaultdict(list)
    for row_id, target in rows.items():
        if target != label:
            moving[target].append(row_id)
    return moving


def _move_vertices(
    conn: psycopg.Connection[Any],
    graph: AgeGraph,
    label: str,
    destination: tuple[str, int, str],
    ids: list[str],
) -> None:
    """Copies the vertices ``ids`` of ``label`` into ``destination`` (label, its AGE id, its id sequence)
    with new ids (recorded in the map) and deletes the originals."""
    target, label_id, sequence = destination
    conn.execute(
        sql.SQL(
            "WITH moved AS MATERIALIZED (SELECT v.id AS old_id,"
            " ag_catalog._graphid(%(label_id)s, nextval(%(sequence)s::regclass)) AS new_id, v.properties"
            " FROM ONLY {source} v WHERE v.id::text IN (SELECT unnest(%(ids)s::text[]))),"
            " copied AS (INSERT INTO {target} (id, properties) SELECT new_id, properties FROM moved)"
            " INSERT INTO relabel_moved_ids (old_id, new_id, label) SELECT old_id, new_id, %(label)s FROM moved"
        ).format(source=graph._table(label), target=graph._table(target)),
        {"label_id": label_id, "sequence": sequence, "ids": ids, "label": target},
    )
    conn.execute(
        sql.SQL("DELETE FROM ONLY {} WHERE id::text IN (SELECT unnest(%s::text[]))").format(
            graph._table(label)
        ),
        (ids,),
    )


def _move_edges(
    conn: psycopg.Connection[Any], graph: AgeGraph, label: str, target: str, ids: list[str]
) -> None:
    """Moves the edges ``ids`` of ``label`` into ``target`` (new ids: nothing references edge ids)."""
    conn.execute(
        sql.SQL(
            "WITH gone AS (DELETE FROM ONLY {source} WHERE id::text IN (SELECT unnest(%s::text[]))"
            " RETURNING start_id, end_id, properties)"
            " INSERT INTO {target} (start_id, end_id, properties) SELECT start_id, end_id, properties FROM gone"
        ).format(source=graph._table(label), target=graph._table(target)),
        (ids,),
    )


def _is_empty(conn: psycopg.Connection[Any], graph: AgeGraph, label: str) -> bool:
    return (
        conn.execute(sql.SQL("SELECT 1 FROM ONLY {} LIMIT 1").format(graph._table(label))).fetchone() is None
    )


__all__ = ["MIGRATION_NAME", "migrate_labels"]
