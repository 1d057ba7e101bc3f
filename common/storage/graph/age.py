"""One AGE graph: its labels (created once, with their indexes), label tables and ids, running Cypher,
and the agtype codec. The base of `common.storage.graph.store.GraphStore`. The session set-up of every
connection is `common.storage.session.prepare_age_session`.

Where Cypher lives: only in ``common/storage``. `AgeGraph.cypher` runs Cypher text that a store composed
with sanitised labels (`checked_label`): `GraphStore.get_node` and `ContextStore.node_summaries` (a label
found at run time); static Cypher is a named query that calls ``ag_catalog.cypher`` itself
(``sql/queries/audit_store.sql``) and is run with `AgeGraph.cypher_rows`. Most graph writes and look-ups
are plain SQL over the label tables (see `common.storage.graph.edges`). Parameters reach Cypher only
through the third argument of ``ag_catalog.cypher`` (an agtype map, referenced as ``$name``).

Static SQL of the graph modules (`age_graph`, `node_registry`, `graph_edges`, `graph_store`) is in
``sql/queries/graph.sql``; what names a label table (``{graph}.<label>``) or takes a visibility predicate
is composed with `psycopg.sql` where it is used.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from typing import TYPE_CHECKING
from typing import Any
from typing import ClassVar

import psycopg
from psycopg import sql

from common.kernel.config import Settings
from common.kernel.identifiers import graph_label
from common.storage.named_queries import Queries
from common.storage.session import prepare_age_session

if TYPE_CHECKING:
    from common.storage.database import Database

_SAFE_LABEL = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
# Labels every namespace uses, all derived by `graph_label`: the project's own node types,
# the MENTIONS predicate of identifier links, the document links.
BASE_VERTEX_LABELS = tuple(graph_label("node_type", t) for t in ("episode", "entity", "document", "text"))
BASE_EDGE_LABELS = (graph_label("internal_edge", "LINKS_TO"), graph_label("predicate", "MENTIONS"))
_LABEL_LOCK_BASE = 0x6C61_0000  # advisory lock namespace for label creation
_AGTYPE_SUFFIX = re.compile(r"::(vertex|edge|path|numeric)$")
GRAPH_QUERIES = "graph.sql"


def checked_label(label: str) -> str:
    """Returns ``label`` when it is a plain identifier; raises ValueError otherwise (defence in depth)."""
    if not _SAFE_LABEL.match(label):
        raise ValueError(f"unsafe graph label {label!r}")
    return label


def agtype_text(value: dict[str, Any]) -> str:
    """JSON text of a property map, read by PostgreSQL as agtype."""
    return json.dumps(value, ensure_ascii=False)


def decode_agtype(value: Any) -> Any:
    """agtype text -> Python (maps, lists, scalars). ``::vertex`` style suffixes are stripped."""
    if value is None:
        return None
    text = _AGTYPE_SUFFIX.sub("", str(value))
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def label_tables(conn: psycopg.Connection[Any], settings: Settings, kind: str) -> list[str]:
    """The names of the graph's label tables of ``kind`` (``"v"`` vertex, ``"e"`` edge) from AGE's
    catalog, by name, AGE's default labels excluded."""
    queries = Queries.for_settings(GRAPH_QUERIES, settings)
    return [str(r[0]) for r in conn.execute(queries["label_tables"], (settings.graph_name, kind)).fetchall()]


class AgeGraph:
    """The graph of one database: labels, label tables, Cypher. Thread-safe; label existence and label
    ids are cached per process."""

    # Keyed by (database URL, graph, ...): one process may talk to several databases (tests, tools).
    _known_labels: ClassVar[set[tuple[str, str, str, str]]] = set()
    _label_sequences: ClassVar[
        dict[tuple[str, str, str], tuple[int, str]]
    ] = {}  # (database URL, graph, label) -> (id, sequence)
    _labels_lock = threading.Lock()

    def __init__(self, database: Database) -> None:
        self.database = database
        self.graph = database.settings.graph_name
        self.queries = Queries.for_settings(GRAPH_QUERIES, database.settings)

    # -- Cypher ------------------------------------------------------------------------------------

    def cypher(
        self, conn: psycopg.Connection[Any], query: str, params: dict[str, Any] | None = None
    ) -> list[Any]:
        """Runs one Cypher statement; returns the decoded single ``v`` column of each row.

        ``query`` is Cypher text composed by a store with sanitised labels; values go in ``params``.
        """
        if "$$" in query:
            raise ValueError("Cypher text must not contain $$")
        statement = sql.SQL(
            "SELECT * FROM ag_catalog.cypher({graph}, $$ {query} $$, %s) AS (v ag_catalog.agtype)"
        ).format(
            graph=sql.Literal(self.graph),
            query=sql.SQL(query),  # type: ignore[arg-type]
        )
        return self.cypher_rows(conn, statement, params)

    @staticmethod
    def cypher_rows(
        conn: psycopg.Connection[Any], statement: sql.Composable, params: dict[str, Any] | None = None
    ) -> list[Any]:
        """Runs a whole ``SELECT * FROM ag_catalog.cypher(graph, $$ ... $$, %s) AS (v agtype)`` statement
        (a named query) with ``params`` as its agtype map; returns the decoded ``v`` of each row."""
        rows = conn.execute(statement, (json.dumps(params or {}, ensure_ascii=False),)).fetchall()
        return [decode_agtype(row[0]) for row in rows]

    # -- labels ------------------------------------------------------------------------------------

    @classmethod
    def ensure_base_labels(cls, database: Database) -> None:
        """Creates the labels every namespace uses (called after migrations)."""
        store = cls(database)
        for label in BASE_VERTEX_LABELS:
            store.ensure_label(label, "vertex")
        for label in BASE_EDGE_LABELS:
            store.ensure_label(label, "edge")

    def ensure_label(self, label: str, kind: str) -> None:
        """Creates a vertex or edge label with its indexes, once, before first use (docs/explanation/architecture.md).

        Runs in its own autocommit connection under an advisory lock, so concurrent writers never race
        on the implicit label creation of CREATE (error 42P07).
        """
        checked_label(label)
        cache_key = (self.database.settings.database_url, self.graph, kind, label)
        if cache_key in self._known_labels:
            return
        with self._labels_lock:
            if cache_key in self._known_labels:
                return
            with psycopg.connect(
                self.database.settings.database_url, autocommit=True, connect_timeout=5
            ) as conn:
                prepare_age_session(conn)
                lock_key = _LABEL_LOCK_BASE + (int(hashlib.sha256(label.encode()).hexdigest()[:6], 16))
                conn.execute(self.queries["lock_label_creation"], (lock_key,))
                try:
                    self.create_label_in(conn, label, kind)
                finally:
                    conn.execute(self.queries["unlock_label_creation"], (lock_key,))
            self._known_labels.add(cache_key)

    def create_label_in(self, conn: psycopg.Connection[Any], label: str, kind: str) -> None:
        """Creates the label and its missing indexes on ``conn`` (the caller holds the label's advisory
        lock or the migration lock).

        Raises:
            ValueError: the label exists as the other kind (vertex vs edge).
        """
        row = conn.execute(self.queries["label_kind"], (self.graph, label)).fetchone()
        if row is None:
            create = (
                self.queries["create_vertex_label"] if kind == "vertex" else self.queries["create_edge_label"]
            )
            conn.execute(create, (self.graph, label))
        elif (row[0] == "v") != (kind == "vertex"):
            raise ValueError(f"label {label!r} already exists as the other kind (vertex vs edge)")
        wanted = [(f"{label}_properties_gin", sql.SQL("USING gin (properties)"))]
        if kind == "edge":
            wanted += [
                (f"{label}_{column}_idx", sql.SQL("({})").format(sql.Identifier(column)))
                for column in ("start_id", "end_id")
            ]
        else:
            wanted.append((f"{label}_id_idx", sql.SQL("(id)")))
        for index_name, definition in wanted:
            # Only a missing index is created: CREATE INDEX takes a SHARE lock on the label table even
            # when the index exists (IF NOT EXISTS is checked after the lock), which waits behind every
            # open transaction that wrote the label, e.g. the caller's own.
            if conn.execute(self.queries["graph_index_exists"], (self.graph, index_name)).fetchone() is None:
                conn.execute(
                    sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} {}").format(
                        sql.Identifier(index_name), self._table(label), definition
                    )
                )

    def _label_ids(self, conn: psycopg.Connection[Any], labels: set[str]) -> dict[str, tuple[int, str]]:
        """Vertex labels -> (AGE label id, qualified name of the label's id sequence), creating missing
        labels (`ensure_label`); cached per process (a label's id and sequence never change)."""
        found: dict[str, tuple[int, str]] = {}
        for label in sorted(labels):
            self.ensure_label(label, "vertex")
            cache_key = (self.database.settings.database_url, self.graph, label)
            cached = self._label_sequences.get(cache_key)
            if cached is None:
                row = conn.execute(self.queries["label_id_and_sequence"], (self.graph, label)).fetchone()
                assert row is not None, f"label {label} exists after ensure_label"
                cached = self._label_sequences[cache_key] = (int(row[0]), str(row[1]))
            found[label] = cached
        return found

    def _table(self, label: str) -> sql.Composable:
        """The label's table ``<graph>.<label>`` (AGE stores each label in a table of the graph's schema)."""
        return sql.Identifier(self.graph, checked_label(label))


__all__ = [
    "BASE_EDGE_LABELS",
    "BASE_VERTEX_LABELS",
    "AgeGraph",
    "agtype_text",
    "checked_label",
    "decode_agtype",
]
