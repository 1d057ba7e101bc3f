"""What a chunk row is as the read side sees it (docs/explanation/knowledge-model.md): the row read back
(`StoredChunk`), the filter every ranking applies (`ChunkFilter`), a ranking's candidate (`Candidate`) and
the column lists of their statements. The rankings themselves are in `common.storage.chunks.rankings`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from typing import Any

from psycopg import sql

from common.storage.visibility import EVERYTHING
from common.storage.visibility import Visibility

CHUNK_COLUMNS = sql.SQL("node_key, chunk_order, node_type, source_path, title, heading, text, meta")
"""The columns of a chunk row as read back (`StoredChunk`), in its field order."""
RANKED_COLUMNS = sql.SQL("id, node_key, chunk_order")
"""The columns a ranking returns for each candidate (`Candidate`, before its score): the row id and the key.
The rest of the row is read only for the chunks that survive fusion (`ChunkRankings.ranked_chunks`)."""


@dataclass(frozen=True)
class StoredChunk:
    """One chunk row as read back (no embedding)."""

    node_key: str
    chunk_order: int
    node_type: str
    source_path: str
    title: str
    heading: str
    text: str
    meta: dict[str, Any]


@dataclass(frozen=True)
class ChunkFilter:
    """Predicates shared by the three rankings.

    Attributes:
        namespace: required.
        node_types: keep only chunks of these node types (empty: all).
        meta: jsonb containment filter, ``meta @> {...}`` (empty: none).
        node_keys: keep only chunks of these nodes (empty: all).
        participants: keep only the episodes of observations whose actor or subject id is one of these
            (empty: all chunks): the turns of the people a question names.
        visibility: the caller's visibility; chunks whose ``meta.scopes`` hide them are left out
            (`common.storage.visibility`).
    """

    namespace: str
    node_types: tuple[str, ...] = ()
    meta: Mapping[str, Any] = field(default_factory=dict)
    node_keys: tuple[str, ...] = ()
    participants: tuple[str, ...] = ()
    visibility: Visibility = EVERYTHING


@dataclass(frozen=True)
class Candidate:
    """A chunk returned by one ranking, with that ranking's raw score: its row id and key, not its columns.

    ``chunk_id`` is the row's ``id`` (what `ChunkRankings.ranked_chunks` reads the row by); ``score`` is
    the cosine *distance* for the vector ranking (smaller is better), the BM25 score for full text and, for
    trigram, 1.0 for an exact identifier hit, else the word similarity; ``rank`` is 1-based.

    A Search fuses up to three rankings of 50 candidates and returns 10 of them, so the rankings do not
    read the text, title and meta of their candidates: decoding those rows took about a fifth of the
    query service's interpreter time at 16 clients (py-spy ``--gil``, bench/RESULTS.md (git history)).
    """

    chunk_id: int
    node_key: str
    chunk_order: int
    score: float
    rank: int
    heading_match: bool = False  # full text only: the chunk's heading holds every query lexeme
    verbatim: bool = False  # trigram only: the chunk holds the whole query verbatim, not as a quotation

    @property
    def key(self) -> tuple[str, int]:
        return (self.node_key, self.chunk_order)
