"""How CompileContext compiles (`ContextSettings`) and its named presets (`CONTEXT_PRESETS`); what each
setting does is described in `query_service.context.compiler`. Configured as data (STYLE 7)."""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field
from dataclasses import replace
from datetime import timedelta

from query_service.context.pack.fitting import FitSettings
from query_service.retrieval.hybrid_search import MAX_TOP_K
from query_service.retrieval.hybrid_search import SEARCH_PRESETS
from query_service.retrieval.hybrid_search import SearchSettings
from query_service.retrieval.hybrid_search import search_preset


@dataclass(frozen=True)
class ContextSettings:
    """How a context pack is compiled (the module doc names where each is used).

    Attributes:
        search: the retrieval settings for the hits: the default preset without similar-chunk propagation
            (a pack drops the near copies it would lift: `near_duplicate_threshold`; and it saves a statement).
        search_tokens_per_hit: tokens a hit is expected to take; the search asks for
            ``token_budget / search_tokens_per_hit`` hits, within ``min_search_hits..max_search_hits``.
        min_search_hits, max_search_hits: bounds of that depth (at most Search's ``top_k`` limit, 100).
        hit_half_rank: 0 scores a hit by its fused score relative to the best possible one; n > 0 by its
            place r in the fused list, ``1 / (1 + (r - 1) / n)`` (1 for the first hit, 1/2 at place n + 1).
        neighbour_origins: the best hits whose neighbouring turns become candidates.
        neighbour_window: turns on each side of such a hit.
        neighbour_max_gap: the farthest a neighbouring turn may be in time.
        neighbour_weight: a neighbour's score relative to its origin hit's, at distance 1.
        neighbour_decay: the factor per further turn (also per place among the recent turns).
        participant_weight: a turn whose actor or subject the query names (its id's words are words of
            the query: "caroline" in "When did Caroline ...") scores ``1 + participant_weight`` times more:
            a question about a person is answered by what that person said, in words of its own
            (docs/decisions/0023-named-participant-weight.md).
        participant_round_hits: for each participant the query names (an actor or subject of a first-round
            turn; `query_service.context.pack.participants`), a second search among that participant's
            turns only, for the query without the name, adds this many hits (0: no such round).
        participant_round_limit: the most named participants searched that way (one search each).
        participant_round_weight: such a hit's score relative to a first-round hit's of the same fused
            score (before the participant boost, which it then gets as the named participant's turn).
        participant_round_preset: the search preset of that round (`SEARCH_PRESETS`, without similar-chunk
            propagation as ``search``), its fused score taken relative to the best that preset can give:
            ``"semantic"``, meaning over wording, since the question without the name keeps only its frame
            ("What did … research?") and the person's answer is in words of their own
            (docs/decisions/0023-named-participant-weight.md).
        recent_limit: the most recent turns taken as candidates (0: none).
        recent_weight: the score of the most recent turn.
        anchor_fact_limit: facts read per anchor and direction (as subject, as object).
        graph_neighbour_limit: nodes one fact away from an anchor whose facts become candidates.
        graph_neighbour_weight: their facts' base weight relative to ``anchor_weight``.
        mention_scan_chunks: best hits whose text is scanned for entity ids.
        mentioned_entity_limit: entities named in hits whose facts become candidates.
        mentioned_fact_limit: facts read per such entity (as subject) and per graph neighbour.
        anchor_weight: base score of a fact about an anchor.
        mention_weight: base score of a fact about a named entity, times the naming hit's score.
        near_duplicate_threshold: word-set Jaccard similarity from which a chunk repeats a better one.
        summary_weight: a summary brought in by the memory hits it covers scores the best of their
            scores times this (`query_service.context.pack.summaries`).
        fitting: budget fitting (`FitSettings`: score order or value per token); chunks are the truncatable items,
            capped at ``fitting.max_item_share`` of the budget.
    """

    search: SearchSettings = field(
        default_factory=lambda: replace(SEARCH_PRESETS["default"], similar_share=0)
    )
    search_tokens_per_hit: int = 25
    min_search_hits: int = 20
    max_search_hits: int = MAX_TOP_K
    hit_half_rank: int = 0
    neighbour_origins: int = 20
    neighbour_window: int = 2
    neighbour_max_gap: timedelta = timedelta(hours=6)
    neighbour_weight: float = 0.5
    neighbour_decay: float = 0.6
    participant_weight: float = 3.0
    participant_round_hits: int = 20
    participant_round_limit: int = 3
    participant_round_weight: float = 0.5
    participant_round_preset: str = "semantic"
    recent_limit: int = 5
    recent_weight: float = 0.1
    anchor_fact_limit: int = 100
    graph_neighbour_limit: int = 10
    graph_neighbour_weight: float = 0.25
    mention_scan_chunks: int = 10
    mentioned_entity_limit: int = 20
    mentioned_fact_limit: int = 20
    anchor_weight: float = 1.0
    mention_weight: float = 0.7
    near_duplicate_threshold: float = 0.85
    summary_weight: float = 1.0
    fitting: FitSettings = field(default_factory=lambda: FitSettings(selection="rank"))

    def participant_round_search(self) -> SearchSettings:
        """The retrieval settings of the participant round (``participant_round_preset``).

        Raises:
            KeyError: the preset is not one of `SEARCH_PRESETS`.
        """
        return replace(search_preset(self.participant_round_preset), similar_share=0)

    def search_depth(self, token_budget: int) -> int:
        """Hits asked of the search for ``token_budget``."""
        wanted = token_budget // max(1, self.search_tokens_per_hit)
        return max(self.min_search_hits, min(self.max_search_hits, MAX_TOP_K, wanted))


CONTEXT_PRESETS: dict[str, ContextSettings] = {
    # Score order (a candidate that does not fit is skipped and the next one tried): on the LoCoMo
    # development split it packed as many evidence turns as value per token (bench/RESULTS.md (git history)).
    "default": ContextSettings(),
    # Score per token added (greedy knapsack), items shorter than 40 tokens counted as 40: favours short
    # items when candidates differ much in length (documents next to chat turns).
    "value_per_token": ContextSettings(fitting=FitSettings(selection="value_per_token", min_cost_tokens=40)),
}


def context_preset(name: str = "default") -> ContextSettings:
    """The named preset. Raises KeyError naming the known presets."""
    try:
        return CONTEXT_PRESETS[name]
    except KeyError:
        raise KeyError(f"unknown context preset {name!r}; known: {', '.join(CONTEXT_PRESETS)}") from None
