"""`PackFitter` (query_service/context/pack/fitting.py) and the turn rendering and redundancy checks
(query_service/context/pack/conversation.py), with the real tokenizer."""

from __future__ import annotations

from datetime import UTC
from datetime import datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.storage.episode_store import EpisodeTurn
from common.text_models.tokenizer import TokenCounter
from query_service.context.pack.conversation import RedundancyFilter
from query_service.context.pack.conversation import rarer_first
from query_service.context.pack.conversation import speaker_of
from query_service.context.pack.conversation import turn_header
from query_service.context.pack.conversation import turn_line
from query_service.context.pack.fitting import FitCandidate
from query_service.context.pack.fitting import FitSettings
from query_service.context.pack.fitting import PackFitter


@pytest.fixture(scope="module")
def tokens() -> TokenCounter:
    return TokenCounter()


def _candidate(key: str, text: str, score: float, **fields: object) -> FitCandidate:
    return FitCandidate(kind="chunk", key=key, text=text, score=score, **fields)  # type: ignore[arg-type]


def test_rank_order_keeps_the_given_order_and_skips_what_does_not_fit(tokens: TokenCounter) -> None:
    fitter = PackFitter(tokens, FitSettings(separator="\n"))
    long = " ".join(["word"] * 80)
    candidates = [
        _candidate("a", "alpha beta", 0.9),
        _candidate("b", long, 0.8),
        _candidate("c", "gamma", 0.1),
    ]
    fitted = fitter.fit(candidates, budget=20)
    assert [f.candidate.key for f in fitted.kept] == ["a", "c"]
    assert fitted.text == "alpha beta\ngamma"
    assert fitted.token_count == tokens.count(fitted.text) <= 20
    assert [d["decision"] for d in fitted.decisions] == ["kept", "dropped", "kept"]
    assert fitted.decisions[1]["reason"].startswith("over budget")


def test_a_drop_reason_states_the_budget_really_left(tokens: TokenCounter) -> None:
    fitter = PackFitter(tokens, FitSettings(separator="\n\n"))
    first = "alpha beta gamma"
    budget = tokens.count(first) + 1  # one token left after the first item, less than any joint and item
    fitted = fitter.fit([_candidate("a", first, 0.9), _candidate("b", "delta epsilon", 0.8)], budget=budget)
    assert [f.candidate.key for f in fitted.kept] == ["a"]
    assert fitted.decisions[1]["reason"] == (
        f"over budget ({tokens.count('delta epsilon')} tokens, 1 of the budget left)"
    )


def test_value_per_token_prefers_the_better_score_per_token(tokens: TokenCounter) -> None:
    fitter = PackFitter(tokens, FitSettings(selection="value_per_token", min_cost_tokens=1))
    wordy = " ".join(["filler"] * 30)  # ~30 tokens, score 0.9: ~0.03 per token
    terse = "short answer here"  # 3 tokens, score 0.5: ~0.17 per token
    budget = tokens.count(wordy)  # room for one of them only
    fitted = fitter.fit([_candidate("wordy", wordy, 0.9), _candidate("terse", terse, 0.5)], budget=budget)
    assert [f.candidate.key for f in fitted.kept] == ["terse"]
    # In rank order the higher score would have taken the budget.
    ranked = PackFitter(tokens, FitSettings(selection="rank")).fit(
        [_candidate("wordy", wordy, 0.9), _candidate("terse", terse, 0.5)], budget=budget
    )
    assert [f.candidate.key for f in ranked.kept] == ["wordy"]


def test_grouped_candidates_share_one_header_in_position_order(tokens: TokenCounter) -> None:
    fitter = PackFitter(tokens, FitSettings(selection="value_per_token"))
    header = "[2023-05-08 chat/one]"
    candidates = [
        _candidate("late", "10:02 bob: second", 0.9, group=header, position=(2,)),
        _candidate("doc", "[Doc] doc:a#0\nA document.", 0.5),
        _candidate("early", "10:01 ann: first", 0.4, group=header, position=(1,)),
    ]
    fitted = fitter.fit(candidates, budget=200)
    assert fitted.text == f"{header}\n10:01 ann: first\n10:02 bob: second\n\n[Doc] doc:a#0\nA document."
    assert [f.candidate.key for f in fitted.kept] == ["early", "late", "doc"]
    assert fitted.token_count == tokens.count(fitted.text)


def test_fitting_counts_each_text_once_not_the_whole_pack_per_candidate(tokens: TokenCounter) -> None:
    fitter = PackFitter(tokens, FitSettings(selection="value_per_token"))
    candidates = [
        _candidate(f"t{i}", f"10:{i:02d} ann: message number {i}", 1.0 - i / 100, group="[h]", position=(i,))
        for i in range(60)
    ]
    fitted = fitter.fit(candidates, budget=400)
    assert 0 < len(fitted.kept) < 60 and fitted.token_count == tokens.count(fitted.text) <= 400
    # separator + line break + one header + each candidate once + the final exact count
    assert fitted.tokenised == 2 + 1 + 60 + 1


def test_the_budget_holds_for_every_budget(tokens: TokenCounter) -> None:
    texts = ["naïve café — 東京 and more", "x" * 300, "a\n\nb", " spaced  out ", "…", "emoji 🎉🎉 here"]
    for budget in range(1, 120, 7):
        for selection in ("rank", "value_per_token"):
            fitter = PackFitter(tokens, FitSettings(selection=selection, min_truncated_tokens=4))  # type: ignore[arg-type]
            candidates = [
                _candidate(f"k{i}", text, 1 / (i + 1), truncatable=True, group="[g]" if i % 2 else "")
                for i, text in enumerate(texts)
            ]
            fitted = fitter.fit(candidates, budget)
            assert fitted.token_count == tokens.count(fitted.text) <= budget, (budget, selection)


def test_a_long_truncatable_candidate_is_capped_and_cut(tokens: TokenCounter) -> None:
    fitter = PackFitter(tokens, FitSettings(max_item_share=0.35))
    huge = " ".join(f"fix {i}." for i in range(400))
    fitted = fitter.fit([_candidate("huge", huge, 1.0, truncatable=True)], budget=1000)
    assert fitted.kept[0].text.endswith(" …") and fitted.kept[0].token_count <= 350
    assert fitted.decisions[0]["capped_from_tokens"] > 350


def test_drop_reason_is_kept_in_the_decisions(tokens: TokenCounter) -> None:
    fitter = PackFitter(tokens, FitSettings())
    fitted = fitter.fit([_candidate("a", "text", 1.0, drop_reason="duplicate of b#0")], budget=100)
    assert fitted.kept == [] and fitted.decisions[0]["reason"] == "duplicate of b#0"


def _turn(actor: dict[str, str] | None) -> EpisodeTurn:
    return EpisodeTurn(
        observation_id="obs-1",
        source_system="chat",
        source_stream="s-1",
        kind="chat.message",
        occurred_at=datetime(2023, 5, 8, 13, 56, tzinfo=UTC),
        actor=actor,
        subject=None,
        recorded_order=7,
    )


def test_a_turn_is_one_line_under_a_dated_stream_header() -> None:
    turn = _turn({"type": "person", "id": "caroline"})
    assert speaker_of(turn) == "caroline" and speaker_of(_turn(None)) == "chat.message"
    assert turn_header(turn, "chat/s-1") == "[2023-05-08 chat/s-1]"
    assert turn_line(turn, "caroline", "I went to a  support group.") == (
        "13:56 caroline: I went to a  support group."
    )


def test_redundancy_finds_duplicates_and_near_duplicates_only() -> None:
    check = RedundancyFilter(threshold=0.85)
    assert check.offer("a", "I love painting sunsets by the lake every summer") == ""
    assert (
        check.offer("b", "i love PAINTING sunsets, by the lake every summer!")
        == "duplicate of a better chunk"
    )
    assert check.redundant_with == "a"
    near = check.offer("c", "I love painting sunsets by the lake every summer evening")
    assert near.startswith("near duplicate of a better chunk") and check.redundant_with == "a"
    assert check.offer("d", "I love hiking mountains in the winter with friends") == ""
    assert check.offer("e", "ok") == "" and check.offer("f", "OK!") == "duplicate of a better chunk"


def _brute_force_redundancy(texts: list[str], threshold: float) -> list[tuple[str, str]]:
    """Every text against every earlier kept one (the definition the prefix filter must equal)."""
    from query_service.context.pack.conversation import NEAR_DUPLICATE_MIN_WORDS
    from query_service.context.pack.conversation import normalised_words

    exact: dict[tuple[str, ...], str] = {}
    kept: list[tuple[frozenset[str], str]] = []
    out = []
    for index, text in enumerate(texts):
        key, words = f"k{index}", normalised_words(text)
        if not words:
            out.append(("", ""))
            continue
        if words in exact:
            out.append(("duplicate", exact[words]))
            continue
        exact[words] = key
        if len(words) < NEAR_DUPLICATE_MIN_WORDS:
            out.append(("", ""))
            continue
        bag = frozenset(words)
        match = next((k for other, k in kept if len(bag & other) / len(bag | other) >= threshold), "")
        out.append(("near", match) if match else ("", ""))
        if not match:
            kept.append((bag, key))
    return out


@given(
    texts=st.lists(
        st.lists(st.sampled_from(list("abcdefghijkl")), min_size=0, max_size=12).map(" ".join),
        max_size=40,
    ),
    threshold=st.sampled_from([0.5, 0.7, 0.85, 1.0]),
)
def test_prefix_filtered_redundancy_equals_comparing_every_pair(texts: list[str], threshold: float) -> None:
    check = RedundancyFilter(threshold=threshold)
    found = []
    for index, text in enumerate(texts):
        reason = check.offer(f"k{index}", text)
        kind = "" if not reason else "duplicate" if reason.startswith("duplicate") else "near"
        found.append((kind, check.redundant_with if reason else ""))
    assert found == _brute_force_redundancy(texts, threshold)


@given(st.frozensets(st.text(min_size=1, max_size=8)))
def test_the_prefix_filters_word_order_is_longest_first_then_alphabetical(words: frozenset[str]) -> None:
    assert rarer_first(words) == sorted(words, key=lambda word: (-len(word), word))


def test_the_search_depth_follows_the_budget_within_searchs_limit() -> None:
    from query_service.context.pack.settings import ContextSettings

    settings = ContextSettings()
    assert settings.search_depth(1000) == 40 and settings.search_depth(2000) == 80
    assert settings.search_depth(60) == 20 and settings.search_depth(100_000) == 100
