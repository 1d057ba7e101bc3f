"""Storage of namespace export and import: every row of a namespace as JSON, and back.

Rows are read with ``to_jsonb`` and written with ``jsonb_populate_record`` over the table's own row type,
so every column type round-trips through its text form (vectors, tsvector-free: the generated columns
``search_document`` and ``identifier_text`` of chunks are computed again). Surrogate ids (chunk ids,
trace ids, snapshot row ids, vertex and edge graph ids, observation recording order) are allocated anew
by the target; everything the API names (observation ids, natural keys, fact ids, memory ids, snapshot
ids, run ids) keeps its value. Writes are ``ON CONFLICT DO NOTHING`` on each table's key, so importing
the same archive twice changes nothing. Composed with `psycopg.sql` (label tables are known at run time).
"""

from __future__ import annotations

import json
from collections.abc import Collection
from collections.abc import Iterator
from collections.abc import Mapping
from typing import Any

import psycopg
from psycopg import sql

from common.kernel.config import Settings
from common.storage.graph.age import agtype_text
from common.storage.graph.age import decode_agtype
from common.storage.graph.age import label_tables
from common.storage.tables import ComposingStore

# table key -> (columns left out on write, conflict target)
TABLES: dict[str, tuple[tuple[str, ...], str]] = {
    "namespace_settings": ((), "(namespace)"),
    "observations": (("recorded_order",), "(observation_id)"),
    "facts": ((), "(fact_id)"),
    "chunks": (("id", "search_document", "identifier_text"), "(namespace, node_key, chunk_order)"),
    "memories": ((), "(namespace, memory_id)"),
    "vault_runs": ((), "(run_id)"),
    "vault_documents": ((), "(namespace, natural_key)"),
    "context_traces": (("id",), ""),
}
ORDER = {"observations": "recorded_order", "chunks": "id", "context_traces": "id"}


def _any_of(any_of: Mapping[str, Collection[str] | None] | None) -> tuple[sql.Composable, list[list[str]]]:
    """`` AND (col = ANY(%s) OR ...)`` over ``any_of``'s columns (dotted names are qualified) and its
    parameters; nothing when ``any_of`` is None."""
    if any_of is None:
        return sql.SQL(""), []
    columns = [sql.Identifier(*name.split(".")) for name in any_of]
    matching = sql.SQL(" AND ({})").format(
        sql.SQL(" OR ").join(sql.SQL("{} = ANY(%s)").format(column) for column in columns)
    )
    return matching, [sorted(values or ()) for values in any_of.values()]


class NamespaceArchiveStore(ComposingStore):
    """Reads and writes the rows of one namespace (see the module doc)."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self._inserts: dict[str, sql.Composed] = {}

    def _insert_statement(self, conn: psycopg.Connection[Any], table: str) -> sql.Composed:
        """The INSERT of one exported row of ``table`` (its columns read once from the catalog)."""
        if table not in self._inserts:
            left_out, conflict = TABLES[table]
            columns = [
                str(r[0])
                for r in conn.execute(
                    "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0"
                    " AND NOT attisdropped ORDER BY attnum",
                    (self.t[table].as_string(conn),),
                )
                if str(r[0]) not in left_out
            ]
            ids = sql.SQL(", ").join(sql.Identifier(c) for c in columns)
            target = sql.SQL(f"ON CONFLICT {conflict} DO NOTHING" if conflict else "")
            self._inserts[table] = sql.SQL(
                "INSERT INTO {t} ({c}) SELECT {c} FROM jsonb_populate_recordset(NULL::{t}, %s::jsonb) {target}"
            ).format(t=self.t[table], c=ids, target=target)
        return self._inserts[table]

    def rows(
        self,
        conn: psycopg.Connection[Any],
        table: str,
        namespace: str,
        any_of: Mapping[str, Collection[str]] | None = None,
    ) -> Iterator[dict[str, Any]]:
        """The rows of ``table`` in ``namespace`` as JSON objects (every column); with ``any_of`` only
        those where one of its columns holds one of its values (a subject export)."""
        order = sql.Identifier(ORDER.get(table, "namespace"))
        matching, params = _any_of(any_of)
        cursor = conn.cursor(name=f"export_{table}")
        cursor.execute(
            sql.SQL("SELECT to_jsonb(x) FROM {t} x WHERE namespace = %s{m} ORDER BY {o}").format(
                t=self.t[table], m=matching, o=order
            ),
            (namespace, *params),
        )
        for (row,) in cursor:
            yield row
        cursor.close()

    def domain_packs(
        self, conn: psycopg.Connection[Any], packages: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """The domain pack rows named by a namespace's ``packages`` setting."""
        out: list[dict[str, Any]] = []
        for package in packages:
            row = conn.execute(
                sql.SQL("SELECT to_jsonb(x) FROM {t} x WHERE name = %s AND version = %s").format(
                    t=self.t["domain_packs"]
                ),
                (package.get("name"), package.get("version")),
            ).fetchone()
            if row:
                out.append(row[0])
        return out

    def snapshots(self, conn: psycopg.Connection[Any], namespace: str) -> list[dict[str, Any]]:
        """The snapshot journal of ``namespace``: each snapshot row with its items (``items``)."""
        return [
            row
            for (row,) in conn.execute(
                sql.SQL(
                    "SELECT to_jsonb(s) || jsonb_build_object('items', coalesce((SELECT jsonb_agg(to_jsonb(i))"
                    " FROM {items} i WHERE i.snapshot_row = s.id), '[]'::jsonb))"
                    " FROM {snapshots} s WHERE s.namespace = %s ORDER BY s.id"
                ).format(items=self.t["snapshot_items"], snapshots=self.t["snapshots"]),
                (namespace,),
            )
        ]

    def nodes(
        self, conn: psycopg.Connection[Any], namespace: str, keys: Collection[str] | None = None
    ) -> Iterator[dict[str, Any]]:
        """The ``graph_nodes`` rows of ``namespace`` (of ``keys`` only, when given) with their vertex's
        properties (``properties``)."""
        matching, params = _any_of({"g.natural_key": keys} if keys is not None else None)
        labels = [
            str(r[0])
            for r in conn.execute(
                sql.SQL("SELECT DISTINCT label FROM graph_nodes g WHERE g.namespace = %s{m}").format(
                    m=matching
                ),
                (namespace, *params),
            )
        ]
        for label in sorted(labels):
            cursor = conn.execute(
                sql.SQL(
                    "SELECT to_jsonb(g) - 'vertex_id', ag_catalog.agtype_out(v.properties)::text FROM graph_nodes g"
                    " LEFT JOIN {v} v ON v.id = g.vertex_id WHERE g.namespace = %s AND g.label = %s{m}"
                    " ORDER BY g.natural_key"
                ).format(v=sql.Identifier(self.graph, label), m=matching),
                (namespace, label, *params),
            )
            for row, props in cursor:
                row["properties"] = decode_agtype(props) if props is not None else None
                yield row

    def edges(
        self, conn: psycopg.Connection[Any], namespace: str, touching: Collection[str] | None = None
    ) -> Iterator[dict[str, Any]]:
        """Every edge starting at a vertex of ``namespace`` (with an end in ``touching`` only, when
        given): label, end keys, properties."""
        matching, params = _any_of(
            {"s.natural_key": touching, "t.natural_key": touching} if touching is not None else None
        )
        for label in label_tables(conn, self.settings, "e"):
            cursor = conn.execute(
                sql.SQL(
                    "SELECT s.natural_key, t.natural_key, ag_catalog.agtype_out(e.properties)::text FROM {e} e"
                    " JOIN graph_nodes s ON s.vertex_id = e.start_id JOIN graph_nodes t ON t.vertex_id = e.end_id"
                    " WHERE s.namespace = %s{m} ORDER BY e.id"
                ).format(e=sql.Identifier(self.graph, label), m=matching),
                (namespace, *params),
            )
            for start, end, props in cursor:
                yield {"label": label, "start": start, "end": end, "properties": decode_agtype(props)}

    # -- writes ------------------------------------------------------------------------------------

    def insert_rows(self, conn: psycopg.Connection[Any], table: str, rows: list[dict[str, Any]]) -> int:
        """Inserts exported rows of ``table`` in one statement, except those whose key exists; returns
        how many were inserted."""
        if not rows:
            return 0
        cursor = conn.execute(self._insert_statement(conn, table), (json.dumps(rows),))
        return max(cursor.rowcount, 0)

    def insert_domain_pack(self, conn: psycopg.Connection[Any], row: dict[str, Any]) -> bool:
        """Inserts a domain pack version unless it exists."""
        cursor = conn.execute(
            sql.SQL(
                "INSERT INTO {t} SELECT * FROM jsonb_populate_record(NULL::{t}, %s::jsonb) ON CONFLICT DO NOTHING"
            ).format(t=self.t["domain_packs"]),
            (json.dumps(row),),
        )
        return cursor.rowcount > 0

    def insert_snapshot(self, conn: psycopg.Connection[Any], row: dict[str, Any]) -> bool:
        """Inserts a snapshot with its items unless the snapshot exists."""
        items = row.pop("items", [])
        row.pop("id", None)
        new = conn.execute(
            sql.SQL(
                "INSERT INTO {s} (namespace, source, scope, snapshot_id, snapshot_time, counts, created_at)"
                " SELECT namespace, source, scope, snapshot_id, snapshot_time, counts, created_at"
                " FROM jsonb_populate_record(NULL::{s}, %s::jsonb) ON CONFLICT DO NOTHING RETURNING id"
            ).format(s=self.t["snapshots"]),
            (json.dumps(row),),
        ).fetchone()
        if new is None:
            return False
        for item in items:
            item["snapshot_row"] = new[0]
            conn.execute(
                sql.SQL("INSERT INTO {i} SELECT * FROM jsonb_populate_record(NULL::{i}, %s::jsonb)").format(
                    i=self.t["snapshot_items"]
                ),
                (json.dumps(item),),
            )
        return True

    def insert_nodes(self, conn: psycopg.Connection[Any], rows: list[dict[str, Any]]) -> list[str]:
        """Inserts registry rows and their vertices, except keys that exist, in one statement per table
        and label; returns the keys inserted."""
        if not rows:
            return []
        properties = {str(row["natural_key"]): row.get("properties") for row in rows}
        # vertex ids are this database's: set below for the vertices written, never taken from the archive
        registry = [
            {**{k: v for k, v in row.items() if k != "properties"}, "vertex_id": None} for row in rows
        ]
        inserted = conn.execute(
            "INSERT INTO graph_nodes SELECT * FROM jsonb_populate_recordset(NULL::graph_nodes, %s::jsonb)"
            " ON CONFLICT DO NOTHING RETURNING natural_key, label",
            (json.dumps(registry),),
        ).fetchall()
        namespace = str(rows[0]["namespace"])
        by_label: dict[str, list[str]] = {}
        for key, label in inserted:
            if properties.get(str(key)) is not None:
                by_label.setdefault(str(label), []).append(agtype_text(properties[str(key)]))
        for label, vertices in by_label.items():
            # each vertex's properties carry its natural key, which finds its registry row
            conn.execute(
                sql.SQL(
                    "WITH v AS (INSERT INTO {v} (properties) SELECT p::ag_catalog.agtype FROM unnest(%s::text[]) p"
                    " RETURNING id, (ag_catalog.agtype_out(properties)::text)::jsonb ->> 'natural_key' AS natural_key)"
                    " UPDATE graph_nodes g SET vertex_id = v.id FROM v WHERE g.namespace = %s"
                    " AND g.natural_key = v.natural_key"
                ).format(v=sql.Identifier(self.graph, label)),
                (vertices, namespace),
            )
        return [str(key) for key, _ in inserted]

    def insert_edges(self, conn: psycopg.Connection[Any], namespace: str, edges: list[dict[str, Any]]) -> int:
        """Inserts edges between vertices looked up by key (an end may be in another namespace only when
        it exists there), one statement per label; an edge with a missing end is left out. Returns how
        many were inserted."""
        by_label: dict[str, list[dict[str, Any]]] = {}
        for edge in edges:
            by_label.setdefault(str(edge["label"]), []).append(edge)
        inserted = 0
        for label, group in by_label.items():
            cursor = conn.execute(
                sql.SQL(
                    "INSERT INTO {e} (start_id, end_id, properties)"
                    " SELECT s.vertex_id, t.vertex_id, x.props::ag_catalog.agtype"
                    " FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[]) AS x(start_key, end_key, end_ns, props)"
                    " JOIN graph_nodes s ON s.namespace = %s AND s.natural_key = x.start_key"
                    " JOIN graph_nodes t ON t.namespace = x.end_ns AND t.natural_key = x.end_key"
                    " WHERE s.vertex_id IS NOT NULL AND t.vertex_id IS NOT NULL"
                ).format(e=sql.Identifier(self.graph, label)),
                (
                    [e["start"] for e in group],
                    [e["end"] for e in group],
                    [e.get("end_namespace", namespace) for e in group],
                    [agtype_text(e["properties"]) for e in group],
                    namespace,
                ),
            )
            inserted += max(cursor.rowcount, 0)
        return inserted

    def node_exists(self, conn: psycopg.Connection[Any], namespace: str, key: str) -> bool:
        """True when ``key`` is registered in ``namespace``."""
        return (
            conn.execute(
                "SELECT 1 FROM graph_nodes WHERE namespace = %s AND natural_key = %s", (namespace, key)
            ).fetchone()
            is not None
        )

    def trace_exists(self, conn: psycopg.Connection[Any], namespace: str, row: dict[str, Any]) -> bool:
        """True when a context trace of the same trace id and instant exists (traces have no key of
        their own)."""
        return (
            conn.execute(
                sql.SQL(
                    "SELECT 1 FROM {t} WHERE namespace = %s AND trace_id = %s AND created_at = %s::timestamptz"
                ).format(t=self.t["context_traces"]),
                (namespace, row.get("trace_id"), row.get("created_at")),
            ).fetchone()
            is not None
        )
