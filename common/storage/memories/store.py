"""The memories table (migration 0015; docs/how-to/memory-records.md): every SQL statement on it.

A memory is the node ``(namespace, memory_id)`` of type ``memory`` (label ``n_memory``) with its text as
chunk 0 of ``{chunks}``; this table is its narrow index row (scope, importance, tier, expiry, lineage,
versions). Reads that return whole records join the row with its vertex (``graph_nodes.vertex_id`` ->
the label table, no Cypher) and return the vertex's ``props``, where the semantic fields live.

Every read is confined to one namespace and one owner (``namespace``, ``user_id``): the caller's scope
(`common.domain.memory_scope.MemoryScope`). The statements are composed here with `psycopg.sql` (their
filters are optional), never from request text: values are bound parameters.

The statements of the tier policy, the expiry sweep and the enrichment state are in
`common.storage.memories.lifecycle`.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from datetime import datetime
from typing import Any

import numpy as np
import psycopg
from psycopg import sql
from psycopg.adapt import PyFormat
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from common.kernel.config import Settings
from common.kernel.identifiers import graph_label
from common.storage.tables import table_identifiers

MEMORY_NODE_TYPE = "memory"
MEMORY_LABEL = graph_label("node_type", MEMORY_NODE_TYPE)
TIERS = ("hot", "warm", "cold")

UPDATABLE_COLUMNS = frozenset(
    {
        "source",
        "event_type",
        "tags",
        "importance",
        "quality_score",
        "memory_type",
        "tier",
        "expires_at",
        "updated_at",
        "version",
        "summary_id",
        "hidden",
    }
)


_INSERT_COLUMNS = (
    ("namespace", "text"),
    ("memory_id", "text"),
    ("organization_id", "text"),
    ("environment", "text"),
    ("project_id", "text"),
    ("user_id", "text"),
    ("user_scope", "text"),
    ("idempotency_key", "text"),
    ("source", "text"),
    ("event_type", "text"),
    ("importance", "real"),
    ("memory_type", "text"),
    ("tier", "text"),
    ("expires_at", "timestamptz"),
    ("created_at", "timestamptz"),
    ("updated_at", "timestamptz"),
    ("last_used_at", "timestamptz"),
    ("is_summary", "boolean"),
    ("lossless", "boolean"),
    ("parent_id", "text"),
)
"""The columns `MemoryStore.insert_rows` binds as arrays (all but ``tags``) and their types."""


@dataclass(frozen=True)
class MemoryRow:
    """A new row of the memories table (the columns of `ROW_COLUMNS` not defaulted by the database)."""

    namespace: str
    memory_id: str
    organization_id: str
    environment: str
    project_id: str
    user_id: str
    user_scope: str
    idempotency_key: str
    source: str
    event_type: str
    tags: tuple[str, ...]
    importance: float
    memory_type: str
    tier: str
    expires_at: datetime | None
    created_at: datetime
    is_summary: bool = False
    lossless: bool = False
    parent_id: str = ""


@dataclass(frozen=True)
class MemoryQuery:
    """Which rows of one owner a read may return (every set field must match).

    Attributes:
        namespace: the scope's namespace.
        user_id: the owner.
        now: the instant expiry is judged at.
        tags: the row has all of these.
        source: equal, when set.
        event_type: equal, when set.
        tiers: one of these (empty: any).
        memory_types: one of these (empty: any).
        created_from: ``created_at >=`` this.
        created_to: ``created_at <`` this.
        min_importance: ``importance >=`` this.
        is_summary: equal, when not None.
        include_expired: also rows past ``expires_at``.
        include_hidden: also originals hidden by a lossy summary.
    """

    namespace: str
    user_id: str
    now: datetime
    tags: tuple[str, ...] = ()
    source: str = ""
    event_type: str = ""
    tiers: tuple[str, ...] = ()
    memory_types: tuple[str, ...] = ()
    created_from: datetime | None = None
    created_to: datetime | None = None
    min_importance: float = 0.0
    is_summary: bool | None = None
    include_expired: bool = False
    include_hidden: bool = False


@dataclass(frozen=True)
class RecallWeights:
    """Weights of the recall score (see `MemoryStore.recall`)."""

    similarity: float
    recency: float
    importance: float
    half_life_days: float


@dataclass
class StoredMemory:
    """A row with its node's ``props`` (and, for recall, the score components)."""

    row: dict[str, Any]
    props: dict[str, Any] = field(default_factory=dict)
    score: float = 0.0
    similarity: float = 0.0
    recency: float = 0.0


class MemoryStore:
    """SQL of the memories table. Stateless apart from the table names; safe to share.

    Args:
        settings: table and graph names.
    """

    def __init__(self, settings: Settings) -> None:
        names = table_identifiers(settings)
        self.table = names["memories"]
        self.chunks = names["chunks"]
        self.graph_nodes = names["graph_nodes"]
        self.vertices = sql.Identifier(settings.graph_name, MEMORY_LABEL)

    # -- writes --------------------------------------------------------------------------------------

    def insert_rows(self, conn: psycopg.Connection[Any], rows: Sequence[MemoryRow]) -> set[str]:
        """Inserts the rows that do not exist yet (``ON CONFLICT DO NOTHING``); returns the ids inserted.

        One statement for the whole batch (``unnest`` of one array per column; the tags of each row as a
        JSON array, since a text[][] cannot be ragged): the statement-level triggers of the table (the
        change feed) run once per batch, not once per row.
        """
        if not rows:
            return set()
        columns = [name for name, _ in _INSERT_COLUMNS]
        statement = sql.SQL(
            "INSERT INTO {table} ({columns}, tags)"
            " SELECT {values}, ARRAY(SELECT jsonb_array_elements_text(r.tags))"
            " FROM unnest({arrays}, %(tags)b::jsonb[]) AS r({columns}, tags)"
            " ON CONFLICT (namespace, memory_id) DO NOTHING RETURNING memory_id"
        ).format(
            table=self.table,
            columns=sql.SQL(", ").join(sql.Identifier(c) for c in columns),
            values=sql.SQL(", ").join(sql.Identifier("r", c) for c in columns),
            arrays=sql.SQL(", ").join(
                sql.SQL("{}::{}[]").format(sql.Placeholder(name, PyFormat.BINARY), sql.SQL(kind))
                for name, kind in _INSERT_COLUMNS
            ),
        )
        params: dict[str, Any] = {
            name: [
                row.created_at if name in ("updated_at", "last_used_at") else getattr(row, name)
                for row in rows
            ]
            for name in columns
        }
        params["tags"] = [Jsonb(list(row.tags)) for row in rows]
        return {str(found[0]) for found in conn.execute(statement, params).fetchall()}

    def existing_ids(
        self, conn: psycopg.Connection[Any], namespace: str, memory_ids: Sequence[str]
    ) -> set[str]:
        """The ids among ``memory_ids`` that have a row in ``namespace``."""
        if not memory_ids:
            return set()
        rows = conn.execute(
            sql.SQL("SELECT memory_id FROM {} WHERE namespace = %s AND memory_id = ANY(%s)").format(
                self.table
            ),
            (namespace, list(memory_ids)),
        ).fetchall()
        return {str(r[0]) for r in rows}

    def lock_rows(
        self, conn: psycopg.Connection[Any], namespace: str, user_id: str, memory_ids: Sequence[str]
    ) -> dict[str, dict[str, Any]]:
        """The rows of ``memory_ids`` owned by ``user_id`` in ``namespace``, locked ``FOR UPDATE`` (in id
        order, so concurrent writers never deadlock), by id."""
        if not memory_ids:
            return {}
        with conn.cursor(row_factory=dict_row) as cursor:
            rows = cursor.execute(
                sql.SQL(
                    "SELECT * FROM {} WHERE namespace = %s AND user_id = %s AND memory_id = ANY(%s)"
                    " ORDER BY memory_id FOR UPDATE"
                ).format(self.table),
                (namespace, user_id, sorted(set(memory_ids))),
            ).fetchall()
        return {str(row["memory_id"]): row for row in rows}

    def update_row(
        self, conn: psycopg.Connection[Any], namespace: str, memory_id: str, changes: Mapping[str, Any]
    ) -> None:
        """Sets the columns of ``changes`` (names from `UPDATABLE_COLUMNS`) of one row.

        Raises:
            ValueError: a column outside `UPDATABLE_COLUMNS`.
        """
        unknown = set(changes) - UPDATABLE_COLUMNS
        if unknown:
            raise ValueError(f"not updatable: {sorted(unknown)}")
        if not changes:
            return
        params = {f"v_{name}": (list(v) if name == "tags" else v) for name, v in changes.items()}
        params.update(namespace=namespace, memory_id=memory_id)
        conn.execute(
            sql.SQL("UPDATE {} SET {} WHERE namespace = %(namespace)s AND memory_id = %(memory_id)s").format(
                self.table,
                sql.SQL(", ").join(
                    sql.SQL("{} = {}").format(sql.Identifier(name), sql.Placeholder(f"v_{name}"))
                    for name in changes
                ),
            ),
            params,
        )

    def delete_row(self, conn: psycopg.Connection[Any], namespace: str, memory_id: str) -> bool:
        """Deletes one row; True when it existed."""
        cursor = conn.execute(
            sql.SQL("DELETE FROM {} WHERE namespace = %s AND memory_id = %s").format(self.table),
            (namespace, memory_id),
        )
        return cursor.rowcount > 0

    def cover_by_summary(
        self,
        conn: psycopg.Connection[Any],
        namespace: str,
        memory_ids: Sequence[str],
        summary_id: str,
        *,
        hidden: bool,
        now: datetime,
    ) -> None:
        """Marks originals as summarised by ``summary_id`` (``hidden``: a lossy summary replaces them)."""
        conn.execute(
            sql.SQL(
                "UPDATE {} SET summary_id = %s, hidden = %s, updated_at = %s"
                " WHERE namespace = %s AND memory_id = ANY(%s)"
            ).format(self.table),
            (summary_id, hidden, now, namespace, list(memory_ids)),
        )

    def release_summary(
        self, conn: psycopg.Connection[Any], namespace: str, summary_id: str, now: datetime
    ) -> int:
        """The originals of a deleted summary become plain memories again; returns how many."""
        cursor = conn.execute(
            sql.SQL(
                "UPDATE {} SET summary_id = '', hidden = false, updated_at = %s WHERE namespace = %s AND summary_id = %s"
            ).format(self.table),
            (now, namespace, summary_id),
        )
        return max(cursor.rowcount, 0)

    def touch(
        self, conn: psycopg.Connection[Any], namespace: str, memory_ids: Sequence[str], now: datetime
    ) -> None:
        """A recall returned these memories: last recall and use now, count + 1, tier back to hot."""
        if not memory_ids:
            return
        conn.execute(
            sql.SQL(
                "UPDATE {} SET last_recalled_at = %(now)s, last_used_at = %(now)s, recall_count = recall_count + 1,"
                " tier = 'hot' WHERE namespace = %(namespace)s AND memory_id = ANY(%(ids)s)"
            ).format(self.table),
            {"now": now, "namespace": namespace, "ids": sorted(set(memory_ids))},
        )

    # -- reads ---------------------------------------------------------------------------------------

    def where(self, query: MemoryQuery, params: dict[str, Any], alias: str = "m") -> sql.Composable:
        """The conditions of ``query`` on the memories table aliased ``alias`` (values bound into
        ``params``)."""
        column = lambda name: sql.Identifier(alias, name)
        conditions: list[sql.Composable] = [
            sql.SQL("{} = %(namespace)s").format(column("namespace")),
            sql.SQL("{} = %(user_id)s").format(column("user_id")),
        ]
        params.update(namespace=query.namespace, user_id=query.user_id, now=query.now)
        if not query.include_expired:
            conditions.append(sql.SQL("({e} IS NULL OR {e} > %(now)s)").format(e=column("expires_at")))
        if not query.include_hidden:
            conditions.append(sql.SQL("NOT {}").format(column("hidden")))
        optional: list[tuple[bool, str, str, Any]] = [
            (bool(query.tags), "{} @> %(tags)s::text[]", "tags", list(query.tags)),
            (bool(query.source), "{} = %(source)s", "source", query.source),
            (bool(query.event_type), "{} = %(event_type)s", "event_type", query.event_type),
            (bool(query.tiers), "{} = ANY(%(tiers)s)", "tier", list(query.tiers)),
            (bool(query.memory_types), "{} = ANY(%(memory_types)s)", "memory_type", list(query.memory_types)),
            (query.created_from is not None, "{} >= %(created_from)s", "created_at", query.created_from),
            (query.created_to is not None, "{} < %(created_to)s", "created_at", query.created_to),
            (query.min_importance > 0, "{} >= %(min_importance)s", "importance", query.min_importance),
            (query.is_summary is not None, "{} = %(is_summary)s", "is_summary", query.is_summary),
        ]
        for present, template, name, value in optional:
            if present:
                placeholder = template.split("%(")[1].split(")")[0]
                conditions.append(sql.SQL(template).format(column(name)))
                params[placeholder] = value
        return sql.SQL(" AND ").join(conditions)

    def _records_select(self) -> sql.Composable:
        return sql.SQL(
            "SELECT m.*, (ag_catalog.agtype_out(v.properties)::text)::jsonb -> 'props' AS props"
            " FROM {memories} m"
            " JOIN {graph_nodes} g ON g.namespace = m.namespace AND g.natural_key = m.memory_id"
            " JOIN {vertices} v ON v.id = g.vertex_id"
        ).format(memories=self.table, graph_nodes=self.graph_nodes, vertices=self.vertices)

    def get(
        self, conn: psycopg.Connection[Any], namespace: str, user_id: str, memory_ids: Sequence[str]
    ) -> dict[str, StoredMemory]:
        """Whole records of ``memory_ids`` owned by ``user_id`` (expired and hidden ones included), by id."""
        if not memory_ids:
            return {}
        with conn.cursor(row_factory=dict_row) as cursor:
            rows = cursor.execute(
                sql.SQL("{} WHERE m.namespace = %s AND m.user_id = %s AND m.memory_id = ANY(%s)").format(
                    self._records_select()
                ),
                (namespace, user_id, list(dict.fromkeys(memory_ids))),
            ).fetchall()
        return {str(row["memory_id"]): _stored(row) for row in rows}

    def list_page(
        self,
        conn: psycopg.Connection[Any],
        query: MemoryQuery,
        *,
        limit: int,
        after: tuple[datetime, str] | None = None,
        oldest_first: bool = False,
    ) -> list[StoredMemory]:
        """One page of whole records, newest first (``created_at``, then ``memory_id``), after the keyset
        ``after`` (the last item of the previous page). ``oldest_first`` reverses the order."""
        params: dict[str, Any] = {"limit": limit}
        where = self.where(query, params)
        direction = sql.SQL("ASC" if oldest_first else "DESC")
        if after is not None:
            params.update(after_time=after[0], after_id=after[1])
            comparison = sql.SQL(">" if oldest_first else "<")
            where = sql.SQL("{} AND (m.created_at, m.memory_id) {} (%(after_time)s, %(after_id)s)").format(
                where, comparison
            )
        statement = sql.SQL("{} WHERE {} ORDER BY m.created_at {d}, m.memory_id {d} LIMIT %(limit)s").format(
            self._records_select(), where, d=direction
        )
        with conn.cursor(row_factory=dict_row) as cursor:
            rows = cursor.execute(statement, params).fetchall()
        return [_stored(row) for row in rows]

    def recall(
        self,
        conn: psycopg.Connection[Any],
        query: MemoryQuery,
        vector: np.ndarray,
        weights: RecallWeights,
        *,
        limit: int,
        candidates: Mapping[str, float] | None = None,
    ) -> list[StoredMemory]:
        """The best ``limit`` records of ``query`` by

        ``score = max(similarity, 0) * (w_sim + w_rec * 0.5 ^ (age_days / half_life_days) + w_imp * importance)``,
        similarity = 1 - cosine_distance(vector, chunk 0): recency and importance scale a memory's relevance
        (by at most ``(w_sim + w_rec + w_imp) / w_sim``), so they never lift an unrelated memory over a
        related one; ties (no similarity) by similarity, then id

        (age from ``created_at`` to ``query.now``), exact over the owner's rows (the owner index narrows
        them first, then the distance is computed for those chunks only), best first.

        ``candidates``: score only these ids, with the similarity given (the approximate stage of
        `common.storage.memories.recall` computed it with the same expression on the same chunk: no
        second read of the chunks); every filter of ``query`` still applies. None scores every row of the
        owner.
        """
        params: dict[str, Any] = {
            "limit": limit,
            "vector": np.asarray(vector, dtype=np.float32),
            "w_sim": weights.similarity,
            "w_rec": weights.recency,
            "w_imp": weights.importance,
            "half_life": max(weights.half_life_days, 1e-6),
        }
        where = self.where(query, params)
        if candidates is None:
            similarity = sql.SQL("coalesce(1 - (c.embedding <=> %(vector)s), 0)")
            rows = sql.SQL(
                "{memories} m JOIN {chunks} c ON c.namespace = m.namespace AND c.node_key = m.memory_id"
                " AND c.chunk_order = 0"
            ).format(memories=self.table, chunks=self.chunks)
        else:
            similarity = sql.SQL("k.similarity")
            rows = sql.SQL(
                "unnest(%(candidate_ids)s::text[], %(candidate_similarities)s::float8[])"
                " AS k(memory_id, similarity)"
                " JOIN {memories} m ON m.namespace = %(namespace)s AND m.memory_id = k.memory_id"
            ).format(memories=self.table)
            params.update(candidate_ids=list(candidates), candidate_similarities=list(candidates.values()))
        statement = sql.SQL(
            "WITH scored AS ("
            " SELECT m.memory_id, {similarity} AS similarity,"
            " power(0.5, greatest(extract(epoch FROM (%(now)s - m.created_at)), 0) / 86400.0 / %(half_life)s)"
            " AS recency, m.importance"
            " FROM {rows} WHERE {where}),"
            " best AS (SELECT memory_id, similarity, recency,"
            " greatest(similarity, 0) * (%(w_sim)s + %(w_rec)s * recency + %(w_imp)s * importance) AS score"
            " FROM scored ORDER BY score DESC, similarity DESC, memory_id LIMIT %(limit)s)"
            " SELECT m.*, (ag_catalog.agtype_out(v.properties)::text)::jsonb -> 'props' AS props,"
            " b.score, b.similarity, b.recency"
            " FROM best b JOIN {memories} m ON m.namespace = %(namespace)s AND m.memory_id = b.memory_id"
            " JOIN {graph_nodes} g ON g.namespace = m.namespace AND g.natural_key = m.memory_id"
            " JOIN {vertices} v ON v.id = g.vertex_id"
            " ORDER BY b.score DESC, b.similarity DESC, m.memory_id"
        ).format(
            similarity=similarity,
            rows=rows,
            memories=self.table,
            where=where,
            graph_nodes=self.graph_nodes,
            vertices=self.vertices,
        )
        with conn.cursor(row_factory=dict_row) as cursor:
            rows = cursor.execute(statement, params).fetchall()
        out = []
        for row in rows:
            stored = _stored(row)
            stored.score = float(row.pop("score"))
            stored.similarity = float(row.pop("similarity"))
            stored.recency = float(row.pop("recency"))
            out.append(stored)
        return out


def _stored(row: dict[str, Any]) -> StoredMemory:
    props = row.pop("props", None)
    return StoredMemory(row=row, props=dict(props) if isinstance(props, Mapping) else {})


__all__ = [
    "MEMORY_LABEL",
    "MEMORY_NODE_TYPE",
    "TIERS",
    "MemoryQuery",
    "MemoryRow",
    "MemoryStore",
    "RecallWeights",
    "StoredMemory",
]
