"""CompileContext's candidates before fitting: `PackCandidate` (a rendered chunk or fact with its
`Selection`), `CandidatePool` (one candidate per key: a chunk found by two rules is kept once, at its
best score, the other rule listed in ``Selection.also``) and the rendering of chunks as turns or as
document sections (`chunk_candidate`). Transport free; see `query_service.context.compiler`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from dataclasses import replace
from typing import Any

from common.kernel.pii import PiiMarks
from common.storage.chunks.rows import StoredChunk
from common.storage.chunks.store import meta_observation_ids
from common.storage.episode_store import EpisodeTurn
from query_service.context.pack.conversation import speaker_of
from query_service.context.pack.conversation import turn_header
from query_service.context.pack.conversation import turn_line
from query_service.context.pack.fitting import FitCandidate
from query_service.context.pack.items import Selection
from query_service.context.pack.participants import participant_ids
from query_service.pii_output import PiiDisclosure
from query_service.pii_output import withheld_text
from query_service.provenance import Provenance
from query_service.provenance import chunk_citation
from query_service.retrieval.hybrid_search import disclose_chunk


@dataclass(kw_only=True)
class PackCandidate(FitCandidate):
    """A chunk or fact candidate; chunks may be cut to fit (`PackFitter`)."""

    provenance: Provenance
    selection: Selection
    conflict: bool = False
    pii_marks: PiiMarks = field(default_factory=PiiMarks)  # of the chunk, for the pii_access audit
    words_text: str = ""  # the text compared for redundancy (a turn's without its time and speaker)
    participants: tuple[str, ...] = ()  # a turn's actor and subject ids (for matching the query; never shown)

    def __post_init__(self) -> None:
        self.truncatable = self.kind == "chunk"


def chunk_key(chunk: StoredChunk) -> str:
    """A chunk's identity in the trace: ``node_key#chunk_order``."""
    return f"{chunk.node_key}#{chunk.chunk_order}"


def render_chunk_header(chunk: StoredChunk) -> str:
    """``[title — heading] node_key#chunk_order`` (the heading part only when there is one)."""
    label = f"{chunk.title} — {chunk.heading}" if chunk.heading else chunk.title or chunk.node_key
    return f"[{label}] {chunk.node_key}#{chunk.chunk_order}"


def chunk_candidate(
    chunk: StoredChunk,
    turn: EpisodeTurn | None,
    shown: PiiDisclosure,
    *,
    score: float,
    selection: Selection,
    metadata: Mapping[str, Any] | None = None,
    source_path: str = "",
) -> PackCandidate:
    """A chunk as a candidate: a turn line in its stream's block when ``turn`` is its observation, else a
    block with a header line; masked (or withheld) for ``shown``'s caller before it is counted."""
    marks = PiiMarks.from_props(chunk.meta)
    ids = meta_observation_ids(chunk.meta)
    visible = disclose_chunk(shown, chunk)
    provenance = Provenance(
        node_key=visible.node_key,
        source_path=shown.text(source_path, key=chunk.node_key) if source_path else visible.source_path,
        chunk_order=chunk.chunk_order,
        observation_ids=ids,
        metadata=shown.value(dict(metadata or {}), key=chunk.node_key, observation_ids=ids),
        citation=shown.text(chunk_citation(chunk.meta), key=chunk.node_key),
    )
    candidate = PackCandidate(
        kind="chunk",
        key=chunk_key(chunk),
        text="",
        score=score,
        provenance=provenance,
        selection=selection,
        pii_marks=marks,
        words_text=visible.text,
    )
    if turn is None:
        candidate.text = render_chunk_header(visible) + "\n" + visible.text
        return candidate
    withheld = shown.withholds(marks)
    speaker = (
        withheld_text(marks) if withheld else shown.text(speaker_of(turn), marks=marks, key=chunk.node_key)
    )
    stream = shown.text(f"{turn.source_system}/{turn.source_stream}", key=chunk.node_key)
    candidate.text = turn_line(turn, speaker, visible.text)
    candidate.group = turn_header(turn, stream)
    candidate.position = (turn.occurred_at, turn.recorded_order, chunk.chunk_order)
    candidate.participants = participant_ids(turn)
    return candidate


class CandidatePool:
    """Candidates by key, merged: the best score wins, the other rules are kept in ``Selection.also``."""

    def __init__(self) -> None:
        self.by_key: dict[str, PackCandidate] = {}

    def __contains__(self, key: str) -> bool:
        return key in self.by_key

    def add(self, candidate: PackCandidate) -> None:
        current = self.by_key.get(candidate.key)
        if current is None:
            self.by_key[candidate.key] = candidate
            return
        better, other = (candidate, current) if candidate.score > current.score else (current, candidate)
        also = tuple(
            dict.fromkeys([*better.selection.also, other.selection.rule, *other.selection.also])
            if other.selection.rule != better.selection.rule
            else better.selection.also
        )
        better.selection = replace(
            better.selection, also=tuple(a for a in also if a != better.selection.rule)
        )
        self.by_key[candidate.key] = better

    def ranked(self) -> list[PackCandidate]:
        """Best score first; ties by kind and key (deterministic)."""
        return sorted(self.by_key.values(), key=lambda c: (-c.score, c.kind, c.key))
