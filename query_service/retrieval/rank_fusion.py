"""Fusion of the retrieval rankings into one (docs/explanation/retrieval.md), and score propagation between
near-identical chunks. Pure functions over `common.storage.chunks.rows.Candidate` lists;
`query_service.retrieval.hybrid_search` runs the rankings and calls these with its `SearchSettings`.

Two fusion functions:

* **reciprocal rank fusion** (Cormack, Clarke, Büttcher, SIGIR 2009): ``sum over rankings m of
  weight_m / (k + rank_m)``; ranks only, so a ranking's near-ties count as much as its clear wins.
* **convex combination** of normalised scores (Bruch, Gai, Ingber, "An Analysis of Fusion Functions for
  Hybrid Retrieval", ACM TOIS 2023): ``sum over rankings m of weight_m * s_m(d) / s_m(best)``, each
  ranking's score divided by its best score for the query (the theoretical minimum of each score is 0:
  cosine similarity clipped at 0, BM25, trigram similarity), so a chunk the vector ranking places 15th
  but almost as close as the first keeps almost all of that ranking's say. Bruch et al. found it above
  RRF in and out of domain, with its one parameter (the weights' ratio) learnt from few queries.

**Similar-chunk propagation** (the cluster hypothesis, van Rijsbergen 1979: closely associated documents
tend to be relevant to the same requests; score regularisation, Diaz, CIKM 2005): a candidate whose
embedding is within ``similar_threshold`` cosine of a better hit gets at least ``similar_share`` of that
hit's fused score. A page and its translation, or two copies of one answer, then rise together: the
multilingual model places a page's translation next to it (FAQ pairs: the translation is the nearest
neighbour of all 224 answers, median cosine 0.92) while the query, in one language, sits closer to every
page in that language.
"""

from __future__ import annotations

from collections.abc import Hashable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import replace
from typing import TypeVar

from common.storage.chunks.rows import Candidate

K = TypeVar("K", bound=Hashable)
Key = tuple[str, int]

VECTOR = "vector"
TEXT = "text"
HEADING = "heading"
TRIGRAM = "trigram"
VERBATIM = "verbatim"
RANKINGS = (TEXT, HEADING, TRIGRAM, VERBATIM, VECTOR)
"""The rankings in the order fusion breaks exact ties (the first appearance wins): a chunk the lexical
rankings place first ties with one the vector ranking places first whenever each is found by one ranking
only, and the one sharing the query's words is the better bet at the top (docs/explanation/retrieval.md)."""
RRF = "rrf"
CONVEX = "convex"
FUSIONS = (RRF, CONVEX)


def reciprocal_rank_fusion(
    rankings: Mapping[str, Sequence[K]], *, k: int = 60, weights: Mapping[str, float] | None = None
) -> list[tuple[K, float]]:
    """Fuses rankings of items into one (Cormack et al. 2009).

    Args:
        rankings: ranking name -> items, best first (an item appears at most once per ranking; later
            duplicates are ignored).
        k: the RRF constant, >= 0.
        weights: ranking name -> weight (default 1.0 for each); a ranking with weight 0 is ignored.

    Returns:
        (item, score) pairs, best first. Ties are broken by the best single rank, then by the order of
        first appearance (rankings in the given order), so the result is deterministic.
    """
    if k < 0:
        raise ValueError("k must be >= 0")
    scores: dict[K, float] = {}
    best_rank: dict[K, int] = {}
    first_seen: dict[K, int] = {}
    for name, items in rankings.items():
        weight = 1.0 if weights is None else float(weights.get(name, 1.0))
        if weight == 0:
            continue
        seen: set[K] = set()
        for rank, item in enumerate(items, start=1):
            if item in seen:
                continue
            seen.add(item)
            scores[item] = scores.get(item, 0.0) + weight / (k + rank)
            best_rank[item] = min(best_rank.get(item, rank), rank)
            first_seen.setdefault(item, len(first_seen))
    ordered = sorted(scores, key=lambda item: (-scores[item], best_rank[item], first_seen[item]))
    return [(item, scores[item]) for item in ordered]


def heading_ranking(text: Sequence[Candidate]) -> list[Candidate]:
    """The full-text candidates whose heading holds every query lexeme (`Candidate.heading_match`), in
    their BM25 order, ranked 1, 2, ...: the sections the query names.

    Fused as a ranking of its own, like a title field weighted apart from the body (BM25F, Robertson,
    Zaragoza and Taylor, CIKM 2004): the words of a section title describe the whole section, so a query
    made of them is evidence that one body word match is not.
    """
    return _reranked([candidate for candidate in text if candidate.heading_match])


def verbatim_ranking(trigram: Sequence[Candidate]) -> list[Candidate]:
    """The trigram candidates holding the whole query verbatim (`Candidate.verbatim`: a pasted sentence of
    at least the preset's minimum of words, not inside a quotation), in their order, ranked 1, 2, ...:
    the passages the query was copied from.

    Fused as a ranking of its own, on top of the trigram ranking that found them: a dozen words in the same
    order is evidence of the source that no count of shared words or nearness of meaning gives, and
    without it chunks that share the sentence's common words, found by two rankings, outrank the one
    that holds it (docs/decisions/0042-top-of-the-ranking.md).
    """
    return _reranked([candidate for candidate in trigram if candidate.verbatim])


def _reranked(kept: Sequence[Candidate]) -> list[Candidate]:
    """``kept`` ranked 1, 2, ... in its order."""
    return [replace(candidate, rank=rank) for rank, candidate in enumerate(kept, start=1)]


def normalised_scores(name: str, ranking: Sequence[Candidate]) -> list[float]:
    """A ranking's scores in [0, 1] relative to its best candidate (module doc): the vector ranking's
    cosine distance turned into similarity clipped at 0, the others' scores as they are; all 0 when the
    best is not positive."""
    raw = [max(1.0 - c.score, 0.0) if name == VECTOR else max(c.score, 0.0) for c in ranking]
    best = max(raw, default=0.0)
    return [value / best if best > 0 else 0.0 for value in raw]


def convex_combination(
    rankings: Mapping[str, Sequence[Candidate]], weights: Mapping[str, float]
) -> list[tuple[Key, float]]:
    """``sum over rankings m of weights[m] * normalised score`` (Bruch et al. 2023), best first; ties by the
    best single rank, then by the order of first appearance (rankings in the given order)."""
    scores: dict[Key, float] = {}
    best_rank: dict[Key, int] = {}
    first_seen: dict[Key, int] = {}
    for name, ranking in rankings.items():
        weight = float(weights.get(name, 1.0))
        if weight == 0:
            continue
        seen: set[Key] = set()
        for candidate, value in zip(ranking, normalised_scores(name, ranking), strict=True):
            if candidate.key in seen:
                continue
            seen.add(candidate.key)
            scores[candidate.key] = scores.get(candidate.key, 0.0) + weight * value
            best_rank[candidate.key] = min(best_rank.get(candidate.key, candidate.rank), candidate.rank)
            first_seen.setdefault(candidate.key, len(first_seen))
    ordered = sorted(scores, key=lambda key: (-scores[key], best_rank[key], first_seen[key]))
    return [(key, scores[key]) for key in ordered]


def propagate_to_similar(
    fused: Sequence[tuple[Key, float]],
    similar: Sequence[tuple[Key, Key, float]],
    *,
    share: float,
) -> list[tuple[Key, float]]:
    """Similar-chunk propagation (module doc): each fused item gets at least ``share`` times the fused score
    of any item it is similar to (from the scores before propagation, so nothing chains), re-sorted; the
    order of ``fused`` breaks ties.

    Args:
        fused: (key, score) best first.
        similar: (source key, target key, cosine similarity) pairs, already cut at the threshold; pairs
            naming a key not in ``fused`` are ignored.
        share: in [0, 1]; 0 returns ``fused`` unchanged.
    """
    if share <= 0 or not similar:
        return list(fused)
    before = dict(fused)
    after = dict(fused)
    for source, target, _ in similar:
        if source in before and target in after and source != target:
            after[target] = max(after[target], share * before[source])
    place = {key: index for index, (key, _) in enumerate(fused)}
    return sorted(after.items(), key=lambda item: (-item[1], place[item[0]]))


__all__ = [
    "CONVEX",
    "FUSIONS",
    "HEADING",
    "RANKINGS",
    "RRF",
    "TEXT",
    "TRIGRAM",
    "VECTOR",
    "VERBATIM",
    "convex_combination",
    "heading_ranking",
    "normalised_scores",
    "propagate_to_similar",
    "reciprocal_rank_fusion",
    "verbatim_ranking",
]
