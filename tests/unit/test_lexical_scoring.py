"""BM25 weights and the bounded candidate plan (common/storage/chunks/lexical_scoring.py)."""

from __future__ import annotations

import math

import pytest

from common.storage.chunks.lexical_scoring import LexemeStatistics
from common.storage.chunks.lexical_scoring import inverse_document_frequency
from common.storage.chunks.lexical_scoring import plan_bm25


def test_inverse_document_frequency_is_the_non_negative_robertson_form() -> None:
    assert inverse_document_frequency(1, 100) == pytest.approx(math.log(1 + 99.5 / 1.5))
    assert inverse_document_frequency(100, 100) == pytest.approx(math.log(1 + 0.5 / 100.5))
    assert inverse_document_frequency(100, 100) > 0
    assert inverse_document_frequency(1, 100) > inverse_document_frequency(10, 100)
    assert inverse_document_frequency(500, 100) == inverse_document_frequency(100, 100)  # clamped to N


def test_plan_fetches_the_rarest_lexemes_within_the_budget_and_weighs_all() -> None:
    statistics = LexemeStatistics(
        chunks=10_000,
        total_length=400_000,
        document_frequencies={"debian": 6_000, "packag": 900, "zstd": 40, "borscht": 0, "kernel": 300},
    )
    plan = plan_bm25(statistics, budget=1_000)
    assert plan is not None
    assert list(plan.weights) == ["zstd", "kernel", "packag", "debian"]  # rarest first; absent left out
    assert plan.fetched == ("zstd", "kernel")  # 40 + 300 <= 1000 < 40 + 300 + 900
    assert not plan.every_lexeme and plan.average_length == 40.0
    weights = list(plan.weights.values())
    assert weights == sorted(weights, reverse=True)


def test_plan_for_only_common_lexemes_requires_every_lexeme() -> None:
    statistics = LexemeStatistics(
        chunks=100_000, total_length=1, document_frequencies={"debian": 14_000, "packag": 9_000}
    )
    plan = plan_bm25(statistics, budget=1_000)
    assert plan is not None and plan.every_lexeme
    assert plan.fetched == ("packag", "debian") and plan.average_length == 1.0
    single = plan_bm25(LexemeStatistics(100, 900, {"a": 20}), budget=10)
    assert single is not None and single.every_lexeme and single.fetched == ("a",)


def test_no_plan_without_a_lexeme_in_the_namespace() -> None:
    assert plan_bm25(LexemeStatistics(0, 0, {"zstd": 0})) is None
    assert plan_bm25(LexemeStatistics(50, 900, {"zstd": 0})) is None
    assert plan_bm25(LexemeStatistics(50, 900, {})) is None
