"""ChunkStore on the real database with the real embedder: writes, reads and the three rankings."""

from __future__ import annotations

import threading
from collections.abc import Callable
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from psycopg import sql

from common.kernel.config import Settings
from common.storage.chunks.query_terms import identifier_tokens
from common.storage.chunks.rows import ChunkFilter
from common.storage.chunks.store import ChunkStore
from common.storage.chunks.store import ChunkWrite
from common.storage.chunks.store import NodeRef
from common.storage.chunks.store import embedding_input
from common.storage.database import Database
from common.storage.schema import migrations
from common.text_models.embeddings.provider import EmbeddingProvider
from query_service.retrieval.hybrid_search import HybridSearcher
from query_service.retrieval.hybrid_search import SearchQuery

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def store(settings: Settings) -> ChunkStore:
    return ChunkStore(settings)


def _writes(
    provider: EmbeddingProvider, title: str, pieces: list[tuple[str, str]], meta: dict[str, Any] | None = None
) -> list[ChunkWrite]:
    vectors = provider.encode_passages([embedding_input(title, heading, text) for heading, text in pieces])
    return [
        ChunkWrite(chunk_order=order, heading=heading, text=text, embedding=vectors[order], meta=meta or {})
        for order, (heading, text) in enumerate(pieces)
    ]


def _store(
    database: Database,
    store: ChunkStore,
    provider: EmbeddingProvider,
    documents: list[tuple[NodeRef, list[tuple[str, str]]]],
    cleanup: list[tuple[str, str]],
) -> None:
    """Writes each node's (heading, text) pieces as its chunks, embedded by ``provider``; removed after the
    test (``cleanup``)."""
    with database.connection() as conn:
        for node, pieces in documents:
            cleanup.append((node.namespace, node.node_key))
            store.replace_chunks(conn, node, _writes(provider, node.title, pieces))


def _xmins(database: Database, settings: Settings, namespace: str) -> list[tuple[str, int, str]]:
    from psycopg import sql

    with database.connection() as conn:
        rows = conn.execute(
            sql.SQL(
                "SELECT node_key, chunk_order, xmin::text FROM {} WHERE namespace = %s ORDER BY 1, 2"
            ).format(sql.Identifier(settings.chunks_table)),
            (namespace,),
        ).fetchall()
    return [(str(a), int(b), str(c)) for a, b, c in rows]


def _ranked(database: Database, ranking: Callable[..., Any], namespace: str, *queries: str) -> list[Any]:
    """One ranking's candidates (at most 10) of each query over ``namespace``, on one connection."""
    with database.connection() as conn:
        return [ranking(conn, ChunkFilter(namespace), query, 10) for query in queries]


@pytest.fixture
def cleanup(database: Database, store: ChunkStore) -> Iterator[list[tuple[str, str]]]:
    created: list[tuple[str, str]] = []
    yield created
    with database.connection() as conn:
        for namespace, key in created:
            store.delete_chunks(conn, namespace, key)


def test_replace_reads_back_in_order_and_identical_rewrite_touches_nothing(
    database: Database,
    settings: Settings,
    store: ChunkStore,
    provider: EmbeddingProvider,
    namespace: str,
    cleanup: list[tuple[str, str]],
) -> None:
    node = NodeRef(namespace, "doc:order", "document", "Order", "docs/order.md")
    cleanup.append((namespace, node.node_key))
    pieces = [("A", "first text"), ("A / B", "second text"), ("C", "third text")]
    writes = _writes(provider, node.title, pieces, {"collection": "faq"})
    with database.connection() as conn:
        result = store.replace_chunks(conn, node, list(reversed(writes)))
    assert (result.written, result.deleted, result.chunk_count) == (3, 0, 3)
    with database.connection() as conn:
        chunks = store.list_chunks(conn, namespace, node.node_key)
    assert [(c.chunk_order, c.heading, c.text) for c in chunks] == [
        (i, h, t) for i, (h, t) in enumerate(pieces)
    ]
    assert all(c.meta == {"collection": "faq"} and c.source_path == "docs/order.md" for c in chunks)

    before = _xmins(database, settings, namespace)
    with database.connection() as conn:
        again = store.replace_chunks(conn, node, writes)
    assert (again.written, again.deleted) == (0, 0)
    assert _xmins(database, settings, namespace) == before  # no new row version

    # A changed chunk is rewritten, a shorter document loses its tail.
    changed = _writes(provider, node.title, [("A", "first text, edited")])
    with database.connection() as conn:
        shorter = store.replace_chunks(conn, node, changed)
    assert (shorter.written, shorter.deleted, shorter.chunk_count) == (1, 2, 1)

    # Without delete_beyond (PutChunks) the other chunks stay.
    extra = [ChunkWrite(5, "Z", "fifth", writes[0].embedding, {})]
    with database.connection() as conn:
        kept = store.replace_chunks(conn, node, extra, delete_beyond=False)
        orders = [c.chunk_order for c in store.list_chunks(conn, namespace, node.node_key)]
    assert kept.chunk_count == 2 and orders == [0, 5]


def test_existing_embeddings_are_keyed_by_embedding_input(
    database: Database,
    store: ChunkStore,
    provider: EmbeddingProvider,
    namespace: str,
    cleanup: list[tuple[str, str]],
) -> None:
    node = NodeRef(namespace, "doc:reuse", title="Reuse")
    cleanup.append((namespace, node.node_key))
    writes = _writes(provider, node.title, [("H", "body")])
    with database.connection() as conn:
        store.replace_chunks(conn, node, writes)
        stored = store.existing_embeddings(conn, namespace, node.node_key)
    vector = stored[embedding_input("Reuse", "H", "body")]
    assert vector is not None and writes[0].embedding is not None
    assert np.allclose(np.asarray(vector), writes[0].embedding, atol=1e-6)


@pytest.fixture
def corpus(
    database: Database,
    store: ChunkStore,
    provider: EmbeddingProvider,
    namespace: str,
    cleanup: list[tuple[str, str]],
) -> str:
    """A few documents of mixed language and type in ``namespace``."""
    documents: list[tuple[NodeRef, list[tuple[str, str]], dict[str, Any]]] = [
        (
            NodeRef(namespace, "doc:apt", "document", "APT guide"),
            [
                ("Install", "Installation of packages with apt-get install libc6 on Debian bookworm."),
                (
                    "Upgrade",
                    "Run apt full-upgrade to move to libc6 version 2.36-9+deb12u4 from 2.36-9+deb12u3.",
                ),
            ],
            {"collection": "faq"},
        ),
        (
            NodeRef(namespace, "doc:ru", "article", "Пакеты"),
            [
                ("Установка", "Установка пакетов в Debian выполняется командой apt. Версия пакета 1:2.3-4."),
                ("Ключи", "Задача PROJ-1234 описывает перенос ключей на новый сервер."),
            ],
            {"collection": "kb"},
        ),
        (
            NodeRef(namespace, "doc:other", "document", "Cooking"),
            [("Soup", "A borscht recipe with beetroot, cabbage and 100% natural ingredients here.")],
            {"collection": "faq"},
        ),
        (
            NodeRef(namespace, "doc:upgrade-notes", "document", "Notes"),
            [("Old", "The upgrade to 2.36-9+deb12u3 was tested on 1000 bookworm hosts.")],
            {},
        ),
    ]
    with database.connection() as conn:
        for node, pieces, meta in documents:
            cleanup.append((namespace, node.node_key))
            store.replace_chunks(conn, node, _writes(provider, node.title, pieces, meta))
        # A chunk without an embedding (an episode's observation text): text and trigram only.
        store.replace_chunks(
            conn,
            NodeRef(namespace, "episode:obs-1", "episode", "task.completed"),
            [ChunkWrite(0, "", "Deployment of zstd 1.5.5+dfsg-1 finished on host web-01.", None, {})],
        )
        cleanup.append((namespace, "episode:obs-1"))
    return namespace


def test_vector_ranking_is_sorted_by_distance_and_skips_chunks_without_embedding(
    database: Database, store: ChunkStore, provider: EmbeddingProvider, corpus: str
) -> None:
    with database.connection() as conn:
        found = store.vector_candidates(
            conn, ChunkFilter(corpus), provider.encode_query("how to install packages"), 50
        )
    distances = [c.score for c in found]
    assert distances == sorted(distances)
    assert [c.rank for c in found] == list(range(1, len(found) + 1))
    assert len(found) == 6  # every embedded chunk, never the episode chunk
    assert "episode:obs-1" not in {c.node_key for c in found}
    assert found[0].node_key in {"doc:apt", "doc:ru"}


def test_filters_apply_inside_every_ranking(
    database: Database, store: ChunkStore, provider: EmbeddingProvider, corpus: str
) -> None:
    query = "upgrade 2.36-9+deb12u4"
    vector = provider.encode_query(query)
    filters = {
        "meta": ChunkFilter(corpus, meta={"collection": "faq"}),
        "types": ChunkFilter(corpus, node_types=("article",)),
        "keys": ChunkFilter(corpus, node_keys=("doc:upgrade-notes",)),
    }
    allowed = {"meta": {"doc:apt", "doc:other"}, "types": {"doc:ru"}, "keys": {"doc:upgrade-notes"}}
    with database.connection() as conn:
        for name, where in filters.items():
            for ranking in (
                store.vector_candidates(conn, where, vector, 50),
                store.text_candidates(conn, where, "upgrade packages", 50),
                store.trigram_candidates(conn, where, query, 50),
            ):
                assert {c.node_key for c in ranking} <= allowed[name], name
            assert store.vector_candidates(conn, where, vector, 50), name
        assert store.vector_candidates(conn, ChunkFilter("no-such-namespace-x"), vector, 50) == []


def test_ranked_chunks_reads_the_rows_that_still_pass_the_filter(
    database: Database,
    store: ChunkStore,
    provider: EmbeddingProvider,
    namespace: str,
    cleanup: list[tuple[str, str]],
) -> None:
    """What Search reads after fusion: the candidates' rows by id, the ranking's filter applied again."""
    other = namespace + "-other"
    for ns, key, text in (
        (namespace, "doc:kept", "kept text"),
        (namespace, "doc:gone", "gone text"),
        (other, "doc:foreign", "foreign text"),
    ):
        cleanup.append((ns, key))
        with database.connection() as conn:
            store.replace_chunks(
                conn, NodeRef(ns, key, "note", "title"), _writes(provider, "title", [("", text)])
            )
    query = provider.encode_query("text")
    with database.connection() as conn:
        found = store.vector_candidates(conn, ChunkFilter(namespace), query, 50)
        [foreign] = store.vector_candidates(conn, ChunkFilter(other), query, 50)
        ids = [c.chunk_id for c in found]
        rows = store.ranked_chunks(conn, ChunkFilter(namespace), [*ids, foreign.chunk_id])
        other_type = store.ranked_chunks(conn, ChunkFilter(namespace, node_types=("document",)), ids)
        store.delete_chunks(conn, namespace, "doc:gone")
        after_delete = store.ranked_chunks(conn, ChunkFilter(namespace), ids)
        none = store.ranked_chunks(conn, ChunkFilter(namespace), [])
    assert sorted(c.node_key for c in found) == ["doc:gone", "doc:kept"]
    by_key = {chunk.node_key: chunk for chunk in rows.values()}
    assert sorted(by_key) == ["doc:gone", "doc:kept"]  # the other namespace's id is not read
    assert by_key["doc:kept"].text == "kept text" and by_key["doc:kept"].node_type == "note"
    assert {rows[c.chunk_id].node_key for c in found} == {c.node_key for c in found}
    assert other_type == {}  # the filter applies to the fetch too
    assert [chunk.node_key for chunk in after_delete.values()] == ["doc:kept"]
    assert none == {}


def test_full_text_matches_english_identifiers_and_both_morphologies(
    database: Database, store: ChunkStore, corpus: str
) -> None:
    english, russian, identifier, episode = _ranked(
        database,
        store.text_candidates,
        corpus,
        "installing apt-get",
        "пакет установки",
        "libc6",
        "deployment zstd",
    )
    assert english[0].key == ("doc:apt", 0)  # "installing" and "Installation" share the stem
    assert russian[0].key == ("doc:ru", 0)  # "пакет"/"пакетов", "установки"/"Установка"
    assert {c.key for c in identifier} == {("doc:apt", 0), ("doc:apt", 1)}
    assert episode[0].key == ("episode:obs-1", 0)
    assert all(c.score > 0 for c in english + russian + identifier)


def test_full_text_falls_back_to_any_term_after_all_terms(
    database: Database, store: ChunkStore, corpus: str
) -> None:
    [found] = _ranked(database, store.text_candidates, corpus, "upgrade bookworm borscht")
    keys = [c.key for c in found]
    # No chunk has all three words; chunks with any of them are returned, best rank first.
    assert set(keys) >= {("doc:apt", 1), ("doc:upgrade-notes", 0), ("doc:other", 0)}
    assert [c.rank for c in found] == list(range(1, len(found) + 1))


def test_concurrent_rankings_equal_sequential_ones_and_pass_errors_on(
    database: Database, provider: EmbeddingProvider, corpus: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    searcher = HybridSearcher(database, provider)
    query = SearchQuery(namespace=corpus, query="upgrade libc6 to 2.36-9+deb12u4", top_k=5)
    concurrent = searcher.search(query)
    sequential = searcher.search(query, settings=replace(searcher.settings, concurrent_rankings=False))

    def shape(hits: list[Any]) -> list[tuple[Any, ...]]:
        return [(h.node_key, h.chunk_order, h.score, dict(h.ranks)) for h in hits]

    assert concurrent and shape(concurrent) == shape(sequential)
    assert {name for hit in concurrent for name in hit.ranks} == {"vector", "text", "trigram"}

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("trigram ranking failed")

    monkeypatch.setattr(searcher.chunks, "trigram_candidates", broken)
    with pytest.raises(RuntimeError, match="trigram ranking failed"):
        searcher.search(query)


def test_trigram_finds_exact_version_strings_first(
    database: Database, store: ChunkStore, corpus: str
) -> None:
    queries = ["2.36-9+deb12u4", "1:2.3-4", "what is proj-1234 about?", "1.5.5+dfsg-1", "100%", "s_here"]
    version, epoch, ticket, episode, percent, underscore = _ranked(
        database, store.trigram_candidates, corpus, *queries
    )
    assert version[0].key == ("doc:apt", 1) and version[0].score == 1.0
    # deb12u3 differs only in punctuation-free trigrams; it may follow, but never with an exact score.
    assert all(c.score < 1.0 for c in version[1:])
    assert epoch[0].key == ("doc:ru", 0) and epoch[0].score == 1.0
    assert ticket[0].key == ("doc:ru", 1)
    assert episode[0].key == ("episode:obs-1", 0)
    # "%" and "_" are matched literally, not as LIKE wildcards ("1000" and "s here" must not be exact hits).
    assert [c.key for c in percent if c.score == 1.0] == [("doc:other", 0)]
    assert [c for c in underscore if c.score == 1.0] == []


def test_trigram_matches_a_quoted_sentence_verbatim(
    database: Database, store: ChunkStore, corpus: str
) -> None:
    sentence = "установка пакетов в debian выполняется командой apt."  # no identifier-like token
    paraphrase = "Установка пакетов в Debian делается командой apt."
    found, other = _ranked(database, store.trigram_candidates, corpus, sentence.upper(), paraphrase)
    assert [(c.key, c.score) for c in found] == [(("doc:ru", 0), 1.0)]
    assert other == []  # verbatim (case-insensitive) only; paraphrases are the vector ranking's job


def test_trigram_does_not_count_a_quoted_occurrence_of_the_whole_query(
    database: Database,
    store: ChunkStore,
    provider: EmbeddingProvider,
    namespace: str,
    cleanup: list[tuple[str, str]],
) -> None:
    question = "How do I keep my Debian system up to date?"
    nodes = [
        NodeRef(namespace, "doc:answer", "document", "Answer"),
        NodeRef(namespace, "doc:citing", "document", "Citing"),
        NodeRef(namespace, "doc:citing-ru", "document", "Citing"),
    ]
    texts = [
        f"Often asked: {question} Run apt update and apt upgrade regularly.",
        f"For upgrades see Section 9.1, “{question}”, and the release notes.",
        f"См. раздел 9.1, «{question}».",
    ]
    _store(
        database,
        store,
        provider,
        [(node, [("", text)]) for node, text in zip(nodes, texts, strict=True)],
        cleanup,
    )
    with database.connection() as conn:
        found = store.trigram_candidates(conn, ChunkFilter(namespace), question, 10, whole_query_min_words=8)
    # The answer states the question; the other two cite it by its title (in quotation marks).
    assert [c.key for c in found] == [("doc:answer", 0)]


def test_similar_pairs_are_cosines_between_sources_and_targets_cut_at_the_threshold(
    database: Database,
    store: ChunkStore,
    provider: EmbeddingProvider,
    namespace: str,
    cleanup: list[tuple[str, str]],
) -> None:
    pieces = {
        "doc:en": "How to install packages on Debian with apt.",
        "doc:ru": "Как устанавливать пакеты в Debian с помощью apt.",
        "doc:soup": "A borscht recipe with beetroot and cabbage.",
    }
    vectors: dict[str, np.ndarray] = {}
    with database.connection() as conn:
        for key, text in pieces.items():
            cleanup.append((namespace, key))
            [write] = _writes(provider, "", [("", text)])
            vectors[key] = np.asarray(write.embedding, dtype=np.float64)
            store.replace_chunks(conn, NodeRef(namespace, key, "document", ""), [write])

        def chunk_id(key: str, of: str = namespace) -> int:
            query = sql.SQL("SELECT id FROM {} WHERE namespace = %s AND node_key = %s AND chunk_order = 0")
            return int(conn.execute(query.format(store.table), (of, key)).fetchone()[0])

        keys = [chunk_id(key) for key in pieces]
        every = store.similar_pairs(conn, namespace, keys[:1], keys, -1.0)
        close = store.similar_pairs(conn, namespace, keys[:1], keys, 0.6)
        none = store.similar_pairs(conn, namespace, [], keys, 0.0)
        repeated = store.similar_pairs(conn, namespace, keys[:1] * 2, keys + keys, -1.0)
        # Sources and targets are separate lists: a source that is not a target is never paired as one.
        crossed = store.similar_pairs(conn, namespace, keys[:2], keys[2:], -1.0)
        missing = store.similar_pairs(conn, namespace, [-1], keys, -1.0)  # no such row
        # The cosine, not the inner product: a vector twice as long as doc:en points the same way.
        cleanup.append((namespace, "doc:long"))
        long = ChunkWrite(chunk_order=0, heading="", text="long", embedding=2 * vectors["doc:en"], meta={})
        store.replace_chunks(conn, NodeRef(namespace, "doc:long", "document", ""), [long])
        same_direction = store.similar_pairs(conn, namespace, keys[:1], [chunk_id("doc:long")], 0.99)
        # A zero vector (a remote model may return one) is similar to nothing, either way round.
        cleanup.append((namespace, "doc:zero"))
        zero = ChunkWrite(
            chunk_order=0, heading="", text="blank", embedding=np.zeros(provider.dimension), meta={}
        )
        store.replace_chunks(conn, NodeRef(namespace, "doc:zero", "document", ""), [zero])
        zero_id = chunk_id("doc:zero")
        from_zero = store.similar_pairs(conn, namespace, [zero_id], keys, 0.5)
        to_zero = store.similar_pairs(conn, namespace, keys, [zero_id], 0.5)
        zero_floor = store.similar_pairs(conn, namespace, [zero_id], keys[:1], -1.0)
        # A row of another namespace, named by its id, is never paired: the namespace bounds the ids.
        other = namespace + "-other"
        cleanup.append((other, "doc:en"))
        [copy] = _writes(provider, "", [("", pieces["doc:en"])])
        store.replace_chunks(conn, NodeRef(other, "doc:en", "document", ""), [copy])
        foreign = store.similar_pairs(conn, namespace, keys[:1], [chunk_id("doc:en", other), *keys], 0.99)
        foreign_source = store.similar_pairs(conn, namespace, [chunk_id("doc:en", other)], keys, -1.0)

    def cosine(left: str, right: str) -> float:
        a, b = vectors[left], vectors[right]
        return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))

    assert [target for _, target, _ in every] == [("doc:ru", 0), ("doc:soup", 0)]
    similarity = {target[0]: value for _, target, value in every}
    assert similarity["doc:ru"] == pytest.approx(cosine("doc:en", "doc:ru"), abs=1e-5)
    assert similarity["doc:soup"] == pytest.approx(cosine("doc:en", "doc:soup"), abs=1e-5)
    assert similarity["doc:ru"] > similarity["doc:soup"]
    assert [(source, target) for source, target, _ in close] == [(("doc:en", 0), ("doc:ru", 0))]
    assert none == []
    assert repeated == every
    assert [(source, target) for source, target, _ in crossed] == [
        (("doc:en", 0), ("doc:soup", 0)),
        (("doc:ru", 0), ("doc:soup", 0)),
    ]
    assert crossed[1][2] == pytest.approx(cosine("doc:ru", "doc:soup"), abs=1e-5)
    assert missing == []
    assert [(target, round(value, 4)) for _, target, value in same_direction] == [(("doc:long", 0), 1.0)]
    assert from_zero == [] and to_zero == []
    assert zero_floor == [(("doc:zero", 0), ("doc:en", 0), 0.0)]
    assert foreign == [] and foreign_source == []


def test_identifier_tokens() -> None:
    assert identifier_tokens('Что нового в "2.36-9+deb12u4"? См. PROJ-1234, 1:2.3-4.') == [
        "2.36-9+deb12u4",
        "proj-1234",
        "1:2.3-4",
    ]
    assert identifier_tokens("how do I install openssl") == []
    assert identifier_tokens("see https://github and the description: for top-level docs") == []


def test_search_never_holds_a_connection_while_waiting_for_a_ranking(
    settings: Settings, provider: EmbeddingProvider, corpus: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A pool of one connection: a search that held its connection while the lexical arms wait for theirs
    # would give up after the pool timeout instead of answering.
    single = Database(
        settings.model_copy(update={"pool_min_size": 1, "pool_max_size": 1}), prepare=migrations.apply
    )
    try:
        searcher = HybridSearcher(single, provider)
        # The lexical arms ask for their connections only after the vector arm is done, so the
        # caller checks out first: it must not keep a connection while it waits for theirs.
        vector_done = threading.Event()
        vector_candidates, ranking = searcher.chunks.vector_candidates, searcher._ranking

        def vector_then_signal(*args: Any, **kwargs: Any) -> Any:
            try:
                return vector_candidates(*args, **kwargs)
            finally:
                vector_done.set()

        def late_worker(arm: Any) -> Any:  # a worker's ranking waits for the vector ranking
            if threading.current_thread().name.startswith("search-arm"):
                vector_done.wait(60)
            return ranking(arm)

        monkeypatch.setattr(searcher.chunks, "vector_candidates", vector_then_signal)
        monkeypatch.setattr(searcher, "_ranking", late_worker)
        query = SearchQuery(namespace=corpus, query="upgrade libc6 to 2.36-9+deb12u4", top_k=5)
        concurrent = searcher.search(query)
        sequential = searcher.search(query, settings=replace(searcher.settings, concurrent_rankings=False))
        assert concurrent and [(h.node_key, h.chunk_order) for h in concurrent] == [
            (h.node_key, h.chunk_order) for h in sequential
        ]
    finally:
        single.close()


def test_search_puts_the_section_the_query_names_first(
    database: Database,
    store: ChunkStore,
    provider: EmbeddingProvider,
    namespace: str,
    cleanup: list[tuple[str, str]],
) -> None:
    documents = [
        (
            NodeRef(namespace, "doc:codec", "document", "Codec manual"),
            [("Restart markers", "They cut the compressed stream into intervals a decoder can resume at.")],
        ),
        (
            NodeRef(namespace, "doc:npm", "document", "npm"),
            [("Synopsis", "npm restart runs the restart script; a restart prints markers for each restart.")],
        ),
    ]
    _store(database, store, provider, documents, cleanup)
    [text] = _ranked(database, store.text_candidates, namespace, "restart markers")
    assert [(c.node_key, c.heading_match) for c in text] == [("doc:npm", False), ("doc:codec", True)]
    searcher = HybridSearcher(database, provider)
    hits = searcher.search(SearchQuery(namespace=namespace, query="restart markers", top_k=5))
    assert hits[0].node_key == "doc:codec" and hits[0].ranks["heading"] == 1
    assert all("heading" not in hit.ranks for hit in hits[1:])


def test_search_puts_the_chunk_a_pasted_sentence_comes_from_first(
    database: Database,
    store: ChunkStore,
    provider: EmbeddingProvider,
    namespace: str,
    cleanup: list[tuple[str, str]],
) -> None:
    sentence = "Will be added as a listener for the 'connect' event once."
    documents = [
        (
            NodeRef(namespace, "doc:net", "document", "Net"),
            [
                (
                    "socket.connect(options, connectListener)",
                    "Initiate a connection on a given socket. Possible signatures: options with a port and "
                    "a host for TCP, or a path for IPC; the local address and port to bind, the family of "
                    "the IP stack, hints for the DNS lookup, a custom lookup function, the timeout before "
                    "the socket gives up, keep-alive with its initial delay, and whether to disable "
                    "Nagle's algorithm. connectListener: a function, common parameter of the connect "
                    f"methods. {sentence} Returns the socket itself. On error, the 'error' event is emitted "
                    "instead and the socket is destroyed; on success the 'ready' event follows.",
                )
            ],
        ),
        (
            NodeRef(namespace, "doc:events", "document", "Events"),
            [
                (
                    "emitter.once(eventName, listener)",
                    "Adds a one-time listener for the event. The listener is added once: the next time the "
                    "event is emitted, the listener is removed and then called.",
                ),
                (
                    "emitter.prependOnceListener(eventName, listener)",
                    "Adds a one-time listener for the event to the beginning of the listeners array: "
                    "the listener will be added once and called once for the event.",
                ),
                (
                    "emitter.addListener(eventName, listener)",
                    "Alias for emitter.on: the listener will be added to the end of the listeners array "
                    "for the event; added again, it is called once per addition.",
                ),
                (
                    "Event: 'connect'",
                    "Emitted when a socket connection is established: a listener for the 'connect' event "
                    "is added by socket.connect() and called once the connection is up.",
                ),
                *[
                    (
                        f"Event: '{name}'",
                        f"Emitted {when}: a listener for the '{name}' event is added once per connect "
                        "attempt and called once for the event.",
                    )
                    for name, when in (
                        ("connectionAttempt", "when a new connect attempt is started"),
                        ("connectionAttemptFailed", "when a connect attempt failed"),
                        ("connectionAttemptTimeout", "when a connect attempt timed out"),
                        ("ready", "when a socket is ready to be used, right after the connect event"),
                        ("lookup", "after resolving the host name but before the connect event"),
                        ("timeout", "if the socket times out from inactivity after connect"),
                    )
                ],
                (
                    "Event: 'newListener'",
                    "Emitted before a listener is added to the internal array of listeners: a listener "
                    "for the 'newListener' event is called once for each listener added.",
                ),
            ],
        ),
    ]
    _store(database, store, provider, documents, cleanup)
    searcher = HybridSearcher(database, provider)
    query = SearchQuery(namespace=namespace, query=sentence, top_k=5)
    hits = searcher.search(query)
    assert hits[0].node_key == "doc:net" and hits[0].ranks["verbatim"] == 1
    assert all("verbatim" not in hit.ranks for hit in hits[1:])
    # Without the verbatim ranking a chunk sharing the sentence's words and meaning comes first.
    without = searcher.search(query, settings=replace(searcher.settings, verbatim_weight=0))
    assert (without[0].node_key, without[0].chunk_order) != ("doc:net", 0)
