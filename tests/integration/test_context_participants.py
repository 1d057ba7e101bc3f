"""CompileContext prefers the turns of a person the question names, on the real database and embedder:
a named speaker's turn that retrieval ranks well below the other speaker's turns still goes into a small
pack first (docs/explanation/context-compilation.md, "Turns of a named participant")."""

from __future__ import annotations

from dataclasses import replace

import pytest

from common.kernel.config import Settings
from common.storage.database import Database
from common.text_models.embeddings.provider import EmbeddingProvider
from common.text_models.tokenizer import TokenCounter
from ingest_service.embedding.episodes import EpisodeEmbedder
from ingest_service.observations.recorder import ObservationRecorder
from query_service.context.compiler import ContextCompiler
from query_service.context.pack.items import ContextPack
from query_service.context.pack.request import ContextRequest
from query_service.context.pack.settings import context_preset
from query_service.retrieval.hybrid_search import HybridSearcher
from query_service.retrieval.hybrid_search import SearchHit
from query_service.retrieval.hybrid_search import SearchQuery
from query_service.retrieval.hybrid_search import SearchSettings
from query_service.retrieval.hybrid_search import search_preset
from tests.waiting import drained

pytestmark = pytest.mark.integration

QUESTION = "What hobbies does Dana enjoy?"
# Evan's turns about hobbies share more of the question's words than Dana's answer does; he names her
# too, as people in a chat do.
TURNS = [
    ("evan", "My hobbies? I enjoy hobbies like chess, and I enjoy reading about hobbies."),
    ("evan", "I enjoy the hobbies club on Tuesdays, it has many hobbies to enjoy."),
    ("evan", "Hobbies keep me sane; I enjoy every one of my hobbies."),
    ("dana", "Last weekend I went sailing on the lake; pottery is my other pastime."),
    ("evan", "Sounds lovely, Dana. Say hi to Dana's sister for me."),
    ("evan", "Dana, are we still meeting on Friday?"),
]
SAILING = TURNS[3][1]


def _record(
    database: Database, namespace: str, provider: EmbeddingProvider, turns: list[tuple[str, str]]
) -> dict[str, str]:
    """``turns`` (speaker, text), one observation each, a day apart (so no turn is another's neighbour),
    every episode embedded; returns text -> episode key."""
    recorder = ObservationRecorder(database)
    keys = {}
    for index, (speaker, text) in enumerate(turns):
        (result,) = recorder.record_batch(
            [
                {
                    "namespace": namespace,
                    "source": {"system": "chat", "stream": "hobbies", "external_id": f"m{index}"},
                    "kind": "chat.message",
                    "occurred_at": f"2024-05-{1 + index:02d}T10:00:00Z",
                    "actor": {"type": "person", "id": speaker},
                    "content": text,
                }
            ]
        )
        keys[text] = f"episode:{result.observation_id}"
    embedder = EpisodeEmbedder(database, provider, namespace=namespace)
    drained(embedder, namespace)
    return keys


@pytest.fixture
def chat(database: Database, namespace: str, provider: EmbeddingProvider) -> dict[str, str]:
    return _record(database, namespace, provider, TURNS)


def _scores(pack: ContextPack) -> dict[str, float]:
    return {item.provenance.node_key: item.score for item in pack.items}


def test_a_named_speakers_turn_outranks_better_matching_turns_of_another_speaker(
    database: Database,
    settings: Settings,
    provider: EmbeddingProvider,
    chat: dict[str, str],
    namespace: str,
) -> None:
    tokens = TokenCounter(settings.tokenizer_encoding)
    searcher = HybridSearcher(database, provider, search_preset("default"))
    default = context_preset("default")
    plain = ContextCompiler(database, searcher, tokens, replace(default, participant_weight=0.0))
    former = ContextCompiler(database, searcher, tokens, replace(default, participant_weight=0.5))
    named = ContextCompiler(database, searcher, tokens, default)

    # Retrieval alone ranks Evan's best turn about hobbies above Dana's answer, by more than the former
    # boost (1.5) and less than the current one.
    unboosted = _scores(plain.compile(ContextRequest(namespace=namespace, query=QUESTION, token_budget=2000)))
    sailing = unboosted[chat[SAILING]]
    evans_best = max(unboosted[chat[text]] for speaker, text in TURNS if speaker == "evan")
    boost = 1 + default.participant_weight
    assert 1.5 * sailing < evans_best < boost * sailing

    # A pack with room for one turn: the former boost kept Evan's turn, the current one keeps Dana's
    # answer, and the item says why.
    request = ContextRequest(namespace=namespace, query=QUESTION, token_budget=40)
    (kept_before,) = [item for item in former.compile(request).items]
    assert kept_before.provenance.node_key != chat[SAILING]
    (item,) = [item for item in named.compile(request).items]
    assert item.provenance.node_key == chat[SAILING]
    assert item.selection is not None and item.selection.components["participant_boost"] == boost
    assert item.score == pytest.approx(sailing * boost)


ROUND_TURNS = [
    ("evan", "My hobbies? I enjoy hobbies like chess, and I enjoy reading about hobbies."),
    ("evan", "I enjoy the hobbies club on Tuesdays, it has many hobbies to enjoy."),
    ("dana", "Hobbies are nice, Evan, I enjoy them too."),
    ("evan", "Hobbies keep me sane; I enjoy every one of my hobbies."),
    ("dana", "Sailing and pottery are my favourite pastimes."),
    ("evan", "Sounds lovely, Dana. Say hi to Dana's sister for me."),
]


def test_a_second_round_among_the_named_participants_turns_finds_what_the_first_missed(
    database: Database, settings: Settings, provider: EmbeddingProvider, namespace: str
) -> None:
    chat = _record(database, namespace, provider, ROUND_TURNS)
    sailing = chat[ROUND_TURNS[4][1]]
    tokens = TokenCounter(settings.tokenizer_encoding)
    searcher = HybridSearcher(database, provider, search_preset("default"))
    # A first round of three hits (as a small budget would ask for): Evan's turns about hobbies fill it.
    # No recent turns: they would bring every turn of so short a chat.
    shallow = replace(context_preset("default"), min_search_hits=3, max_search_hits=3, recent_limit=0)
    first = searcher.search(SearchQuery(namespace=namespace, query=QUESTION, top_k=3), settings=shallow.search)
    assert sailing not in {hit.node_key for hit in first}

    request = ContextRequest(namespace=namespace, query=QUESTION, token_budget=2000, dropped_limit=100)
    no_round = ContextCompiler(database, searcher, tokens, replace(shallow, participant_round_hits=0))
    without = no_round.compile(request)
    assert sailing not in {item.provenance.node_key for item in [*without.items, *without.dropped]}

    pack = ContextCompiler(database, searcher, tokens, shallow).compile(request)
    by_key = {item.provenance.node_key: item for item in pack.items}
    assert sailing in by_key
    selection = by_key[sailing].selection
    assert selection is not None and selection.rule == "hit"
    assert selection.reason == "found by hybrid search among the turns of a participant the query names"
    assert selection.components["participant_round_weight"] == shallow.participant_round_weight
    assert selection.components["participant_boost"] == 1 + shallow.participant_weight
    # The reason names no participant: a caller without clearance sees speakers masked.
    assert "dana" not in selection.reason


class _RecordingSearcher(HybridSearcher):
    """The real searcher, remembering the settings of each search restricted to participants."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.round_settings: list[SearchSettings] = []

    def search(self, query: SearchQuery, *, settings: SearchSettings | None = None) -> list[SearchHit]:
        if query.participants:
            assert settings is not None
            self.round_settings.append(settings)
        return super().search(query, settings=settings)


def test_the_participant_round_searches_for_meaning_and_scores_against_its_own_best(
    database: Database, settings: Settings, provider: EmbeddingProvider, namespace: str
) -> None:
    chat = _record(database, namespace, provider, ROUND_TURNS)
    sailing = chat[ROUND_TURNS[4][1]]
    searcher = _RecordingSearcher(database, provider, search_preset("default"))
    config = replace(context_preset("default"), min_search_hits=3, max_search_hits=3, recent_limit=0)
    compiler = ContextCompiler(database, searcher, TokenCounter(settings.tokenizer_encoding), config)
    pack = compiler.compile(ContextRequest(namespace=namespace, query=QUESTION, token_budget=2000))

    # The question without the name keeps only its frame: the round weighs meaning over wording.
    semantic = replace(search_preset("semantic"), similar_share=0)
    assert config.participant_round_preset == "semantic"
    assert searcher.round_settings == [semantic]
    assert semantic.vector_weight > config.search.vector_weight
    # Its hit is scored against the best score that preset can give, not the first round's.
    item = next(item for item in pack.items if item.provenance.node_key == sailing)
    assert item.selection is not None
    components = item.selection.components
    assert components["relative_score"] == pytest.approx(components["retrieval_score"] / semantic.max_score())
    expected = (
        components["relative_score"] * config.participant_round_weight * (1 + config.participant_weight)
    )
    assert item.score == pytest.approx(expected)
