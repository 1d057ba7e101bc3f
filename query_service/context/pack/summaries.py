"""CompileContext's ``summary`` rule (docs/explanation/retrieval.md): a
summary memory (``is_summary``, lossy or lossless; docs/how-to/memory-records.md) is a candidate of its
own rule, and never shares the pack with the originals it covers. Transport free.

1. **Candidates.** A hit that is a summary memory (its node's provenance names ``summarized_ids``) keeps
   its hit score under the rule ``summary`` (``hit`` in ``Selection.also``). A memory hit covered by a
   summary (its row's ``summary_id``) brings that summary in (`ContextStore.covering_summaries`: live,
   same owner, visible to the caller), scored as the best of the covered hits' scores x
   ``summary_weight``.
2. **No double content.** For each summary candidate and the covered originals among the candidates:
   value per token = score / tokens of the rendered text (the summary's, and the originals' summed
   scores over their summed tokens). The better side stays a candidate; the other is dropped with the
   reason and both values (``value_per_token`` and ``originals_value_per_token`` in the summary's
   components), so the pack holds either the summary or its originals.

What the caller may not see never enters: the summary's chunk and node pass the caller's visibility
inside SQL, another owner's summary is never read, expired summaries are left out, and the text is
masked for an uncleared caller like every chunk (`chunk_candidate`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC
from datetime import datetime

from common.storage.chunks.rows import StoredChunk
from common.storage.context_store import ContextStore
from common.storage.context_store import CoveringSummary
from common.storage.database import Database
from common.text_models.tokenizer import TokenCounter
from query_service.context.pack.candidates import CandidatePool
from query_service.context.pack.candidates import PackCandidate
from query_service.context.pack.candidates import chunk_candidate
from query_service.context.pack.candidates import chunk_key
from query_service.context.pack.items import HIT
from query_service.context.pack.items import SUMMARY
from query_service.context.pack.items import Selection
from query_service.context.pack.request import ContextRequest
from query_service.pii_output import PiiDisclosure
from query_service.retrieval.hybrid_search import SearchHit

MEMORY_NODE_TYPE = "memory"


def is_summary_hit(hit: SearchHit) -> bool:
    """Whether a hit is a summary memory (its node's provenance lists the memories it summarises)."""
    return hit.chunk.node_type == MEMORY_NODE_TYPE and bool(hit.provenance.metadata.get("summarized_ids"))


def summary_selection(hit_selection: Selection, covers: int) -> Selection:
    """A summary hit's selection: the rule ``summary``, the hit's components plus ``covers``."""
    return Selection(
        SUMMARY,
        f"a summary of {covers} memories, found by hybrid search",
        {**hit_selection.components, "covers": float(covers)},
        (HIT,),
    )


def add_summaries(
    database: Database,
    store: ContextStore,
    tokens: TokenCounter,
    request: ContextRequest,
    hits: Sequence[SearchHit],
    pool: CandidatePool,
    shown: PiiDisclosure,
    *,
    summary_weight: float,
) -> None:
    """Adds the summaries covering memory hits to ``pool`` and resolves summary/original overlaps (module
    doc). Reads nothing when no hit is a memory.

    Raises:
        Unavailable: the database cannot be reached.
    """
    memory_hits = [hit for hit in hits if hit.chunk.node_type == MEMORY_NODE_TYPE]
    if not memory_hits:
        return
    for hit in memory_hits:
        if is_summary_hit(hit) and (found := pool.by_key.get(chunk_key(hit.chunk))) is not None:
            covers = len(hit.provenance.metadata.get("summarized_ids") or [])
            found.selection = summary_selection(found.selection, covers)
    with database.read_connection() as conn:  # one statement: no BEGIN/COMMIT
        covering = store.covering_summaries(
            conn,
            request.namespace,
            [hit.chunk.node_key for hit in memory_hits],
            now=datetime.now(UTC),  # expiry is judged now, whatever the pack's as_of
            visibility=request.visibility,
        )
    for summary in covering:
        covered_scores = [
            pool.by_key[key].score
            for key in _memory_keys(pool, summary.covered)
            if pool.by_key[key].selection.rule != SUMMARY
        ]
        if not covered_scores:
            continue
        best = max(covered_scores)
        for chunk in summary.chunks:
            pool.add(
                chunk_candidate(
                    chunk,
                    None,
                    shown,
                    score=best * summary_weight,
                    selection=Selection(
                        SUMMARY,
                        f"a {'lossless' if summary.lossless else 'lossy'} summary of {len(summary.covered)}"
                        " retrieved memories",
                        {
                            "covered_best_score": best,
                            "summary_weight": summary_weight,
                            "covers": float(len(summary.covered)),
                        },
                    ),
                    source_path=chunk.source_path,
                )
            )
    summaries = {
        candidate.provenance.node_key: candidate
        for candidate in pool.by_key.values()
        if candidate.selection.rule == SUMMARY
    }
    covered_by = _covered_by(hits, covering)
    for summary_key, candidate in summaries.items():
        originals = [
            pool.by_key[key]
            for key in _memory_keys(pool, covered_by.get(summary_key, ()))
            if not pool.by_key[key].drop_reason and key != candidate.key
        ]
        if originals and not candidate.drop_reason:
            _keep_better(candidate, originals, tokens)


def _memory_keys(pool: CandidatePool, memory_ids: Sequence[str]) -> list[str]:
    """The pool keys of the memories' chunks (a memory is chunk 0 of its node)."""
    keys = [chunk_key(_memory_chunk(memory_id)) for memory_id in memory_ids]
    return [key for key in keys if key in pool]


def _memory_chunk(memory_id: str) -> StoredChunk:
    return StoredChunk(memory_id, 0, MEMORY_NODE_TYPE, "", "", "", "", {})


def _covered_by(hits: Sequence[SearchHit], covering: Sequence[CoveringSummary]) -> dict[str, tuple[str, ...]]:
    """Summary memory id -> the memory ids it covers: from the summary hits' provenance
    (``summarized_ids``) and from the covering summaries read."""
    out: dict[str, set[str]] = {}
    for hit in hits:
        if is_summary_hit(hit):
            ids = hit.provenance.metadata.get("summarized_ids") or []
            out.setdefault(hit.chunk.node_key, set()).update(str(i) for i in ids)
    for summary in covering:
        out.setdefault(summary.summary_id, set()).update(summary.covered)
    return {key: tuple(sorted(ids)) for key, ids in out.items()}


def _keep_better(summary: PackCandidate, originals: Sequence[PackCandidate], tokens: TokenCounter) -> None:
    """Drops the side with less value per token (score / tokens): the summary or its originals."""
    summary_value = summary.score / max(tokens.count(summary.text), 1)
    originals_value = sum(o.score for o in originals) / max(sum(tokens.count(o.text) for o in originals), 1)
    summary.selection = replace(
        summary.selection,
        components={
            **summary.selection.components,
            "value_per_token": summary_value,
            "originals_value_per_token": originals_value,
        },
    )
    if summary_value >= originals_value:
        for original in originals:
            original.drop_reason = (
                f"covered by the summary {summary.provenance.node_key}, which has more value per token"
                f" ({summary_value:.4f} against {originals_value:.4f})"
            )
    else:
        summary.drop_reason = (
            f"its {len(originals)} original memories are candidates with more value per token"
            f" ({originals_value:.4f} against {summary_value:.4f})"
        )
