"""Counts of what each namespace holds, as one caller may see it (NamespaceService).

Every count carries the caller's `Visibility` inside its statement, so an item restricted to scopes the
caller does not hold is not counted: a count never tells a reader how many hidden items exist. The
statements are composed at run time (the visibility predicate is ``TRUE`` for an unrestricted caller),
which is why they are not named queries of ``sql/queries``.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field
from typing import Any

import psycopg
from psycopg import sql

from common.kernel.config import Settings
from common.storage.fact_store import fact_visibility
from common.storage.tables import query_placeholders
from common.storage.visibility import Visibility


@dataclass(frozen=True)
class NamespaceCounts:
    """One namespace with the items a caller sees in it (ListNamespaces)."""

    namespace: str
    observations: int = 0
    nodes: int = 0
    facts: int = 0
    chunks: int = 0


@dataclass(frozen=True)
class NamespaceDetail:
    """The counts of one namespace by kind (GetNamespaceStats); zero counts are absent from the maps."""

    namespace: str
    observations_by_status: dict[str, int] = field(default_factory=dict)
    nodes_by_type: dict[str, int] = field(default_factory=dict)
    live_facts: int = 0
    closed_facts: int = 0
    chunks: int = 0
    embedding_backlog: int = 0
    memories_by_tier: dict[str, int] = field(default_factory=dict)


class NamespaceStatistics:
    """SQL of the namespace counts; every call runs on the caller's connection."""

    def __init__(self, settings: Settings) -> None:
        self.tables = query_placeholders(settings)

    def _predicates(self, visibility: Visibility) -> dict[str, sql.Composable]:
        return {
            "observations": visibility.array_predicate(sql.SQL("scopes")),
            "graph_nodes": visibility.array_predicate(sql.SQL("scopes")),
            "facts": sql.SQL(" AND ").join(fact_visibility(visibility, sql.SQL("f."))),
            "chunks": visibility.jsonb_predicate(sql.SQL("(meta -> 'scopes')")),
            # a memory is its owner's: the owner scope is restricting, so only its user (or an
            # unrestricted caller) counts it
            "memories": visibility.array_predicate(sql.SQL("ARRAY[user_scope]")),
        }

    def names(self, conn: psycopg.Connection[Any]) -> set[str]:
        """Every namespace holding a row of a counted kind, whatever its visibility (the caller filters
        by read right and counts only a page of them). One index probe per namespace and table (a loose
        index scan, https://wiki.postgresql.org/wiki/Loose_indexscan), so the cost follows the number of
        namespaces, not of rows."""
        walks = [
            sql.SQL(
                "(WITH RECURSIVE walk(namespace) AS ("
                "(SELECT namespace FROM {table} ORDER BY namespace LIMIT 1)"
                " UNION ALL SELECT (SELECT t.namespace FROM {table} t WHERE t.namespace > walk.namespace"
                " ORDER BY t.namespace LIMIT 1) FROM walk WHERE walk.namespace IS NOT NULL)"
                " SELECT namespace FROM walk WHERE namespace IS NOT NULL)"
            ).format(table=self.tables[table])
            for table in ("observations", "graph_nodes", "facts", "chunks")
        ]
        rows = conn.execute(sql.SQL(" UNION ").join(walks)).fetchall()
        return {str(row[0]) for row in rows}

    def list(
        self, conn: psycopg.Connection[Any], visibility: Visibility, namespaces: list[str] | None
    ) -> list[NamespaceCounts]:
        """The namespaces (all, or those of ``namespaces``) holding an item ``visibility`` reaches, by
        name."""
        visible = self._predicates(visibility)
        chosen = sql.SQL("TRUE") if namespaces is None else sql.SQL("namespace = ANY(%(namespaces)s::text[])")
        parts = [
            sql.SQL(
                "SELECT namespace, {kind} AS kind, count(*) AS n FROM {table} WHERE {chosen} AND {visible}"
                " GROUP BY namespace"
            ).format(kind=sql.Literal(kind), table=self.tables[table], chosen=chosen, visible=visible[table])
            for kind, table in (
                ("observations", "observations"),
                ("nodes", "graph_nodes"),
                ("chunks", "chunks"),
            )
        ]
        parts.append(
            sql.SQL(
                "SELECT f.namespace, 'facts' AS kind, count(*) AS n FROM {table} f WHERE {chosen} AND {visible}"
                " GROUP BY f.namespace"
            ).format(
                table=self.tables["facts"],
                chosen=sql.SQL("TRUE")
                if namespaces is None
                else sql.SQL("f.namespace = ANY(%(namespaces)s::text[])"),
                visible=visible["facts"],
            )
        )
        statement = sql.SQL(" UNION ALL ").join(parts)
        rows = conn.execute(statement, {"namespaces": namespaces or [], **visibility.params}).fetchall()
        counts: dict[str, dict[str, int]] = {}
        for namespace, kind, number in rows:
            counts.setdefault(str(namespace), {})[str(kind)] = int(number)
        return [NamespaceCounts(namespace=name, **counts[name]) for name in sorted(counts)]

    def detail(
        self, conn: psycopg.Connection[Any], namespace: str, visibility: Visibility
    ) -> NamespaceDetail:
        """The counts of ``namespace`` by kind that ``visibility`` reaches (all zero for an empty one)."""
        visible = self._predicates(visibility)
        params = {"namespace": namespace, **visibility.params}

        def grouped(table: str, column: str) -> dict[str, int]:
            statement = sql.SQL(
                "SELECT {column}, count(*) FROM {table} WHERE namespace = %(namespace)s AND {visible}"
                " GROUP BY {column} ORDER BY {column}"
            ).format(column=sql.Identifier(column), table=self.tables[table], visible=visible[table])
            return {str(key): int(number) for key, number in conn.execute(statement, params).fetchall()}

        facts = conn.execute(
            sql.SQL(
                "SELECT count(*) FILTER (WHERE f.valid_to IS NULL OR f.valid_to > now()),"
                " count(*) FILTER (WHERE f.valid_to <= now())"
                " FROM {table} f WHERE f.namespace = %(namespace)s AND {visible}"
            ).format(table=self.tables["facts"], visible=visible["facts"]),
            params,
        ).fetchone()
        chunks = conn.execute(
            sql.SQL(
                "SELECT count(*), count(*) FILTER (WHERE embedding_pending)"
                " FROM {table} WHERE namespace = %(namespace)s AND {visible}"
            ).format(table=self.tables["chunks"], visible=visible["chunks"]),
            params,
        ).fetchone()
        assert facts is not None and chunks is not None
        return NamespaceDetail(
            namespace=namespace,
            observations_by_status=grouped("observations", "status"),
            nodes_by_type=grouped("graph_nodes", "node_type"),
            live_facts=int(facts[0]),
            closed_facts=int(facts[1]),
            chunks=int(chunks[0]),
            embedding_backlog=int(chunks[1]),
            memories_by_tier=grouped("memories", "tier"),
        )
