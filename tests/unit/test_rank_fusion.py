"""Rank fusion (reciprocal rank fusion, convex combination, similar-chunk propagation) and search request
validation: pure functions."""

from __future__ import annotations

import pytest

from common.kernel.errors import InvalidArgument
from common.storage.chunks.rows import Candidate
from query_service.retrieval.hybrid_search import SEARCH_PRESETS
from query_service.retrieval.hybrid_search import SearchQuery
from query_service.retrieval.hybrid_search import SearchSettings
from query_service.retrieval.hybrid_search import fuse_rankings
from query_service.retrieval.hybrid_search import reciprocal_rank_fusion
from query_service.retrieval.hybrid_search import search_preset
from query_service.retrieval.hybrid_search import validate_search
from query_service.retrieval.rank_fusion import heading_ranking
from query_service.retrieval.rank_fusion import normalised_scores
from query_service.retrieval.rank_fusion import propagate_to_similar
from query_service.retrieval.rank_fusion import verbatim_ranking


def test_single_ranking_keeps_its_order_with_rrf_scores() -> None:
    fused = reciprocal_rank_fusion({"vector": ["a", "b", "c"]}, k=60)
    assert [item for item, _ in fused] == ["a", "b", "c"]
    assert [score for _, score in fused] == pytest.approx([1 / 61, 1 / 62, 1 / 63])


def test_agreement_between_rankings_beats_one_first_place() -> None:
    fused = dict(reciprocal_rank_fusion({"vector": ["x", "y"], "text": ["y", "z"], "trigram": ["w", "y"]}))
    assert fused["y"] == pytest.approx(1 / 62 + 1 / 61 + 1 / 62)
    assert max(fused, key=lambda item: fused[item]) == "y"
    assert (fused["x"], fused["z"], fused["w"]) == pytest.approx((1 / 61, 1 / 62, 1 / 61))


def test_sum_over_rankings_matches_the_formula() -> None:
    rankings = {"vector": ["d1", "d2", "d3", "d4"], "text": ["d3", "d1"], "trigram": ["d4"]}
    fused = dict(reciprocal_rank_fusion(rankings, k=60))
    expected = {
        "d1": 1 / 61 + 1 / 62,
        "d2": 1 / 62,
        "d3": 1 / 63 + 1 / 61,
        "d4": 1 / 64 + 1 / 61,
    }
    assert fused == pytest.approx(expected)
    order = [item for item, _ in reciprocal_rank_fusion(rankings, k=60)]
    assert order == ["d1", "d3", "d4", "d2"]


def test_weights_scale_and_zero_weight_ignores_a_ranking() -> None:
    rankings = {"vector": ["a", "b"], "text": ["b", "a"]}
    doubled = dict(reciprocal_rank_fusion(rankings, k=60, weights={"vector": 2.0, "text": 1.0}))
    assert doubled["a"] == pytest.approx(2 / 61 + 1 / 62)
    assert doubled["a"] > doubled["b"]
    only_text = reciprocal_rank_fusion(rankings, k=60, weights={"vector": 0.0, "text": 1.0})
    assert [item for item, _ in only_text] == ["b", "a"]


def test_ties_break_by_best_rank_then_first_appearance() -> None:
    fused = reciprocal_rank_fusion({"vector": ["a", "b"], "text": ["b", "a"]}, k=60)
    assert fused[0][1] == fused[1][1]
    assert [item for item, _ in fused] == ["a", "b"]  # same best rank (1): first appearance wins
    fused = reciprocal_rank_fusion({"text": ["p", "q"], "vector": ["q", "p"]}, k=60)
    assert [item for item, _ in fused] == ["p", "q"]


def test_duplicates_inside_one_ranking_count_once() -> None:
    fused = dict(reciprocal_rank_fusion({"vector": ["a", "a", "b"]}, k=0))
    assert fused == pytest.approx({"a": 1.0, "b": 1 / 3})


def test_empty_and_invalid_input() -> None:
    assert reciprocal_rank_fusion({}) == []
    assert reciprocal_rank_fusion({"vector": []}) == []
    with pytest.raises(ValueError):
        reciprocal_rank_fusion({"vector": ["a"]}, k=-1)


def test_workload_presets_measured_on_the_faq_pairs_and_locomo() -> None:
    default = search_preset("default")
    assert default is SEARCH_PRESETS["default"] is SEARCH_PRESETS["documents"]
    assert (default.fusion, default.rrf_k, default.vector_weight, default.text_weight) == ("rrf", 5, 1.0, 1.0)
    assert (default.trigram_weight, default.similar_share, default.similar_threshold) == (1.0, 0.8, 0.85)
    assert (default.text_min_share, default.trigram_max_query_chars) == (0.2, 1000)
    assert default.trigram_whole_query_min_words == 8
    conversations = SEARCH_PRESETS["conversations"]
    assert (conversations.vector_weight, conversations.text_weight, conversations.rrf_k) == (0.25, 1.0, 5)
    assert (conversations.candidates, conversations.similar_share) == (100, 0.0)
    assert default.heading_weight == 1.0
    assert default.max_score() == pytest.approx(4 / 6)  # vector, text, heading, trigram
    assert SearchSettings(trigram_weight=0, heading_weight=0).max_score() == pytest.approx(2 / 11)
    assert SearchSettings(text_weight=0).max_score() == pytest.approx(2 / 11)  # no heading without text
    assert SearchSettings(fusion="convex", vector_weight=0.6, text_weight=0.4).max_score() == pytest.approx(
        3.0
    )
    with pytest.raises(ValueError, match="fusion"):
        SearchSettings(fusion="borda")
    with pytest.raises(KeyError, match="default"):
        search_preset("nope")


def _ranking(*scored: tuple[str, float], named: tuple[str, ...] = ()) -> list[Candidate]:
    return [
        Candidate(
            chunk_id=rank, node_key=key, chunk_order=0, score=score, rank=rank, heading_match=key in named
        )
        for rank, (key, score) in enumerate(scored, start=1)
    ]


@pytest.mark.parametrize("fusion", ["rrf", "convex"])
def test_exact_ties_go_to_the_lexical_rankings_whatever_order_they_come_in(fusion: str) -> None:
    config = SearchSettings(fusion=fusion, trigram_weight=0, heading_weight=0)
    vector_first = {"vector": _ranking(("topic", 0.1)), "text": _ranking(("words", 7.0))}
    fused = fuse_rankings(vector_first, config, 10)
    assert fused[0][1] == pytest.approx(fused[1][1])
    assert [key[0] for key, _ in fused] == ["words", "topic"]
    assert [key[0] for key, _ in fuse_rankings(dict(reversed(vector_first.items())), config, 10)] == [
        "words",
        "topic",
    ]


def test_heading_ranking_keeps_the_named_sections_in_bm25_order() -> None:
    text = _ranking(
        ("body", 9.0), ("named-2", 8.0), ("other", 5.0), ("named-4", 4.0), named=("named-2", "named-4")
    )
    named = heading_ranking(text)
    assert [(c.node_key, c.rank, c.score) for c in named] == [("named-2", 1, 8.0), ("named-4", 2, 4.0)]
    assert heading_ranking(_ranking(("body", 9.0))) == []


def test_a_section_the_query_names_outranks_words_and_meaning_elsewhere() -> None:
    # The section titled by the query is BM25's first but no vector candidate; another page repeats some
    # of its words and is the vector ranking's first (measured: bench/bench_title_search.py).
    text = _ranking(("named", 9.0), ("elsewhere", 8.0), named=("named",))
    rankings = {"vector": _ranking(("elsewhere", 0.2)), "text": text}
    config = SearchSettings(rrf_k=5, trigram_weight=0)
    with_heading = fuse_rankings({**rankings, "heading": heading_ranking(text)}, config, 10)
    assert [key[0] for key, _ in with_heading] == ["named", "elsewhere"]
    assert with_heading[0][1] == pytest.approx(2 / 6)
    without = fuse_rankings(rankings, config, 10)
    assert [key[0] for key, _ in without] == ["elsewhere", "named"]


def test_fusion_cuts_weak_text_candidates_and_fills_with_them_last() -> None:
    config = SearchSettings(rrf_k=10, text_min_share=0.2, trigram_weight=0)
    rankings = {
        "vector": _ranking(("strong", 0.1), ("x", 0.2), ("other-language", 0.3)),
        "text": _ranking(("strong", 10.0), ("weak-1", 1.9), ("weak-2", 1.0)),
    }
    fused = fuse_rankings(rankings, config, 10)
    # "weak-1" holds less than 0.2 of the best BM25 score: it no longer outranks the vector ranking's third.
    assert [key[0] for key, _ in fused] == ["strong", "x", "other-language", "weak-1", "weak-2"]
    scores = [score for _, score in fused]
    assert scores == sorted(scores, reverse=True)
    assert scores[0] == pytest.approx(2 / 11) and scores[2] == pytest.approx(1 / 13)
    assert scores[3] == pytest.approx(1 / 13) and scores[4] == pytest.approx(1 / 13)  # own 1/12 capped
    assert [key[0] for key, _ in fuse_rankings(rankings, config, 2)] == ["strong", "x"]
    uncut = fuse_rankings(rankings, SearchSettings(rrf_k=10, text_min_share=0, trigram_weight=0), 10)
    # Uncut, each text candidate ties with the vector one of its rank: the lexical ranking's goes first.
    assert [key[0] for key, _ in uncut] == ["strong", "weak-1", "x", "weak-2", "other-language"]
    text_only = fuse_rankings({"text": rankings["text"]}, config, 10)
    assert [key[0] for key, _ in text_only] == ["strong", "weak-1", "weak-2"]


@pytest.mark.parametrize("fusion", ["rrf", "convex"])
def test_fusion_leaves_out_vector_only_candidates_below_the_relevance_floor(fusion: str) -> None:
    config = SearchSettings(fusion=fusion, vector_min_similarity=0.05)
    rankings = {  # the vector ranking holds cosine distances: 1.2 is a similarity of -0.2
        "vector": _ranking(("related", 0.5), ("unrelated", 0.96), ("named", 1.2)),
        "trigram": _ranking(("named", 1.0)),
    }
    fused = [key[0] for key, _ in fuse_rankings(rankings, config, 10)]
    assert sorted(fused) == ["named", "related"]  # the lexical hit stays, whatever its similarity
    assert fuse_rankings({"vector": rankings["vector"][1:]}, config, 10) == []
    unfloored = fuse_rankings(rankings, SearchSettings(fusion=fusion, vector_min_similarity=-1.0), 10)
    assert "unrelated" in [key[0] for key, _ in unfloored]


def test_validate_search_defaults_and_field_violations() -> None:
    assert validate_search(SearchQuery(namespace="ns", query="q", top_k=0)).top_k == 10
    with pytest.raises(InvalidArgument) as raised:
        validate_search(SearchQuery(namespace="", query="  ", top_k=101, node_types=("doc", "")))
    fields = [violation.field for violation in raised.value.violations]
    assert fields == ["namespace", "query", "top_k", "types[1]"]
    with pytest.raises(InvalidArgument) as raised:
        validate_search(SearchQuery(namespace="ns", query="q", top_k=-1))
    assert [violation.field for violation in raised.value.violations] == ["top_k"]


def test_validate_search_names_an_unknown_preset_and_accepts_the_workload_presets() -> None:
    for name in ("", "documents", "conversations"):
        assert validate_search(SearchQuery(namespace="ns", query="q", preset=name)).preset == name
    with pytest.raises(InvalidArgument) as raised:
        validate_search(SearchQuery(namespace="ns", query="q", preset="fastest"))
    assert [violation.field for violation in raised.value.violations] == ["preset"]
    assert "documents" in raised.value.violations[0].description


def test_convex_fusion_weighs_scores_relative_to_each_rankings_best() -> None:
    config = SearchSettings(fusion="convex", vector_weight=0.6, text_weight=0.4, trigram_weight=0)
    rankings = {
        # cosine distances: similarities 0.9, 0.88, 0.3
        "vector": _ranking(("a", 0.1), ("close-second", 0.12), ("far", 0.7)),
        "text": _ranking(("far", 8.0), ("a", 4.0)),
    }
    fused = {key[0]: score for key, score in fuse_rankings(rankings, config, 10)}
    assert fused["a"] == pytest.approx(0.6 + 0.4 * 0.5)
    assert fused["close-second"] == pytest.approx(0.6 * 0.88 / 0.9)  # rank 2, almost the first's share
    assert fused["far"] == pytest.approx(0.6 * 0.3 / 0.9 + 0.4)
    assert [key[0] for key, _ in fuse_rankings(rankings, config, 10)] == ["a", "far", "close-second"]
    assert len(fuse_rankings(rankings, config, 2)) == 2
    # Ties: the best single rank, then the first appearance.
    tied = fuse_rankings({"text": _ranking(("x", 1.0), ("y", 1.0))}, config, 10)
    assert [key[0] for key, _ in tied] == ["x", "y"]


def test_normalised_scores_clip_negative_similarity_and_empty_best() -> None:
    assert normalised_scores("vector", _ranking(("a", 0.5), ("b", 1.5))) == [1.0, 0.0]
    assert normalised_scores("text", _ranking(("a", 0.0))) == [0.0]
    assert normalised_scores("text", []) == []


def test_similar_chunk_propagation_lifts_a_near_copy_of_a_better_hit() -> None:
    fused = [(("en", 0), 0.5), (("other", 0), 0.4), (("ru", 0), 0.1), (("far", 0), 0.05)]
    similar = [(("en", 0), ("ru", 0), 0.92), (("ru", 0), ("far", 0), 0.9), (("x", 0), ("far", 0), 0.99)]
    lifted = propagate_to_similar(fused, similar, share=0.9)
    assert [key[0] for key, _ in lifted] == ["en", "ru", "other", "far"]
    scores = dict(lifted)
    assert scores[("ru", 0)] == pytest.approx(0.45)
    assert scores[("far", 0)] == pytest.approx(0.09)  # from ru's score before propagation: no chaining
    assert scores[("en", 0)] == 0.5  # never lowered
    assert propagate_to_similar(fused, similar, share=0) == fused
    assert propagate_to_similar(fused, [], share=0.9) == fused


def test_verbatim_ranking_keeps_the_chunks_holding_the_whole_query_in_trigram_order() -> None:
    trigram = [
        Candidate(chunk_id=1, node_key="token", chunk_order=0, score=1.0, rank=1),
        Candidate(chunk_id=2, node_key="source", chunk_order=0, score=1.0, rank=2, verbatim=True),
        Candidate(chunk_id=3, node_key="copy", chunk_order=1, score=1.0, rank=3, verbatim=True),
    ]
    assert [(c.node_key, c.rank) for c in verbatim_ranking(trigram)] == [("source", 1), ("copy", 2)]
    assert verbatim_ranking(trigram[:1]) == []


@pytest.mark.parametrize("fusion", ["rrf", "convex"])
def test_a_chunk_the_query_was_copied_from_outranks_one_two_rankings_place_first(fusion: str) -> None:
    """A pasted sentence shares its common words with many chunks; the one holding it verbatim, found by the
    trigram ranking alone, comes first through the verbatim ranking, and not without it."""
    source = Candidate(chunk_id=9, node_key="source", chunk_order=0, score=1.0, rank=1, verbatim=True)
    rankings = {
        "text": _ranking(("similar", 9.0), ("other", 8.0)),
        "vector": _ranking(("similar", 0.1), ("other", 0.2)),
        "trigram": [source],
    }
    with_verbatim = {**rankings, "verbatim": verbatim_ranking(rankings["trigram"])}
    config = SearchSettings(fusion=fusion, heading_weight=0)
    assert [key[0] for key, _ in fuse_rankings(with_verbatim, config, 3)][0] == "source"
    assert [key[0] for key, _ in fuse_rankings(rankings, config, 3)][0] == "similar"
    assert (
        config.max_score() == SearchSettings(fusion=fusion, heading_weight=0, verbatim_weight=0).max_score()
    )
