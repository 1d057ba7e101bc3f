"""The chunks table (docs/explanation/knowledge-model.md): writing a node's chunks and reading them back.

`ChunkStore` holds all SQL on ``{chunks}`` (``Settings.chunks_table``): the writes and reads here, the
three retrieval rankings in its base `common.storage.chunks.rankings.ChunkRankings`. The static statements
(embeddings of a node, the chunk upsert, deletes) are named queries in ``sql/queries/chunks.sql``; the
reads that take a caller's visibility predicate (`count_chunks`, `list_chunks`, `first_chunks`) are
composed here with `psycopg.sql`.
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
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from common.storage.chunks.rankings import ChunkRankings
from common.storage.chunks.rows import CHUNK_COLUMNS
from common.storage.chunks.rows import StoredChunk
from common.storage.row_count import fetch_count
from common.storage.visibility import EVERYTHING
from common.storage.visibility import Visibility


@dataclass(frozen=True)
class ChunkWrite:
    """One chunk to store.

    Attributes:
        chunk_order: position in the document, >= 0, unique per node.
        heading: heading path of the chunk's section.
        text: the chunk text (no NUL characters).
        embedding: vector of ``Settings.embedding_dim`` float32 values of ``"<title> — <heading>\\n<text>"``,
            or None for a chunk searched by full text and trigram only (vector search skips it).
        meta: chunk meta (consumer tags, ``scopes``, ``observation_id``); stored as jsonb.
        embedding_pending: with ``embedding`` None, the chunk waits on the backlog for the background
            embedder (`ChunkStore.claim_pending_embeddings`); episode chunks of observations.
    """

    chunk_order: int
    heading: str
    text: str
    embedding: np.ndarray | None
    meta: Mapping[str, Any] = field(default_factory=dict)
    embedding_pending: bool = False


@dataclass(frozen=True)
class NodeRef:
    """The node that owns chunks, with the columns copied onto every chunk row."""

    namespace: str
    node_key: str
    node_type: str = "document"
    title: str = ""
    source_path: str = ""


def meta_observation_ids(meta: Mapping[str, Any]) -> tuple[str, ...]:
    """The observation ids a chunk's meta names (``observation_id``, then ``observation_ids``), deduplicated."""
    value = meta.get("observation_id")
    ids = meta.get("observation_ids")
    out: list[str] = []
    if isinstance(value, str) and value:
        out.append(value)
    if isinstance(ids, list):
        out.extend(str(item) for item in ids if isinstance(item, str) and item and item not in out)
    return tuple(out)


@dataclass(frozen=True)
class WriteResult:
    """What a chunk write changed: rows inserted or updated, rows deleted, chunks the node has now."""

    written: int
    deleted: int
    chunk_count: int


def embedding_input(title: str, heading: str, text: str) -> str:
    """The text that is embedded for a chunk (docs/explanation/knowledge-model.md): ``"<title> —
    <heading>\\n<text>"``."""
    return f"{title} — {heading}\n{text}"


class ChunkStore(ChunkRankings):
    """SQL for the chunks table (rankings in `ChunkRankings`). Stateless apart from the table's names and
    a cache of lexeme statistics; safe to share."""

    # -- writes ------------------------------------------------------------------------------------

    def existing_embeddings(
        self, conn: psycopg.Connection[Any], namespace: str, node_key: str
    ) -> dict[str, np.ndarray | None]:
        """Stored embeddings of a node's chunks keyed by their `embedding_input` (None: stored without one).

        Lets a writer skip re-embedding unchanged chunks (same title, heading and text).
        """
        rows = conn.execute(self.queries["chunk_embeddings_of_node"], (namespace, node_key)).fetchall()
        return {embedding_input(title, heading, text): vector for title, heading, text, vector in rows}

    def replace_chunks(
        self,
        conn: psycopg.Connection[Any],
        node: NodeRef,
        chunks: Sequence[ChunkWrite],
        *,
        delete_beyond: bool = True,
        seen_run: str | None = None,
    ) -> WriteResult:
        """Upserts ``chunks`` by (namespace, node_key, chunk_order).

        A row whose columns (and embedding) are already equal is left untouched (no new row version), so
        writing identical chunks twice changes nothing. With ``delete_beyond`` (Retain), the node's chunks
        whose order is not below ``len(chunks)`` are deleted, so the node has exactly ``chunks``; without
        it (PutChunks) the other chunks stay. A vault run's write (``seen_run`` set) never overwrites nor
        deletes a chunk written through the API (``seen_run`` NULL): those stay on the node.

        Args:
            conn: a connection inside the caller's transaction.
            node: the owning node; its type, title and source path are copied onto every row.
            chunks: the chunks; with ``delete_beyond`` their orders must be 0..len-1.
            delete_beyond: delete chunks with ``chunk_order >= len(chunks)``.
            seen_run: vault-ingest run mark (None for API writes): the run that wrote the chunk.

        Returns:
            Rows inserted or updated, rows deleted, and the node's chunk count afterwards.
        """
        written = 0
        if chunks:
            rows = [_upsert_row(node, chunk, seen_run) for chunk in chunks]
            with conn.cursor() as cursor:
                cursor.executemany(self.queries["upsert_chunk"], rows)
                written = max(cursor.rowcount, 0)
        deleted = 0
        if delete_beyond:
            if seen_run is None:
                statement = self.queries["delete_chunks_from_order"]
            else:
                statement = self.queries["delete_vault_chunks_from_order"]
            deleted = conn.execute(statement, (node.namespace, node.node_key, len(chunks))).rowcount
        count = self.count_chunks(conn, node.namespace, node.node_key)
        return WriteResult(written=written, deleted=max(deleted, 0), chunk_count=count)

    # -- the embedding backlog (episode chunks written without their vector) -------------------------

    def claim_pending_embeddings(
        self, conn: psycopg.Connection[Any], limit: int, namespace: str | None = None
    ) -> list[tuple[int, str]]:
        """Locks up to ``limit`` chunks of the backlog (of ``namespace``, or of all when None), oldest
        first, skipping those another transaction holds (``FOR UPDATE SKIP LOCKED``), and returns
        ``(id, embedding_input)`` of each. The locks last until the caller's transaction ends: a crash
        before `fill_embeddings` leaves them pending."""
        rows = conn.execute(
            self.queries["claim_pending_embeddings"], (namespace, namespace, limit)
        ).fetchall()
        return [(int(row[0]), embedding_input(row[1], row[2], row[3])) for row in rows]

    def fill_embeddings(self, conn: psycopg.Connection[Any], ids: Sequence[int], vectors: np.ndarray) -> int:
        """Stores ``vectors[i]`` (float32, ``Settings.embedding_dim``) as the embedding of chunk
        ``ids[i]`` and takes it off the backlog; returns how many rows changed (a row no longer pending,
        or deleted, is skipped)."""
        if not ids:
            return 0
        if len(ids) != len(vectors):
            raise ValueError(f"fill_embeddings: {len(ids)} ids, {len(vectors)} vectors")
        cursor = conn.execute(
            self.queries["fill_embeddings"],
            {
                "ids": list(ids),
                "embeddings": [np.asarray(vector, dtype=np.float32) for vector in vectors],
            },
        )
        return max(cursor.rowcount, 0)

    def embedding_backlog(
        self, conn: psycopg.Connection[Any], namespace: str | None = None
    ) -> tuple[int, datetime | None]:
        """Chunks waiting for their embedding (of ``namespace``, or of all when None) and when the oldest
        of them was written (None when there is none)."""
        row = conn.execute(self.queries["embedding_backlog"], (namespace, namespace)).fetchone()
        return (int(row[0]), row[1]) if row else (0, None)

    def queue_unembedded_episodes(self, conn: psycopg.Connection[Any], namespace: str) -> int:
        """Puts the episode chunks of ``namespace`` stored without an embedding (before migration 0010) on
        the backlog; returns how many."""
        return max(conn.execute(self.queries["queue_unembedded_episodes"], (namespace,)).rowcount, 0)

    def replace_chunks_of_nodes(
        self, conn: psycopg.Connection[Any], writes: Sequence[tuple[NodeRef, Sequence[ChunkWrite]]]
    ) -> None:
        """`replace_chunks` (with ``delete_beyond``) of many nodes at once: one multi-row upsert of every
        row (``upsert_chunks``: the term statistics triggers run once, not per row), one delete of the
        chunks beyond each node's new count (orders 0..len-1 per node).

        Raises:
            ValueError: a node is listed twice (a multi-row upsert touches each row once).
        """
        if len({(node.namespace, node.node_key) for node, _ in writes}) != len(writes):
            raise ValueError("replace_chunks_of_nodes: a node is listed twice")
        rows = [_upsert_row(node, chunk, None) for node, chunks in writes for chunk in chunks]
        if not rows:
            return
        columns = list(zip(*rows, strict=True))
        conn.execute(
            self.queries["upsert_chunks"],
            {
                **{name: list(column) for name, column in zip(_UPSERT_ARRAYS, columns[:8], strict=True)},
                "embeddings": list(columns[8]),
                "metas": list(columns[9]),
                "pending": list(columns[11]),
            },
        )
        conn.execute(
            self.queries["delete_chunks_beyond_counts"],
            (
                [node.namespace for node, _ in writes],
                [node.node_key for node, _ in writes],
                [len(chunks) for _, chunks in writes],
            ),
        )

    def delete_chunks(self, conn: psycopg.Connection[Any], namespace: str, node_key: str) -> int:
        """Deletes every chunk of a node; returns how many there were."""
        return conn.execute(self.queries["delete_chunks_of_node"], (namespace, node_key)).rowcount

    def delete_vault_chunks(self, conn: psycopg.Connection[Any], namespace: str, node_key: str) -> int:
        """Deletes the chunks vault runs wrote of a node (chunks written through the API stay); returns how
        many there were."""
        return conn.execute(self.queries["delete_vault_chunks_of_node"], (namespace, node_key)).rowcount

    def count_api_chunks(self, conn: psycopg.Connection[Any], namespace: str, node_key: str) -> int:
        """How many chunks of a node were written through the API (``seen_run`` NULL)."""
        return fetch_count(conn, self.queries["count_api_chunks_of_node"], (namespace, node_key))

    # -- reads -------------------------------------------------------------------------------------

    def count_chunks(
        self,
        conn: psycopg.Connection[Any],
        namespace: str,
        node_key: str,
        *,
        visibility: Visibility = EVERYTHING,
    ) -> int:
        """Number of chunks of a node (those ``visibility`` may see)."""
        rows = self._visible_rows(
            conn,
            "SELECT count(*) AS count FROM {table} WHERE namespace = %(namespace)s AND node_key = %(node_key)s"
            " AND {visible}",
            {"namespace": namespace, "node_key": node_key},
            visibility,
        )
        return int(rows[0]["count"]) if rows else 0

    def list_chunks(
        self,
        conn: psycopg.Connection[Any],
        namespace: str,
        node_key: str,
        *,
        visibility: Visibility = EVERYTHING,
    ) -> list[StoredChunk]:
        """The chunks of a node that ``visibility`` may see, in ``chunk_order``."""
        records = self._visible_rows(
            conn,
            "SELECT {columns} FROM {table} WHERE namespace = %(namespace)s AND node_key = %(node_key)s"
            " AND {visible} ORDER BY chunk_order",
            {"namespace": namespace, "node_key": node_key},
            visibility,
        )
        return [StoredChunk(**record) for record in records]

    def first_chunks(
        self,
        conn: psycopg.Connection[Any],
        namespace: str,
        node_keys: list[str],
        *,
        visibility: Visibility = EVERYTHING,
    ) -> dict[str, StoredChunk]:
        """The first chunk (lowest ``chunk_order``) that ``visibility`` may see of each node among
        ``node_keys`` that has one; one statement over the unique (namespace, node_key, chunk_order) index."""
        if not node_keys:
            return {}
        records = self._visible_rows(
            conn,
            "SELECT DISTINCT ON (node_key) {columns} FROM {table} WHERE namespace = %(namespace)s"
            " AND node_key = ANY(%(node_keys)s) AND {visible} ORDER BY node_key, chunk_order",
            {"namespace": namespace, "node_keys": list(node_keys)},
            visibility,
        )
        return {record["node_key"]: StoredChunk(**record) for record in records}

    def _visible_rows(
        self, conn: psycopg.Connection[Any], template: str, params: dict[str, Any], visibility: Visibility
    ) -> list[dict[str, Any]]:
        """Rows (dicts) of a read of the chunks table: ``template`` names ``{table}``, ``{columns}``
        (`CHUNK_COLUMNS`) and ``{visible}``, the predicate "``visibility`` may see the chunk" over
        ``meta.scopes``, composed per call."""
        statement = sql.SQL(template).format(  # type: ignore[arg-type]
            table=self.table,
            columns=CHUNK_COLUMNS,
            visible=visibility.jsonb_predicate(sql.SQL("(meta -> 'scopes')")),
        )
        with conn.cursor(row_factory=dict_row) as cursor:
            return cursor.execute(statement, {**params, **visibility.params}).fetchall()


# The text and number columns of `_upsert_row`, by their ``upsert_chunks`` parameter names.
_UPSERT_ARRAYS = ("namespaces", "keys", "orders", "types", "paths", "titles", "headings", "texts")


def _upsert_row(node: NodeRef, chunk: ChunkWrite, seen_run: str | None) -> tuple[Any, ...]:
    """The parameters of ``upsert_chunk`` for one chunk of ``node`` (the last one, embedding_pending,
    only for a chunk written without its vector)."""
    return (
        node.namespace,
        node.node_key,
        chunk.chunk_order,
        node.node_type,
        node.source_path,
        node.title,
        chunk.heading,
        chunk.text,
        None if chunk.embedding is None else np.asarray(chunk.embedding, dtype=np.float32),
        Jsonb(dict(chunk.meta)),
        seen_run,
        chunk.embedding is None and chunk.embedding_pending,
    )
