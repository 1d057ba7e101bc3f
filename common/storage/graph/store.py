"""Vertices of the AGE graph keyed by (namespace, natural_key): `GraphStore`, the graph access of the stores
and the domain.

`GraphStore` is the last of a chain, one module per concern: `common.storage.graph.age.AgeGraph` (labels,
label tables, Cypher, agtype), `common.storage.graph.node_registry.NodeRegistry` (the ``graph_nodes`` registry
that makes a key's vertex unique, docs/explanation/architecture.md), `common.storage.graph.edges.GraphEdges` (edges), and this
module (vertex writes, reads and deletes). The registry row of a key is written or locked before its
vertex is touched; it records the vertex's AGE id (``vertex_id``, migration 0006), so edges are created by
set-based joins on the registry's primary key instead of a GIN look-up of each end.

Static SQL (the registry statements) is in ``sql/queries/graph.sql``; statements on a label table
(``{graph}.<label>``, the label known at run time) are composed here with `psycopg.sql`. Where Cypher
lives: see `common.storage.graph.age`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from dataclasses import field
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql

from common.kernel.identifiers import canonical_instant
from common.kernel.identifiers import canonical_json
from common.kernel.identifiers import graph_label
from common.storage.graph.age import agtype_text
from common.storage.graph.age import checked_label
from common.storage.graph.age import decode_agtype
from common.storage.graph.edges import GraphEdges
from common.storage.graph.node_registry import vertex_parameters
from common.storage.visibility import EVERYTHING
from common.storage.visibility import Visibility


def type_of_key(natural_key: str) -> str:
    """Node type implied by a natural key: the part before the first ':' of ``type:id``, else "entity"."""
    head, sep, _ = natural_key.partition(":")
    return head if sep and head else "entity"


@dataclass
class NodeWrite:
    """Properties of one vertex (docs/explanation/knowledge-model.md); ``props`` holds content, provenance,
    meta, ...."""

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
        """The vertex's property map (docs/explanation/knowledge-model.md list), ``last_seen`` a canonical
        instant."""
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
    """What `GraphStore.upsert_nodes` did to one node: created, updated, or neither (unchanged)."""

    natural_key: str
    label: str
    created: bool
    updated: bool
    # The vertex existed only as a placeholder (a fact end) and this write completed it.
    completed_placeholder: bool = False


class GraphStore(GraphEdges):
    """Graph access for one database (vertices here; labels, registry and edges in its bases). Thread-safe;
    label existence is cached per process."""

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
            prepared.append((node, graph_label("node_type", node.node_type), properties, digest))
        label_ids = self._label_ids(conn, {label for _, label, _, _ in prepared})
        # One statement either inserts each row (xmax = 0) or locks the existing one (DO UPDATE), so
        # concurrent writers of one key are serialised until commit. A new row gets its vertex id here,
        # from the label's own sequence (`_label_ids`); an existing row keeps its id.
        rows = conn.execute(
            self.queries["upsert_registry_rows"],
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
                self.queries["update_registry_row"],
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
                    node.natural_key,
                    existing_label,
                    created=False,
                    updated=True,
                    completed_placeholder=bool(was_placeholder),
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
        label = graph_label("node_type", node.node_type)
        properties = node.vertex_properties(canonical_instant(now), placeholder=False)
        row = conn.execute(
            self.queries["insert_registry_row_once"],
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

    def ensure_nodes(
        self,
        conn: psycopg.Connection[Any],
        namespace: str,
        natural_keys: list[str],
        *,
        now: datetime,
        scopes: dict[str, list[str]] | None = None,
    ) -> dict[str, str]:
        """Labels of the vertices of ``natural_keys`` (natural key -> label), creating placeholders for
        the missing ones: a placeholder's type is the key's ``type:`` prefix; a later entity assertion
        completes it. Every returned vertex has its ``vertex_id`` recorded, so `create_edges` can join it.

        ``scopes`` (`common.domain.scope_inheritance` rule 3) maps a key to the restricting
        scopes of the facts naming it here (``[]``: a visible fact): a new placeholder gets them; an
        existing placeholder with scopes gets their union, or none when a visible fact names it. None
        (and a key absent from the map) is a visible reference. Completed nodes are not changed.

        Set-based: one look-up, one INSERT of the missing registry rows (``ON CONFLICT DO NOTHING`` waits
        for a concurrent inserter of the same key, whose row is then read), one multi-row INSERT of
        placeholder vertices per label.
        """
        keys = sorted(set(natural_keys))
        if not keys:
            return {}
        labels = self._registered(conn, namespace, keys)
        missing = [key for key in keys if key not in labels]
        scopes = scopes or {}
        if labels:
            self.follow_placeholder_scopes(conn, namespace, {key: scopes.get(key, []) for key in labels})
        if missing:
            types = [type_of_key(key) for key in missing]
            type_labels = [graph_label("node_type", node_type) for node_type in types]
            label_ids = self._label_ids(conn, set(type_labels))
            inserted = conn.execute(
                self.queries["insert_placeholder_registry_rows"],
                {
                    "namespace": namespace,
                    "now": now,
                    "keys": missing,
                    "types": types,
                    "labels": type_labels,
                    "label_ids": [label_ids[label][0] for label in type_labels],
                    "label_sequences": [label_ids[label][1] for label in type_labels],
                    "scopes": [json.dumps(sorted(set(scopes.get(key, [])))) for key in missing],
                },
            ).fetchall()
            placeholders: dict[str, list[tuple[str, dict[str, Any]]]] = {}
            for natural_key, label, vertex_id in inserted:
                labels[str(natural_key)] = str(label)
                node = NodeWrite(
                    namespace=namespace, natural_key=str(natural_key), node_type=type_of_key(str(natural_key))
                )
                placeholders.setdefault(str(label), []).append(
                    (str(vertex_id), node.vertex_properties(canonical_instant(now), True))
                )
            for label, batch in placeholders.items():
                self._insert_vertices(conn, label, batch)
            raced = [key for key in missing if key not in labels]  # committed meanwhile by another writer
            if raced:
                labels.update(self._registered(conn, namespace, raced))
        return labels

    def follow_placeholder_scopes(
        self, conn: psycopg.Connection[Any], namespace: str, scopes: dict[str, list[str]]
    ) -> None:
        """Placeholders among ``scopes``' keys that carry scopes take the union with the key's scopes, or
        none for ``[]`` (see ``scopes`` of `ensure_nodes`; for keys already ensured in this transaction);
        nothing else is changed."""
        conn.execute(
            self.queries["follow_placeholder_scopes"],
            {
                "namespace": namespace,
                "keys": list(scopes),
                "scopes": [json.dumps(sorted(set(value))) for value in scopes.values()],
            },
        )

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

    def delete_nodes(
        self, conn: psycopg.Connection[Any], namespace: str, natural_keys: list[str]
    ) -> list[str]:
        """Deletes the vertices of ``natural_keys`` (those that exist), every edge touching them and their
        ``graph_nodes`` rows. Returns the keys deleted, sorted.

        The caller keeps fact ends out of ``natural_keys``: a fact's edge must live as long as its row.
        Edges are deleted through AGE's parent edge table ``_ag_label_edge`` (every edge label inherits
        from it; each has B-tree indexes on ``start_id`` and ``end_id``).
        """
        if not natural_keys:
            return []
        rows = conn.execute(
            self.queries["lock_registry_rows_to_delete"], (namespace, sorted(set(natural_keys)))
        ).fetchall()
        deleted: list[str] = []
        for natural_key, label in rows:
            conn.execute(
                sql.SQL(
                    "WITH gone AS (DELETE FROM {vertices} WHERE id = {vertex} RETURNING id)"
                    " DELETE FROM {edges} e USING gone WHERE e.start_id = gone.id OR e.end_id = gone.id"
                ).format(
                    vertices=self._table(str(label)),
                    vertex=self._vertex_id(str(label)),
                    edges=self._table("_ag_label_edge"),
                ),
                vertex_parameters(namespace, str(natural_key)),
            )
            deleted.append(str(natural_key))
        if deleted:
            conn.execute(self.queries["delete_registry_rows"], (namespace, deleted))
        return deleted

    # -- label tables (vertex writes) ----------------------------------------------------------------

    def _insert_vertex(self, conn: psycopg.Connection[Any], label: str, properties: dict[str, Any]) -> None:
        """Inserts one vertex whose graph_nodes row the caller's transaction holds, and records its id."""
        conn.execute(
            sql.SQL(
                "WITH v AS (INSERT INTO {} (properties) VALUES (%s::ag_catalog.agtype) RETURNING id)"
                " UPDATE graph_nodes SET vertex_id = (SELECT id FROM v) WHERE namespace = %s AND natural_key = %s"
            ).format(self._table(label)),
            (agtype_text(properties), properties["namespace"], properties["natural_key"]),
        )

    def _insert_vertices(
        self, conn: psycopg.Connection[Any], label: str, batch: list[tuple[str, dict[str, Any]]]
    ) -> None:
        """Inserts the vertices ``(vertex_id, properties)`` of ``batch`` into ``label`` with one statement;
        the ids were allocated with the graph_nodes rows (`_label_ids`)."""
        conn.execute(
            sql.SQL(
                "INSERT INTO {} (id, properties) SELECT x.id::ag_catalog.graphid, x.properties::ag_catalog.agtype"
                " FROM unnest(%(ids)b::text[], %(properties)b::text[]) AS x(id, properties)"
            ).format(self._table(label)),
            {
                "ids": [vertex_id for vertex_id, _ in batch],
                "properties": [agtype_text(properties) for _, properties in batch],
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
                (agtype_text(key),),
            ).fetchone()
        stored = decode_agtype(row[0]) if row is not None else {}
        if not isinstance(stored, dict):
            return properties
        merged = dict(properties)
        merged["type"] = (
            stored.get("type") or merged["type"]
        )  # the written kind stays (document, episode, ...)
        for name in ("title", "source_path", "source_id"):
            if not merged.get(name) or (name == "title" and merged[name] == merged["natural_key"]):
                merged[name] = stored.get(name, merged.get(name, ""))
        stored_props = stored.get("props") if isinstance(stored.get("props"), dict) else {}
        merged["props"] = {**stored_props, **properties.get("props", {})}
        return merged

    def _replace_vertex(self, conn: psycopg.Connection[Any], label: str, properties: dict[str, Any]) -> None:
        conn.execute(
            sql.SQL("UPDATE {} SET properties = %(properties)s::ag_catalog.agtype WHERE id = {}").format(
                self._table(label), self._vertex_id(label)
            ),
            {
                "properties": agtype_text(properties),
                **vertex_parameters(properties["namespace"], properties["natural_key"]),
            },
        )


def _properties_hash(properties: dict[str, Any], ignore: tuple[str, ...] = ()) -> str:
    stable = {k: v for k, v in properties.items() if k != "last_seen" and k not in ignore}
    return hashlib.sha256(canonical_json(stable).encode("utf-8")).hexdigest()


__all__ = ["GraphStore", "NodeResult", "NodeWrite", "type_of_key"]
