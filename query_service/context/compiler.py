"""CompileContext: candidates by rule, scored, deduplicated, rendered, fitted to the token budget and
traced, never showing what the caller's visibility hides (protos/memory/v1/context_service.proto).

The rules step by step, visibility and personal data: docs/decisions/0021-context-compilation-rules.md.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC
from datetime import datetime
from typing import cast

from common.storage.database import Database
from common.storage.episode_store import EpisodeStore
from common.storage.episode_store import EpisodeTurn
from common.text_models.tokenizer import TokenCounter
from query_service.context.pack.candidates import CandidatePool
from query_service.context.pack.candidates import PackCandidate
from query_service.context.pack.candidates import chunk_candidate
from query_service.context.pack.candidates import chunk_key
from query_service.context.pack.compiler import PackCompiler
from query_service.context.pack.conversation import RedundancyFilter
from query_service.context.pack.conversation import normalised_words
from query_service.context.pack.fact_candidates import fact_candidates
from query_service.context.pack.fitting import DROPPED
from query_service.context.pack.fitting import FitResult
from query_service.context.pack.items import HIT
from query_service.context.pack.items import NEIGHBOUR
from query_service.context.pack.items import RECENT
from query_service.context.pack.items import ContextItem
from query_service.context.pack.items import ContextPack
from query_service.context.pack.items import DroppedCandidate
from query_service.context.pack.items import Selection
from query_service.context.pack.participants import named_participants
from query_service.context.pack.participants import names_participant
from query_service.context.pack.participants import without_names
from query_service.context.pack.request import ContextRequest
from query_service.context.pack.request import context_request_violations
from query_service.context.pack.request import with_context_defaults
from query_service.context.pack.settings import CONTEXT_PRESETS
from query_service.context.pack.settings import ContextSettings
from query_service.context.pack.settings import context_preset
from query_service.context.pack.summaries import add_summaries
from query_service.pii_output import PiiDisclosure
from query_service.retrieval.hybrid_search import HybridSearcher
from query_service.retrieval.hybrid_search import SearchHit
from query_service.retrieval.hybrid_search import SearchQuery

__all__ = ["CONTEXT_PRESETS", "ContextCompiler", "ContextSettings", "context_preset", "validate_context"]

log = logging.getLogger(__name__)


def validate_context(request: ContextRequest) -> ContextRequest:
    """Checks a request and fills defaults (budget 0 -> 2000, as_of None -> now, trace id ``ctx-...``).

    Raises:
        InvalidArgument: field violations named like the CompileContextRequest fields.
    """
    context_request_violations(request).raise_if_any()
    return with_context_defaults(request, trace_prefix="ctx-")


def hit_components(hit: SearchHit, best: float, place: int) -> dict[str, float]:
    """The parts of a hit's score: its place in the fused list (1-based), fused retrieval score, its share
    of the best possible one, each ranking's score and rank (1-based)."""
    components = {
        "fused_rank": float(place),
        "retrieval_score": hit.score,
        "relative_score": min(1.0, hit.score / best),
        "vector_score": hit.vector_score,
        "text_score": hit.text_score,
        "trigram_score": hit.trigram_score,
    }
    components.update({f"rank_{name}": float(rank) for name, rank in hit.ranks.items()})
    return components


class ContextCompiler(PackCompiler):
    """Compiles context packs (see the module doc).

    Args:
        database: the process's database.
        searcher: the hybrid searcher for the hits.
        tokens: the token counter of the configured encoding (``Settings.tokenizer_encoding``).
        settings: a `ContextSettings` (default preset when None).
    """

    def __init__(
        self,
        database: Database,
        searcher: HybridSearcher,
        tokens: TokenCounter,
        settings: ContextSettings | None = None,
    ) -> None:
        self.settings = settings or context_preset("default")
        super().__init__(database, tokens, self.settings.fitting)
        self.searcher = searcher
        self.episodes = EpisodeStore(database.settings)
        self.round_search = self.settings.participant_round_search()

    def compile(self, request: ContextRequest) -> ContextPack:
        """Compiles the pack for ``request`` and records the decisions under its trace id.

        Raises:
            InvalidArgument: see `validate_context`.
            PermissionDenied: an anchor holds personal data and the caller's output is masked (reason
                PII_CLEARANCE_REQUIRED): the pack's anchor facts would tell whether it is stored.
            Unavailable: the database cannot be reached.
        """
        request = validate_context(request)
        request.pii.refuse_personal_data_lookups(
            {f"anchors[{i}]": key for i, key in enumerate(request.anchors)}
        )
        as_of = request.as_of or datetime.now(UTC)
        config = self.settings
        depth = config.search_depth(request.token_budget)
        hits: list[SearchHit] = []
        if request.query.strip():
            hits = self.searcher.search(
                SearchQuery(
                    namespace=request.namespace,
                    query=request.query,
                    top_k=depth,
                    visibility=request.visibility,
                ),
                settings=config.search,
            )
        shown = self.pii.start(request.pii)  # masks what the caller may not see, before fitting
        pool = CandidatePool()
        scores = self._chunk_candidates(request, as_of, hits, pool, shown)
        add_summaries(
            self.database,
            self.store,
            self.tokens,
            request,
            hits,
            pool,
            shown,
            summary_weight=config.summary_weight,
        )
        episodes = {key.rsplit("#", 1)[0] for key, c in pool.by_key.items() if c.kind == "chunk"}
        for candidate in fact_candidates(
            self, config, request, as_of, hits, scores, shown, candidate_episodes=episodes
        ):
            pool.add(candidate)
        _weigh_participants(pool, request.query, config.participant_weight)
        candidates = pool.ranked()
        _mark_redundant(candidates, config.near_duplicate_threshold)
        fitted = self.fitter.fit(candidates, request.token_budget)
        kept = [cast(PackCandidate, piece.candidate) for piece in fitted.kept]
        items = [
            ContextItem(
                kind=candidate.kind,
                key=candidate.key,
                text=piece.text,
                score=candidate.score,
                provenance=candidate.provenance,
                conflict=candidate.conflict,
                token_count=piece.token_count,
                selection=candidate.selection,
                group=candidate.group,
            )
            for candidate, piece in zip(kept, fitted.kept, strict=True)
        ]
        self.audit_kept(request, lambda exposed: _note_kept(exposed, items, kept))
        with self.database.primary_connection() as conn:  # the journal is a write: never on a replica
            self.record(conn, request, fitted, {"search_depth": depth})
        return ContextPack(
            items=items,
            **self.pack_totals(request, fitted, as_of),
            dropped=_best_dropped(candidates, fitted, request.dropped_limit),
        )

    # -- chunk candidates: hits, their neighbouring turns, recent turns ------------------------------

    def _chunk_candidates(
        self,
        request: ContextRequest,
        as_of: datetime,
        hits: Sequence[SearchHit],
        pool: CandidatePool,
        shown: PiiDisclosure,
    ) -> dict[str, float]:
        """Adds the hits, their neighbours and the recent turns to ``pool``; returns the hits' scores by
        chunk key."""
        config = self.settings
        best = config.search.max_score() or 1.0
        origin_ids = [
            ids[0]
            for hit in hits
            if hit.chunk.node_type == "episode" and (ids := hit.provenance.observation_ids)
        ]
        with self.database.read_connection() as conn:  # one statement: no BEGIN/COMMIT round trips
            conversation = self.episodes.conversation(
                conn,
                request.namespace,
                origin_ids,
                origins=config.neighbour_origins,
                window=config.neighbour_window,
                max_gap=config.neighbour_max_gap,
                as_of=as_of,
                recent_limit=config.recent_limit,
                visibility=request.visibility,
            )
        turns = dict(conversation.turns)
        participant_hits = self._participant_round(request, as_of, turns)
        scores: dict[str, float] = {}
        origin_score: dict[str, float] = {}
        for place, hit in enumerate(hits):
            score = min(1.0, hit.score / best)
            if config.hit_half_rank > 0:
                score = 1.0 / (1.0 + place / config.hit_half_rank)
            key = chunk_key(hit.chunk)
            scores[key] = score
            turn = _turn_of(hit.chunk.node_key, turns)
            if turn is not None and len(origin_score) < config.neighbour_origins:
                origin_score.setdefault(turn.observation_id, score)
            pool.add(
                chunk_candidate(
                    hit.chunk,
                    turn,
                    shown,
                    score=score,
                    selection=Selection(HIT, "found by hybrid search", hit_components(hit, best, place + 1)),
                    metadata=hit.provenance.metadata,
                    source_path=hit.provenance.source_path,
                )
            )
        round_best = self.round_search.max_score() or 1.0
        for place, hit in enumerate(participant_hits):
            score = min(1.0, hit.score / round_best) * config.participant_round_weight
            key = chunk_key(hit.chunk)
            scores[key] = max(score, scores.get(key, 0.0))
            pool.add(
                chunk_candidate(
                    hit.chunk,
                    _turn_of(hit.chunk.node_key, turns),
                    shown,
                    score=score,
                    selection=Selection(
                        HIT,
                        "found by hybrid search among the turns of a participant the query names",
                        hit_components(hit, round_best, place + 1)
                        | {"participant_round_weight": config.participant_round_weight},
                    ),
                    metadata=hit.provenance.metadata,
                    source_path=hit.provenance.source_path,
                )
            )
        neighbours = [near for near in conversation.neighbours if near.origin_id in origin_score]
        recent = conversation.recent
        for near in neighbours:
            decay = config.neighbour_decay ** (abs(near.distance) - 1)
            base = origin_score[near.origin_id]
            side = "before" if near.distance < 0 else "after"
            count = abs(near.distance)
            reason = f"{count} turn{'s' if count > 1 else ''} {side} episode:{near.origin_id} (a hit)"
            for chunk in near.chunks:
                pool.add(
                    chunk_candidate(
                        chunk,
                        near.turn,
                        shown,
                        score=base * config.neighbour_weight * decay,
                        selection=Selection(
                            NEIGHBOUR,
                            reason,
                            {
                                "origin_score": base,
                                "neighbour_weight": config.neighbour_weight,
                                "decay": decay,
                                "distance": float(near.distance),
                            },
                        ),
                    )
                )
        for place, latest in enumerate(recent):
            decay = config.neighbour_decay**place
            for chunk in latest.chunks:
                pool.add(
                    chunk_candidate(
                        chunk,
                        latest.turn,
                        shown,
                        score=config.recent_weight * decay,
                        selection=Selection(
                            RECENT,
                            f"the {_ordinal(place + 1)} most recent observation",
                            {"recent_weight": config.recent_weight, "decay": decay},
                        ),
                    )
                )
        return scores

    def _participant_round(
        self, request: ContextRequest, as_of: datetime, turns: dict[str, EpisodeTurn]
    ) -> list[SearchHit]:
        """The second retrieval round: for each participant of the first round's ``turns`` that the query
        names (at most ``participant_round_limit``), the best ``participant_round_hits`` of that
        participant's turns for the query without the name (`query_service.context.pack.participants`);
        the turns of those hits are added to ``turns``. A question about a person is answered by what that
        person said, often in words the question does not use; among everyone's turns those rank low.

        Raises:
            Unavailable: the database cannot be reached.
        """
        config = self.settings
        if config.participant_round_hits <= 0 or config.participant_round_limit <= 0:
            return []
        found: list[SearchHit] = []
        named = named_participants(request.query, turns.values())
        for participant in named[: config.participant_round_limit]:
            rest = without_names(request.query, [participant])
            if not rest.strip():
                continue
            found += self.searcher.search(
                SearchQuery(
                    namespace=request.namespace,
                    query=rest,
                    top_k=config.participant_round_hits,
                    participants=(participant,),
                    visibility=request.visibility,
                ),
                settings=self.round_search,
            )
        unread = [ids[0] for hit in found if (ids := hit.provenance.observation_ids) and ids[0] not in turns]
        if unread:
            with self.database.read_connection() as conn:
                turns.update(
                    self.episodes.conversation(
                        conn,
                        request.namespace,
                        unread,
                        origins=0,
                        window=0,
                        max_gap=config.neighbour_max_gap,
                        as_of=as_of,
                        recent_limit=0,
                        visibility=request.visibility,
                    ).turns
                )
        return found

    # -- fact candidates: about anchors, their graph neighbours and entities named in hits -----------


def _turn_of(node_key: str, turns: dict[str, EpisodeTurn]) -> EpisodeTurn | None:
    """The turn of an episode node key (``episode:<observation_id>``), when it was read."""
    return turns.get(node_key.removeprefix("episode:")) if node_key.startswith("episode:") else None


def _weigh_participants(pool: CandidatePool, query: str, weight: float) -> None:
    """Scales the turns whose actor or subject the query names by ``1 + weight`` (the module doc)."""
    if weight <= 0:
        return
    words = set(normalised_words(query))
    for candidate in pool.by_key.values():
        if any(names_participant(words, p) for p in candidate.participants):
            candidate.score *= 1 + weight
            candidate.selection = replace(
                candidate.selection,
                components={**candidate.selection.components, "participant_boost": 1 + weight},
            )


def _ordinal(number: int) -> str:
    suffix = "th" if 10 <= number % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(number % 10, "th")
    return f"{number}{suffix}"


def _mark_redundant(candidates: Sequence[PackCandidate], threshold: float) -> None:
    """Sets the drop reason of chunks that repeat a better chunk (``candidates`` best first)."""
    check = RedundancyFilter(threshold)
    for candidate in candidates:
        if candidate.kind != "chunk" or candidate.drop_reason:
            continue
        reason = check.offer(candidate.key, candidate.words_text or candidate.text)
        if reason:
            candidate.drop_reason = reason
    for candidate in candidates:  # the trace records the rule of every candidate (no other item's key:
        # another reader of the trace may not see the hit a neighbour was found next to)
        candidate.detail.setdefault("rule", candidate.selection.rule)
        if candidate.kind == "chunk":
            candidate.detail.setdefault("components", dict(candidate.selection.components))


def _best_dropped(
    candidates: Sequence[PackCandidate], fitted: FitResult, limit: int
) -> list[DroppedCandidate]:
    """The ``limit`` best-scored dropped candidates with why they were dropped (decisions are in
    candidate order)."""
    if limit <= 0:
        return []
    dropped = [
        DroppedCandidate(
            kind=candidate.kind,
            text=candidate.text,
            score=candidate.score,
            provenance=candidate.provenance,
            selection=candidate.selection,
            drop_reason=decision["reason"],
            token_count=int(decision["tokens"]),
        )
        for candidate, decision in zip(candidates, fitted.decisions, strict=True)
        if decision["decision"] == DROPPED
    ]
    dropped.sort(key=lambda d: -d.score)
    return dropped[:limit]


def _note_kept(exposed: PiiDisclosure, items: Sequence[ContextItem], kept: Sequence[PackCandidate]) -> None:
    """Passes the kept items' texts through a cleared caller's disclosure (with their chunks' marks), so
    the audit names what the caller received."""
    for item, candidate in zip(items, kept, strict=True):
        exposed.text(
            item.text,
            marks=candidate.pii_marks,
            key=item.provenance.fact_id or item.provenance.node_key,
            observation_ids=item.provenance.observation_ids,
        )
