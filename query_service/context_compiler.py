"""CompileContext, first version (DESIGN §7; protos/memory/v1/context_service.proto).

Steps:

1. **Candidates.** The best chunks for the query (`HybridSearcher`, ``chunk_candidates`` of them); the
   facts valid at ``as_of`` whose subject or object is an anchor; and the facts valid at ``as_of`` about
   entities *named* in the best chunks: registry nodes (``graph_nodes``) whose key's id part
   (``openssl`` of ``package:openssl``) equals a word or identifier of a chunk's text, limited to nodes
   that take part in facts and to ``mentioned_entity_limit`` of them. Facts whose evidence was lost
   are candidates only to be dropped with that reason.
2. **Rank.** Chunks: the fused retrieval score relative to the best possible one (0..1]. Facts: a base
   weight (``anchor_weight`` for facts about anchors; ``mention_weight`` times the score of the best
   chunk naming the entity otherwise) x confidence x evidence rank / 3 (asserted 3, extracted 2,
   inferred 1, derived 1; seed 000). Conflicting facts (another live fact of the same subject and
   predicate with a different object overlaps) are kept and flagged, never resolved.
3. **Render and fit.** Each item is rendered as text (facts as ``subject PREDICATE object (valid from X[,
   to Y]; evidence, confidence C; fact_id)``, chunks as a header line with title, heading and
   ``node_key#chunk_order`` followed by the chunk text), then items are added greedily in rank order
   while the *whole* pack text, counted with the configured tokenizer, stays within ``token_budget``. A
   chunk that does not fit whole may be cut to fit when at least ``min_truncated_tokens`` remain, and no
   chunk takes more than ``max_item_share`` of the budget (longer ones are cut to it; `FitSettings`).
   ``pack.token_count`` is the token count of ``pack.text`` and never exceeds the budget. The fitting
   is `query_service.context_pack.fitting.PackFitter`, shared with CompileTypedContext.
4. **Trace.** Every candidate's decision (kept or dropped, with a reason) is appended to
   ``context_traces`` under the pack's trace id (`query_service.context_pack.compiler.PackCompiler`).

What both compilers share (the request, the pack, evidence ranks, fact rendering, fitting, the
journal, the kept items' audit) is in `query_service.context_pack`; this module holds what is CompileContext's own: its
candidates (chunks and facts), their ranks, and the chunk rendering.

Visibility (seed 000 "Видимость внутри namespace"): ``ContextRequest.visibility`` is applied inside
every query — chunk rankings, facts about anchors, the registry look-up of entities named in chunks and
their facts — and a fact whose subject or object node is hidden is never a candidate, so no hidden
node's key or title reaches the pack through a fact.

Personal data (seed 000 "Персональные данные"; `query_service.pii_output`): with ``CB_PII_PROTECTION``
and a caller without clearance (``ContextRequest.pii``), every candidate is masked (or withheld, by its
chunk's marks) when it is rendered — before fitting, so the budget holds for the text actually returned
and ``token_count`` counts it. For a cleared caller the pack is unmasked and, when the kept items hold
personal data, one ``pii_access`` audit event is recorded under the pack's trace id. The trace journal
(``context_traces``) stores keys and decisions unmasked; GetTrace masks them on the way out.

Not yet: graph neighbourhood, recent observations and episodes as candidates, recency.

Configured as data: `ContextSettings` with named presets in `CONTEXT_PRESETS` (``"default"``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import cast

from common.kernel.pii import PiiMarks
from common.storage.context_store import key_tokens
from common.storage.database import Database
from common.storage.fact_store import FactQuery, FactRow
from common.text_models.tokenizer import TokenCounter
from query_service.context_pack.compiler import PackCompiler
from query_service.context_pack.fitting import FitCandidate, FitSettings
from query_service.context_pack.items import ContextItem, ContextPack, fact_score, render_fact
from query_service.context_pack.request import (
    ContextRequest,
    context_request_violations,
    with_context_defaults,
)
from query_service.fact_reader import disclose_fact
from query_service.hybrid_search import (
    SEARCH_PRESETS,
    HybridSearcher,
    SearchHit,
    SearchQuery,
    SearchSettings,
    disclose_hit,
)
from query_service.pii_output import PiiDisclosure
from query_service.provenance import Provenance

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ContextSettings:
    """How a context pack is compiled.

    Attributes:
        search: the retrieval settings for the chunk candidates.
        chunk_candidates: chunks taken from hybrid search.
        anchor_fact_limit: facts read per anchor and direction (as subject, as object).
        mention_scan_chunks: best chunks whose text is scanned for entity ids.
        mentioned_entity_limit: entities named in chunks whose facts become candidates.
        mentioned_fact_limit: facts read per such entity (as subject).
        anchor_weight: base score of a fact about an anchor.
        mention_weight: base score of a fact about a named entity, times the naming chunk's score.
        fitting: budget fitting (`FitSettings`); chunks are the truncatable items, capped at
            ``fitting.max_item_share`` of the budget.
    """

    search: SearchSettings = field(default_factory=lambda: SEARCH_PRESETS["default"])
    chunk_candidates: int = 20
    anchor_fact_limit: int = 100
    mention_scan_chunks: int = 10
    mentioned_entity_limit: int = 20
    mentioned_fact_limit: int = 20
    anchor_weight: float = 1.0
    mention_weight: float = 0.7
    fitting: FitSettings = field(default_factory=FitSettings)


CONTEXT_PRESETS: dict[str, ContextSettings] = {"default": ContextSettings()}


def context_preset(name: str = "default") -> ContextSettings:
    """The named preset. Raises KeyError naming the known presets."""
    try:
        return CONTEXT_PRESETS[name]
    except KeyError:
        raise KeyError(f"unknown context preset {name!r}; known: {', '.join(CONTEXT_PRESETS)}") from None


@dataclass(kw_only=True)
class _Candidate(FitCandidate):
    """A chunk or fact candidate; chunks may be cut to fit (`PackFitter`)."""

    provenance: Provenance
    conflict: bool = False
    pii_marks: PiiMarks = field(default_factory=PiiMarks)  # of the chunk, for the pii_access audit

    def __post_init__(self) -> None:
        self.truncatable = self.kind == "chunk"


def validate_context(request: ContextRequest) -> ContextRequest:
    """Checks a request and fills defaults (budget 0 -> 2000, as_of None -> now, trace id ``ctx-...``).

    Raises:
        InvalidArgument: field violations named like the CompileContextRequest fields.
    """
    context_request_violations(request).raise_if_any()
    return with_context_defaults(request, trace_prefix="ctx-")


def render_chunk_header(hit: SearchHit) -> str:
    """``[title — heading] node_key#chunk_order`` (the heading part only when there is one)."""
    chunk = hit.chunk
    label = f"{chunk.title} — {chunk.heading}" if chunk.heading else chunk.title or chunk.node_key
    return f"[{label}] {chunk.node_key}#{chunk.chunk_order}"


class ContextCompiler(PackCompiler):
    """Compiles context packs (see the module doc).

    Args:
        database: the process's database.
        searcher: the hybrid searcher for chunk candidates.
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

    def compile(self, request: ContextRequest) -> ContextPack:
        """Compiles the pack for ``request`` and records the decisions under its trace id.

        Raises:
            InvalidArgument: see `validate_context`.
            Unavailable: the database cannot be reached.
        """
        request = validate_context(request)
        as_of = request.as_of or datetime.now(UTC)
        config = self.settings
        hits: list[SearchHit] = []
        if request.query.strip():
            hits = self.searcher.search(
                SearchQuery(
                    namespace=request.namespace,
                    query=request.query,
                    top_k=config.chunk_candidates,
                    visibility=request.visibility,
                ),
                settings=config.search,
            )
        shown = self.pii.start(request.pii)  # masks what the caller may not see, before fitting
        candidates = self._chunk_candidates(hits, config, shown)
        candidates += self._fact_candidates(request, as_of, hits, candidates, config, shown)
        candidates.sort(key=lambda c: (-c.score, c.kind, c.key))
        fitted = self.fitter.fit(candidates, request.token_budget)
        kept = [cast(_Candidate, piece.candidate) for piece in fitted.kept]
        items = [
            ContextItem(
                kind=candidate.kind,
                key=candidate.key,
                text=piece.text,
                score=candidate.score,
                provenance=candidate.provenance,
                conflict=candidate.conflict,
                token_count=piece.token_count,
            )
            for candidate, piece in zip(kept, fitted.kept, strict=True)
        ]
        self.audit_kept(request, lambda exposed: _note_kept(exposed, items, kept))
        with self.database.primary_connection() as conn:  # the journal is a write: never on a replica
            self.record(conn, request, fitted)
        return ContextPack(
            items=items,
            text=fitted.text,
            token_count=fitted.token_count,
            trace_id=request.trace_id,
            token_budget=request.token_budget,
            dropped_count=fitted.dropped_count,
            as_of=as_of,
        )

    # -- candidates --------------------------------------------------------------------------------

    def _chunk_candidates(
        self, hits: Sequence[SearchHit], config: ContextSettings, shown: PiiDisclosure
    ) -> list[_Candidate]:
        best = config.search.max_score() or 1.0
        out: list[_Candidate] = []
        seen_texts: set[str] = set()
        for hit in hits:
            key = f"{hit.node_key}#{hit.chunk_order}"
            visible = disclose_hit(shown, hit)  # masked or withheld for an uncleared caller
            candidate = _Candidate(
                kind="chunk",
                key=key,
                text=render_chunk_header(visible) + "\n" + visible.chunk.text,
                score=min(1.0, hit.score / best),
                provenance=visible.provenance,
                detail={"retrieval_score": hit.score, "ranks": dict(hit.ranks)},
                pii_marks=PiiMarks.from_props(hit.chunk.meta),
            )
            if hit.chunk.text in seen_texts:
                candidate.drop_reason = "duplicate text of a better chunk"
            seen_texts.add(hit.chunk.text)
            out.append(candidate)
        return out

    def _fact_candidates(
        self,
        request: ContextRequest,
        as_of: datetime,
        hits: Sequence[SearchHit],
        chunks: Sequence[_Candidate],
        config: ContextSettings,
        shown: PiiDisclosure,
    ) -> list[_Candidate]:
        chunk_scores = {c.key: c.score for c in chunks}
        scored: dict[str, tuple[FactRow, float, str]] = {}  # fact_id -> (row, score, why)

        def offer(row: FactRow, score: float, why: str) -> None:
            current = scored.get(row.fact_id)
            if current is None or score > current[1]:
                scored[row.fact_id] = (row, score, why)

        now = datetime.now(UTC)
        with self.database.connection() as conn:
            for anchor in request.anchors:
                for direction in ("subject", "object"):
                    query = FactQuery(
                        namespace=request.namespace,
                        subject=anchor if direction == "subject" else "",
                        object=anchor if direction == "object" else "",
                        as_of=as_of,
                        include_lost=True,
                        page_size=config.anchor_fact_limit,
                        visibility=request.visibility,
                    )
                    for row in self.facts.list(conn, query, now)[: config.anchor_fact_limit]:
                        offer(
                            row, fact_score(row, config.anchor_weight), f"about anchor {anchor} ({direction})"
                        )
            token_score: dict[str, float] = {}
            for hit in hits[: config.mention_scan_chunks]:
                score = chunk_scores.get(f"{hit.node_key}#{hit.chunk_order}", 0.0)
                for token in key_tokens([hit.chunk.text]):
                    token_score[token] = max(token_score.get(token, 0.0), score)
            mentioned = self.store.keys_with_facts(
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
                query = FactQuery(
                    namespace=request.namespace,
                    subject=key,
                    as_of=as_of,
                    include_lost=True,
                    page_size=config.mentioned_fact_limit,
                    visibility=request.visibility,
                )
                for row in self.facts.list(conn, query, now)[: config.mentioned_fact_limit]:
                    offer(row, fact_score(row, base), f"about {key}, named in a retrieved chunk")
            live = [row for row, _, _ in scored.values() if not row.evidence_lost]
            conflicts = self.facts.conflicting_ids(conn, live, visibility=request.visibility)
        out: list[_Candidate] = []
        for row, score, why in scored.values():
            conflict = row.fact_id in conflicts
            visible = disclose_fact(shown, row)  # keys and attributes masked for an uncleared caller
            candidate = _Candidate(
                kind="fact",
                key=row.fact_id,
                text=render_fact(visible, conflict=conflict),
                score=score,
                provenance=Provenance(
                    node_key=visible.subject_key,
                    source_path=visible.source_path,
                    observation_ids=tuple(row.observation_ids),
                    fact_id=row.fact_id,
                ),
                conflict=conflict,
                detail={"why": why, "evidence": row.evidence, "confidence": row.confidence},
            )
            if row.evidence_lost:
                candidate.drop_reason = "evidence lost (every observation behind it was redacted or purged)"
            out.append(candidate)
        return out


def _note_kept(exposed: PiiDisclosure, items: Sequence[ContextItem], kept: Sequence[_Candidate]) -> None:
    """Passes the kept items' texts through a cleared caller's disclosure (with their chunks' marks), so
    the audit names what the caller received."""
    for item, candidate in zip(items, kept, strict=True):
        exposed.text(
            item.text,
            marks=candidate.pii_marks,
            key=item.provenance.fact_id or item.provenance.node_key,
            observation_ids=item.provenance.observation_ids,
        )
