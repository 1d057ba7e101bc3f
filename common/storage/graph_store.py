"""The AGE graph: labels, vertices keyed by (namespace, natural_key), edges. All Cypher lives here.

Uniqueness (DESIGN §11): AGE has no unique property constraint and MERGE does not serialise across
sessions, so every vertex has a row in ``graph_nodes`` (primary key namespace + natural_key). A writer
inserts that row first (``ON CONFLICT DO NOTHING`` waits for a concurrent inserter of the same key) or
locks it (``FOR UPDATE``), and only then touches the vertex: one vertex per key, even under concurrency.
The row also records the vertex's AGE id (``vertex_id``, migration 0006), so edges are created by
set-based joins on the registry's primary key instead of a GIN look-up of each end (`create_edges`);
rows written before 0006 get theirs on first use.

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
from typing import TYPE_CHECKING, Any, ClassVar

import psycopg
from psycopg import sql

from common.kernel.identifiers import age_label, canonical_instant, canonical_json
from common.storage.visibility import EVERYTHING, Visibility

if TYPE_CHECKING:
    from common.storage.database import Database

_SAFE_LABEL = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
BASE_VERTEX_LABELS = ("episode", "entity", "document", "text")
BASE_EDGE_LABELS = ("LINKS_TO", "MENTIONS")
_LABEL_LOCK_BASE = 0x6C61_0000  # advisory lock namespace for label creation


# A new vertex's id, allocated with its graph_nodes row exactly as AGE's column default does (the label's
# id and sequence, from ag_catalog.ag_label: `GraphStore._label_ids`), so the vertices of a batch are
# inserted with their ids and nothing is joined back. Rows carry ``label_id`` and ``label_sequence``.
_VERTEX_ID = "ag_catalog._graphid(x.label_id, nextval(x.label_sequence::regclass))"
# The ends of edges ``(source_key, target_key, properties)`` with their vertex ids, one fenced primary-key
# look-up each (see `GraphStore._registered` for why not a join), in input order.
_EDGE_ENDS = (
    "SELECT (SELECT vertex_id FROM graph_nodes WHERE namespace = %(namespace)s AND natural_key = x.source_key) AS start_id,"
    " (SELECT vertex_id FROM graph_nodes WHERE namespace = %(namespace)s AND natural_key = x.target_key) AS end_id,"
    " x.properties::ag_catalog.agtype AS properties, x.position"
    " FROM unnest(%(sources)b::text[], %(targets)b::text[], %(properties)b::text[])"
    " WITH ORDINALITY AS x(source_key, target_key, properties, position) OFFSET 0"
)


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
    # The vertex existed only as a placeholder (a fact end) and this write completed it.
    completed_placeholder: bool = False


class GraphStore:
    """Graph access for one database. Thread-safe; label existence is cached per process."""

    _known_labels: set[tuple[str, str, str]] = set()
    _label_sequences: ClassVar[dict[tuple[str, str], tuple[int, str]]] = {}  # (graph, label) -> (id, sequence)
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
                    wanted = [(f"{label}_properties_gin", sql.SQL("USING gin (properties)"))]
                    if kind == "edge":
                        wanted += [
                            (f"{label}_{column}_idx", sql.SQL("({})").format(sql.Identifier(column)))
                            for column in ("start_id", "end_id")
                        ]
                    else:
                        wanted.append((f"{label}_id_idx", sql.SQL("(id)")))
                    for index_name, definition in wanted:
                        # Only a missing index is created: CREATE INDEX takes a SHARE lock on the label table
                        # even when the index exists (IF NOT EXISTS is checked after the lock), which waits
                        # behind every open transaction that wrote the label, e.g. the caller's own.
                        exists = conn.execute(
                            "SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                            " WHERE n.nspname = %s AND c.relname = %s",
                            (self.graph, index_name),
                        ).fetchone()
                        if exists is None:
                            conn.execute(
                                sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} {}").format(
                                    sql.Identifier(index_name), table, definition
                                )
                            )
                finally:
                    conn.execute("SELECT pg_advisory_unlock(%s)", (lock_key,))
            self._known_labels.add(cache_key)

    def _label_ids(self, conn: psycopg.Connection[Any], labels: set[str]) -> dict[str, tuple[int, str]]:
        """Vertex labels -> (AGE label id, qualified name of the label's id sequence), creating missing
        labels (`ensure_label`); cached per process (a label's id and sequence never change)."""
        found: dict[str, tuple[int, str]] = {}
        for label in sorted(labels):
            self.ensure_label(label, "vertex")
            cached = self._label_sequences.get((self.graph, label))
            if cached is None:
                row = conn.execute(
                    "SELECT l.id, format('%%I.%%I', n.nspname, l.seq_name) FROM ag_catalog.ag_label l"
                    " JOIN ag_catalog.ag_graph g ON l.graph = g.graphid JOIN pg_namespace n ON n.oid = g.namespace"
                    " WHERE g.name = %s AND l.name = %s",
                    (self.graph, label),
                ).fetchone()
                assert row is not None, f"label {label} exists after ensure_label"
                cached = self._label_sequences[(self.graph, label)] = (int(row[0]), str(row[1]))
            found[label] = cached
        return found

    # -- vertices ----------------------------------------------------------------------------------

    def upsert_node(
        self,
        conn: psycopg.Connection[Any],
        node: NodeWrite,
        *,
        now: datetime,
        overwrite: bool = True,
        merge_props: bool = False,
    ) -> NodeResult:
        """Creates the vertex of (namespace, natural_key) or updates it (`upsert_nodes` of one node)."""
        return self.upsert_nodes(conn, [node], now=now, overwrite=overwrite, merge_props=merge_props)[0]

    def upsert_nodes(
        self,
        conn: psycopg.Connection[Any],
        nodes: list[NodeWrite],
        *,
        now: datetime,
        overwrite: bool = True,
        merge_props: bool = False,
    ) -> list[NodeResult]:
        """Creates or updates the vertices of ``nodes`` (one namespace each, no key twice); results in the
        order of ``nodes``.

        ``overwrite=True`` (documents written through the API) replaces the properties on every write.
        ``overwrite=False`` (entity assertions) updates only when ``node.asserted_at`` is not older than
        the assertion the vertex holds, so the result does not depend on delivery order.
        A placeholder (created for a fact end) is always completed by the first real write.

        ``merge_props=True`` (entity assertions of observations and snapshots) updates an existing vertex
        with what the assertion states and keeps the rest: ``props`` is merged key by key (the
        assertion's keys win, e.g. ``attributes``), and an empty title or source path keeps the stored
        one. So an entity assertion whose key names a retained document never drops the document's
        content, provenance, meta, PII marks or visibility scopes (a dropped ``workspace:`` scope would
        publish a hidden node). The stored hash stays the assertion's, so repeating it is no change.

        Set-based: one statement inserts or locks every registry row (in key order, so concurrent bulk
        writers lock in one order), one multi-row INSERT per label creates the new vertices; changed
        existing vertices are rewritten one by one.

        Raises:
            ValueError: a (namespace, natural_key) appears twice in ``nodes``.
        """
        if not nodes:
            return []
        if len({(n.namespace, n.natural_key) for n in nodes}) != len(nodes):
            raise ValueError("upsert_nodes: a (namespace, natural_key) is listed twice")
        last_seen = canonical_instant(now)
        prepared = []
        for node in nodes:
            properties = node.vertex_properties(last_seen, placeholder=False)
            # For assertions (overwrite=False) the citation of the latest observation alone is no change.
            digest = _properties_hash(properties, ignore=() if overwrite else ("source_path", "source_id"))
            prepared.append((node, age_label(node.node_type), properties, digest))
        label_ids = self._label_ids(conn, {label for _, label, _, _ in prepared})
        # One statement either inserts each row (xmax = 0) or locks the existing one (DO UPDATE), so
        # concurrent writers of one key are serialised until commit. A new row gets its vertex id here,
        # from the label's own sequence (`_VERTEX_ID`); an existing row keeps its id.
        rows = conn.execute(
            "INSERT INTO graph_nodes AS g (namespace, natural_key, node_type, label, placeholder, origin, asserted_at,"
            " props_hash, created_at, last_seen, scopes, vertex_id)"
            " SELECT x.namespace, x.natural_key, x.node_type, x.label, false, x.origin, x.asserted_at, x.props_hash,"
            f" %(now)s, %(now)s, ARRAY(SELECT jsonb_array_elements_text(x.scopes::jsonb)), {_VERTEX_ID}"
            " FROM unnest(%(namespaces)b::text[], %(keys)b::text[], %(types)b::text[], %(labels)b::text[],"
            " %(origins)b::text[], %(asserted)b::timestamptz[], %(hashes)b::text[], %(scopes)b::text[],"
            " %(label_ids)b::int4[], %(label_sequences)b::text[])"
            " AS x(namespace, natural_key, node_type, label, origin, asserted_at, props_hash, scopes, label_id,"
            " label_sequence)"
            " ORDER BY x.namespace, x.natural_key"
            " ON CONFLICT (namespace, natural_key) DO UPDATE SET last_seen = greatest(g.last_seen, excluded.last_seen)"
            " RETURNING g.namespace, g.natural_key, (xmax = 0) AS inserted, label, placeholder, asserted_at, props_hash,"
            " vertex_id::text",
            {
                "now": now,
                "label_ids": [label_ids[label][0] for _, label, _, _ in prepared],
                "label_sequences": [label_ids[label][1] for _, label, _, _ in prepared],
                "namespaces": [n.namespace for n, *_ in prepared],
                "keys": [n.natural_key for n, *_ in prepared],
                "types": [n.node_type for n, *_ in prepared],
                "labels": [label for _, label, _, _ in prepared],
                "origins": [n.origin for n, *_ in prepared],
                "asserted": [n.asserted_at for n, *_ in prepared],
                "hashes": [digest for *_, digest in prepared],
                "scopes": [json.dumps(n.scopes()) for n, *_ in prepared],
            },
        ).fetchall()
        stored = {(str(r[0]), str(r[1])): r[2:] for r in rows}
        results: list[NodeResult] = []
        new_vertices: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        for node, label, properties, digest in prepared:
            inserted, existing_label, was_placeholder, asserted_at, props_hash, vertex_id = stored[
                (node.namespace, node.natural_key)
            ]
            if inserted:
                new_vertices.setdefault(label, []).append((str(vertex_id), properties))
                results.append(NodeResult(node.natural_key, label, created=True, updated=False))
                continue
            newer = asserted_at is None or node.asserted_at is None or node.asserted_at >= asserted_at
            if not (overwrite or was_placeholder or newer) or props_hash == digest:
                results.append(NodeResult(node.natural_key, existing_label, created=False, updated=False))
                continue
            scopes = node.scopes()
            if merge_props and not was_placeholder:
                properties = self._merged_properties(conn, existing_label, vertex_id, properties)
                raw_scopes = properties["props"].get("scopes")
                scopes = [s for s in raw_scopes if isinstance(s, str)] if isinstance(raw_scopes, list) else []
            self._replace_vertex(conn, existing_label, properties)
            conn.execute(
                "UPDATE graph_nodes SET node_type = %s, placeholder = false, props_hash = %s, last_seen = %s,"
                " asserted_at = CASE WHEN %s::timestamptz IS NULL THEN asserted_at"
                " ELSE greatest(asserted_at, %s::timestamptz) END, scopes = %s"
                " WHERE namespace = %s AND natural_key = %s",
                (
                    properties["type"],
                    digest,
                    now,
                    node.asserted_at,
                    node.asserted_at,
                    scopes,
                    node.namespace,
                    node.natural_key,
                ),
            )
            results.append(
                NodeResult(
                    node.natural_key, existing_label, created=False, updated=True, completed_placeholder=bool(was_placeholder)
                )
            )
        for label, batch in new_vertices.items():
            self._insert_vertices(conn, label, batch)
        return results

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
        """Returns the label of the vertex of ``natural_key``, creating a placeholder when it is missing
        (`ensure_nodes` of one key)."""
        if known is not None and natural_key in known:
            return known[natural_key]
        return self.ensure_nodes(conn, namespace, [natural_key], now=now)[natural_key]

    def ensure_nodes(
        self, conn: psycopg.Connection[Any], namespace: str, natural_keys: list[str], *, now: datetime
    ) -> dict[str, str]:
        """Labels of the vertices of ``natural_keys`` (natural key -> label), creating placeholders for
        the missing ones: a placeholder's type is the key's ``type:`` prefix; a later entity assertion
        completes it. Every returned vertex has its ``vertex_id`` recorded, so `create_edges` can join it.

        Set-based: one look-up, one INSERT of the missing registry rows (``ON CONFLICT DO NOTHING`` waits
        for a concurrent inserter of the same key, whose row is then read), one multi-row INSERT of
        placeholder vertices per label.
        """
        keys = sorted(set(natural_keys))
        if not keys:
            return {}
        labels = self._registered(conn, namespace, keys)
        missing = [key for key in keys if key not in labels]
        if missing:
            types = [type_of_key(key) for key in missing]
            label_ids = self._label_ids(conn, {age_label(node_type) for node_type in types})
            inserted = conn.execute(
                "INSERT INTO graph_nodes (namespace, natural_key, node_type, label, placeholder, created_at, last_seen,"
                f" vertex_id) SELECT %(namespace)s, x.natural_key, x.node_type, x.label, true, %(now)s, %(now)s, {_VERTEX_ID}"
                " FROM unnest(%(keys)b::text[], %(types)b::text[], %(labels)b::text[], %(label_ids)b::int4[],"
                " %(label_sequences)b::text[]) AS x(natural_key, node_type, label, label_id, label_sequence)"
                " ORDER BY x.natural_key ON CONFLICT (namespace, natural_key) DO NOTHING"
                " RETURNING natural_key, label, vertex_id::text",
                {
                    "namespace": namespace,
                    "now": now,
                    "keys": missing,
                    "types": types,
                    "labels": [age_label(node_type) for node_type in types],
                    "label_ids": [label_ids[age_label(node_type)][0] for node_type in types],
                    "label_sequences": [label_ids[age_label(node_type)][1] for node_type in types],
                },
            ).fetchall()
            placeholders: dict[str, list[tuple[str, dict[str, Any]]]] = {}
            for natural_key, label, vertex_id in inserted:
                labels[str(natural_key)] = str(label)
                node = NodeWrite(namespace=namespace, natural_key=str(natural_key), node_type=type_of_key(str(natural_key)))
                placeholders.setdefault(str(label), []).append(
                    (str(vertex_id), node.vertex_properties(canonical_instant(now), True))
                )
            for label, batch in placeholders.items():
                self._insert_vertices(conn, label, batch)
            raced = [key for key in missing if key not in labels]  # committed meanwhile by another writer
            if raced:
                labels.update(self._registered(conn, namespace, raced))
        return labels

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
            "SELECT g.natural_key, g.label, g.vertex_id IS NULL FROM unnest(%(keys)b::text[]) AS x(natural_key)"
            " CROSS JOIN LATERAL (SELECT natural_key, label, vertex_id FROM graph_nodes"
            " WHERE namespace = %(namespace)s AND natural_key = x.natural_key OFFSET 0 FOR KEY SHARE) AS g",
            {"namespace": namespace, "keys": keys},
        ).fetchall()
        for natural_key, label, unrecorded in rows:
            if unrecorded:
                conn.execute(
                    sql.SQL(
                        "UPDATE graph_nodes SET vertex_id = (SELECT id FROM {} WHERE properties @> %s::ag_catalog.agtype"
                        " LIMIT 1) WHERE namespace = %s AND natural_key = %s"
                    ).format(self._table(str(label))),
                    (_agtype({"namespace": namespace, "natural_key": natural_key}), namespace, natural_key),
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
        statement = sql.SQL(
            "SELECT natural_key, label FROM graph_nodes WHERE namespace = %(namespace)s"
            " AND natural_key = ANY(%(keys)s) AND {visible}"
        ).format(visible=visibility.array_predicate(sql.SQL("scopes")))
        rows = conn.execute(statement, {"namespace": namespace, "keys": natural_keys, **visibility.params}).fetchall()
        return {str(key): str(label) for key, label in rows}

    def hidden_keys(
        self, conn: psycopg.Connection[Any], namespace: str, natural_keys: list[str], *, visibility: Visibility
    ) -> set[str]:
        """The keys among ``natural_keys`` whose node exists but ``visibility`` may not see (write-side
        checks: such a node must be neither overwritten nor extended, `common.write_access`)."""
        if visibility.unrestricted or not natural_keys:
            return set()
        statement = sql.SQL(
            "SELECT natural_key FROM graph_nodes WHERE namespace = %(namespace)s"
            " AND natural_key = ANY(%(keys)s) AND NOT {visible}"
        ).format(visible=visibility.array_predicate(sql.SQL("scopes")))
        rows = conn.execute(
            statement, {"namespace": namespace, "keys": sorted(set(natural_keys)), **visibility.params}
        ).fetchall()
        return {str(row[0]) for row in rows}

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
        statement = sql.SQL(
            "SELECT natural_key, node_type, label, placeholder, origin, scopes FROM graph_nodes"
            " WHERE namespace = %(namespace)s AND natural_key = %(key)s AND {visible} FOR UPDATE"
        ).format(visible=visibility.array_predicate(sql.SQL("scopes")))
        row = conn.execute(statement, {"namespace": namespace, "key": natural_key, **visibility.params}).fetchone()
        if row is None:
            return None
        names = ("natural_key", "node_type", "label", "placeholder", "origin", "scopes")
        return dict(zip(names, row, strict=True))

    def edge_counts(self, conn: psycopg.Connection[Any], namespace: str, natural_key: str, label: str) -> dict[str, int]:
        """Edge label -> number of edges touching the vertex of ``natural_key`` (either direction; a loop
        counts once). Plain SQL over AGE's parent edge table: each edge label has B-tree indexes on
        ``start_id`` and ``end_id`` (a Cypher match with an anonymous end plans across every label)."""
        rows = conn.execute(
            sql.SQL(
                "WITH v AS (SELECT id FROM {vertices} WHERE properties @> %s::ag_catalog.agtype)"
                " SELECT c.relname, count(*) FROM {edges} e JOIN pg_class c ON c.oid = e.tableoid, v"
                " WHERE e.start_id = v.id OR e.end_id = v.id GROUP BY c.relname"
            ).format(vertices=self._table(label), edges=self._table("_ag_label_edge")),
            (_agtype({"namespace": namespace, "natural_key": natural_key}),),
        ).fetchall()
        return {str(name): int(count) for name, count in rows}

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
        """Inserts one vertex whose graph_nodes row the caller's transaction holds, and records its id."""
        conn.execute(
            sql.SQL(
                "WITH v AS (INSERT INTO {} (properties) VALUES (%s::ag_catalog.agtype) RETURNING id)"
                " UPDATE graph_nodes SET vertex_id = (SELECT id FROM v) WHERE namespace = %s AND natural_key = %s"
            ).format(self._table(label)),
            (_agtype(properties), properties["namespace"], properties["natural_key"]),
        )

    def _insert_vertices(self, conn: psycopg.Connection[Any], label: str, batch: list[tuple[str, dict[str, Any]]]) -> None:
        """Inserts the vertices ``(vertex_id, properties)`` of ``batch`` into ``label`` with one statement;
        the ids were allocated with the graph_nodes rows (`_VERTEX_ID`)."""
        conn.execute(
            sql.SQL(
                "INSERT INTO {} (id, properties) SELECT x.id::ag_catalog.graphid, x.properties::ag_catalog.agtype"
                " FROM unnest(%(ids)b::text[], %(properties)b::text[]) AS x(id, properties)"
            ).format(self._table(label)),
            {
                "ids": [vertex_id for vertex_id, _ in batch],
                "properties": [_agtype(properties) for _, properties in batch],
            },
        )

    def _merged_properties(
        self, conn: psycopg.Connection[Any], label: str, vertex_id: str | None, properties: dict[str, Any]
    ) -> dict[str, Any]:
        """``properties`` laid over the stored vertex's (see ``merge_props`` of `upsert_nodes`)."""
        if vertex_id is not None:
            row = conn.execute(
                sql.SQL(
                    "SELECT v.properties FROM {} v JOIN graph_nodes g ON v.id = g.vertex_id"
                    " WHERE g.namespace = %s AND g.natural_key = %s"
                ).format(self._table(label)),
                (properties["namespace"], properties["natural_key"]),
            ).fetchone()
        else:  # a registry row written before vertex ids were recorded
            key = {"namespace": properties["namespace"], "natural_key": properties["natural_key"]}
            row = conn.execute(
                sql.SQL("SELECT properties FROM {} WHERE properties @> %s::ag_catalog.agtype").format(
                    self._table(label)
                ),
                (_agtype(key),),
            ).fetchone()
        stored = _decode_agtype(row[0]) if row is not None else {}
        if not isinstance(stored, dict):
            return properties
        merged = dict(properties)
        merged["type"] = stored.get("type") or merged["type"]  # the written kind stays (document, episode, ...)
        for name in ("title", "source_path", "source_id"):
            if not merged.get(name) or (name == "title" and merged[name] == merged["natural_key"]):
                merged[name] = stored.get(name, merged.get(name, ""))
        stored_props = stored.get("props") if isinstance(stored.get("props"), dict) else {}
        merged["props"] = {**stored_props, **properties.get("props", {})}
        return merged

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
        self.create_edges(
            conn,
            namespace=namespace,
            edge_label="LINKS_TO",
            edges=[(source_key, target_key, {"namespace": namespace}) for target_key in targets],
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
        self.create_edges(
            conn, namespace=namespace, edge_label=edge_label, edges=[(source[0], target[0], properties)]
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
            created = conn.execute(
                statement,
                {
                    "namespace": namespace,
                    "sources": [source for source, _, _ in pending],
                    "targets": [target for _, target, _ in pending],
                    "properties": [_agtype(properties) for _, _, properties in pending],
                },
            ).fetchall()
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
        self, conn: psycopg.Connection[Any], namespace: str, edge_label: str, edges: list[tuple[str, str, dict[str, Any]]]
    ) -> list[tuple[str, str, dict[str, Any]]]:
        """The edges among ``edges`` that do not exist yet (same ends, same properties)."""
        rows = conn.execute(
            sql.SQL(
                f"SELECT e.position FROM ({_EDGE_ENDS}) AS e WHERE EXISTS (SELECT 1 FROM {{}} edge"
                " WHERE edge.start_id = e.start_id AND edge.end_id = e.end_id AND edge.properties = e.properties)"
            ).format(self._table(edge_label)),
            {
                "namespace": namespace,
                "sources": [source for source, _, _ in edges],
                "targets": [target for _, target, _ in edges],
                "properties": [_agtype(properties) for _, _, properties in edges],
            },
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
        self._registered(conn, namespace, sorted({key for source, target, _, _ in edges for key in (source, target)}))
        conn.execute(
            sql.SQL(
                "UPDATE {} edge SET properties = e.properties FROM ({}) AS e"
                " WHERE edge.start_id = e.start_id AND edge.end_id = e.end_id"
                " AND edge.properties ->> '\"fact_id\"'::ag_catalog.agtype = e.properties ->> '\"fact_id\"'::ag_catalog.agtype"
            ).format(self._table(edge_label), sql.SQL(_EDGE_ENDS)),
            {
                "namespace": namespace,
                "sources": [source for source, _, _, _ in edges],
                "targets": [target for _, target, _, _ in edges],
                "properties": [_agtype(properties) for _, _, _, properties in edges],
            },
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
