"""Temporal facts: the ``facts`` table (one row per fact_id) and the fact edge in AGE, kept equal.

Every change of a fact row is mirrored onto its edge (`sync_edge`) in the same transaction. As-of
queries run on the table with B-tree indexes: ``valid_from <= t AND (valid_to IS NULL OR t < valid_to)``.

The static reads are named queries (``sql/queries/facts.sql``); `FactStore.list` and `conflicting_ids`
(optional filters, the caller's visibility) are composed here, and so are the write statements for now.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from common.kernel.identifiers import MULTI_VALUED_PREDICATES
from common.kernel.identifiers import graph_label
from common.storage.fact_rows import FactQuery
from common.storage.fact_rows import FactRow
from common.storage.fact_rows import decode_cursor
from common.storage.graph.store import GraphStore
from common.storage.memories.liveness import live_memory_node
from common.storage.named_queries import Queries
from common.storage.tables import query_placeholders
from common.storage.visibility import EVERYTHING
from common.storage.visibility import Visibility

_COLUMNS = (
    "fact_id, namespace, subject_key, predicate, object_key, valid_from, valid_to, observed_at, evidence,"
    " confidence, observation_ids, supersedes, superseded_by, origin, scopes, attributes, source_path, evidence_lost,"
    " agent_asserted"
)
# The columns of ``_COLUMNS`` with the SQL type of the array each is passed in by the bulk insert
# (text[] columns travel as JSON text, one per row, since unnest flattens arrays of arrays).
_FACT_COLUMN_TYPES = {
    "fact_id": "text",
    "namespace": "text",
    "subject_key": "text",
    "predicate": "text",
    "object_key": "text",
    "valid_from": "timestamptz",
    "valid_to": "timestamptz",
    "observed_at": "timestamptz",
    "evidence": "text",
    "confidence": "float8",
    "observation_ids": "text",
    "supersedes": "text",
    "superseded_by": "text",
    "origin": "text",
    "scopes": "text",
    "attributes": "text",
    "source_path": "text",
    "evidence_lost": "bool",
    "agent_asserted": "bool",
}
_QUALIFIED_COLUMNS = ", ".join("f." + column.strip() for column in _COLUMNS.split(","))


def fact_visibility(visibility: Visibility, alias: sql.Composable) -> list[sql.Composable]:
    """Predicates "``visibility`` may see the fact": its own scopes, its subject and object nodes, and
    neither end is a memory hidden by a lossy summary or expired (for every caller,
    `common.storage.memories.liveness`) (``alias`` is the qualifying table prefix, e.g. ``sql.SQL("facts.")``: the node subquery has columns
    of the same names, so unqualified ones would bind to it)."""
    column = sql.SQL("{}{}").format
    live = [  # no fact of a hidden or expired memory, for any caller
        live_memory_node(column(alias, sql.SQL("namespace")), column(alias, sql.SQL(side)))
        for side in ("subject_key", "object_key")
    ]
    if visibility.unrestricted:
        return live
    return live + [
        visibility.array_predicate(column(alias, sql.SQL("scopes"))),
        visibility.node_predicate(column(alias, sql.SQL("namespace")), column(alias, sql.SQL("subject_key"))),
        visibility.node_predicate(column(alias, sql.SQL("namespace")), column(alias, sql.SQL("object_key"))),
    ]


class FactStore:
    """SQL and Cypher for facts."""

    def __init__(self, graph: GraphStore) -> None:
        self.graph = graph
        self.queries = Queries(
            "facts.sql",
            {
                **query_placeholders(graph.database.settings),
                "fact_columns": sql.SQL(_COLUMNS),
                "qualified_fact_columns": sql.SQL(_QUALIFIED_COLUMNS),
            },
        )

    def get(
        self, conn: psycopg.Connection[Any], namespace: str, fact_id: str, *, lock: bool = False
    ) -> FactRow | None:
        """The fact row, optionally locked FOR UPDATE."""
        query = self.queries["fact_by_id_for_update"] if lock else self.queries["fact_by_id"]
        with conn.cursor(row_factory=dict_row) as cursor:
            record = cursor.execute(query, (namespace, fact_id)).fetchone()
        return FactRow(**record) if record else None

    def insert_or_strengthen_many(
        self, conn: psycopg.Connection[Any], facts: list[FactRow]
    ) -> list[tuple[bool, FactRow]]:
        """Inserts each fact, or strengthens the existing one with the same fact_id; results in the order
        of ``facts``, each (created, row after the write).

        Strengthening (docs/explanation/knowledge-model.md): observation_ids becomes the sorted union,
        confidence the maximum, observed_at the earliest; new evidence revives a fact whose evidence was lost,
        and ``agent_asserted`` sticks once set. The ends' vertices must exist (`GraphStore.ensure_nodes`).

        Set-based: one multi-row INSERT .. ON CONFLICT (rows in fact_id order, so concurrent writers lock
        in one order), then one multi-row edge INSERT per predicate for the facts created here; the edges
        of strengthened facts are rewritten one by one. One edge per fact_id holds under concurrency
        because only the transaction whose INSERT created the facts row (``xmax = 0``; a concurrent
        inserter of the same fact_id waits for it and then strengthens) creates the edge, in the same
        transaction.

        Raises:
            ValueError: a fact_id appears twice in ``facts``, or the facts are of several namespaces.
        """
        if not facts:
            return []
        if len({fact.fact_id for fact in facts}) != len(facts):
            raise ValueError("insert_or_strengthen_many: a fact_id is listed twice")
        if len({fact.namespace for fact in facts}) != 1:
            raise ValueError("insert_or_strengthen_many: facts of one namespace per call")
        ordered = sorted(facts, key=lambda fact: fact.fact_id)
        columns: dict[str, list[Any]] = {name: [] for name in _FACT_COLUMN_TYPES}
        for fact in ordered:
            for name in _FACT_COLUMN_TYPES:
                value = getattr(fact, name)
                if name == "observation_ids":
                    value = json.dumps(sorted(value))
                elif name == "scopes":
                    value = json.dumps(list(value))
                elif name == "attributes":
                    value = json.dumps(value, ensure_ascii=False)
                columns[name].append(value)
        source = ", ".join(f"%({name})b::{kind}[]" for name, kind in _FACT_COLUMN_TYPES.items())
        values = ", ".join(
            f"ARRAY(SELECT jsonb_array_elements_text(x.{name}::jsonb))"
            if name in ("observation_ids", "scopes")
            else f"x.{name}::jsonb"
            if name == "attributes"
            else f"x.{name}"
            for name in _FACT_COLUMN_TYPES
        )
        with conn.cursor(row_factory=dict_row) as cursor:
            records = cursor.execute(
                f"INSERT INTO facts ({_COLUMNS}) SELECT {values}"
                f" FROM unnest({source}) WITH ORDINALITY AS x({_COLUMNS}, position) ORDER BY x.position"
                " ON CONFLICT (fact_id) DO UPDATE SET"
                " observation_ids = ARRAY(SELECT DISTINCT unnest(facts.observation_ids || excluded.observation_ids)"
                " ORDER BY 1),"
                " confidence = greatest(facts.confidence, excluded.confidence),"
                " observed_at = least(facts.observed_at, excluded.observed_at),"
                " evidence_lost = facts.evidence_lost AND excluded.evidence_lost,"
                " agent_asserted = facts.agent_asserted OR excluded.agent_asserted"
                f" RETURNING (xmax = 0) AS inserted, {_COLUMNS}",
                columns,
            ).fetchall()
        written: dict[str, tuple[bool, FactRow]] = {}
        for record in records:
            created = bool(record.pop("inserted"))
            row = FactRow(**record)
            written[row.fact_id] = (created, row)
        new_edges: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
        for created, row in written.values():
            if created:
                new_edges.setdefault(graph_label("predicate", row.predicate), []).append(
                    (row.subject_key, row.object_key, row.edge_properties())
                )
        self.sync_edges(conn, [row for created, row in written.values() if not created])
        namespace = ordered[0].namespace
        for edge_label, edges in new_edges.items():
            self.graph.create_edges(conn, namespace=namespace, edge_label=edge_label, edges=edges)
        return [written[fact.fact_id] for fact in facts]

    def close(
        self,
        conn: psycopg.Connection[Any],
        namespace: str,
        fact_id: str,
        valid_to: datetime,
        superseded_by: str | None,
    ) -> FactRow | None:
        """Closes a fact's interval at ``valid_to`` (never widening it) and records ``superseded_by``."""
        with conn.cursor(row_factory=dict_row) as cursor:
            record = cursor.execute(
                "UPDATE facts SET valid_to = CASE WHEN valid_to IS NULL OR valid_to > %s THEN greatest(%s, valid_from)"
                " ELSE valid_to END, superseded_by = coalesce(%s, superseded_by)"
                f" WHERE namespace = %s AND fact_id = %s RETURNING {_COLUMNS}",
                (valid_to, valid_to, superseded_by, namespace, fact_id),
            ).fetchone()
        if record is None:
            return None
        row = FactRow(**record)
        self.sync_edge(conn, row)
        return row

    def close_superseded_many(
        self, conn: psycopg.Connection[Any], namespace: str, closes: list[tuple[str, datetime, str]]
    ) -> list[FactRow]:
        """`close` of many facts, each by its successor: ``(fact_id, valid_to, superseded_by)`` applied as
        if one by one in order (a fact closed twice keeps the earliest valid_to and the last successor),
        in one statement (rows locked in fact_id order) and one edge rewrite per predicate. Returns the
        rows after the write, ordered by fact_id (missing ones left out)."""
        folded: dict[str, tuple[datetime, str]] = {}
        for fact_id, valid_to, successor in closes:
            earlier = folded.get(fact_id)
            folded[fact_id] = (valid_to if earlier is None else min(earlier[0], valid_to), successor)
        if not folded:
            return []
        ids = sorted(folded)
        with conn.cursor(row_factory=dict_row) as cursor:
            records = cursor.execute(
                "WITH target AS (SELECT f.fact_id, x.valid_to, x.superseded_by"
                " FROM unnest(%(ids)s::text[], %(valid_to)s::timestamptz[], %(successors)s::text[])"
                " AS x(fact_id, valid_to, superseded_by) CROSS JOIN LATERAL"
                " (SELECT fact_id FROM facts WHERE fact_id = x.fact_id AND namespace = %(namespace)s"
                " ORDER BY fact_id FOR UPDATE) AS f)"
                " UPDATE facts f SET valid_to = CASE WHEN f.valid_to IS NULL OR f.valid_to > target.valid_to"
                " THEN greatest(target.valid_to, f.valid_from) ELSE f.valid_to END,"
                " superseded_by = target.superseded_by"
                f" FROM target WHERE f.fact_id = target.fact_id RETURNING {_QUALIFIED_COLUMNS}",
                {
                    "namespace": namespace,
                    "ids": ids,
                    "valid_to": [folded[i][0] for i in ids],
                    "successors": [folded[i][1] for i in ids],
                },
            ).fetchall()
        rows = sorted((FactRow(**record) for record in records), key=lambda row: row.fact_id)
        self.sync_edges(conn, rows)
        return rows

    def close_many(
        self, conn: psycopg.Connection[Any], namespace: str, fact_ids: list[str], valid_to: datetime
    ) -> list[FactRow]:
        """`close` of many facts without ``superseded_by`` in one statement (rows locked in fact_id
        order); their edges are rewritten. Returns the rows after the write, ordered by fact_id."""
        if not fact_ids:
            return []
        with conn.cursor(row_factory=dict_row) as cursor:
            records = cursor.execute(
                "WITH target AS (SELECT f.fact_id FROM unnest(%(ids)b::text[]) AS x(fact_id) CROSS JOIN LATERAL"
                " (SELECT fact_id FROM facts WHERE fact_id = x.fact_id AND namespace = %(namespace)s OFFSET 0) AS f"
                " ORDER BY f.fact_id)"
                " UPDATE facts f SET valid_to = CASE WHEN f.valid_to IS NULL OR f.valid_to > %(valid_to)s"
                " THEN greatest(%(valid_to)s, f.valid_from) ELSE f.valid_to END"
                f" FROM target WHERE f.fact_id = target.fact_id RETURNING {_QUALIFIED_COLUMNS}",
                {"namespace": namespace, "ids": sorted(set(fact_ids)), "valid_to": valid_to},
            ).fetchall()
        rows = sorted((FactRow(**record) for record in records), key=lambda row: row.fact_id)
        self.sync_edges(conn, rows)
        return rows

    def strike_observation(
        self, conn: psycopg.Connection[Any], namespace: str, observation_id: str
    ) -> list[FactRow]:
        """Removes ``observation_id`` from the observation_ids of every fact of ``namespace`` it proved and
        marks the facts left with none and not ``agent_asserted`` as evidence_lost
        (docs/explanation/knowledge-model.md: lost evidence); their edges are rewritten. Returns the facts
        changed, ordered by fact_id (rows are locked in that order). Facts that did not cite the observation
        are untouched, so repeating the call changes nothing.
        """
        with conn.cursor(row_factory=dict_row) as cursor:
            records = cursor.execute(
                "WITH target AS (SELECT fact_id FROM facts WHERE namespace = %(namespace)s"
                " AND observation_ids @> ARRAY[%(observation_id)s]::text[] ORDER BY fact_id FOR UPDATE)"
                " UPDATE facts f SET observation_ids = array_remove(f.observation_ids, %(observation_id)s),"
                " evidence_lost = f.evidence_lost OR (cardinality(array_remove(f.observation_ids, %(observation_id)s)) = 0"
                " AND NOT f.agent_asserted)"
                f" FROM target WHERE f.fact_id = target.fact_id RETURNING {_QUALIFIED_COLUMNS}",
                {"namespace": namespace, "observation_id": observation_id},
            ).fetchall()
        rows = sorted((FactRow(**record) for record in records), key=lambda row: row.fact_id)
        self.sync_edges(conn, rows)
        return rows

    def referenced_keys(
        self, conn: psycopg.Connection[Any], namespace: str, natural_keys: list[str]
    ) -> set[str]:
        """The keys among ``natural_keys`` that are the subject or object of some fact (lost ones included)."""
        if not natural_keys:
            return set()
        records = conn.execute(
            self.queries["keys_of_facts"], {"namespace": namespace, "keys": natural_keys}
        ).fetchall()
        return {str(record[0]) for record in records}

    def touching(self, conn: psycopg.Connection[Any], namespace: str, natural_key: str) -> list[FactRow]:
        """The facts whose subject or object is ``natural_key`` (lost ones included), ordered by fact_id."""
        with conn.cursor(row_factory=dict_row) as cursor:
            records = cursor.execute(
                f"SELECT {_COLUMNS} FROM facts WHERE namespace = %(namespace)s AND fact_id IN ("
                " SELECT fact_id FROM facts WHERE namespace = %(namespace)s AND subject_key = %(key)s"
                " UNION SELECT fact_id FROM facts WHERE namespace = %(namespace)s AND object_key = %(key)s)",
                {"namespace": namespace, "key": natural_key},
            ).fetchall()
        return sorted((FactRow(**record) for record in records), key=lambda row: row.fact_id)

    def delete_touching(
        self, conn: psycopg.Connection[Any], namespace: str, natural_key: str
    ) -> list[FactRow]:
        """Deletes the rows of every fact whose subject or object is ``natural_key`` (lost ones included) and
        returns them ordered by fact_id. Their edges go with the node's vertex (`GraphStore.delete_nodes`),
        which the caller deletes in the same transaction (DocumentService.DeleteNode)."""
        with conn.cursor(row_factory=dict_row) as cursor:
            records = cursor.execute(
                f"DELETE FROM facts WHERE namespace = %(namespace)s AND fact_id IN ("
                " SELECT fact_id FROM facts WHERE namespace = %(namespace)s AND subject_key = %(key)s"
                " UNION SELECT fact_id FROM facts WHERE namespace = %(namespace)s AND object_key = %(key)s)"
                f" RETURNING {_COLUMNS}",
                {"namespace": namespace, "key": natural_key},
            ).fetchall()
        return sorted((FactRow(**record) for record in records), key=lambda row: row.fact_id)

    def open_facts(
        self, conn: psycopg.Connection[Any], namespace: str, subject_key: str, predicate: str
    ) -> list[FactRow]:
        """The facts of (``subject_key``, ``predicate``) whose interval is open (``valid_to`` NULL), lost
        ones included, ordered by object and fact_id (index ``facts_subject_idx``)."""
        with conn.cursor(row_factory=dict_row) as cursor:
            records = cursor.execute(
                self.queries["open_facts_of_subject_predicate"], (namespace, subject_key, predicate)
            ).fetchall()
        return [FactRow(**record) for record in records]

    def first_superseding(
        self, conn: psycopg.Connection[Any], namespace: str, fact_ids: list[str]
    ) -> dict[str, FactRow]:
        """For each of ``fact_ids`` that some fact's ``supersedes`` names, the earliest such fact (by
        valid_from, fact_id): `superseding` of many facts in one statement."""
        if not fact_ids:
            return {}
        with conn.cursor(row_factory=dict_row) as cursor:
            records = cursor.execute(
                self.queries["first_facts_superseding"], (namespace, fact_ids)
            ).fetchall()
        rows = [FactRow(**record) for record in records]
        return {str(row.supersedes): row for row in rows}

    def sync_edge(self, conn: psycopg.Connection[Any], row: FactRow) -> None:
        """Writes the properties of ``row`` onto its AGE edge (`sync_edges` of one row)."""
        self.sync_edges(conn, [row])

    def sync_edges(self, conn: psycopg.Connection[Any], rows: list[FactRow]) -> None:
        """Writes the properties of each of ``rows`` onto its AGE edge: one statement per namespace and
        predicate (`GraphStore.replace_fact_edge_properties`)."""
        groups: dict[tuple[str, str], list[tuple[str, str, str, dict[str, Any]]]] = {}
        for row in rows:
            groups.setdefault((row.namespace, graph_label("predicate", row.predicate)), []).append(
                (row.subject_key, row.object_key, row.fact_id, row.edge_properties())
            )
        for (namespace, edge_label), edges in groups.items():
            self.graph.replace_fact_edge_properties(
                conn, namespace=namespace, edge_label=edge_label, edges=edges
            )

    def get_many(self, conn: psycopg.Connection[Any], namespace: str, fact_ids: list[str]) -> list[FactRow]:
        """The fact rows of ``fact_ids`` in ``namespace`` (missing ones left out), ordered by fact_id."""
        if not fact_ids:
            return []
        with conn.cursor(row_factory=dict_row) as cursor:
            records = cursor.execute(
                self.queries["facts_by_ids"], {"namespace": namespace, "ids": list(fact_ids)}
            ).fetchall()
        return [FactRow(**record) for record in records]

    def list(self, conn: psycopg.Connection[Any], query: FactQuery, now: datetime) -> list[FactRow]:
        """Facts matching ``query`` ordered by (subject, predicate, valid_from, fact_id); page_size + 1 rows
        at most, so the caller can tell whether another page exists."""
        conditions = ["namespace = %(namespace)s"]
        params: dict[str, Any] = {"namespace": query.namespace, "limit": query.page_size + 1}
        for name, column in (
            ("subject", "subject_key"),
            ("predicate", "predicate"),
            ("object", "object_key"),
        ):
            value = getattr(query, name)
            if value:
                conditions.append(f"{column} = %({name})s")
                params[name] = value
        if not query.include_lost:
            conditions.append("NOT evidence_lost")
        if not query.include_history:
            params["as_of"] = query.as_of or now
            conditions.append("valid_from <= %(as_of)s AND (valid_to IS NULL OR %(as_of)s < valid_to)")
        elif query.as_of is not None:
            # history as of t: every version that had begun by t (superseded ones included)
            params["as_of"] = query.as_of
            conditions.append("valid_from <= %(as_of)s")
        if query.page_token:
            params["after_subject"], params["after_predicate"], params["after_from"], params["after_id"] = (
                decode_cursor(query.page_token)
            )
            conditions.append(
                "(subject_key, predicate, valid_from, fact_id) >"
                " (%(after_subject)s, %(after_predicate)s, %(after_from)s, %(after_id)s)"
            )
        predicates = [sql.SQL(condition) for condition in conditions] + fact_visibility(
            query.visibility, sql.SQL("facts.")
        )
        params.update(query.visibility.params)
        statement = sql.SQL(
            "SELECT {columns} FROM facts WHERE {where} ORDER BY subject_key, predicate, valid_from, fact_id"
            " LIMIT %(limit)s"
        ).format(columns=sql.SQL(_COLUMNS), where=sql.SQL(" AND ").join(predicates))
        with conn.cursor(row_factory=dict_row) as cursor:
            records = cursor.execute(statement, params).fetchall()
        return [FactRow(**record) for record in records]

    def conflicting_ids(
        self, conn: psycopg.Connection[Any], rows: list[FactRow], *, visibility: Visibility = EVERYTHING
    ) -> set[str]:
        """fact_ids among ``rows`` whose interval overlaps another live fact of the same (subject, predicate)
        with a different object (docs/explanation/knowledge-model.md: conflicts are flagged, never resolved).
        Only facts ``visibility`` may see count as the other side, so a flag never reveals a hidden fact.
        Facts of a many-valued predicate (`MULTI_VALUED_PREDICATES`: MENTIONS) never conflict."""
        ids = [row.fact_id for row in rows if row.predicate not in MULTI_VALUED_PREDICATES]
        if not ids:
            return set()
        statement = sql.SQL(
            "SELECT DISTINCT a.fact_id FROM facts a JOIN facts b"
            " ON b.namespace = a.namespace AND b.subject_key = a.subject_key AND b.predicate = a.predicate"
            " AND b.fact_id <> a.fact_id AND b.object_key <> a.object_key AND NOT b.evidence_lost"
            " AND b.valid_from < coalesce(a.valid_to, 'infinity') AND a.valid_from < coalesce(b.valid_to, 'infinity')"
            " AND {visible} WHERE a.namespace = %(namespace)s AND a.fact_id = ANY(%(ids)s)"
        ).format(visible=sql.SQL(" AND ").join(fact_visibility(visibility, sql.SQL("b."))))
        records = conn.execute(
            statement, {"namespace": rows[0].namespace, "ids": ids, **visibility.params}
        ).fetchall()
        return {str(record[0]) for record in records}
