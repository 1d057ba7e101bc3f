"""Okapi BM25 for the full-text ranking (`common.storage.chunks.rankings.ChunkRankings.text_candidates`): the
term weights from a namespace's lexeme statistics and the bounded candidate set the ranking scores.

BM25 (Robertson and Zaragoza, "The Probabilistic Relevance Framework: BM25 and Beyond", 2009) scores a
chunk ``d`` for the query lexemes ``q``::

    score(d) = sum over q in d of idf(q) * tf(q, d) * (k1 + 1) / (tf(q, d) + k1 * (1 - b + b * |d| / avgdl))
    idf(q)   = ln(1 + (N - df(q) + 0.5) / (df(q) + 0.5))

with ``k1 = 1.2``, ``b = 0.75``; the idf is the non-negative form Lucene uses. ``N`` is the namespace's
number of chunks, ``df(q)`` the number holding lexeme ``q``, ``tf(q, d)`` the positions of ``q`` in the
chunk's ``search_document``, ``|d|`` its number of distinct lexemes (``length(tsvector)``) and ``avgdl``
their mean over the namespace. ``N``, ``df`` and the summed lengths come from the statistics the chunks
table's triggers keep (``sql/0011_lexeme_statistics.sql``); they count every chunk of the namespace,
whatever the caller may see.

Bounded cost: the ranking reads only the chunks holding one of the *fetched* lexemes, the rarest ones
while their document frequencies add up to at most `CANDIDATE_BUDGET` (always at least the rarest one).
A chunk holding only common lexemes of the query is then not a candidate: its score is at most the sum of
those lexemes' small weights (the max-score pruning idea of Turtle and Flood 1995). When even the rarest
lexeme is in more than `CANDIDATE_BUDGET` chunks, the candidates are the chunks holding *every* query
lexeme, at most `CANDIDATE_BUDGET` of them in the index's order: a query of only very common words gets a
bounded, not an exhaustive, ranking. Every candidate is scored for all query lexemes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

K1 = 1.2
B = 0.75
CANDIDATE_BUDGET = 300
"""At most this many chunks are read and scored per full-text ranking (module doc). Scoring costs about
15 us a candidate on real documents (mostly reading and filtering its ``tsvector``), so the budget is most
of the ranking's time. On the docs vault with the Debian FAQ in one namespace (9,874 chunks; 224 FAQ
questions and 200 vault sentences, in process, bench/RESULTS.md (git history)) budgets 1000 / 500 / 300 / 200
gave FAQ MRR@10 0.445 / 0.449 / 0.450 / 0.444, sentence hit@5 0.99 / 0.99 / 0.99 / 0.985, and a
full-text ranking p50 of 13.4 / 8.9 / 6.3 / 6.9 ms (p95 21.6 / 14.2 / 8.8 / 10.4)."""
NAMESPACE_TOTALS = ""
"""The statistics row holding a namespace's chunk count and summed lengths (no tsvector has an empty lexeme)."""


@dataclass(frozen=True)
class LexemeStatistics:
    """A namespace's statistics for the lexemes of one query.

    Attributes:
        chunks: number of chunks in the namespace (``N``).
        total_length: sum of their lengths (distinct lexemes per chunk).
        document_frequencies: query lexeme -> number of chunks holding it (0: none).
    """

    chunks: int
    total_length: int
    document_frequencies: Mapping[str, int]

    @property
    def average_length(self) -> float:
        """``avgdl``, at least 1."""
        return max(self.total_length / self.chunks, 1.0) if self.chunks > 0 else 1.0


@dataclass(frozen=True)
class Bm25Plan:
    """What the full-text ranking runs for one query.

    Attributes:
        weights: lexeme -> idf, for the query lexemes present in the namespace, rarest first.
        fetched: the lexemes whose chunks are the candidates (rarest first).
        every_lexeme: the candidates must hold every lexeme of ``weights`` (the all-common case).
        average_length: ``avgdl`` of the namespace.
    """

    weights: Mapping[str, float]
    fetched: tuple[str, ...]
    every_lexeme: bool
    average_length: float


def inverse_document_frequency(document_frequency: int, chunks: int) -> float:
    """``ln(1 + (N - df + 0.5) / (df + 0.5))`` (module doc); > 0 for every ``0 <= df <= N``."""
    document_frequency = min(max(document_frequency, 0), chunks)
    return math.log(1.0 + (chunks - document_frequency + 0.5) / (document_frequency + 0.5))


def plan_bm25(statistics: LexemeStatistics, budget: int = CANDIDATE_BUDGET) -> Bm25Plan | None:
    """The weights and candidate lexemes of a query (module doc), or None when no query lexeme occurs in
    the namespace (or it is empty).

    Lexemes are ordered by document frequency, then alphabetically, so the plan is deterministic.
    """
    present = sorted(
        (
            (frequency, lexeme)
            for lexeme, frequency in statistics.document_frequencies.items()
            if frequency > 0
        ),
    )
    if statistics.chunks <= 0 or not present:
        return None
    weights = {lexeme: inverse_document_frequency(df, statistics.chunks) for df, lexeme in present}
    fetched: list[str] = []
    total = 0
    for frequency, lexeme in present:
        if fetched and total + frequency > budget:
            break
        fetched.append(lexeme)
        total += frequency
    every_lexeme = total > budget  # even the rarest lexeme alone is over the budget
    return Bm25Plan(
        weights=weights,
        fetched=tuple(weights) if every_lexeme else tuple(fetched),
        every_lexeme=every_lexeme,
        average_length=statistics.average_length,
    )


__all__ = [
    "CANDIDATE_BUDGET",
    "K1",
    "NAMESPACE_TOTALS",
    "B",
    "Bm25Plan",
    "LexemeStatistics",
    "inverse_document_frequency",
    "plan_bm25",
]
