"""The three retrieval rankings over the chunks table: `ChunkRankings`, the base of
`common.storage.chunks.store.ChunkStore`, with the filter and candidate types.

Filters run inside each ranking so a small namespace of a large table still fills its candidates; why each
ranking is built as it is, with the measurements: docs/decisions/0020-chunk-rankings.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext
from typing import Any

import numpy as np
import psycopg
from psycopg import sql
from psycopg.pq import TransactionStatus
from psycopg.types.json import Jsonb

from common.kernel.config import Settings
from common.storage.chunks.lexical_scoring import CANDIDATE_BUDGET
from common.storage.chunks.lexical_scoring import K1
from common.storage.chunks.lexical_scoring import NAMESPACE_TOTALS
from common.storage.chunks.lexical_scoring import B
from common.storage.chunks.lexical_scoring import LexemeStatistics
from common.storage.chunks.lexical_scoring import plan_bm25
from common.storage.chunks.query_terms import OPENING_QUOTES
from common.storage.chunks.query_terms import identifier_tokens
from common.storage.chunks.query_terms import like_pattern
from common.storage.chunks.query_terms import tsquery_literal
from common.storage.chunks.rows import CHUNK_COLUMNS
from common.storage.chunks.rows import RANKED_COLUMNS
from common.storage.chunks.rows import Candidate
from common.storage.chunks.rows import ChunkFilter
from common.storage.chunks.rows import StoredChunk
from common.storage.chunks.tenant_vector_indexes import OWN_INDEX
from common.storage.chunks.tenant_vector_indexes import TenantIndexRegistry
from common.storage.chunks.tenant_vector_indexes import tenant_index_expression
from common.storage.memories.liveness import live_memory_chunk
from common.storage.named_queries import Queries


class ChunkRankings:
    """The rankings of the chunks table; stateless apart from the table's names and a cache of lexeme
    statistics; safe to share."""

    candidate_budget = CANDIDATE_BUDGET
    """The most chunks one full-text ranking scores (`common.storage.chunks.lexical_scoring`)."""

    custom_plans = True
    """Plan the full-text and trigram statements for their values on every call (``prepare=False``); False
    lets psycopg prepare them after five calls, and PostgreSQL may then use a generic plan (the A/B of
    bench/RESULTS.md (git history))."""

    def __init__(self, settings: Settings, *, trigram_max_query_chars: int = 1000) -> None:
        self.settings = settings
        self.table = sql.Identifier(settings.chunks_table)
        self.observations = sql.Identifier(settings.observations_table)
        self.queries = Queries.for_settings("chunks.sql", settings)
        self.text_search_config = settings.text_search_config
        self.trigram_max_query_chars = trigram_max_query_chars
        self.tenant_indexes = TenantIndexRegistry(settings)
        self._tenant_vector = tenant_index_expression(settings.embedding_dim)

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
        if where.participants:
            conditions.append(
                sql.SQL(
                    "node_key IN (SELECT 'episode:' || o.observation_id FROM {observations} o"
                    " WHERE o.namespace = %(namespace)s AND (o.actor ->> 'id' = ANY(%(participants)s)"
                    " OR o.subject ->> 'id' = ANY(%(participants)s)))"
                ).format(observations=self.observations)
            )
            params["participants"] = list(where.participants)
        if not where.visibility.unrestricted:
            conditions.append(where.visibility.jsonb_predicate(sql.SQL("(meta -> 'scopes')")))
            params.update(where.visibility.params)
        conditions.append(live_memory_chunk(self.table))  # no hidden or expired memory, for any caller
        return sql.SQL(" AND ").join(conditions)

    @property
    def _prepare(self) -> bool | None:
        return False if self.custom_plans else None

    def _candidates(
        self,
        conn: psycopg.Connection[Any],
        statement: sql.Composed,
        params: dict[str, Any],
        *,
        prepare: bool | None = None,
    ) -> list[Candidate]:
        """Runs a ranking statement, whose rows are `RANKED_COLUMNS` and the score, best first;
        ``prepare=False`` plans it for its values every time (module doc)."""
        records = conn.execute(statement, params, prepare=prepare).fetchall()
        return [
            Candidate(
                chunk_id=int(chunk_id),
                node_key=str(node_key),
                chunk_order=int(order),
                score=float(score),
                rank=rank,
            )
            for rank, (chunk_id, node_key, order, score) in enumerate(records, start=1)
        ]

    def ranked_chunks(
        self, conn: psycopg.Connection[Any], where: ChunkFilter, chunk_ids: Sequence[int]
    ) -> dict[int, StoredChunk]:
        """The rows of ``chunk_ids`` (`Candidate.chunk_id`) that still pass ``where``, by id: what a ranking
        returned, read once fusion has chosen among the candidates (one statement, primary key lookups).

        A candidate deleted, or changed so that ``where`` no longer keeps it (its scopes, a memory hidden
        or expired), since its ranking ran is absent from the result: the filter is applied again here,
        so this never returns a row that the ranking would not have returned to the same caller.
        """
        if not chunk_ids:
            return {}
        params: dict[str, Any] = {"ids": list(dict.fromkeys(chunk_ids))}
        condition = self._filter_sql(where, params)
        statement = sql.SQL(
            "SELECT id, {columns} FROM {table} WHERE id = ANY(%(ids)s) AND {condition}"
        ).format(columns=CHUNK_COLUMNS, table=self.table, condition=condition)
        rows = conn.execute(statement, params).fetchall()
        return {int(row[0]): StoredChunk(*row[1:]) for row in rows}

    def vector_candidates(
        self, conn: psycopg.Connection[Any], where: ChunkFilter, embedding: np.ndarray, limit: int
    ) -> list[Candidate]:
        """Up to ``limit`` chunks nearest to ``embedding`` by cosine distance (``score`` = distance, ascending).

        Two steps in one statement: the nearest row ids with their distances (only ``id`` and
        ``embedding`` are read, so for one namespace among many the planner can take them from the
        covering index of migration 0012 in an index-only scan, exactly, instead of fetching every heap
        row and detoasting its 2 KB embedding; for a namespace that is most of the table it takes the
        HNSW index), then the keys of those ids by primary key.

        A namespace with a tenant index (an HNSW index partial to it, `common.storage.chunks.tenant_vector_indexes`)
        is ranked by that index: the statement orders by the expression only that index holds
        (`tenant_index_expression`, the same distances) and runs in a transaction with ``enable_sort`` off
        (a registered namespace that holds most of the table: the same on the table's own index), because
        the planner's cost model prefers the exact sort of a few thousand rows (it does not count the
        detoasting of each vector: 19 ms against 2.5 ms for 5k rows, measured). All vector statements
        run with custom plans (``prepare=False``): the planner sees the literal namespace, which a
        partial index's predicate needs, and judges its size.

        When the HNSW scan comes back with fewer than ``limit`` rows (the filters keep few of the
        neighbours it visits: a small namespace or a selective filter in a large shared table, past
        ``hnsw.max_scan_tuples`` even with the iterative scan), the same statement runs exactly: its
        ``ORDER BY`` on ``(embedding <=> q) + 0`` is an expression no index answers, so PostgreSQL sorts
        the rows the filters keep. A namespace that has fewer matching rows than ``limit`` pays this
        second statement; the result is then every matching row, which is exact.
        """
        params: dict[str, Any] = {"embedding": np.asarray(embedding, dtype=np.float32), "limit": limit}
        condition = self._filter_sql(where, params)
        index = self.tenant_indexes.index_of(conn, where.namespace)
        if index is not None:
            vector = self._tenant_vector if index == OWN_INDEX else None
            tenant = self._nearest_statement(condition, exact=False, vector=vector)
            found = self._tenant_index_candidates(conn, tenant, params)
        else:
            approximate = self._nearest_statement(condition, exact=False)
            found = self._candidates(conn, approximate, params, prepare=False)
        if len(found) >= limit:
            return found
        return self._candidates(conn, self._nearest_statement(condition, exact=True), params, prepare=False)

    def _tenant_index_candidates(
        self, conn: psycopg.Connection[Any], statement: sql.Composed, params: dict[str, Any]
    ) -> list[Candidate]:
        """``statement`` with ``enable_sort`` off, the setting never outliving this call.

        On an idle autocommit connection (every read connection of a Search): ``SET``, the statement
        and ``RESET`` in one pipeline, one round trip and no ``BEGIN``/``COMMIT``. The statements of a
        pipeline up to its next sync run in one implicit transaction (PostgreSQL, "Pipeline mode" of
        libpq), so a failing statement rolls the ``SET`` back with it. The pipelined transaction block
        this replaces cost 5.9-6.4 ms against 4.6 ms for the same statement at 10k chunks
        (bench/RESULTS.md (git history)). Inside a caller's transaction: a savepoint, as before.
        """
        idle_autocommit = conn.autocommit and conn.info.transaction_status == TransactionStatus.IDLE
        with conn.pipeline(), nullcontext() if idle_autocommit else conn.transaction():
            conn.execute("SET enable_sort = off")
            found = self._candidates(conn, statement, params, prepare=False)
            conn.execute("RESET enable_sort")
        return found

    def _nearest_statement(
        self, condition: sql.Composable, *, exact: bool, vector: sql.Composable | None = None
    ) -> sql.Composed:
        """The ids-first nearest statement; ``vector``: the indexed expression to order by (None: the
        column; a tenant index's `tenant_index_expression`); ``exact``: an ORDER BY no index answers."""
        distance = sql.SQL("{} <=> %(embedding)s").format(vector or sql.SQL("embedding"))
        order = sql.SQL("({}) + 0").format(distance) if exact else distance
        return sql.SQL(
            "WITH nearest AS MATERIALIZED ("
            " SELECT id, {distance} AS score FROM {table}"
            " WHERE {condition} AND embedding IS NOT NULL"
            " ORDER BY {order} LIMIT %(limit)s)"
            " SELECT id, chunk.node_key, chunk.chunk_order, nearest.score FROM nearest JOIN {table} AS chunk USING (id)"
            " ORDER BY nearest.score, chunk.node_key, chunk.chunk_order"
        ).format(table=self.table, condition=condition, order=order, distance=distance)

    def text_candidates(
        self, conn: psycopg.Connection[Any], where: ChunkFilter, query: str, limit: int
    ) -> list[Candidate]:
        """Up to ``limit`` full-text matches ranked by Okapi BM25 (``score``, descending; module doc and
        `common.storage.chunks.lexical_scoring`): one statement for the namespace's statistics of the query's
        lexemes, one that scores at most `candidate_budget` candidate chunks. Ties: newer chunk first.

        Each returned candidate tells whether its ``heading`` (the heading path of its section) holds
        every query lexeme the namespace has (`Candidate.heading_match`): the query names its section.
        Computed for the returned rows only, on the heading alone (a few words each)."""
        plan = plan_bm25(self.lexeme_statistics(conn, where.namespace, query), self.candidate_budget)
        if plan is None:
            return []
        operator = " & " if plan.every_lexeme else " | "
        params: dict[str, Any] = {
            "fetch": operator.join(tsquery_literal(lexeme) for lexeme in plan.fetched),
            "lexemes": list(plan.weights),
            "weights": list(plan.weights.values()),
            "average_length": plan.average_length,
            "k1": K1,
            "b": B,
            "budget": self.candidate_budget,
            "limit": limit,
            "config": self.text_search_config,
            "every": " & ".join(tsquery_literal(lexeme) for lexeme in plan.weights),
        }
        condition = self._filter_sql(where, params)
        # Candidates (`common.storage.chunks.lexical_scoring`): every chunk holding a fetched lexeme, which the
        # plan bounds by the lexemes' document frequencies (at most the budget), or, when every lexeme is
        # common, the first ``candidate_budget`` chunks holding them all. The first has no LIMIT: with one,
        # the planner, which estimates the matches of a namespace from table-wide lexeme statistics,
        # took a sequential scan that it expected to stop early, and read the whole namespace when the
        # matches were fewer than it thought (bench/RESULTS.md (git history), p95 38 -> 15 ms at 10k chunks
        # while another namespace was loading).
        candidates = sql.SQL(
            "SELECT * FROM {table} WHERE {condition} AND search_document @@ %(fetch)s::tsquery"
        ).format(table=self.table, condition=condition)
        if plan.every_lexeme:
            candidates = sql.SQL("{} LIMIT %(budget)s").format(candidates)
        statement = sql.SQL(
            "SELECT {columns}, score,"
            " to_tsvector(%(config)s::regconfig, heading) @@ %(every)s::tsquery AS heading_match FROM ("
            " SELECT c.*, (SELECT coalesce(sum(w.weight * t.frequency * (%(k1)s + 1) / (t.frequency + %(k1)s"
            " * (1 - %(b)s + %(b)s * length(c.search_document) / %(average_length)s))), 0)"
            " FROM (SELECT lexeme, coalesce(array_length(positions, 1), 1)::float8 AS frequency"
            " FROM unnest(ts_filter(setweight(c.search_document, 'A', %(lexemes)s::text[]), '{{a}}'))) AS t"
            " JOIN unnest(%(lexemes)s::text[], %(weights)s::float8[]) AS w(lexeme, weight) USING (lexeme)"
            " ) AS score"
            " FROM ({candidates}) AS c"
            ") AS scored ORDER BY score DESC, created_at DESC, id DESC LIMIT %(limit)s"
        ).format(columns=RANKED_COLUMNS, candidates=candidates)
        records = conn.execute(statement, params, prepare=self._prepare).fetchall()
        return [
            Candidate(int(chunk_id), str(node_key), int(order), float(score), rank, bool(heading_match))
            for rank, (chunk_id, node_key, order, score, heading_match) in enumerate(records, start=1)
        ]

    def lexeme_statistics(
        self, conn: psycopg.Connection[Any], namespace: str, query: str
    ) -> LexemeStatistics:
        """The namespace's BM25 statistics of the lexemes of ``query`` under the configured text search
        configuration (`LexemeStatistics`; one statement over the trigger-kept statistics tables)."""
        rows = conn.execute(
            self.queries["lexeme_statistics"],
            {"config": self.text_search_config, "query": query, "namespace": namespace},
        ).fetchall()
        frequencies = {str(lexeme): int(documents) for lexeme, documents, _ in rows}
        totals = next((row for row in rows if row[0] == NAMESPACE_TOTALS), (NAMESPACE_TOTALS, 0, 0))
        frequencies.pop(NAMESPACE_TOTALS, None)
        return LexemeStatistics(
            chunks=int(totals[1]), total_length=int(totals[2]), document_frequencies=frequencies
        )

    def similar_pairs(
        self,
        conn: psycopg.Connection[Any],
        namespace: str,
        sources: Sequence[int],
        targets: Sequence[int],
        threshold: float,
    ) -> list[tuple[tuple[str, int], tuple[str, int], float]]:
        """(source, target, cosine similarity), the chunks as ``(node_key, chunk_order)``, for every source
        and target chunk of ``namespace``, given by their row ids (`Candidate.chunk_id`), whose embeddings
        are at least ``threshold`` similar, never a chunk with itself, sorted by source then target
        (codepoint order of the keys); chunks without an embedding, and ids not in ``namespace``, are left
        out.

        One statement (``similar_chunk_pairs``) computes the cosines in PostgreSQL from one unit-length
        copy of each embedding and returns only the pairs at or above ``threshold``. Reading the ~70
        vectors of a Search and comparing them here cost 1.1 ms of this process's CPU per call, the
        statement 0.3 ms, with the same pairs (replayed Searches, bench/RESULTS.md (git history)). A zero
        vector has similarity 0 with every chunk.
        """
        if not sources or not targets:
            return []
        rows = conn.execute(
            self.queries["similar_chunk_pairs"],
            {
                "namespace": namespace,
                "sources": list(dict.fromkeys(sources)),
                "targets": list(dict.fromkeys(targets)),
                "threshold": threshold,
            },
        ).fetchall()
        return [
            ((source_key, int(source_order)), (target_key, int(target_order)), float(similarity))
            for source_key, source_order, target_key, target_order, similarity in rows
        ]

    def trigram_candidates(
        self,
        conn: psycopg.Connection[Any],
        where: ChunkFilter,
        query: str,
        limit: int,
        *,
        whole_query_chars: int | None = None,
        whole_query_min_words: int = 1,
    ) -> list[Candidate]:
        """Up to ``limit`` chunks containing an identifier-like token of the query or the whole query
        verbatim (``score`` 1.0 for both).

        Rows qualify when they contain an `identifier_tokens` token (``PROJ-1234``, ``2.36-9+deb12u4``)
        as a case-insensitive substring (``identifier_text ILIKE``, its trigram GIN index; the same rows
        as ``text ILIKE``, module doc) that at most ``limit`` chunks of the
        namespace hold (a more common token cannot select among them and takes no part), or, only when
        ``whole_query_chars`` (default: the store's ``trigram_max_query_chars``) is positive, the query is
        at most that long and has at least ``whole_query_min_words`` words, the whole query as a
        case-insensitive substring. The whole query is looked up through the full-text index by the lexemes
        of its inner words (all but the first and the last: a sentence cut out of a text may tokenise
        differently at its ends, ``bash_completion.d`` against ``bash_completion.``;
        as a phrase only 165 of 200 vault sentences were found, with the inner words all 200) and then
        checked verbatim with ``strpos(lower(text), lower(query))``, which no index serves; a query
        whose inner words hold no lexeme (stop words only) is looked up by the lexemes of all its words,
        the first and the last included (so it is missed when cut inside one of those), and one without
        any lexeme is not matched whole (no index covers a whole text's trigrams since migration 0028; a
        one- or two-word query has no inner words and takes this path, which the presets' minimum of 8
        words keeps from Search). With custom plans the planner folds that
        choice away. A query
        without such a token (and no whole-query match configured) does not run the ranking. Order: the
        number of tokens found, then the similarity (1.0 for a verbatim whole-query match, otherwise
        ``word_similarity(query, text)``), then the newer chunk. The fuzzy
        ``<%`` operator is not used as a filter: on 10k chunks of the docs vault it cost 0.3-0.9 s per
        query even at threshold 0.9 (measured), against 15 ms for ``ILIKE``.
        """
        tokens = identifier_tokens(query)
        whole_chars = self.trigram_max_query_chars if whole_query_chars is None else whole_query_chars
        whole = 3 <= len(query.strip()) and len(query) <= whole_chars
        whole = whole and len(query.split()) >= whole_query_min_words
        if not tokens and not whole:
            return []
        params: dict[str, Any] = {
            "query": query,
            "config": self.text_search_config,
            "whole": query.strip(),
            "inner": " ".join(query.split()[1:-1]),
            "patterns": [like_pattern(token) for token in tokens],
            "quotes": list(OPENING_QUOTES),
            "limit": limit,
        }
        condition = self._filter_sql(where, params)
        # Each token is looked up with a LIMIT of one more chunk than the ranking returns: a token found in
        # more chunks than that (`6.0`, `1.0.0` in a manual) cannot select among them, so it takes no part
        # (neither as a match nor in ``hits``), and the bitmap heap scan stops rechecking at the LIMIT
        # instead of reading every chunk that holds its trigrams (about 4,000 for `6.0`: pg_trgm indexes
        # alphanumeric runs only). Measured on the docs vault, 200 chunk texts (the benchmark history in git):
        # the ranking's mean 24.0 -> 6.8 ms, p95 66.9 -> 24.8, slowest 237 -> 40; Search quality unchanged
        # on 300 Debian package-version probes and on the FAQ and vault-sentence probes.
        matched: list[sql.Composable] = []
        if tokens:
            matched.append(
                sql.SQL("SELECT id FROM token_rows WHERE token IN (SELECT token FROM rare_tokens)")
            )
        if whole:
            matched.append(
                sql.SQL(
                    "SELECT id FROM {table} WHERE {condition} AND ("
                    "(numnode(plainto_tsquery(%(config)s::regconfig, %(inner)s)) > 0"
                    " AND search_document @@ plainto_tsquery(%(config)s::regconfig, %(inner)s)"
                    " AND strpos(lower(text), lower(%(whole)s)) > 0"
                    " AND substr(text, strpos(lower(text), lower(%(whole)s)) - 1, 1) <> ALL(%(quotes)s::text[]))"
                    " OR (numnode(plainto_tsquery(%(config)s::regconfig, %(inner)s)) = 0"
                    " AND numnode(plainto_tsquery(%(config)s::regconfig, %(whole)s)) > 0"
                    " AND search_document @@ plainto_tsquery(%(config)s::regconfig, %(whole)s)"
                    " AND strpos(lower(text), lower(%(whole)s)) > 0"
                    " AND substr(text, strpos(lower(text), lower(%(whole)s)) - 1, 1) <> ALL(%(quotes)s::text[])))"
                ).format(table=self.table, condition=condition)
            )
        # A chunk holding the whole query verbatim scores 1.0 without word_similarity, which is 1 for it
        # unless the match starts or ends inside a word, and which costs about 0.12 ms a row: 84 ms for the
        # 680 copies of one vault sentence at 100k chunks (bench/RESULTS.md (git history)).
        similarity = sql.SQL("word_similarity(%(query)s, text)")
        if whole:
            similarity = sql.SQL(
                "CASE WHEN strpos(lower(text), lower(%(whole)s)) > 0 THEN 1.0::real ELSE {} END"
            ).format(similarity)
        # The token part (the per-token lookups and the count of tokens each row holds) only when the query
        # has identifier tokens: without them every ``hits`` is 0, and planning the empty lookups cost more
        # than running the whole-query match (0.77 against 0.26 ms p50 on the docs vault, where 99 of 100
        # benchmark queries have no such token; bench/RESULTS.md (git history)).
        tokens_part, hits = sql.SQL(""), sql.SQL("0")
        if tokens:
            tokens_part = sql.SQL(
                "WITH token_rows AS MATERIALIZED ("
                " SELECT t.number AS token, m.id FROM unnest(%(patterns)s::text[]) WITH ORDINALITY AS t(pattern, number)"
                " CROSS JOIN LATERAL (SELECT id FROM {table} WHERE {condition} AND identifier_text ILIKE t.pattern"
                " LIMIT %(limit)s + 1) AS m"
                "), rare_tokens AS MATERIALIZED ("
                " SELECT token FROM token_rows GROUP BY token HAVING count(*) <= %(limit)s) "
            ).format(table=self.table, condition=condition)
            hits = sql.SQL(
                "(SELECT count(*) FROM unnest(%(patterns)s::text[]) WITH ORDINALITY AS p(pattern, number)"
                " WHERE p.number IN (SELECT token FROM rare_tokens) AND identifier_text ILIKE p.pattern)"
            )
        statement = sql.SQL(
            "{tokens_part}"
            "SELECT id, node_key, chunk_order, CASE WHEN hits > 0 THEN 1.0 ELSE similarity END FROM ("
            " SELECT {columns}, created_at, {similarity} AS similarity, {hits} AS hits"
            " FROM {table} WHERE id IN ({matched})) AS matched"
            " ORDER BY hits DESC, similarity DESC, created_at DESC, id DESC LIMIT %(limit)s"
        ).format(
            tokens_part=tokens_part,
            columns=RANKED_COLUMNS,
            similarity=similarity,
            hits=hits,
            table=self.table,
            matched=sql.SQL(" UNION ").join(matched),
        )
        return self._candidates(conn, statement, params, prepare=self._prepare)
