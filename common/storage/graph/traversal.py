"""Bounded graph traversal over the ``facts`` index with a recursive CTE (docs/explanation/architecture.md: variable-length
Cypher paths are very slow; traverse with bounded recursive CTEs).

The walk starts from anchor keys and follows, in both directions, the facts that

* are valid at ``as_of`` (``valid_from <= as_of < valid_to``, an open interval is current),
* have not lost their evidence,
* the caller may see (the fact's scopes and both of its end nodes: `fact_visibility`, so a hidden node's
  key never appears on a path), and
* match a `RelationRule`: the predicate is the rule's relation, the subject's kind is in its
  ``from_kinds`` and the object's kind in its ``to_kinds`` (an empty set accepts any kind). The kind of a
  key is its ``type:`` prefix (``entity`` without one), as in kind validation.

Bounds: at most ``max_depth`` steps from an anchor; a path never revisits a node (cycle safe); at most
``fanout`` facts are followed from one node in one step (highest confidence first, then fact_id); and
the walk stops after ``row_limit`` steps. The recursive CTE runs breadth first and the limit is applied
before anything sorts, so PostgreSQL stops the recursion as soon as the limit is reached and the rows
kept are those of the smallest depths. Each fact is returned once, with the shortest path that reached
it. All request values are bound parameters.

The walk has no named query (``sql/queries``): its statement is composed with `psycopg.sql` per call,
because the visibility predicate of the caller (`fact_visibility`) is part of both recursive arms.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import fields
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from common.storage.fact_rows import FactRow
from common.storage.fact_store import fact_visibility
from common.storage.visibility import EVERYTHING
from common.storage.visibility import Visibility

_FACT_COLUMNS = [item.name for item in fields(FactRow)]


@dataclass(frozen=True)
class RelationRule:
    """A relation the walk may follow; empty kind sets accept any kind."""

    relation: str
    from_kinds: frozenset[str] = frozenset()
    to_kinds: frozenset[str] = frozenset()


@dataclass(frozen=True)
class WalkQuery:
    """What to walk.

    Attributes:
        namespace: the namespace.
        anchors: natural keys the walk starts from (depth 0).
        as_of: the instant facts must be valid at.
        max_depth: steps from an anchor (>= 0).
        rules: the relations followed.
        visibility: the caller's visibility scopes.
        fanout: facts followed per node and step.
        row_limit: steps read in total.
    """

    namespace: str
    anchors: Sequence[str]
    as_of: datetime
    max_depth: int
    rules: Sequence[RelationRule]
    visibility: Visibility = EVERYTHING
    fanout: int = 50
    row_limit: int = 2000


@dataclass(frozen=True)
class WalkStep:
    """A fact reached by the walk, at the smallest depth it was reached.

    Attributes:
        fact: the fact row.
        depth: steps from the anchor to ``node_key`` (1 for a fact touching the anchor).
        anchor: the anchor the path starts from.
        from_key: the node the step left.
        node_key: the node the step reached (the fact's other end).
        direction: ``"out"`` (subject -> object) or ``"in"`` (object -> subject).
        path_keys: the nodes of the path, anchor first, ``node_key`` last (``depth + 1`` entries).
        path_facts, path_relations, path_directions: the steps of the path (``depth`` entries each).
    """

    fact: FactRow
    depth: int
    anchor: str
    from_key: str
    node_key: str
    direction: str
    path_keys: tuple[str, ...]
    path_facts: tuple[str, ...]
    path_relations: tuple[str, ...]
    path_directions: tuple[str, ...]


@dataclass(frozen=True)
class Walk:
    """The facts reached (ordered by depth, then fact_id), the steps read, and whether the row limit cut
    the walk short."""

    steps: list[WalkStep]
    rows: int
    truncated: bool


_KIND_OF = "(CASE WHEN strpos({key}, ':') > 1 THEN split_part({key}, ':', 1) ELSE 'entity' END)"


def _kind_of(column: str) -> sql.Composable:
    return sql.SQL(_KIND_OF.format(key=column))


class TraversalStore:
    """The recursive walk (see the module doc); runs on the caller's connection."""

    def walk(self, conn: psycopg.Connection[Any], query: WalkQuery) -> Walk:
        """Walks from ``query.anchors``; returns each fact reached once, at its smallest depth."""
        if not query.anchors or not query.rules or query.max_depth <= 0:
            return Walk([], 0, False)
        visible = sql.SQL(" AND ").join(fact_visibility(query.visibility, sql.SQL("f.")))
        live = sql.SQL(
            "NOT f.evidence_lost AND f.valid_from <= %(as_of)s"
            " AND (f.valid_to IS NULL OR %(as_of)s < f.valid_to) AND {visible}"
            " AND (cardinality(r.from_kinds) = 0 OR {subject_kind} = ANY(r.from_kinds))"
            " AND (cardinality(r.to_kinds) = 0 OR {object_kind} = ANY(r.to_kinds))"
        ).format(
            visible=visible, subject_kind=_kind_of("f.subject_key"), object_kind=_kind_of("f.object_key")
        )
        statement = sql.SQL(
            "WITH RECURSIVE rules AS MATERIALIZED ("
            " SELECT r.relation, r.from_kinds, r.to_kinds"
            " FROM jsonb_to_recordset(%(rules)s::jsonb) AS r(relation text, from_kinds text[], to_kinds text[])),"
            " walk (anchor, depth, node_key, from_key, fact_id, direction, path_keys, path_facts, path_relations,"
            " path_directions) AS ("
            " SELECT a.key, 0, a.key, NULL::text, NULL::text, NULL::text, ARRAY[a.key], ARRAY[]::text[],"
            " ARRAY[]::text[], ARRAY[]::text[] FROM unnest(%(anchors)s::text[]) AS a(key)"
            " UNION ALL"
            " SELECT w.anchor, w.depth + 1, s.next_key, w.node_key, s.fact_id, s.direction,"
            " w.path_keys || s.next_key, w.path_facts || s.fact_id, w.path_relations || s.predicate,"
            " w.path_directions || s.direction"
            " FROM walk w CROSS JOIN LATERAL ("
            "  SELECT e.fact_id, e.predicate, e.next_key, e.direction FROM ("
            "   SELECT f.fact_id, f.predicate, f.object_key AS next_key, 'out' AS direction, f.confidence"
            "   FROM facts f JOIN rules r ON r.relation = f.predicate"
            "   WHERE f.namespace = %(namespace)s AND f.subject_key = w.node_key AND {live}"
            "   UNION ALL"
            "   SELECT f.fact_id, f.predicate, f.subject_key AS next_key, 'in' AS direction, f.confidence"
            "   FROM facts f JOIN rules r ON r.relation = f.predicate"
            "   WHERE f.namespace = %(namespace)s AND f.object_key = w.node_key AND {live}"
            "  ) e WHERE NOT (e.next_key = ANY(w.path_keys))"
            "  ORDER BY e.confidence DESC, e.fact_id LIMIT %(fanout)s"
            " ) s WHERE w.depth < %(max_depth)s),"
            # The LIMIT is applied to the walk before anything sorts: the recursion stops at the limit.
            " bounded AS MATERIALIZED (SELECT * FROM walk WHERE depth > 0 LIMIT %(row_limit)s),"
            " counted AS (SELECT count(*) AS rows FROM bounded)"
            " SELECT DISTINCT ON (b.fact_id) b.anchor AS walk_anchor, b.depth AS walk_depth,"
            " b.node_key AS walk_node_key, b.from_key AS walk_from_key, b.direction AS walk_direction,"
            " b.path_keys AS walk_path_keys, b.path_facts AS walk_path_facts,"
            " b.path_relations AS walk_path_relations, b.path_directions AS walk_path_directions,"
            " counted.rows AS walk_rows, {fact_columns}"
            " FROM bounded b CROSS JOIN counted JOIN facts f ON f.fact_id = b.fact_id"
            " ORDER BY b.fact_id, b.depth, b.anchor, b.path_keys"
        ).format(
            live=live,
            fact_columns=sql.SQL(", ").join(sql.SQL("f.") + sql.Identifier(name) for name in _FACT_COLUMNS),
        )
        params: dict[str, Any] = {
            "rules": Jsonb(
                [
                    {
                        "relation": rule.relation,
                        "from_kinds": sorted(rule.from_kinds),
                        "to_kinds": sorted(rule.to_kinds),
                    }
                    for rule in query.rules
                ]
            ),
            "anchors": list(dict.fromkeys(query.anchors)),
            "namespace": query.namespace,
            "as_of": query.as_of,
            "max_depth": query.max_depth,
            "fanout": query.fanout,
            "row_limit": query.row_limit,
            **query.visibility.params,
        }
        with conn.cursor(row_factory=dict_row) as cursor:
            records = cursor.execute(statement, params).fetchall()
        rows = int(records[0]["walk_rows"]) if records else 0
        steps = [
            WalkStep(
                fact=FactRow(**{name: record[name] for name in _FACT_COLUMNS}),
                depth=int(record["walk_depth"]),
                anchor=str(record["walk_anchor"]),
                from_key=str(record["walk_from_key"]),
                node_key=str(record["walk_node_key"]),
                direction=str(record["walk_direction"]),
                path_keys=tuple(record["walk_path_keys"]),
                path_facts=tuple(record["walk_path_facts"]),
                path_relations=tuple(record["walk_path_relations"]),
                path_directions=tuple(record["walk_path_directions"]),
            )
            for record in records
        ]
        steps.sort(key=lambda step: (step.depth, step.fact.fact_id))
        return Walk(steps, rows, rows >= query.row_limit)
