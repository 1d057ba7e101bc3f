"""The chunks table (seed 000 "Чанки и документы"): writing a node's chunks and the three retrieval rankings.

All SQL on ``{chunks}`` (``Settings.chunks_table``, passed as `psycopg.sql.Identifier`) lives here. Every
query carries the namespace predicate; the optional filters (node types, meta containment
``meta @> {...}``, node keys) are applied *inside* each ranking query, so a small namespace inside a
large table still fills its candidate list:

* **vector**: ``ORDER BY embedding <=> q LIMIT n`` over the HNSW cosine index. The pool sets
  ``hnsw.iterative_scan = relaxed_order`` (pgvector >= 0.8), so when the filters discard the first
  ``ef_search`` neighbours the index scan continues (up to ``hnsw.max_scan_tuples``) instead of
  returning fewer rows. Relaxed order means the rows may come slightly out of order: they are
  re-sorted by distance in a materialized CTE, as the pgvector documentation prescribes. For a small
  namespace the planner usually prefers the namespace B-tree plus an exact sort, which is exact anyway.
* **full text**: ``search_document @@ websearch_to_tsquery(config, q)`` ranked by ``ts_rank_cd`` over the
  stored, GIN-indexed ``search_document`` (title + heading + text, configured config, ``russian`` by
  default). Websearch syntax ANDs every term, which starves natural-language questions ("how do I
  upgrade openssl on bookworm" rarely has all its words in one chunk), so when the AND query yields
  fewer than ``limit`` rows, the rest is filled with chunks matching *any* lexeme of the query (an OR
  query built from the same lexemes), ranked after the AND matches. The OR matches are ordered by
  ``ts_rank`` (term frequency; rewards chunks with more of the query's lexemes), not ``ts_rank_cd``: cover
  density over an OR query only counts single-term covers, and ``ts_rank_cd`` over the 1,000-4,000 OR
  matches of a sentence in the 9.6k-chunk docs vault cost 2-3x ``ts_rank`` (25-66 ms against 13-24 ms,
  EXPLAIN ANALYZE) and was the p95 of Search. AND matches are removed from the OR rows in Python rather
  than by a ``NOT @@`` filter, which detoasted every row once more.

  About the ``simple`` configuration: ``ts_debug`` shows that the ``russian`` configuration sends ASCII
  words through ``english_stem`` and numbers, versions and mixed tokens (``libc6``, ``deb12u4``,
  ``2.36``, ``-9``) through ``simple`` — identically for the stored vector and for the query — so English
  words and identifiers match under ``russian`` (``installing`` and ``installation`` both become
  ``instal``). A ``simple``-config *query* against the stemmed stored vector can only match lexemes the
  stemmer left unchanged, i.e. a subset of what the configured query already matches, and a
  ``simple``-config *vector* has no index (computing it per query scans the whole namespace). So the
  ``simple`` configuration is deliberately not queried; exact identifiers are the trigram ranking's job.
* **trigram**: pg_trgm over ``text`` (GIN ``gin_trgm_ops``), as case-insensitive substring matches that the
  trigram index serves: rows containing an *identifier-like token* of the query verbatim
  (``text ILIKE '%token%'``) or, for a query of at most ``trigram_max_query_chars``, the whole query.
  Identifier-like tokens are whitespace-separated pieces with a digit or one of ``-_.:+/#@`` and at least
  3 characters, such as ``PROJ-1234``, ``1:2.3-4`` or ``2.36-9+deb12u4``; pg_trgm similarity alone ignores
  punctuation, so ``2.36-9+deb12u4`` would also match ``2.36-9+deb12u3``. Matches are ordered by the number
  of tokens found, then by ``word_similarity(query, text)``; the fuzzy ``<%`` filter is not used (0.3-0.9 s
  per sentence-long query on the 10k-chunk docs vault).
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import psycopg
from psycopg import sql
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from common.kernel.config import Settings
from common.storage.visibility import EVERYTHING, Visibility

_CHUNK_COLUMNS = sql.SQL("node_key, chunk_order, node_type, source_path, title, heading, text, meta")
_IDENTIFIER_TOKEN = re.compile(r"[0-9]")
# OR fill of the full-text ranking (see ChunkStore._rare_lexemes).
OR_MAX_LEXEME_FREQUENCY = 0.05
OR_MAX_LEXEMES = 8
LEXEME_STATISTICS_TTL_SECONDS = 600.0
_TRIM_TOKEN = re.compile(r"^[\s\"'«»“”‘’(\[{<,;!?]+|[\s\"'«»“”‘’)\]}>,;!?.]+$")


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
    """

    chunk_order: int
    heading: str
    text: str
    embedding: np.ndarray | None
    meta: Mapping[str, Any] = field(default_factory=dict)


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
class StoredChunk:
    """One chunk row as read back (no embedding)."""

    node_key: str
    chunk_order: int
    node_type: str
    source_path: str
    title: str
    heading: str
    text: str
    meta: dict[str, Any]


@dataclass(frozen=True)
class ChunkFilter:
    """Predicates shared by the three rankings.

    Attributes:
        namespace: required.
        node_types: keep only chunks of these node types (empty: all).
        meta: jsonb containment filter, ``meta @> {...}`` (empty: none).
        node_keys: keep only chunks of these nodes (empty: all).
        visibility: the caller's visibility; chunks whose ``meta.scopes`` hide them are left out
            (`common.storage.visibility`).
    """

    namespace: str
    node_types: tuple[str, ...] = ()
    meta: Mapping[str, Any] = field(default_factory=dict)
    node_keys: tuple[str, ...] = ()
    visibility: Visibility = EVERYTHING


@dataclass(frozen=True)
class Candidate:
    """A chunk returned by one ranking, with that ranking's raw score.

    ``score`` is the cosine *distance* for the vector ranking (smaller is better), ``ts_rank_cd`` for full
    text (``ts_rank`` for a chunk matching only some of the query's lexemes) and the trigram similarity (1.0 for an exact identifier hit) for trigram; ``rank`` is 1-based.
    """

    chunk: StoredChunk
    score: float
    rank: int

    @property
    def key(self) -> tuple[str, int]:
        return (self.chunk.node_key, self.chunk.chunk_order)


@dataclass(frozen=True)
class WriteResult:
    """What a chunk write changed: rows inserted or updated, rows deleted, chunks the node has now."""

    written: int
    deleted: int
    chunk_count: int


def embedding_input(title: str, heading: str, text: str) -> str:
    """The text that is embedded for a chunk (seed 000): ``"<title> — <heading>\\n<text>"``."""
    return f"{title} — {heading}\n{text}"


def identifier_tokens(query: str, *, limit: int = 8) -> list[str]:
    """Identifier-like tokens of ``query`` (``PROJ-1234``, ``1:2.3-4``, ``2.36-9+deb12u4``), deduplicated.

    A token is a whitespace-separated piece, stripped of surrounding quotes and sentence punctuation,
    of at least 3 characters containing a digit. Pieces with only punctuation (``https://github``,
    ``description:``, ``top-level``) matched 50-1,656 chunks of the docs vault each, every one then
    scored with ``word_similarity``: that was the p95 of Search (bench/RESULTS.md).
    """
    tokens: list[str] = []
    for piece in query.split():
        token = _TRIM_TOKEN.sub("", piece)
        if len(token) >= 3 and _IDENTIFIER_TOKEN.search(token) and token.lower() not in tokens:
            tokens.append(token.lower())
        if len(tokens) >= limit:
            break
    return tokens


def _like_pattern(token: str) -> str:
    escaped = token.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _tsquery_literal(lexeme: str) -> str:
    """A lexeme quoted for tsquery input (single quotes doubled, backslashes escaped)."""
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"


class ChunkStore:
    """SQL for the chunks table. Stateless apart from the table identifier; safe to share."""

    def __init__(self, settings: Settings, *, trigram_max_query_chars: int = 1000) -> None:
        self.settings = settings
        self.table = sql.Identifier(settings.chunks_table)
        self.text_search_config = settings.text_search_config
        self.trigram_max_query_chars = trigram_max_query_chars
        self._lexeme_frequencies: tuple[float, dict[str, float]] = (-LEXEME_STATISTICS_TTL_SECONDS, {})

    # -- writes ------------------------------------------------------------------------------------

    def existing_embeddings(
        self, conn: psycopg.Connection[Any], namespace: str, node_key: str
    ) -> dict[str, np.ndarray | None]:
        """Stored embeddings of a node's chunks keyed by their `embedding_input` (None: stored without one).

        Lets a writer skip re-embedding unchanged chunks (same title, heading and text).
        """
        rows = conn.execute(
            sql.SQL(
                "SELECT title, heading, text, embedding FROM {} WHERE namespace = %s AND node_key = %s"
            ).format(self.table),
            (namespace, node_key),
        ).fetchall()
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
        it (PutChunks) the other chunks stay.

        Args:
            conn: a connection inside the caller's transaction.
            node: the owning node; its type, title and source path are copied onto every row.
            chunks: the chunks; with ``delete_beyond`` their orders must be 0..len-1.
            delete_beyond: delete chunks with ``chunk_order >= len(chunks)``.
            seen_run: vault-ingest run mark (None for API writes).

        Returns:
            Rows inserted or updated, rows deleted, and the node's chunk count afterwards.
        """
        written = 0
        if chunks:
            statement = sql.SQL(
                "INSERT INTO {table} AS c (namespace, node_key, chunk_order, node_type, source_path, title,"
                " heading, text, embedding, meta, seen_run)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
                " ON CONFLICT (namespace, node_key, chunk_order) DO UPDATE SET"
                " node_type = excluded.node_type, source_path = excluded.source_path, title = excluded.title,"
                " heading = excluded.heading, text = excluded.text, embedding = excluded.embedding,"
                " meta = excluded.meta, seen_run = excluded.seen_run"
                " WHERE (c.node_type, c.source_path, c.title, c.heading, c.text, c.meta, c.seen_run)"
                " IS DISTINCT FROM (excluded.node_type, excluded.source_path, excluded.title, excluded.heading,"
                " excluded.text, excluded.meta, excluded.seen_run)"
                " OR c.embedding IS DISTINCT FROM excluded.embedding"
            ).format(table=self.table)
            rows = [
                (
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
                )
                for chunk in chunks
            ]
            with conn.cursor() as cursor:
                cursor.executemany(statement, rows)
                written = max(cursor.rowcount, 0)
        deleted = 0
        if delete_beyond:
            deleted = conn.execute(
                sql.SQL("DELETE FROM {} WHERE namespace = %s AND node_key = %s AND chunk_order >= %s").format(
                    self.table
                ),
                (node.namespace, node.node_key, len(chunks)),
            ).rowcount
        count = self.count_chunks(conn, node.namespace, node.node_key)
        return WriteResult(written=written, deleted=max(deleted, 0), chunk_count=count)

    def delete_chunks(self, conn: psycopg.Connection[Any], namespace: str, node_key: str) -> int:
        """Deletes every chunk of a node; returns how many there were."""
        return conn.execute(
            sql.SQL("DELETE FROM {} WHERE namespace = %s AND node_key = %s").format(self.table),
            (namespace, node_key),
        ).rowcount

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
        row = conn.execute(
            sql.SQL(
                "SELECT count(*) FROM {table} WHERE namespace = %(namespace)s AND node_key = %(node_key)s"
                " AND {visible}"
            ).format(table=self.table, visible=visibility.jsonb_predicate(sql.SQL("(meta -> 'scopes')"))),
            {"namespace": namespace, "node_key": node_key, **visibility.params},
        ).fetchone()
        return int(row[0]) if row else 0

    def list_chunks(
        self,
        conn: psycopg.Connection[Any],
        namespace: str,
        node_key: str,
        *,
        visibility: Visibility = EVERYTHING,
    ) -> list[StoredChunk]:
        """The chunks of a node that ``visibility`` may see, in ``chunk_order``."""
        with conn.cursor(row_factory=dict_row) as cursor:
            records = cursor.execute(
                sql.SQL(
                    "SELECT {columns} FROM {table} WHERE namespace = %(namespace)s AND node_key = %(node_key)s"
                    " AND {visible} ORDER BY chunk_order"
                ).format(
                    columns=_CHUNK_COLUMNS,
                    table=self.table,
                    visible=visibility.jsonb_predicate(sql.SQL("(meta -> 'scopes')")),
                ),
                {"namespace": namespace, "node_key": node_key, **visibility.params},
            ).fetchall()
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
        with conn.cursor(row_factory=dict_row) as cursor:
            records = cursor.execute(
                sql.SQL(
                    "SELECT DISTINCT ON (node_key) {columns} FROM {table} WHERE namespace = %(namespace)s"
                    " AND node_key = ANY(%(node_keys)s) AND {visible} ORDER BY node_key, chunk_order"
                ).format(
                    columns=_CHUNK_COLUMNS,
                    table=self.table,
                    visible=visibility.jsonb_predicate(sql.SQL("(meta -> 'scopes')")),
                ),
                {"namespace": namespace, "node_keys": list(node_keys), **visibility.params},
            ).fetchall()
        return {record["node_key"]: StoredChunk(**record) for record in records}

    # -- rankings ----------------------------------------------------------------------------------

    def _filter_sql(self, where: ChunkFilter, params: dict[str, Any]) -> sql.Composable:
        conditions: list[sql.Composable] = [sql.SQL("namespace = %(namespace)s")]
        params["namespace"] = where.namespace
        if where.node_types:
            conditions.append(sql.SQL("node_type = ANY(%(node_types)s)"))
            params["node_types"] = list(where.node_types)
        if where.meta:
            conditions.append(sql.SQL("meta @> %(meta)s"))
            params["meta"] = Jsonb(dict(where.meta))
        if where.node_keys:
            conditions.append(sql.SQL("node_key = ANY(%(node_keys)s)"))
            params["node_keys"] = list(where.node_keys)
        if not where.visibility.unrestricted:
            conditions.append(where.visibility.jsonb_predicate(sql.SQL("(meta -> 'scopes')")))
            params.update(where.visibility.params)
        return sql.SQL(" AND ").join(conditions)

    def _candidates(
        self, conn: psycopg.Connection[Any], statement: sql.Composed, params: dict[str, Any]
    ) -> list[Candidate]:
        with conn.cursor(row_factory=dict_row) as cursor:
            records = cursor.execute(statement, params).fetchall()
        candidates = []
        for rank, record in enumerate(records, start=1):
            score = float(record.pop("score"))
            candidates.append(Candidate(chunk=StoredChunk(**record), score=score, rank=rank))
        return candidates

    def vector_candidates(
        self, conn: psycopg.Connection[Any], where: ChunkFilter, embedding: np.ndarray, limit: int
    ) -> list[Candidate]:
        """Up to ``limit`` chunks nearest to ``embedding`` by cosine distance (``score`` = distance, ascending)."""
        params: dict[str, Any] = {"embedding": np.asarray(embedding, dtype=np.float32), "limit": limit}
        condition = self._filter_sql(where, params)
        statement = sql.SQL(
            "WITH nearest AS MATERIALIZED ("
            " SELECT {columns}, embedding <=> %(embedding)s AS score FROM {table}"
            " WHERE {condition} AND embedding IS NOT NULL"
            " ORDER BY embedding <=> %(embedding)s LIMIT %(limit)s)"
            " SELECT * FROM nearest ORDER BY score, node_key, chunk_order"
        ).format(columns=_CHUNK_COLUMNS, table=self.table, condition=condition)
        return self._candidates(conn, statement, params)

    def text_candidates(
        self, conn: psycopg.Connection[Any], where: ChunkFilter, query: str, limit: int
    ) -> list[Candidate]:
        """Up to ``limit`` full-text matches (``score`` = ts_rank_cd, descending).

        Chunks matching every term (websearch syntax: quotes, ``or``, ``-``) come first; when they are
        fewer than ``limit``, chunks matching any lexeme of the query follow, by ``ts_rank`` (``score``
        = ts_rank for them; see the module doc).
        """
        params: dict[str, Any] = {"config": self.text_search_config, "query": query, "limit": limit}
        condition = self._filter_sql(where, params)
        statement = sql.SQL(
            "SELECT {columns}, ts_rank_cd(search_document, q.tsq) AS score"
            " FROM {table}, (SELECT websearch_to_tsquery(%(config)s::regconfig, %(query)s) AS tsq) AS q"
            " WHERE {condition} AND search_document @@ q.tsq"
            " ORDER BY score DESC, node_key, chunk_order LIMIT %(limit)s"
        ).format(columns=_CHUNK_COLUMNS, table=self.table, condition=condition)
        candidates = self._candidates(conn, statement, params)
        if len(candidates) >= limit:
            return candidates
        lexemes = [
            str(row[0])
            for row in conn.execute(
                "SELECT DISTINCT lexeme FROM unnest(to_tsvector(%s::regconfig, %s)) ORDER BY 1",
                (self.text_search_config, query),
            ).fetchall()
        ]
        if len(lexemes) < 2:
            return candidates  # the AND query already was the OR query
        params_any: dict[str, Any] = {
            "any_query": " | ".join(_tsquery_literal(lexeme) for lexeme in self._rare_lexemes(conn, lexemes)),
            "limit": limit,
        }
        condition_any = self._filter_sql(where, params_any)
        statement_any = sql.SQL(
            "SELECT {columns}, ts_rank(search_document, q.tsq) AS score"
            " FROM {table}, (SELECT %(any_query)s::tsquery AS tsq) AS q"
            " WHERE {condition} AND search_document @@ q.tsq"
            " ORDER BY score DESC, node_key, chunk_order LIMIT %(limit)s"
        ).format(columns=_CHUNK_COLUMNS, table=self.table, condition=condition_any)
        found = {candidate.key for candidate in candidates}
        extra = [c for c in self._candidates(conn, statement_any, params_any) if c.key not in found]
        extra = extra[: limit - len(candidates)]
        offset = len(candidates)
        return candidates + [
            Candidate(c.chunk, c.score, offset + rank) for rank, c in enumerate(extra, start=1)
        ]

    def _rare_lexemes(self, conn: psycopg.Connection[Any], lexemes: list[str]) -> list[str]:
        """The lexemes the OR fill searches: those in at most `OR_MAX_LEXEME_FREQUENCY` of the chunks,
        at most `OR_MAX_LEXEMES` of them, rarest first (the single rarest when every one is common).

        Frequencies are the planner's statistics of ``search_document`` (``pg_stats.most_common_elems``,
        the 1,000 most common lexemes of the sampled rows, refreshed by (auto)ANALYZE); a lexeme not
        among them counts as rare. Every matched row is read and ranked, so each common lexeme costs
        thousands of rows: on the bench database, dropping lexemes above 5 % halves the OR rows of the
        200 vault sentences (median 2,553 -> 1,336, p95 5,276 -> 3,166). ``ts_rank`` weighs every lexeme
        alike (no IDF), so common ones mostly add noise to the fill's order.
        """
        frequencies = self._frequencies(conn)
        ordered = sorted(lexemes, key=lambda lexeme: (frequencies.get(lexeme, 0.0), lexeme))
        rare = [lexeme for lexeme in ordered if frequencies.get(lexeme, 0.0) <= OR_MAX_LEXEME_FREQUENCY]
        return (rare or ordered[:1])[:OR_MAX_LEXEMES]

    def _frequencies(self, conn: psycopg.Connection[Any]) -> dict[str, float]:
        loaded_at, frequencies = self._lexeme_frequencies
        if time.monotonic() - loaded_at < LEXEME_STATISTICS_TTL_SECONDS:
            return frequencies
        rows = conn.execute(
            "SELECT u.lexeme, u.frequency FROM pg_stats AS s,"
            " unnest(s.most_common_elems::text::text[], s.most_common_elem_freqs) AS u(lexeme, frequency)"
            " WHERE s.schemaname = current_schema() AND s.tablename = %s AND s.attname = 'search_document'"
            " AND u.lexeme IS NOT NULL",
            (self.settings.chunks_table,),
        ).fetchall()
        frequencies = {str(lexeme): float(frequency) for lexeme, frequency in rows}
        self._lexeme_frequencies = (time.monotonic(), frequencies)
        return frequencies

    def trigram_candidates(
        self, conn: psycopg.Connection[Any], where: ChunkFilter, query: str, limit: int
    ) -> list[Candidate]:
        """Up to ``limit`` trigram matches (``score`` = similarity in [0, 1], 1.0 for an exact token hit).

        Rows qualify when they contain an identifier-like token of the query verbatim (``PROJ-1234``,
        ``2.36-9+deb12u4``) or, for a query of at most ``trigram_max_query_chars``, the whole query as a
        case-insensitive substring; both are ``ILIKE`` served by the trigram GIN index. Qualified rows are
        ordered by the number of tokens found, then by ``word_similarity(query, text)``. The fuzzy
        ``<%`` operator is not used as a filter: on 10k chunks of the docs vault it cost 0.3-0.9 s per
        query even at threshold 0.9 (measured), against 15 ms for ``ILIKE``.
        """
        tokens = identifier_tokens(query)
        whole = len(query.strip()) >= 3 and len(query) <= self.trigram_max_query_chars
        if not tokens and not whole:
            return []
        params: dict[str, Any] = {
            "query": query,
            "whole": _like_pattern(query.strip()),
            "patterns": [_like_pattern(token) for token in tokens],
            "limit": limit,
        }
        condition = self._filter_sql(where, params)
        arms: list[sql.Composable] = []
        if whole:
            arms.append(sql.SQL("text ILIKE %(whole)s"))
        if tokens:
            arms.append(sql.SQL("text ILIKE ANY(%(patterns)s::text[])"))
        statement = sql.SQL(
            "SELECT * FROM ("
            " SELECT {columns}, word_similarity(%(query)s, text) AS similarity,"
            " (SELECT count(*) FROM unnest(%(patterns)s::text[]) AS p(pattern) WHERE text ILIKE p.pattern) AS hits"
            " FROM {table} WHERE {condition} AND ({arms})) AS matched"
            " ORDER BY hits DESC, similarity DESC, node_key, chunk_order LIMIT %(limit)s"
        ).format(
            columns=_CHUNK_COLUMNS, table=self.table, condition=condition, arms=sql.SQL(" OR ").join(arms)
        )
        with conn.cursor(row_factory=dict_row) as cursor:
            records = cursor.execute(statement, params).fetchall()
        candidates = []
        for rank, record in enumerate(records, start=1):
            similarity = float(record.pop("similarity"))
            hits = int(record.pop("hits"))
            candidates.append(
                Candidate(chunk=StoredChunk(**record), score=1.0 if hits else similarity, rank=rank)
            )
        return candidates
