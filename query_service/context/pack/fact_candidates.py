"""CompileContext's fact candidates: facts about the anchors, about nodes one fact away from an anchor and
about entities named in the best hits, scored by base weight x confidence x evidence rank
(`query_service.context.compiler` steps 1-2). Transport free.

A participant link (``episode:<id> ACTOR|SUBJECT <key>``) is valued by what it adds to the pack, not by
its kind (docs/explanation/context-compilation.md): nothing when its episode is a candidate itself (the
turn shows who took part), dropped as redundant; otherwise, for a request with a query, its episode's
relevance, which is below every retrieved turn's (the episode was not among the hits), so it scores 0
and only fills budget that nothing else wants."""

from __future__ import annotations

from collections.abc import Collection
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC
from datetime import datetime
from typing import Any

from common.domain.episode_header import PARTICIPANT_PREDICATES
from common.storage.context_store import key_tokens
from common.storage.fact_rows import FactQuery
from common.storage.fact_rows import FactRow
from query_service.context.pack.candidates import PackCandidate
from query_service.context.pack.candidates import chunk_key
from query_service.context.pack.compiler import PackCompiler
from query_service.context.pack.items import ANCHOR_FACT
from query_service.context.pack.items import EVIDENCE_RANK
from query_service.context.pack.items import GRAPH_NEIGHBOUR
from query_service.context.pack.items import MENTION
from query_service.context.pack.items import Selection
from query_service.context.pack.items import fact_score
from query_service.context.pack.items import render_fact
from query_service.context.pack.request import ContextRequest
from query_service.context.pack.settings import ContextSettings
from query_service.pii_output import PiiDisclosure
from query_service.provenance import Provenance
from query_service.readers.facts import disclose_fact
from query_service.retrieval.hybrid_search import SearchHit


def fact_candidates(
    compiler: PackCompiler,
    config: ContextSettings,
    request: ContextRequest,
    as_of: datetime,
    hits: Sequence[SearchHit],
    chunk_scores: dict[str, float],
    shown: PiiDisclosure,
    candidate_episodes: Collection[str] = (),
) -> list[PackCandidate]:
    """The fact candidates of ``request`` (anchor facts, graph neighbours' facts, facts of entities named
    in the best ``hits``; `query_service.context.compiler` steps 1-2), rendered and masked for ``shown``;
    participant links valued against ``candidate_episodes`` (the episode keys of the chunk candidates;
    `participant_link_value`).

    Raises:
        Unavailable: the database cannot be reached.
    """
    scored: dict[str, tuple[FactRow, float, Selection]] = {}  # fact_id -> (row, score, why)

    def offer(row: FactRow, base: float, rule: str, reason: str) -> None:
        score = fact_score(row, base)
        current = scored.get(row.fact_id)
        if current is None or score > current[1]:
            components = {
                "base_weight": base,
                "confidence": row.confidence,
                "evidence_rank": float(EVIDENCE_RANK.get(row.evidence, 1)),
            }
            also = (current[2].rule,) if current is not None and current[2].rule != rule else ()
            scored[row.fact_id] = (row, score, Selection(rule, reason, components, also))

    def facts_of(conn: Any, subject: str = "", object_key: str = "", limit: int = 0) -> list[FactRow]:
        query = FactQuery(
            namespace=request.namespace,
            subject=subject,
            object=object_key,
            as_of=as_of,
            include_lost=True,
            page_size=limit,
            visibility=request.visibility,
        )
        return compiler.facts.list(conn, query, now)[:limit]

    now = datetime.now(UTC)
    # Autocommit: the reads need no common snapshot (no BEGIN/COMMIT round trips).
    with compiler.database.read_connection() as conn:
        far_ends: dict[str, str] = {}  # node one fact away from an anchor -> that anchor
        for anchor in request.anchors:
            for direction in ("subject", "object"):
                rows = facts_of(
                    conn,
                    subject=anchor if direction == "subject" else "",
                    object_key=anchor if direction == "object" else "",
                    limit=config.anchor_fact_limit,
                )
                for row in rows:
                    offer(row, config.anchor_weight, ANCHOR_FACT, f"about anchor {anchor} ({direction})")
                    far = row.object_key if direction == "subject" else row.subject_key
                    if (
                        not row.evidence_lost
                        and far not in request.anchors
                        and not far.startswith("episode:")
                    ):
                        far_ends.setdefault(far, anchor)
        neighbour_base = config.anchor_weight * config.graph_neighbour_weight
        for far, anchor in list(far_ends.items())[: config.graph_neighbour_limit]:
            for row in facts_of(conn, subject=far, limit=config.mentioned_fact_limit):
                offer(
                    row,
                    neighbour_base,
                    GRAPH_NEIGHBOUR,
                    f"about {far}, one fact away from anchor {anchor}",
                )
        token_score: dict[str, float] = {}
        for hit in hits[: config.mention_scan_chunks]:
            score = chunk_scores.get(chunk_key(hit.chunk), 0.0)
            for token in key_tokens([hit.chunk.text]):
                token_score[token] = max(token_score.get(token, 0.0), score)
        mentioned = compiler.store.keys_with_facts(
            conn,
            request.namespace,
            list(token_score),
            exclude=list(request.anchors),
            limit=config.mentioned_entity_limit,
            visibility=request.visibility,
        )
        for key in mentioned:
            id_part = key.split(":", 1)[1].lower() if ":" in key else key.lower()
            base = config.mention_weight * token_score.get(id_part, 0.0)
            for row in facts_of(conn, subject=key, limit=config.mentioned_fact_limit):
                offer(row, base, MENTION, f"about {key}, named in a retrieved chunk")
        live = [row for row, _, _ in scored.values() if not row.evidence_lost]
        conflicts = compiler.facts.conflicting_ids(conn, live, visibility=request.visibility)
    out: list[PackCandidate] = []
    for row, score, selection in scored.values():
        conflict = row.fact_id in conflicts
        visible = disclose_fact(shown, row)  # keys and attributes masked for an uncleared caller
        candidate = PackCandidate(
            kind="fact",
            key=row.fact_id,
            text=render_fact(visible, conflict=conflict),
            score=score,
            provenance=Provenance.of_fact(visible),
            selection=replace(selection, reason=shown.text(selection.reason)),
            conflict=conflict,
            # The journal's reason names no anchor: a reader of the trace may not see it (the fact's
            # own ends it may, or the decision is left out of GetTrace).
            detail={
                "why": selection.reason.split(", one fact away from anchor")[0]
                + (", one fact away from an anchor" if selection.rule == GRAPH_NEIGHBOUR else ""),
                "evidence": row.evidence,
                "confidence": row.confidence,
            },
        )
        if row.evidence_lost:
            candidate.drop_reason = "evidence lost (every observation behind it was redacted or purged)"
        elif is_participant_link(row):
            relevance, candidate.drop_reason = participant_link_value(
                row, candidate_episodes, has_query=bool(request.query.strip())
            )
            candidate.score = score * relevance
            components = {**candidate.selection.components, "episode_relevance": relevance}
            candidate.selection = replace(candidate.selection, components=components)
        out.append(candidate)
    return out


def is_participant_link(row: FactRow) -> bool:
    """Whether ``row`` links an episode to who or what took part (``episode:<id> ACTOR|SUBJECT <key>``)."""
    return row.subject_key.startswith("episode:") and row.predicate in PARTICIPANT_PREDICATES


def participant_link_value(
    row: FactRow, candidate_episodes: Collection[str], *, has_query: bool
) -> tuple[float, str]:
    """(its episode's relevance, drop reason) of a participant link (the module doc): dropped when its
    episode is a candidate itself; relevance 0 when a query ranks the episodes and its episode was not
    retrieved; else 1 (no query: the anchor is all the relevance there is). The link's score is its fact
    score times that relevance."""
    if row.subject_key in candidate_episodes:
        return 1.0, "adds nothing: its episode is a candidate itself and shows who took part"
    return (0.0 if has_query else 1.0), ""
