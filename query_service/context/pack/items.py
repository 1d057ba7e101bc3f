"""The compiled pack (`ContextPack`) and its item (`ContextItem`), how facts are weighed by their evidence (`fact_score`;
docs/explanation/knowledge-model.md: asserted 3, extracted 2, inferred and derived 1) and how a fact is rendered in the pack text
(`render_fact`). Shared by both compilers; transport free.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from datetime import datetime

from common.kernel.identifiers import canonical_instant
from common.storage.fact_rows import FactRow
from query_service.provenance import Provenance

EVIDENCE_RANK: dict[str, int] = {"asserted": 3, "extracted": 2, "inferred": 1, "derived": 1}
MAX_EVIDENCE_RANK = 3


# The rules that make a CompileContext candidate (memory.v1.ItemSelection.rule).
HIT = "hit"  # a chunk hybrid search returned for the query
NEIGHBOUR = "neighbour"  # a turn next to a hit's turn in the same stream
ANCHOR_FACT = "anchor_fact"  # a fact about an anchor
GRAPH_NEIGHBOUR = "graph_neighbour"  # a fact about a node one fact away from an anchor
MENTION = "mention"  # a fact about an entity named in a candidate
RECENT = "recent"  # one of the namespace's most recent observations
SUMMARY = "summary"  # a summary memory that is a hit or covers memory hits (context_pack.summaries)
TRAVERSAL = "traversal"  # CompileTypedContext: reached by the typed walk


@dataclass(frozen=True)
class Selection:
    """Why a candidate is in the pack (or was considered): the rule that brought it, in words, and the parts
    of its score (maps onto memory.v1.ItemSelection).

    Attributes:
        rule: one of the rules above (`HIT`, `NEIGHBOUR`, ...).
        reason: the rule in words, e.g. ``"2 turns after episode:obs-1 (a hit)"``.
        components: the parts of the score by name (``retrieval_score``, ``rank_text``, ``base_weight``,
            ``decay``, ``confidence``, ``evidence_rank``, ``value_per_token``, ...).
        also: the other rules that brought the same item (a turn found as a hit and as a neighbour).
    """

    rule: str
    reason: str = ""
    components: Mapping[str, float] = field(default_factory=dict)
    also: tuple[str, ...] = ()


@dataclass(frozen=True)
class ContextItem:
    """One item of a pack (maps onto memory.v1.ContextItem).

    Attributes:
        kind: ``"chunk"`` or ``"fact"`` (typed packs: ``"node"`` or ``"fact"``).
        key: its identity in the trace (``node_key#chunk_order``, a fact_id, a natural key).
        text: the item as it appears in the pack text (possibly cut to fit).
        score: its rank score, in 0..1.
        provenance: where it came from.
        conflict: a fact overlapped by another live version (same subject and predicate, another object);
            flagged, never resolved.
        token_count: the tokens of ``text``.
        selection: why it was selected (None where a compiler does not say).
        group: the header of the block it is laid out under in the pack text (``""``: a block of its own).
    """

    kind: str
    key: str
    text: str
    score: float
    provenance: Provenance
    conflict: bool = False
    token_count: int = 0
    selection: Selection | None = None
    group: str = ""


@dataclass(frozen=True)
class DroppedCandidate:
    """A candidate that is not in the pack, with why it was a candidate and why it was dropped (maps onto
    memory.v1.DroppedCandidate). Only candidates the caller may see exist; their text is masked like the
    kept items'.

    Attributes:
        kind: ``"chunk"`` or ``"fact"``.
        text: its rendered text (masked for an uncleared caller).
        score: its rank score.
        provenance: where it came from.
        selection: why it was a candidate.
        drop_reason: why it was dropped (over budget, a duplicate of a kept item, evidence lost, ...).
        token_count: the tokens of ``text``.
    """

    kind: str
    text: str
    score: float
    provenance: Provenance
    selection: Selection
    drop_reason: str
    token_count: int


@dataclass(frozen=True)
class ContextPack:
    """A compiled pack (maps onto memory.v1.ContextPack; typed packs extend it).

    Attributes:
        items: the kept items in pack order.
        text: the items' texts joined by the fitting's separator.
        token_count: the tokens of ``text``; never over ``token_budget``.
        trace_id: the journal entry's id (GetTrace).
        token_budget: the budget fitted into.
        dropped_count: candidates that were not kept.
        as_of: the instant facts were valid at.
        dropped: the best dropped candidates, when the request asked for them (CompileContext).
    """

    items: Sequence[ContextItem]
    text: str
    token_count: int
    trace_id: str
    token_budget: int
    dropped_count: int
    as_of: datetime
    dropped: Sequence[DroppedCandidate] = ()


def fact_score(row: FactRow, base: float = 1.0) -> float:
    """``base x confidence x evidence rank / 3``, confidence clamped to 0..1 (unknown evidence classes
    rank 1); with ``base`` 1 the fact's quality in 0..1."""
    rank = EVIDENCE_RANK.get(row.evidence, 1)
    return base * max(0.0, min(1.0, row.confidence)) * rank / MAX_EVIDENCE_RANK


def render_fact(row: FactRow, *, conflict: bool = False) -> str:
    """``subject PREDICATE object (valid from X[, to Y]; evidence, confidence C; fact_id)[ [conflict]]``."""
    interval = f"valid from {canonical_instant(row.valid_from)}"
    if row.valid_to is not None:
        interval += f", to {canonical_instant(row.valid_to)}"
    text = (
        f"{row.subject_key} {row.predicate} {row.object_key} "
        f"({interval}; {row.evidence}, confidence {row.confidence:.2f}; {row.fact_id})"
    )
    return text + " [conflict: overlaps another version]" if conflict else text
