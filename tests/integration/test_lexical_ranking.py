"""The full-text ranking's BM25 on the real database: the trigger-kept lexeme statistics follow every
write and delete, rare terms outweigh common ones, ties go to the newer chunk, and the trigram ranking
runs only for identifier-like tokens when whole-query matching is off, looked up in ``identifier_text``
(migration 0028), which finds exactly the rows ``text`` would."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck
from hypothesis import assume
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from psycopg import sql

from common.kernel.config import Settings
from common.storage.chunks.lexical_scoring import K1
from common.storage.chunks.lexical_scoring import B
from common.storage.chunks.lexical_scoring import inverse_document_frequency
from common.storage.chunks.query_terms import identifier_tokens
from common.storage.chunks.query_terms import like_pattern
from common.storage.chunks.rows import ChunkFilter
from common.storage.chunks.store import ChunkStore
from common.storage.chunks.store import ChunkWrite
from common.storage.chunks.store import NodeRef
from common.storage.database import Database

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def store(settings: Settings) -> ChunkStore:
    return ChunkStore(settings)


@pytest.fixture
def written(database: Database, store: ChunkStore, namespace: str) -> Iterator[list[str]]:
    keys: list[str] = []
    yield keys
    with database.connection() as conn:
        for key in keys:
            store.delete_chunks(conn, namespace, key)


def _put(
    database: Database, store: ChunkStore, namespace: str, keys: list[str], key: str, *texts: str
) -> None:
    keys.append(key)
    with database.connection() as conn:
        store.replace_chunks(
            conn,
            NodeRef(namespace, key),
            [
                ChunkWrite(chunk_order=order, heading="", text=text, embedding=None)
                for order, text in enumerate(texts)
            ],
        )


def _counted(database: Database, settings: Settings, namespace: str, query: str) -> dict[str, int]:
    """What the statistics must say, counted from the chunks table itself."""
    with database.connection() as conn:
        rows = conn.execute(
            sql.SQL(
                "SELECT q.lexeme, (SELECT count(*) FROM {table} WHERE namespace = %(ns)s"
                " AND q.lexeme = ANY(tsvector_to_array(search_document)))"
                " FROM (SELECT DISTINCT lexeme FROM unnest(to_tsvector(%(config)s::regconfig, %(query)s))) AS q"
            ).format(table=sql.Identifier(settings.chunks_table)),
            {"ns": namespace, "config": settings.text_search_config, "query": query},
        ).fetchall()
        totals = conn.execute(
            sql.SQL(
                "SELECT count(*), coalesce(sum(length(search_document)), 0) FROM {table} WHERE namespace = %s"
            ).format(table=sql.Identifier(settings.chunks_table)),
            (namespace,),
        ).fetchone()
    assert totals is not None
    return {str(lexeme): int(count) for lexeme, count in rows} | {
        "<chunks>": int(totals[0]),
        "<length>": int(totals[1]),
    }


def _statistics(database: Database, store: ChunkStore, namespace: str, query: str) -> dict[str, int]:
    with database.connection() as conn:
        found = store.lexeme_statistics(conn, namespace, query)
    return dict(found.document_frequencies) | {"<chunks>": found.chunks, "<length>": found.total_length}


def test_statistics_follow_inserts_updates_and_deletes(
    database: Database, settings: Settings, store: ChunkStore, namespace: str, written: list[str]
) -> None:
    query = "upgrade kernel borscht recipe packages"
    assert _statistics(database, store, namespace, query)["<chunks>"] == 0
    for number in range(30):  # enough statements that some of them fold the deltas (1 in 16)
        _put(database, store, namespace, written, f"doc:{number}", f"upgrade the kernel {number}", "packages")
    assert _statistics(database, store, namespace, query) == _counted(database, settings, namespace, query)
    _put(database, store, namespace, written, "doc:3", "a borscht recipe")  # text changed, chunk 1 deleted
    _put(database, store, namespace, written, "doc:4", "upgrade the kernel 4")  # only chunk 1 deleted
    with database.connection() as conn:
        store.delete_chunks(conn, namespace, "doc:5")
    expected = _counted(database, settings, namespace, query)
    assert expected["borscht"] == 1 and expected["packag"] == 27 and expected["<chunks>"] == 56
    assert _statistics(database, store, namespace, query) == expected
    # a rolled back write leaves the statistics as they were
    with database.connection() as conn, pytest.raises(RuntimeError), conn.transaction():
        store.delete_chunks(conn, namespace, "doc:6")
        raise RuntimeError("roll back")
    assert _statistics(database, store, namespace, query) == expected


def test_rare_terms_outweigh_common_ones_and_ties_go_to_the_newer_chunk(
    database: Database, store: ChunkStore, namespace: str, written: list[str]
) -> None:
    for number in range(20):
        _put(
            database,
            store,
            namespace,
            written,
            f"doc:common-{number}",
            f"debian package manager notes {number}",
        )
    _put(database, store, namespace, written, "doc:rare", "zstd compression in the archive")
    _put(database, store, namespace, written, "doc:older", "debian package debian package debian package")
    _put(database, store, namespace, written, "doc:newer", "debian package debian package debian package")
    with database.connection() as conn:
        rare = store.text_candidates(conn, ChunkFilter(namespace), "debian package zstd", 10)
        tie = store.text_candidates(conn, ChunkFilter(namespace), "debian package", 30)
    # ts_rank put the three-fold "debian package" chunks first; BM25 puts the only chunk with zstd first.
    assert rare[0].node_key == "doc:rare"
    assert [c.rank for c in rare] == list(range(1, len(rare) + 1))
    assert all(a.score >= b.score for a, b in itertools.pairwise(rare))
    repeated = [c for c in tie if c.node_key in {"doc:older", "doc:newer"}]
    assert [c.node_key for c in repeated] == ["doc:newer", "doc:older"]
    assert repeated[0].score == repeated[1].score and tie[0].node_key == "doc:newer"


def test_each_score_is_the_bm25_of_the_module_doc_with_every_query_lexeme_weighted_by_its_idf(
    database: Database, settings: Settings, store: ChunkStore, namespace: str, written: list[str]
) -> None:
    """Each candidate's score equals BM25 (`common.storage.chunks.lexical_scoring`) computed here from the
    namespace's statistics and the chunk's own tsvector: each query lexeme it holds counts with that
    lexeme's idf (not another lexeme's), its term frequency and the chunk's length; lexemes of the chunk
    outside the query and query lexemes outside the namespace add nothing."""
    _put(database, store, namespace, written, "doc:a", "kernel kernel kernel upgrade of the archive mirror")
    _put(database, store, namespace, written, "doc:b", "upgrade upgrade notes", "kernel panic after upgrade")
    _put(database, store, namespace, written, "doc:c", "zstd compression of the kernel image, zstd again")
    for number in range(6):
        _put(database, store, namespace, written, f"doc:filler-{number}", f"upgrade filler {number} archive")
    query = "kernel upgrade zstd archive borscht"
    with database.connection() as conn:
        statistics = store.lexeme_statistics(conn, namespace, query)
        found = store.text_candidates(conn, ChunkFilter(namespace), query, 50)
        documents = {
            int(chunk_id): (int(length), {str(lexeme): int(frequency) for lexeme, frequency in lexemes})
            for chunk_id, length, lexemes in conn.execute(
                sql.SQL(
                    "SELECT id, length(search_document), (SELECT array_agg(ARRAY[lexeme,"
                    " coalesce(array_length(positions, 1), 1)::text]) FROM unnest(search_document))"
                    " FROM {table} WHERE namespace = %s"
                ).format(table=sql.Identifier(settings.chunks_table)),
                (namespace,),
            ).fetchall()
        }
    frequencies = statistics.document_frequencies
    assert frequencies["borscht"] == 0 and frequencies["zstd"] == 1 and frequencies["kernel"] == 3
    idf = {
        lexeme: inverse_document_frequency(df, statistics.chunks) for lexeme, df in frequencies.items() if df
    }
    assert len(set(idf.values())) == len(idf)  # a lexeme weighted with another one's idf would show
    assert len(found) == sum(1 for _, lexemes in documents.values() if set(lexemes) & set(idf))
    for candidate in found:
        length, lexemes = documents[candidate.chunk_id]
        norm = K1 * (1 - B + B * length / statistics.average_length)
        expected = sum(
            weight * lexemes[lexeme] * (K1 + 1) / (lexemes[lexeme] + norm)
            for lexeme, weight in idf.items()
            if lexeme in lexemes
        )
        assert candidate.score == pytest.approx(expected, rel=1e-12), candidate
    assert found[0].node_key == "doc:c"  # zstd twice: the rarest lexeme


def test_candidates_hold_a_rare_lexeme_and_respect_the_filter(
    database: Database, store: ChunkStore, namespace: str, written: list[str]
) -> None:
    _put(database, store, namespace, written, "doc:a", "upgrade bookworm")
    _put(database, store, namespace, written, "doc:b", "upgrade")
    with database.connection() as conn:
        found = store.text_candidates(conn, ChunkFilter(namespace), "upgrade bookworm", 10)
        only_b = store.text_candidates(
            conn, ChunkFilter(namespace, node_keys=("doc:b",)), "upgrade bookworm", 10
        )
        nothing = store.text_candidates(conn, ChunkFilter(namespace), "the of and", 10)
    assert [c.node_key for c in found] == ["doc:a", "doc:b"]
    assert [c.node_key for c in only_b] == ["doc:b"]
    assert nothing == []


def test_candidates_are_bounded_by_the_budget_with_and_without_a_common_lexeme_only(
    settings: Settings, database: Database, namespace: str, written: list[str]
) -> None:
    store = ChunkStore(settings)
    store.candidate_budget = 5
    for number in range(8):
        _put(database, store, namespace, written, f"doc:alpha-{number}", f"alpha filler{number}")
    for number in range(3):
        _put(database, store, namespace, written, f"doc:zeta-{number}", f"alpha zeta filler{number}")
    for number in range(2):
        _put(database, store, namespace, written, f"doc:gamma-{number}", f"gamma filler{number}")
    with database.connection() as conn:
        # zeta (3 chunks) fits the budget, alpha (11) does not: only the zeta chunks are candidates
        rare = store.text_candidates(conn, ChunkFilter(namespace), "zeta alpha", 50)
        # gamma (2) and zeta (3) fill the budget exactly: every chunk holding either
        both = store.text_candidates(conn, ChunkFilter(namespace), "gamma zeta alpha", 50)
        # alpha alone is over the budget: the first 5 chunks holding it, no more
        common = store.text_candidates(conn, ChunkFilter(namespace), "alpha", 50)
        rows = store.ranked_chunks(conn, ChunkFilter(namespace), [c.chunk_id for c in common])
    assert sorted(c.node_key for c in rare) == [f"doc:zeta-{n}" for n in range(3)]
    assert sorted(c.node_key for c in both) == [f"doc:gamma-{n}" for n in range(2)] + [
        f"doc:zeta-{n}" for n in range(3)
    ]
    assert len(common) == 5 and all("alpha" in rows[c.chunk_id].text for c in common)


def test_a_token_found_in_more_chunks_than_the_ranking_returns_takes_no_part(
    database: Database, store: ChunkStore, namespace: str, written: list[str]
) -> None:
    for number in range(4):
        _put(database, store, namespace, written, f"doc:common-{number}", f"release v6.0 notes {number}")
    _put(database, store, namespace, written, "doc:rare", "release v6.0 fixes zz-77")
    _put(database, store, namespace, written, "doc:rare-only", "zz-77 alone")
    with database.connection() as conn:
        # v6.0 is in 5 chunks, more than the 3 asked for: only zz-77 selects, and v6.0 adds no hit
        few = store.trigram_candidates(conn, ChunkFilter(namespace), "v6.0 zz-77", 3, whole_query_chars=0)
        # asked for 10, v6.0 (5 chunks) takes part: the chunk holding both tokens comes first
        many = store.trigram_candidates(conn, ChunkFilter(namespace), "v6.0 zz-77", 10, whole_query_chars=0)
        # the common token alone: nothing
        alone = store.trigram_candidates(conn, ChunkFilter(namespace), "v6.0", 3, whole_query_chars=0)
    assert sorted(c.node_key for c in few) == ["doc:rare", "doc:rare-only"]
    assert len(many) == 6 and many[0].node_key == "doc:rare"
    assert alone == []


def test_trigram_ranking_without_whole_query_matching_needs_an_identifier(
    database: Database, store: ChunkStore, namespace: str, written: list[str]
) -> None:
    _put(database, store, namespace, written, "doc:id", "install libc6 2.36-9+deb12u4 today")
    _put(database, store, namespace, written, "doc:words", "please install today, then reboot")
    with database.connection() as conn:
        sentence = store.trigram_candidates(
            conn, ChunkFilter(namespace), "install libc6 today", 10, whole_query_chars=0
        )
        whole = store.trigram_candidates(
            conn, ChunkFilter(namespace), "install libc6 2.36", 10, whole_query_chars=0
        )
        plain = store.trigram_candidates(
            conn, ChunkFilter(namespace), "install today", 10, whole_query_chars=0
        )
    assert [(c.node_key, c.score) for c in sentence] == [("doc:id", 1.0)]  # "libc6" has a digit
    assert [(c.node_key, c.score) for c in whole] == [("doc:id", 1.0)]
    assert plain == []
    with database.connection() as conn:  # the same query with whole-query matching on (the store's 1000)
        whole_on = store.trigram_candidates(conn, ChunkFilter(namespace), "install today", 10)
        sentence_on = store.trigram_candidates(conn, ChunkFilter(namespace), "Please install today, then", 10)
    assert [c.node_key for c in whole_on] == ["doc:words"]
    assert [(c.node_key, c.score) for c in sentence_on] == [("doc:words", 1.0)]
    with database.connection() as conn:  # a preset's minimum words: a 4-word query is not a pasted sentence
        short = store.trigram_candidates(
            conn, ChunkFilter(namespace), "Please install today, then", 10, whole_query_min_words=8
        )
    assert short == []


# Text of every kind the split must get right: the whitespace it splits on, whitespace it does not split on
# (no-break and ideographic spaces, U+2028, U+001F: Python's str.split() does), digits, non-ASCII digits
# (not identifier digits), letters whose case folds, LIKE's own characters and a backslash.
_TEXT_ALPHABET = st.sampled_from(
    list(" \t\n\r\f\v\u00a0\u3000\u2028\u001f0123456789٣aZ-._:+#%\\()жЖİß") + ["v1.2", "PROJ-12"]
)


@hypothesis_settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=st.lists(_TEXT_ALPHABET, min_size=1, max_size=30).map("".join), data=st.data())
def test_identifier_text_finds_exactly_the_rows_text_finds_for_every_identifier_token(
    database: Database, settings: Settings, text: str, data: st.DataObject
) -> None:
    """Migration 0028's claim, checked on the server's own ``ILIKE``: for every identifier-like token of a
    query (here a piece cut out of the text itself, so most are found, and the same piece with a suffix),
    the chunk's ``identifier_text`` matches ``'%token%'`` exactly when its ``text`` does."""
    start = data.draw(st.integers(0, len(text) - 1))
    piece = text[start : start + data.draw(st.integers(3, 12))]
    query = piece + " " + piece + data.draw(st.sampled_from(["", "1", "x9", "Ж7"]))
    tokens = identifier_tokens(query)
    assume(tokens)
    function = sql.Identifier(f"{settings.chunks_table}_identifier_text")
    patterns = [like_pattern(token) for token in tokens]
    with database.connection() as conn:
        rows = conn.execute(
            sql.SQL(
                "SELECT p, %(text)s ILIKE p, {function}(%(text)s) ILIKE p FROM unnest(%(patterns)s::text[]) AS p"
            ).format(function=function),
            {"text": text, "patterns": patterns},
        ).fetchall()
    assert all(by_text == by_identifiers for _, by_text, by_identifiers in rows), (text, rows)


def test_a_sentence_whose_inner_words_are_stop_words_is_matched_whole_by_its_end_words(
    database: Database, store: ChunkStore, namespace: str, written: list[str]
) -> None:
    """The whole-query match looks a sentence up by its inner words' lexemes; when they are all stop
    words, by the lexemes of all its words (no index covers a whole text's trigrams since migration
    0028), and a sentence without any lexeme is not matched whole."""
    _put(
        database,
        store,
        namespace,
        written,
        "doc:quote",
        "He wrote alpha to be or not to be that is omega, then left.",
    )
    _put(database, store, namespace, written, "doc:other", "alpha and omega, to be or not")
    with database.connection() as conn:
        found = store.trigram_candidates(
            conn,
            ChunkFilter(namespace),
            "alpha to be or not to be that is omega",
            10,
            whole_query_min_words=8,
        )
        stop_words_only = store.trigram_candidates(
            conn, ChunkFilter(namespace), "to be or not to be that is", 10, whole_query_min_words=8
        )
    assert [(c.node_key, c.score) for c in found] == [("doc:quote", 1.0)]
    assert stop_words_only == []
