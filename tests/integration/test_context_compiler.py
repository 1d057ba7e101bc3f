"""ContextCompiler on the real database and embedder: neighbouring turns, compact turn
rendering, explanations and dropped candidates, and that nothing a restricted caller may not see reaches
a pack through a neighbour, a recent turn, a graph neighbour's fact or the dropped list."""

from __future__ import annotations

from typing import Any

import pytest

from common.kernel.config import Settings
from common.storage.database import Database
from common.storage.visibility import Visibility
from common.text_models.embeddings.provider import EmbeddingProvider
from common.text_models.tokenizer import TokenCounter
from ingest_service.embedding.episodes import EpisodeEmbedder
from ingest_service.observations.recorder import ObservationRecorder
from query_service.context.compiler import ContextCompiler
from query_service.context.pack.items import ContextPack
from query_service.context.pack.request import ContextRequest
from query_service.context.pack.settings import context_preset
from query_service.retrieval.hybrid_search import HybridSearcher
from query_service.retrieval.hybrid_search import search_preset
from tests.waiting import drained

pytestmark = pytest.mark.integration

SECRET = "workspace:secret"
OUTSIDER = Visibility.of_scopes(["workspace:other"])
TURNS = [
    ("ann", "Morning! How was the trip?", []),
    ("bob", "Long drive, but the countryside was lovely.", []),
    ("ann", "Did you stop anywhere on the way?", []),
    ("bob", "We had lunch at a small cafe near the river.", []),
    ("ann", "I saw a blue heron nesting by the old mill yesterday.", []),
    ("bob", "The merger codename is Zanzibar, keep it quiet.", [SECRET]),
    ("bob", "Herons are so patient when they fish.", []),
    ("ann", "They stand still for ages.", []),
    ("bob", "Anyway, see you at dinner.", []),
    ("bob", "Zanzibar closes on Friday.", [SECRET]),
]


def _turn(namespace: str, index: int, speaker: str, text: str, scopes: list[str]) -> dict[str, Any]:
    return {
        "namespace": namespace,
        "source": {"system": "chat", "stream": "trip", "external_id": f"m{index}"},
        "kind": "chat.message",
        "occurred_at": "2024-05-01T10:00:00Z",
        "actor": {"type": "person", "id": speaker},
        "scopes": scopes,
        "content": text,
    }


@pytest.fixture(scope="module")
def compiler(database: Database, settings: Settings, provider: EmbeddingProvider) -> ContextCompiler:
    searcher = HybridSearcher(database, provider, search_preset("default"))
    return ContextCompiler(database, searcher, TokenCounter(settings.tokenizer_encoding))


@pytest.fixture
def chat(database: Database, namespace: str, provider: EmbeddingProvider) -> dict[str, str]:
    """The conversation above, one observation per turn in order, every episode embedded; returns
    text -> episode key.

    The episodes are embedded here, before any compile: left pending, any ingest service running on the
    same database (the e2e servers of the session) may embed some of them meanwhile, and the vector arm
    would then rank a varying subset (a flaky fused rank).
    """
    recorder = ObservationRecorder(database)
    keys = {}
    for index, (speaker, text, scopes) in enumerate(TURNS):  # one call each: the recording order is the order
        (result,) = recorder.record_batch([_turn(namespace, index, speaker, text, scopes)])
        keys[text] = f"episode:{result.observation_id}"
    embedder = EpisodeEmbedder(database, provider, namespace=namespace)
    drained(embedder, namespace)  # the embedder threads of the session's e2e servers may hold some chunks
    return keys


def _everything_shown(pack: ContextPack) -> str:
    """Every text and key of the pack a caller receives: items, selections, dropped candidates."""
    parts = [pack.text]
    for item in [*pack.items, *pack.dropped]:
        selection = item.selection
        parts += [item.text, item.provenance.node_key, *item.provenance.observation_ids]
        if selection is not None:
            parts += [selection.reason, *selection.also]
    return "\n".join(parts)


def test_a_hit_brings_its_neighbouring_turns_in_one_compact_block(
    compiler: ContextCompiler, chat: dict[str, str], namespace: str
) -> None:
    pack = compiler.compile(
        ContextRequest(namespace=namespace, query="blue heron nesting by the old mill", dropped_limit=100)
    )
    by_key = {item.provenance.node_key: item for item in pack.items}
    hit = by_key[chat["I saw a blue heron nesting by the old mill yesterday."]]
    assert hit.selection is not None and hit.selection.rule == "hit"
    assert hit.selection.components["fused_rank"] == 1.0 and "retrieval_score" in hit.selection.components
    assert hit.text == "10:00 ann: I saw a blue heron nesting by the old mill yesterday."
    assert hit.group == "[2024-05-01 chat/trip]"
    before = by_key[chat["We had lunch at a small cafe near the river."]]
    assert before.selection is not None and before.selection.rule in ("neighbour", "hit")
    # One header for the stream's day, then one line per turn in recording order.
    block = pack.text.split("\n\n")[0] if pack.text.startswith("[2024-05-01") else pack.text
    lines = block.split("\n")
    assert lines[0] == "[2024-05-01 chat/trip]" and pack.text.count("[2024-05-01 chat/trip]") == 1
    turn_lines = [line for line in lines[1:] if line.startswith("10:00 ")]
    assert turn_lines == sorted(
        turn_lines, key=lambda line: [t[1] for t in TURNS].index(line.split(": ", 1)[1])
    )
    # Each turn is its own item with its own provenance.
    assert len({item.provenance.node_key for item in pack.items}) == len(pack.items)
    # A turn whose speaker the query names scores higher (and says so); the same query without the name does not.
    named = compiler.compile(ContextRequest(namespace=namespace, query="what did bob say about herons"))
    boosted = {item.provenance.node_key: item for item in named.items if item.selection is not None}
    bobs = boosted[chat["Herons are so patient when they fish."]].selection
    anns = boosted[chat["I saw a blue heron nesting by the old mill yesterday."]].selection
    boost = 1 + context_preset().participant_weight
    assert bobs is not None and bobs.components.get("participant_boost") == boost
    assert anns is not None and "participant_boost" not in anns.components
    neighbour_reasons = [
        item.selection.reason
        for item in pack.items
        if item.selection is not None and item.selection.rule == "neighbour"
    ]
    assert neighbour_reasons and all("(a hit)" in reason for reason in neighbour_reasons)


def test_hidden_turns_never_reach_a_restricted_callers_pack(
    compiler: ContextCompiler, chat: dict[str, str], namespace: str
) -> None:
    secret_keys = {chat[text] for _, text, scopes in TURNS if scopes}
    for query in ("blue heron nesting by the old mill", "Herons are so patient when they fish", "Zanzibar"):
        pack = compiler.compile(
            ContextRequest(namespace=namespace, query=query, visibility=OUTSIDER, dropped_limit=100)
        )
        shown = _everything_shown(pack)
        assert "Zanzibar" not in shown, query
        assert not any(key in shown or key.removeprefix("episode:") in shown for key in secret_keys), query
    # The neighbour after the heron turn is the next VISIBLE one: the hidden turn is skipped, not counted.
    pack = compiler.compile(
        ContextRequest(namespace=namespace, query="blue heron nesting by the old mill", visibility=OUTSIDER)
    )
    keys = {item.provenance.node_key for item in pack.items}
    assert chat["Herons are so patient when they fish."] in keys
    # The unrestricted caller sees the hidden turn as a neighbour (the test can fail).
    insider = compiler.compile(
        ContextRequest(namespace=namespace, query="blue heron nesting by the old mill")
    )
    assert "Zanzibar" in insider.text


def test_hidden_nodes_never_reach_a_pack_through_a_graph_neighbour(
    compiler: ContextCompiler, database: Database, namespace: str
) -> None:
    recorder = ObservationRecorder(database)

    def fact(subject: str, predicate: str, obj: str) -> dict[str, Any]:
        return {"fact": {"subject": subject, "predicate": predicate, "object": obj}}

    def note(external_id: str, scopes: list[str], assertions: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "namespace": namespace,
            "source": {"system": "notes", "stream": "n", "external_id": external_id},
            "kind": "note",
            "occurred_at": "2024-05-01T10:00:00Z",
            "scopes": scopes,
            "content": f"note {external_id}",
            "assertions": assertions,
        }

    recorder.record_batch(
        [
            note("p1", [], [fact("person:ann", "KNOWS", "person:carl")]),
            note("p2", [], [fact("person:carl", "WORKS_ON", "project:garden")]),
        ]
    )
    # A hidden fact of the anchor's graph neighbour, to a node only the secret workspace sees.
    recorder.record_batch([note("s1", [SECRET], [fact("person:carl", "WORKS_ON", "project:zanzibar")])])
    insider = compiler.compile(
        ContextRequest(namespace=namespace, anchors=("person:ann",), dropped_limit=100)
    )
    assert "project:garden" in insider.text  # one fact away from the anchor
    rules = {item.text.split(" (")[0]: item.selection.rule for item in insider.items if item.selection}
    assert rules["person:carl WORKS_ON project:garden"] == "graph_neighbour"
    assert rules["person:ann KNOWS person:carl"] == "anchor_fact"
    outsider = compiler.compile(
        ContextRequest(namespace=namespace, anchors=("person:ann",), visibility=OUTSIDER, dropped_limit=100)
    )
    shown = _everything_shown(outsider)
    assert "project:garden" in shown
    assert "zanzibar" not in shown
    assert "project:zanzibar" in _everything_shown(insider)  # the unrestricted caller reaches it
