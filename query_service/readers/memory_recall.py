"""RecallMemories, GetMemory, ListMemories (docs/how-to/memory-records.md). Transport free.

Recall ranks the caller's memories by a weighted sum of similarity, recency and importance
(`MemoryStore.recall`; for an owner with many memories, over the nearest candidates of a vector index,
`common.storage.memories.recall`); the weights are data, one named preset per use (`RECALL_PRESETS`, chosen by
``RecallMemoriesRequest.preset`` like ``SearchRequest.preset``):

    score = max(cosine(query, text), 0)
            * (w_similarity + w_recency * 0.5 ** (age_days / half_life_days) + w_importance * importance)

Recency and importance scale how related a memory is to the query (the "important" preset at most
doubles it): they order related memories and never lift an unrelated one over a related one.

Until the enrichment has run, nothing else is needed (docs/how-to/memory-records.md: "retrieval works
purely on vector similarity + recency"). Only the requested tiers (default hot), never expired memories nor
originals hidden by a lossy summary; a lossless summary can be expanded into its originals. The returned
memories are touched (last recall, count, back to hot) on the primary.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import replace
from datetime import UTC
from datetime import datetime
from typing import Any

from common.domain.memory_records import MemoryRecord
from common.domain.memory_records import ensure_memory_label
from common.domain.memory_records import record_of
from common.domain.memory_scope import MemoryScope
from common.kernel.errors import FieldViolation
from common.kernel.errors import InvalidArgument
from common.kernel.errors import NotFound
from common.kernel.identifiers import canonical_instant
from common.kernel.page_tokens import MalformedPageToken
from common.kernel.page_tokens import decode_page_token as decode_token
from common.kernel.page_tokens import encode_page_token as encode_token
from common.kernel.page_tokens import token_instant
from common.storage.database import Database
from common.storage.graph.store import GraphStore
from common.storage.memories.recall import MemoryRecall
from common.storage.memories.store import MemoryQuery
from common.storage.memories.store import MemoryStore
from common.storage.memories.store import RecallWeights
from common.text_models.embeddings.provider import QueryEncoder

RECALL_PRESETS: Mapping[str, RecallWeights] = {
    # What most turns want: relevant first, fresher and more important ones a little ahead.
    "balanced": RecallWeights(similarity=0.7, recency=0.15, importance=0.15, half_life_days=30.0),
    # Pure semantic similarity (docs/how-to/memory-records.md: before enrichment, similarity + recency).
    "similarity": RecallWeights(similarity=1.0, recency=0.0, importance=0.0, half_life_days=30.0),
    # The latest context of a conversation: a week's half-life weighs heavily.
    "recent": RecallWeights(similarity=0.4, recency=0.5, importance=0.1, half_life_days=7.0),
    # Preferences and incidents the caller marked important.
    "important": RecallWeights(similarity=0.5, recency=0.1, importance=0.4, half_life_days=30.0),
}
DEFAULT_PRESET = "balanced"
MAX_QUERY = 4000
MAX_PAGE = 500
DEFAULT_PAGE = 50


@dataclass(frozen=True)
class Recalled:
    """One recalled memory with its score components and, for an expanded lossless summary, its originals."""

    memory: MemoryRecord
    score: float
    similarity: float
    recency: float
    expanded: tuple[MemoryRecord, ...] = ()


@dataclass(frozen=True)
class RecallInput:
    """A RecallMemoriesRequest in domain form (``query_filter``: tiers empty = hot)."""

    query: str
    query_filter: MemoryQuery
    top_k: int = 10
    preset: str = ""
    expand_summaries: bool = False
    touch: bool = True


_TOKEN_KEYS = frozenset({"t", "id"})  # created_at, memory_id


def encode_page_token(last: MemoryRecord) -> str:
    """The opaque token of the page after ``last``: base64url of ``{"t": created_at, "id": memory_id}``."""
    return encode_token({"t": canonical_instant(last.created_at), "id": last.memory_id})


def decode_page_token(token: str) -> tuple[datetime, str] | None:
    """The keyset of a page token; None for "".

    Raises:
        InvalidArgument: a token this service did not issue (``page_token``).
    """
    if not token:
        return None
    try:
        value = decode_token(token, keys=_TOKEN_KEYS)
        return token_instant(value["t"]), value["id"]
    except MalformedPageToken:
        raise InvalidArgument.single(
            "page_token", "not a token of a previous ListMemories response"
        ) from None


class MemoryReader:
    """Reads memory records of one scope (see the module doc).

    Args:
        database: the read side's database (reads may go to replicas; touches go to the primary).
        encoder: the query encoder (``encode_query``).
    """

    def __init__(self, database: Database, encoder: QueryEncoder) -> None:
        self.database = database
        self.encoder = encoder
        self.store = MemoryStore(database.settings)
        self.ranking = MemoryRecall(database.settings)
        self.graph = GraphStore(database)

    def get(self, scope: MemoryScope, key: str) -> MemoryRecord:
        """One memory, also expired or hidden.

        Raises:
            InvalidArgument: empty ``memory_id``.
            NotFound: no such memory in the caller's scope.
        """
        if not key.strip():
            raise InvalidArgument.single("memory_id", "required")
        ensure_memory_label(self.database, self.graph)
        with self.database.connection() as conn:
            found = self.store.get(conn, scope.namespace, scope.user_id, [key])
        if key not in found:
            raise NotFound(f"memory {key!r} not found")
        return record_of(found[key], datetime.now(UTC))

    def list(self, query: MemoryQuery, *, page_size: int, page_token: str) -> tuple[list[MemoryRecord], str]:
        """One page, newest first, and the next page's token ("" on the last page).

        Raises:
            InvalidArgument: ``page_size`` outside 0..500, or a foreign ``page_token``.
        """
        if not 0 <= page_size <= MAX_PAGE:
            raise InvalidArgument.single("page_size", f"0..{MAX_PAGE}")
        after = decode_page_token(page_token)
        size = page_size or DEFAULT_PAGE
        ensure_memory_label(self.database, self.graph)
        with self.database.connection() as conn:
            stored = self.store.list_page(conn, query, limit=size + 1, after=after)
        records = [record_of(s, query.now) for s in stored[:size]]
        token = encode_page_token(records[-1]) if len(stored) > size else ""
        return records, token

    def recall(self, request: RecallInput) -> tuple[list[Recalled], str]:
        """The best memories for ``request.query`` and the preset's name.

        Raises:
            InvalidArgument: empty or too long ``query``, ``top_k`` outside 1..100 (0 = 10), unknown
                ``preset``.
        """
        problems = []
        if not request.query.strip():
            problems.append(("query", "required"))
        elif len(request.query) > MAX_QUERY:
            problems.append(("query", f"at most {MAX_QUERY} characters"))
        if not 0 <= request.top_k <= 100:
            problems.append(("top_k", "1..100 (0: 10)"))
        preset = request.preset or DEFAULT_PRESET
        if preset not in RECALL_PRESETS:
            problems.append(("preset", f"one of {', '.join(RECALL_PRESETS)}"))
        if problems:
            raise InvalidArgument([FieldViolation(path, text) for path, text in problems])
        query = request.query_filter
        if not query.tiers:
            query = replace(query, tiers=("hot",))
        vector = self.encoder.encode_query(request.query)
        ensure_memory_label(self.database, self.graph)
        with self.database.connection() as conn:
            stored = self.ranking.recall(
                conn, query, vector, RECALL_PRESETS[preset], limit=request.top_k or 10
            ).memories
            records = [(s, record_of(s, query.now)) for s in stored]
            expanded: dict[str, tuple[MemoryRecord, ...]] = {}
            if request.expand_summaries:
                wanted = [(r.memory_id, r.summarized_ids) for _, r in records if r.is_summary and r.lossless]
                originals = self.store.get(
                    conn, query.namespace, query.user_id, [i for _, ids in wanted for i in ids]
                )
                for summary_id, ids in wanted:
                    expanded[summary_id] = tuple(
                        record_of(originals[i], query.now) for i in ids if i in originals
                    )
        if request.touch and records:
            with _primary(self.database) as conn:
                self.store.touch(conn, query.namespace, [r.memory_id for _, r in records], query.now)
        return [
            Recalled(r, s.score, s.similarity, s.recency, expanded.get(r.memory_id, ())) for s, r in records
        ], preset


def _primary(database: Database) -> Any:
    """The primary's transaction (`RoutedDatabase.primary_connection` on the read side)."""
    opener = getattr(database, "primary_connection", None)
    return opener() if opener is not None else database.connection()


__all__ = [
    "DEFAULT_PRESET",
    "RECALL_PRESETS",
    "MemoryReader",
    "RecallInput",
    "Recalled",
    "decode_page_token",
    "encode_page_token",
]
