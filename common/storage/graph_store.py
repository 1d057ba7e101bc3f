"""The AGE graph: labels, vertices keyed by (namespace, natural_key), edges. All Cypher lives here.

Uniqueness (DESIGN §11): AGE has no unique property constraint and MERGE does not serialise across
sessions, so every vertex has a row in ``graph_nodes`` (primary key namespace + natural_key). A writer
inserts that row first (``ON CONFLICT DO NOTHING`` waits for a concurrent inserter of the same key) or
locks it (``FOR UPDATE``), and only then touches the vertex: one vertex per key, even under concurrency.

Parameters reach Cypher only through the third argument of ``ag_catalog.cypher`` (an agtype map,
referenced as ``$name``); labels are sanitised by `common.identifiers.age_label` and checked again here.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

from common.identifiers import age_label, canonical_instant, canonical_json
from common.storage.visibility import EVERYTHING, Visibility

if TYPE_CHECKING:
    from common.db import Database

_SAFE_LABEL = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
BASE_VERTEX_LABELS = ("episode", "entity", "document", "text")
BASE_EDGE_LABELS = ("LINKS_TO", "MENTIONS")
_LABEL_LOCK_BASE = 0x6C61_0000  # advisory lock namespace for label creation


def checked_label(label: str) -> str:
    """Returns ``label`` when it is a plain identifier; raises ValueError otherwise (defence in depth)."""
    if not _SAFE_LABEL.match(label):
        raise ValueError(f"unsafe graph label {label!r}")
    return label


def type_of_key(natural_key: str) -> str:
    """Node type implied by a natural key: the part before the first ':' of ``type:id``, else "entity"."""
    head, sep, _ = natural_key.partition(":")
    return head if sep and head else "entity"


@dataclass
class NodeWrite:
    """Properties of one vertex (seed 000 "Узлы графа"); ``props`` holds content, provenance, meta, ...."""

    namespace: str
    natural_key: str
    node_type: str
    title: str = ""
    source_path: str = ""
    source_id: str = ""
    confidence: float = 1.0
    origin: str = "agent"
    props: dict[str, Any] = field(default_factory=dict)
    asserted_at: datetime | None = None

    def scopes(self) -> list[str]:
        """``props.scopes`` as a list of strings (visibility and relevance scopes; empty when absent)."""
        raw = self.props.get("scopes")
        return [s for s in raw if isinstance(s, str)] if isinstance(raw, (list, tuple)) else []

    def vertex_properties(self, last_seen: str, placeholder: bool) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "natural_key": self.natural_key,
            "type": self.node_type,
            "title": self.title or self.natural_key,
            "source_path": self.source_path,
            "source_id": self.source_id,
            "confidence": self.confidence,
            "origin": self.origin,
            "last_seen": last_seen,
            "placeholder": placeholder,
            "props": self.props,
        }


@dataclass(frozen=True)
class NodeResult:
    natural_key: str
    label: str
    created: bool
    updated: bool


class GraphStore:
    """Graph access for one database. Thread-safe; label existence is cached per process."""

    _known_labels: set[tuple[str, str, str]] = set()
    _labels_lock = threading.Lock()

    def __init__(self, database: "Database") -> None:
        self.database = database
        self.graph = database.settings.graph_name

    # -- Cypher ------------------------------------------------------------------------------------

    def cypher(self, conn: psycopg.Connection[Any], query: str, params: dict[str, Any] | None = None) -> list[Any]:
        """Runs one Cypher statement; returns the decoded single ``v`` column of each row.

        ``query`` is a constant of this module with sanitised labels; values go in ``params``.
        """
        if "$$" in query:
            raise ValueError("Cypher text must not contain $$")
        statement = sql.SQL("SELECT * FROM ag_catalog.cypher({graph}, $$ {query} $$, %s) AS (v ag_catalog.agtype)").format(
            graph=sql.Literal(self.graph), query=sql.SQL(query)  # type: ignore[arg-type]
        )
        rows = conn.execute(statement, (json.dumps(params or {}, ensure_ascii=False),)).fetchall()
        return [_decode_agtype(row[0]) for row in rows]

    # -- labels ------------------------------------------------------------------------------------

    @classmethod
    def ensure_base_labels(cls, database: "Database") -> None:
        """Creates the labels every namespace uses (called after migrations)."""
        store = cls(database)
        for label in BASE_VERTEX_LABELS:
            store.ensure_label(label, "vertex")
        for label in BASE_EDGE_LABELS:
            store.ensure_label(label, "edge")

    def ensure_label(self, label: str, kind: str) -> None:
        """Creates a vertex or edge label with its indexes, once, before first use (DESIGN §11).

        Runs in its own autocommit connection under an advisory lock, so concurrent writers never race
        on the implicit label creation of CREATE (error 42P07).
        """
        checked_label(label)
        cache_key = (self.graph, kind, label)
        if cache_key in self._known_labels:
            return
        with self._labels_lock:
            if cache_key in self._known_labels:
                return
            with psycopg.connect(self.database.settings.database_url, autocommit=True, connect_timeout=5) as conn:
                try:
                    conn.execute("LOAD 'age'")
                except psycopg.Error:
                    pass
                conn.execute("SET search_path = \"$user\", public, ag_catalog")
                lock_key = _LABEL_LOCK_BASE + (int(hashlib.sha256(label.encode()).hexdigest()[:6], 16))
                conn.execute("SELECT pg_advisory_lock(%s)", (lock_key,))
                try:
                    row = conn.execute(
                        "SELECT l.kind FROM ag_catalog.ag_label l JOIN ag_catalog.ag_graph g ON l.graph = g.graphid"
                        " WHERE g.name = %s AND l.name = %s",
                        (self.graph, label),
                    ).fetchone()
                    if row is None:
                        function = "create_vlabel" if kind == "vertex" else "create_elabel"
                        conn.execute(
                            sql.SQL("SELECT ag_catalog.{}(%s, %s)").format(sql.Identifier(function)), (self.graph, label)
                        )
                    elif (row[0] == "v") != (kind == "vertex"):
                        raise ValueError(f"label {label!r} already exists as the other kind (vertex vs edge)")
                    table = sql.Identifier(self.graph, label)
                    conn.execute(
                        sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} USING gin (properties)").format(
                            sql.Identifier(f"{label}_properties_gin"), table
                        )
                    )
                    if kind == "edge":
                        for column in ("start_id", "end_id"):
                            conn.execute(
                                sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} ({})").format(
                                    sql.Identifier(f"{label}_{column}_idx"), table, sql.Identifier(column)
                                )
                            )
                    else:
                        conn.execute(
                            sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} (id)").format(
                                sql.Identifier(f"{label}_id_idx"), table
                            )
                        )
                finally:
                    conn.execute("SELECT pg_advisory_unlock(%s)", (lock_key,))
            self._known_labels.add(cache_key)

    # -- vertices ----------------------------------------------------------------------------------

    def upsert_node(
        self, conn: psycopg.Connection[Any], node: NodeWrite, *, now: datetime, overwrite: bool = True
    ) -> NodeResult:
        """Creates the vertex of (namespace, natural_key) or updates it.

        ``overwrite=True`` (documents written through the API) replaces the properties on every write.
        ``overwrite=False`` (entity assertions) updates only when ``node.asserted_at`` is not older than
        the assertion the vertex holds, so the result does not depend on delivery order.
        A placeholder (created for a fact end) is always completed by the first real write.
        """
        label = age_label(node.node_type)
        last_seen = canonical_instant(now)
        properties = node.vertex_properties(last_seen, placeholder=False)
        scopes = node.scopes()  # mirrored into graph_nodes.scopes for the visibility predicates
        # For assertions (overwrite=False) the citation of the latest observation alone is no change.
        digest = _properties_hash(properties, ignore=() if overwrite else ("source_path", "source_id"))
        # One statement either inserts the row (xmax = 0) or locks the existing one (DO UPDATE), so
        # concurrent writers of one key are serialised until commit.
        row = conn.execute(
            "INSERT INTO graph_nodes AS g (namespace, natural_key, node_type, label, placeholder, origin, asserted_at,"
            " props_hash, created_at, last_seen, scopes) VALUES (%s, %s, %s, %s, false, %s, %s, %s, %s, %s, %s)"
            " ON CONFLICT (namespace, natural_key) DO UPDATE SET last_seen = greatest(g.last_seen, excluded.last_seen)"
            " RETURNING (xmax = 0) AS inserted, label, placeholder, asserted_at, props_hash",
            (
                node.namespace,
                node.natural_key,
                node.node_type,
                label,
                node.origin,
                node.asserted_at,
                digest,
                now,
                now,
                scopes,
            ),
        ).fetchone()
        assert row is not None
        inserted, existing_label, was_placeholder, asserted_at, props_hash = row
        if inserted:
            self.ensure_label(label, "vertex")
            self._insert_vertex(conn, label, properties)
            return NodeResult(node.natural_key, label, created=True, updated=False)
        newer = asserted_at is None or node.asserted_at is None or node.asserted_at >= asserted_at
        if not (overwrite or was_placeholder or newer) or props_hash == digest:
            return NodeResult(node.natural_key, existing_label, created=False, updated=False)
        self._replace_vertex(conn, existing_label, properties)
        conn.execute(
            "UPDATE graph_nodes SET node_type = %s, placeholder = false, props_hash = %s, last_seen = %s,"
            " asserted_at = CASE WHEN %s::timestamptz IS NULL THEN asserted_at"
            " ELSE greatest(asserted_at, %s::timestamptz) END, scopes = %s"
            " WHERE namespace = %s AND natural_key = %s",
            (
                node.node_type,
                digest,
                now,
                node.asserted_at,
                node.asserted_at,
                scopes,
                node.namespace,
                node.natural_key,
            ),
        )
        return NodeResult(node.natural_key, existing_label, created=False, updated=True)

    def insert_node_once(self, conn: psycopg.Connection[Any], node: NodeWrite, *, now: datetime) -> bool:
        """Creates the vertex of (namespace, natural_key) only when the key is new; never updates it.

        For immutable nodes (audit events): returns True when created, False when the key existed (the
        existing vertex is left exactly as it was; a concurrent inserter of the same key is waited for).
        """
        label = age_label(node.node_type)
        properties = node.vertex_properties(canonical_instant(now), placeholder=False)
        row = conn.execute(
            "INSERT INTO graph_nodes (namespace, natural_key, node_type, label, placeholder, origin, props_hash,"
            " created_at, last_seen, scopes) VALUES (%s, %s, %s, %s, false, %s, %s, %s, %s, %s)"
            " ON CONFLICT (namespace, natural_key) DO NOTHING RETURNING label",
            (
                node.namespace,
                node.natural_key,
                node.node_type,
                label,
                node.origin,
                _properties_hash(properties),
                now,
                now,
                node.scopes(),
            ),
        ).fetchone()
        if row is None:
            return False
        self.ensure_label(label, "vertex")
        self._insert_vertex(conn, label, properties)
        return True

    def ensure_node(
        self,
        conn: psycopg.Connection[Any],
        namespace: str,
        natural_key: str,
        *,
        now: datetime,
        known: dict[str, str] | None = None,
    ) -> str:
        """Returns the label of the vertex of ``natural_key``, creating a placeholder when it is missing.

        A placeholder's type is the key's ``type:`` prefix; a later entity assertion completes it.
        ``known`` maps keys already written in this transaction to their labels (skips the look-up).
        """
        if known is not None and natural_key in known:
            return known[natural_key]
        row = conn.execute(
            "SELECT label FROM graph_nodes WHERE namespace = %s AND natural_key = %s", (namespace, natural_key)
        ).fetchone()
        if row is not None:
            return str(row[0])
        node_type = type_of_key(natural_key)
        label = age_label(node_type)
        inserted = conn.execute(
            "INSERT INTO graph_nodes (namespace, natural_key, node_type, label, placeholder, created_at, last_seen)"
            " VALUES (%s, %s, %s, %s, true, %s, %s) ON CONFLICT (namespace, natural_key) DO NOTHING RETURNING label",
            (namespace, natural_key, node_type, label, now, now),
        ).fetchone()
        if inserted is None:
            row = conn.execute(
                "SELECT label FROM graph_nodes WHERE namespace = %s AND natural_key = %s", (namespace, natural_key)
            ).fetchone()
            assert row is not None
            return str(row[0])
        self.ensure_label(label, "vertex")
        placeholder = NodeWrite(namespace=namespace, natural_key=natural_key, node_type=node_type)
        self._insert_vertex(conn, label, placeholder.vertex_properties(canonical_instant(now), True))
        return label

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
        statement = sql.SQL(
            "SELECT natural_key, label FROM graph_nodes WHERE namespace = %(namespace)s"
            " AND natural_key = ANY(%(keys)s) AND {visible}"
        ).format(visible=visibility.array_predicate(sql.SQL("scopes")))
        rows = conn.execute(statement, {"namespace": namespace, "keys": natural_keys, **visibility.params}).fetchall()
        return {str(key): str(label) for key, label in rows}

    def get_node(
        self,
        conn: psycopg.Connection[Any],
        namespace: str,
        natural_key: str,
        *,
        visibility: Visibility = EVERYTHING,
    ) -> dict[str, Any] | None:
        """The vertex properties of a key, or None (also when ``visibility`` may not see it)."""
        labels = self.node_labels(conn, namespace, [natural_key], visibility=visibility)
        if natural_key not in labels:
            return None
        rows = self.cypher(
            conn,
            f"MATCH (n:{checked_label(labels[natural_key])} {{namespace: $namespace, natural_key: $natural_key}})"
            " RETURN properties(n)",
            {"namespace": namespace, "natural_key": natural_key},
        )
        return rows[0] if rows else None

    def delete_nodes(self, conn: psycopg.Connection[Any], namespace: str, natural_keys: list[str]) -> list[str]:
        """Deletes the vertices of ``natural_keys`` (those that exist), every edge touching them and their
        ``graph_nodes`` rows. Returns the keys deleted, sorted.

        The caller keeps fact ends out of ``natural_keys``: a fact's edge must live as long as its row.
        Edges are deleted through AGE's parent edge table ``_ag_label_edge`` (every edge label inherits
        from it; each has B-tree indexes on ``start_id`` and ``end_id``).
        """
        if not natural_keys:
            return []
        rows = conn.execute(
            "SELECT natural_key, label FROM graph_nodes WHERE namespace = %s AND natural_key = ANY(%s)"
            " ORDER BY natural_key FOR UPDATE",
            (namespace, sorted(set(natural_keys))),
        ).fetchall()
        deleted: list[str] = []
        for natural_key, label in rows:
            conn.execute(
                sql.SQL(
                    "WITH gone AS (DELETE FROM {vertices} WHERE properties @> %s::ag_catalog.agtype RETURNING id)"
                    " DELETE FROM {edges} e USING gone WHERE e.start_id = gone.id OR e.end_id = gone.id"
                ).format(vertices=self._table(str(label)), edges=self._table("_ag_label_edge")),
                (_agtype({"namespace": namespace, "natural_key": natural_key}),),
            )
            deleted.append(str(natural_key))
        if deleted:
            conn.execute(
                "DELETE FROM graph_nodes WHERE namespace = %s AND natural_key = ANY(%s)", (namespace, deleted)
            )
        return deleted

    # -- label tables (writes) -----------------------------------------------------------------------
    #
    # Writes go to AGE's label tables with plain SQL (an agtype map as a bound parameter; the GIN index on
    # ``properties`` serves the ``@>`` look-ups). This is what AGE itself stores for CREATE/SET, without
    # Cypher's planning of anonymous end nodes across every vertex label, which made a SET on one fact
    # edge cost milliseconds.

    def _table(self, label: str) -> sql.Composable:
        return sql.Identifier(self.graph, checked_label(label))

    def _insert_vertex(self, conn: psycopg.Connection[Any], label: str, properties: dict[str, Any]) -> None:
        conn.execute(
            sql.SQL("INSERT INTO {} (properties) VALUES (%s::ag_catalog.agtype)").format(self._table(label)),
            (_agtype(properties),),
        )

    def _replace_vertex(self, conn: psycopg.Connection[Any], label: str, properties: dict[str, Any]) -> None:
        key = {"namespace": properties["namespace"], "natural_key": properties["natural_key"]}
        conn.execute(
            sql.SQL("UPDATE {} SET properties = %s::ag_catalog.agtype WHERE properties @> %s::ag_catalog.agtype").format(
                self._table(label)
            ),
            (_agtype(properties), _agtype(key)),
        )

    # -- edges -------------------------------------------------------------------------------------

    def replace_links(
        self, conn: psycopg.Connection[Any], namespace: str, source_key: str, source_label: str, targets: dict[str, str]
    ) -> None:
        """Makes the LINKS_TO edges of ``source_key`` exactly ``targets`` (natural key -> label)."""
        self.ensure_label("LINKS_TO", "edge")
        conn.execute(
            sql.SQL(
                "DELETE FROM {} WHERE start_id IN (SELECT id FROM {} WHERE properties @> %s::ag_catalog.agtype)"
            ).format(self._table("LINKS_TO"), self._table(source_label)),
            (_agtype({"namespace": namespace, "natural_key": source_key}),),
        )
        for target_key, target_label in targets.items():
            self.create_edge(
                conn,
                namespace=namespace,
                edge_label="LINKS_TO",
                source=(source_key, source_label),
                target=(target_key, target_label),
                properties={"namespace": namespace},
            )

    def create_edge(
        self,
        conn: psycopg.Connection[Any],
        *,
        namespace: str,
        edge_label: str,
        source: tuple[str, str],
        target: tuple[str, str],
        properties: dict[str, Any],
    ) -> None:
        """Creates one edge ``source -[edge_label properties]-> target``; ends are (natural_key, label)."""
        self.ensure_label(edge_label, "edge")
        conn.execute(
            sql.SQL(
                "INSERT INTO {} (start_id, end_id, properties) SELECT a.id, b.id, %s::ag_catalog.agtype FROM {} a, {} b"
                " WHERE a.properties @> %s::ag_catalog.agtype AND b.properties @> %s::ag_catalog.agtype"
            ).format(self._table(edge_label), self._table(source[1]), self._table(target[1])),
            (
                _agtype(properties),
                _agtype({"namespace": namespace, "natural_key": source[0]}),
                _agtype({"namespace": namespace, "natural_key": target[0]}),
            ),
        )

    def replace_edge_properties(
        self, conn: psycopg.Connection[Any], *, edge_label: str, match: dict[str, Any], properties: dict[str, Any]
    ) -> None:
        """Replaces the whole property map of the edges of ``edge_label`` whose properties contain ``match``."""
        conn.execute(
            sql.SQL("UPDATE {} SET properties = %s::ag_catalog.agtype WHERE properties @> %s::ag_catalog.agtype").format(
                self._table(edge_label)
            ),
            (_agtype(properties), _agtype(match)),
        )


def _agtype(value: dict[str, Any]) -> str:
    """JSON text of a property map, read by PostgreSQL as agtype."""
    return json.dumps(value, ensure_ascii=False)


def _properties_hash(properties: dict[str, Any], ignore: tuple[str, ...] = ()) -> str:
    stable = {k: v for k, v in properties.items() if k != "last_seen" and k not in ignore}
    return hashlib.sha256(canonical_json(stable).encode("utf-8")).hexdigest()


_AGTYPE_SUFFIX = re.compile(r"::(vertex|edge|path|numeric)$")


def _decode_agtype(value: Any) -> Any:
    """agtype text -> Python (maps, lists, scalars). ``::vertex`` style suffixes are stripped."""
    if value is None:
        return None
    text = str(value)
    text = _AGTYPE_SUFFIX.sub("", text)
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text
