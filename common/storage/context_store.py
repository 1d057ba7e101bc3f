"""Reads and writes of the read side that are neither chunks nor facts: node summaries for provenance,
entities named in text, the summary memories covering memories (CompileContext's ``summary`` rule), and
the ``context_traces`` journal (docs/explanation/retrieval.md).

Static SQL (registry rows of keys, recording a compilation) is in
``sql/queries/context.sql``. Composed here: the vertex read of `ContextStore.node_summaries` (one SQL
statement over the label tables found, sanitised labels; Cypher only for keys without a recorded vertex
id) and the reads that take the caller's visibility predicate (`keys_with_facts`, `traces`).
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from collections import defaultdict
from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from common.kernel.config import Settings
from common.kernel.pii import PiiMarks
from common.storage.chunks.rows import StoredChunk
from common.storage.graph.age import checked_label
from common.storage.graph.store import GraphStore
from common.storage.named_queries import Queries
from common.storage.tables import query_placeholders
from common.storage.visibility import EVERYTHING
from common.storage.visibility import Visibility

# Words and identifiers of a text that may be the id part of a natural key: letters/digits with inner
# - _ . + : / @ # (PROJ-1234, libc6, 2.36-9+deb12u4, package:openssl).
_TOKEN = re.compile(r"[\w](?:[\w.+:/@#-]*[\w])?")


@dataclass(frozen=True)
class NodeSummary:
    """A node without its (possibly large) content: what provenance needs."""

    natural_key: str
    node_type: str
    title: str
    source_path: str
    provenance: dict[str, Any] = field(default_factory=dict)
    attributes: dict[str, Any] = field(default_factory=dict)  # props.attributes of entity assertions
    pii: PiiMarks = field(default_factory=PiiMarks)  # props.pii / props.pii_categories (personal data marks)


@dataclass(frozen=True)
class CoveringSummary:
    """A summary memory covering some of the memories asked about (`ContextStore.covering_summaries`)."""

    summary_id: str
    lossless: bool
    covered: tuple[str, ...]  # the covered memories among those asked about
    chunks: list[StoredChunk]


def key_tokens(texts: Iterable[str], *, min_length: int = 3, limit: int = 2000) -> list[str]:
    """Lower-cased candidate ids found in ``texts``: words and identifiers of at least ``min_length``
    characters, plus the id part of ``type:id`` tokens; deduplicated, at most ``limit``."""
    seen: dict[str, None] = {}
    for text in texts:
        for found in _TOKEN.findall(text):  # strings, not match objects: every token of every hit text
            token = found.lower()
            for candidate in (token, token.split(":", 1)[1]) if ":" in token else (token,):
                if len(candidate) >= min_length and candidate not in seen:
                    seen[candidate] = None
                    if len(seen) >= limit:
                        return list(seen)
    return list(seen)


def _json_text(value: Any) -> str | None:
    """A value decoded from agtype (a Cypher result) as the JSON text the vertex statement returns."""
    return None if value is None else json.dumps(value, ensure_ascii=False)


def _json_value(text: str | None) -> Any:
    return None if text is None else json.loads(text)


class VertexSummaryCache:
    """Summary fields of vertices read by `ContextStore.node_summaries`, by vertex id and row version.

    A row version is ``xmin@server``: PostgreSQL's ``xmin`` of the vertex's row (every committed update of
    a vertex writes a new row version with the writing transaction's id; a streaming replica holds the same
    row versions) and the start time of the server that answered (``pg_postmaster_start_time``). The
    server's part keeps apart what a transaction id named before a point-in-time recovery or on a primary
    that failed over, where transaction ids are issued again: the restarted server, or the promoted
    standby, has another start time. Only committed versions are read (the read path's connections write
    nothing), and vertex ids come from label sequences and are never reused. Entries hold JSON text (each
    caller parses its own objects) and the namespace they were read for. At most ``capacity`` entries, the
    least recently used dropped first; thread-safe.
    """

    def __init__(self, capacity: int = 20_000) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[str, tuple[str, str, tuple[Any, ...]]] = OrderedDict()
        self._lock = threading.Lock()

    def entries(self, vertex_ids: Iterable[str]) -> dict[str, tuple[str, str, tuple[Any, ...]]]:
        """``(version, namespace, fields)`` of each of ``vertex_ids`` the cache holds (marked as used): the
        caller keeps them, so an entry dropped meanwhile by another thread is still there for it."""
        with self._lock:
            found = {key: self._entries[key] for key in vertex_ids if key in self._entries}
            for key in found:
                self._entries.move_to_end(key)
            return found

    def put(self, vertex_id: str, version: str, namespace: str, fields: tuple[Any, ...]) -> None:
        with self._lock:
            self._entries[vertex_id] = (version, namespace, fields)
            self._entries.move_to_end(vertex_id)
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)


class ContextStore:
    """Read-side queries for retrieval provenance and context compilation."""

    def __init__(self, settings: Settings, graph: GraphStore) -> None:
        self.graph = graph
        self.traces_table = sql.Identifier(settings.context_traces_table)
        tables = query_placeholders(settings)
        self.facts_table = tables["facts"]
        self.memories_table = tables["memories"]
        self.chunks_table = tables["chunks"]
        self.queries = Queries.for_settings("context.sql", settings)
        self.summary_cache = VertexSummaryCache()

    def node_summaries(
        self, conn: psycopg.Connection[Any], namespace: str, natural_keys: Sequence[str]
    ) -> dict[str, NodeSummary]:
        """Type, title, source path, ``props.provenance`` and ``props.attributes`` of the existing nodes among
        ``natural_keys``.

        Plain SQL, no Cypher (Search called this on every request): the registry rows of the
        keys, then one statement reading each vertex by its recorded AGE id from its label's table (the
        label's id index). Only a key whose vertex id is not recorded yet (rows older than migration 0006)
        is looked up by Cypher, one query per label. The node's ``props.content`` is never returned.

        A summary read once is kept by the store (`VertexSummaryCache`) under the vertex's id and row
        version (``xmin`` and the server's start time): the statement then returns only the id and version
        of a vertex whose version is known, without reading its properties, which for a document hold its whole text (every read
        detoasted and parsed it: 2.35 ms of a 13.9 ms Search on the docs vault, in the
        benchmark history in git). Any write of a vertex gives its row a new version, so a changed node is read again.
        """
        keys = list(dict.fromkeys(natural_keys))
        if not keys:
            return {}
        rows = conn.execute(self.queries["registered_vertices_of_keys"], (namespace, keys)).fetchall()
        vertex_ids: dict[str, list[str]] = defaultdict(list)
        legacy: dict[str, list[str]] = defaultdict(list)  # no vertex_id recorded yet: found by Cypher
        types: dict[str, str] = {}
        for key, label, node_type, vertex_id in rows:
            if vertex_id:
                vertex_ids[str(label)].append(str(vertex_id))
            else:
                legacy[str(label)].append(str(key))
            types[str(key)] = str(node_type)
        found: list[Sequence[Any]] = []
        if vertex_ids:
            # Kept summaries of this namespace only; any other is read again (and filtered) by the statement.
            known = {
                vertex_id: entry
                for vertex_id, entry in self.summary_cache.entries(
                    [i for ids in vertex_ids.values() for i in ids]
                ).items()
                if entry[1] == namespace
            }
            params = self._vertex_params(vertex_ids, namespace)
            params["known"] = [f"{vertex_id}/{entry[0]}" for vertex_id, entry in known.items()]
            statement = self._vertex_summaries(list(vertex_ids))
            for vertex_id, version, kept, *fields in conn.execute(statement, params).fetchall():
                if kept:  # the version the cache holds (the statement matched it): its properties unread
                    found.append(known[str(vertex_id)][2])
                    continue
                found.append(tuple(fields))
                self.summary_cache.put(str(vertex_id), str(version), namespace, tuple(fields))
        for label, label_keys in legacy.items():
            found.extend(
                (
                    key,
                    title,
                    source_path,
                    _json_text(provenance),
                    _json_text(attributes),
                    _json_text(pii),
                    _json_text(pii_categories),
                )
                for key, title, source_path, provenance, attributes, pii, pii_categories in self.graph.cypher(
                    conn,
                    f"UNWIND $keys AS key MATCH (n:{checked_label(label)} {{namespace: $namespace, natural_key: key}})"
                    " RETURN [n.natural_key, n.title, n.source_path, n.props.provenance, n.props.attributes,"
                    " n.props.pii, n.props.pii_categories]",
                    {"keys": label_keys, "namespace": namespace},
                )
            )
        out: dict[str, NodeSummary] = {}
        for item in found:
            key, title, source_path, provenance_text, attributes_text, pii_text, categories_text = item
            # Parsed anew on every call: each caller gets objects of its own (the cache keeps text).
            provenance, attributes = _json_value(provenance_text), _json_value(attributes_text)
            out[str(key)] = NodeSummary(
                natural_key=str(key),
                node_type=types.get(str(key), ""),
                title=str(title or ""),
                source_path=str(source_path or ""),
                provenance=dict(provenance) if isinstance(provenance, Mapping) else {},
                attributes=dict(attributes) if isinstance(attributes, Mapping) else {},
                pii=PiiMarks.from_props(
                    {"pii": _json_value(pii_text), "pii_categories": _json_value(categories_text)}
                ),
            )
        return out

    def _vertex_summaries(self, labels: Sequence[str]) -> sql.Composed:
        """One SQL statement over the label tables of ``labels``: each vertex by its AGE id (the label's
        id index) with its row version (``xmin@server start``, `VertexSummaryCache`), ``kept`` when
        ``%(known)s`` lists that ``id/version``, and otherwise its properties as jsonb with the summary
        fields picked out as JSON text (no Cypher on the read path). A kept vertex's row comes back with
        NULL fields and its properties are not read.

        ``OFFSET 0`` fences the subquery: without it the planner inlines ``doc`` into each of the eight
        references, and each one detoasts and re-serialises the whole vertex (a document node carries its
        full text in ``props.content``): 11-13 ms for 10 document hits of the docs vault against 1.6-1.9 ms
        fenced (EXPLAIN ANALYZE)."""
        parts = [
            sql.SQL(
                "SELECT vertex_id, version, vertex_id || '/' || version = ANY(%(known)s::text[]) AS kept, properties"
                " FROM (SELECT id::text AS vertex_id, xmin::text || '@' || pg_postmaster_start_time()::text AS version,"
                " properties FROM {} WHERE id = ANY({}::text[]::ag_catalog.graphid[])) AS versions"
            ).format(sql.Identifier(self.graph.graph, checked_label(label)), sql.Placeholder(f"ids_{index}"))
            for index, label in enumerate(labels)
        ]
        return sql.SQL(
            "SELECT vertex_id, version, kept, doc ->> 'natural_key', doc ->> 'title', doc ->> 'source_path',"
            " (doc -> 'props' -> 'provenance')::text, (doc -> 'props' -> 'attributes')::text,"
            " (doc -> 'props' -> 'pii')::text, (doc -> 'props' -> 'pii_categories')::text"
            " FROM (SELECT vertex_id, version, kept,"
            " CASE WHEN kept THEN NULL ELSE (ag_catalog.agtype_out(properties)::text)::jsonb END AS doc"
            " FROM ({}) AS label_rows OFFSET 0) AS vertex"
            " WHERE kept OR doc ->> 'namespace' = %(namespace)s"
        ).format(sql.SQL(" UNION ALL ").join(parts))

    @staticmethod
    def _vertex_params(vertex_ids: Mapping[str, list[str]], namespace: str) -> dict[str, Any]:
        params: dict[str, Any] = {f"ids_{index}": ids for index, ids in enumerate(vertex_ids.values())}
        params["namespace"] = namespace
        return params

    def keys_with_facts(
        self,
        conn: psycopg.Connection[Any],
        namespace: str,
        tokens: Sequence[str],
        *,
        exclude: Sequence[str],
        limit: int,
        visibility: Visibility = EVERYTHING,
    ) -> list[str]:
        """Natural keys whose id part (after the first ``:``; the whole key when it has none) equals one of
        ``tokens`` (lower-case) and that are the subject or object of at least one fact.

        Bounded, in one statement: one hash join of the namespace's registry rows with the token list, then
        index probes of the facts of the keys found; at most ``limit`` keys, ordered by key. Nodes ``visibility`` may not
        see are left out.
        """
        if not tokens or limit <= 0:
            return []
        # One statement, the registry join MATERIALIZED first: without the fence (one plain join with ORDER
        # BY ... LIMIT) the planner chose a nested loop evaluating the id-part expression for every (node,
        # token) pair (1.5 s for 11.5k nodes x 164 tokens in the debian namespace); the hash join of the
        # CTE plus index probes of the facts take ~10 ms, in one round trip instead of two (cost).
        rows = conn.execute(
            sql.SQL(
                "WITH t AS (SELECT DISTINCT unnest(%(tokens)s::text[]) AS token),"
                " named AS MATERIALIZED (SELECT DISTINCT g.natural_key AS key FROM graph_nodes g"
                " JOIN t ON lower(substr(g.natural_key, strpos(g.natural_key, ':') + 1)) = t.token"
                " WHERE g.namespace = %(namespace)s AND NOT (g.natural_key = ANY(%(exclude)s)) AND {visible})"
                " SELECT k.key FROM named k"
                " WHERE EXISTS (SELECT 1 FROM {facts} f WHERE f.namespace = %(namespace)s AND f.subject_key = k.key)"
                " OR EXISTS (SELECT 1 FROM {facts} f WHERE f.namespace = %(namespace)s AND f.object_key = k.key)"
                " ORDER BY k.key LIMIT %(limit)s"
            ).format(visible=visibility.array_predicate(sql.SQL("g.scopes")), facts=self.facts_table),
            {
                "tokens": list(tokens),
                "namespace": namespace,
                "exclude": list(exclude),
                "limit": limit,
                **visibility.params,
            },
        ).fetchall()
        return [str(row[0]) for row in rows]

    def covering_summaries(
        self,
        conn: psycopg.Connection[Any],
        namespace: str,
        memory_ids: Sequence[str],
        *,
        now: datetime,
        visibility: Visibility = EVERYTHING,
    ) -> list[CoveringSummary]:
        """The live summaries (``is_summary``, not expired at ``now``) that cover memories among
        ``memory_ids`` (their ``summary_id``), each with its chunks and the covered ids among
        ``memory_ids``, in one statement.

        A summary is returned only when ``visibility`` may see its chunk (``meta.scopes``: its owner's
        scope) and its node, and it has the covered memory's owner: another user's or tenant's summary
        never is.
        """
        ids = list(dict.fromkeys(memory_ids))
        if not ids:
            return []
        statement = sql.SQL(
            "SELECT s.memory_id AS summary_id, s.lossless, array_agg(DISTINCT o.memory_id) AS covered,"
            " c.node_key, c.chunk_order, c.node_type, c.source_path, c.title, c.heading, c.text, c.meta"
            " FROM {memories} o JOIN {memories} s ON s.namespace = o.namespace AND s.memory_id = o.summary_id"
            " AND s.user_id = o.user_id AND s.is_summary AND NOT s.hidden"
            " AND (s.expires_at IS NULL OR s.expires_at > %(now)s)"
            " JOIN {chunks} c ON c.namespace = s.namespace AND c.node_key = s.memory_id AND {visible_chunk}"
            " WHERE o.namespace = %(namespace)s AND o.memory_id = ANY(%(ids)s) AND o.summary_id <> ''"
            " AND {visible_node}"
            " GROUP BY s.memory_id, s.lossless, c.node_key, c.chunk_order, c.node_type, c.source_path, c.title,"
            " c.heading, c.text, c.meta ORDER BY s.memory_id, c.chunk_order"
        ).format(
            memories=self.memories_table,
            chunks=self.chunks_table,
            visible_chunk=visibility.jsonb_predicate(sql.SQL("(c.meta -> 'scopes')")),
            visible_node=visibility.node_predicate(sql.SQL("s.namespace"), sql.SQL("s.memory_id")),
        )
        rows = conn.execute(
            statement, {"namespace": namespace, "ids": ids, "now": now, **visibility.params}
        ).fetchall()
        out: dict[str, CoveringSummary] = {}
        for summary_id, lossless, covered, *chunk in rows:
            entry = out.setdefault(
                str(summary_id), CoveringSummary(str(summary_id), bool(lossless), tuple(sorted(covered)), [])
            )
            entry.chunks.append(StoredChunk(*chunk))
        return list(out.values())

    def record_trace(
        self,
        conn: psycopg.Connection[Any],
        *,
        namespace: str,
        trace_id: str,
        request: Mapping[str, Any],
        decisions: Sequence[Mapping[str, Any]],
        scopes: Sequence[str] = (),
    ) -> int:
        """Appends one context compilation to ``context_traces``; returns its row id. ``scopes`` restrict
        who reads it back (`common.storage.visibility.Visibility.owner_scopes` of the compiler)."""
        row = conn.execute(
            self.queries["record_context_trace"],
            (namespace, trace_id, Jsonb(dict(request)), Jsonb([dict(d) for d in decisions]), list(scopes)),
        ).fetchone()
        assert row is not None
        return int(row[0])

    def traces(
        self,
        conn: psycopg.Connection[Any],
        namespace: str,
        trace_id: str,
        *,
        visibility: Visibility = EVERYTHING,
    ) -> list[dict[str, Any]]:
        """The compilations recorded for a trace that ``visibility`` may see (their ``scopes``), oldest
        first: ``{id, created_at, request, decisions}``."""
        rows = conn.execute(
            sql.SQL(
                "SELECT id, created_at, request, decisions FROM {} WHERE namespace = %(namespace)s"
                " AND trace_id = %(trace_id)s AND {visible} ORDER BY id"
            ).format(self.traces_table, visible=visibility.array_predicate(sql.SQL("scopes"))),
            {"namespace": namespace, "trace_id": trace_id, **visibility.params},
        ).fetchall()
        return [{"id": r[0], "created_at": r[1], "request": r[2], "decisions": r[3]} for r in rows]
