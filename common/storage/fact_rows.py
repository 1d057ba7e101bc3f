"""The values of the fact store: one stored fact (`FactRow`), a ListFacts query (`FactQuery`) and its
page cursor (`encode_cursor`, `decode_cursor`). `common.storage.fact_store.FactStore` reads and writes them.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field
from datetime import datetime
from typing import Any

from common.kernel.identifiers import canonical_instant
from common.kernel.page_tokens import decode_page_token
from common.kernel.page_tokens import encode_page_token
from common.kernel.page_tokens import token_instant
from common.storage.visibility import EVERYTHING
from common.storage.visibility import Visibility


@dataclass
class FactRow:
    """One stored fact (columns of ``facts``)."""

    fact_id: str
    namespace: str
    subject_key: str
    predicate: str
    object_key: str
    valid_from: datetime
    valid_to: datetime | None
    observed_at: datetime
    evidence: str
    confidence: float
    observation_ids: list[str] = field(default_factory=list)
    supersedes: str | None = None
    superseded_by: str | None = None
    origin: str = "agent"
    scopes: list[str] = field(default_factory=list)
    attributes: dict[str, Any] = field(default_factory=dict)
    source_path: str = ""
    evidence_lost: bool = False
    # Asserted directly through FactService.AssertFacts: evidence no redaction or purge can take away.
    # A table column only (not one of the edge properties of docs/explanation/knowledge-model.md); it decides whether an empty
    # observation_ids means "evidence lost".
    agent_asserted: bool = False

    def edge_properties(self) -> dict[str, Any]:
        """Properties of the AGE edge (the list of docs/explanation/knowledge-model.md); instants canonical strings, absent ones null."""
        return {
            "fact_id": self.fact_id,
            "namespace": self.namespace,
            "observed_at": canonical_instant(self.observed_at),
            "valid_from": canonical_instant(self.valid_from),
            "valid_to": canonical_instant(self.valid_to) if self.valid_to else None,
            "evidence": self.evidence,
            "confidence": self.confidence,
            "observation_ids": list(self.observation_ids),
            "supersedes": self.supersedes,
            "superseded_by": self.superseded_by,
            "source_path": self.source_path,
            "scopes": list(self.scopes),
            "origin": self.origin,
            "attributes": self.attributes,
            "evidence_lost": self.evidence_lost,
        }


@dataclass(frozen=True)
class FactQuery:
    """A ListFacts query: filters, page size and position (the one fact query shape of the read side).
    ``as_of`` None with ``include_history`` False means "now"; ``include_lost`` also returns facts whose
    evidence was lost (every observation behind them redacted or purged), for audit."""

    namespace: str
    subject: str = ""
    predicate: str = ""
    object: str = ""
    as_of: datetime | None = None
    include_history: bool = False
    include_lost: bool = False
    page_size: int = 100
    page_token: str = ""  # `encode_cursor` of the last row of the previous page ("" from the start)
    # The caller's visibility: facts whose scopes hide them, or whose subject or object node is hidden
    # (no hidden node's key leaks through a fact), are left out inside the query.
    visibility: Visibility = EVERYTHING


def encode_cursor(row: FactRow) -> str:
    """Opaque page token for the keyset position after ``row``."""
    return encode_page_token([row.subject_key, row.predicate, canonical_instant(row.valid_from), row.fact_id])


def decode_cursor(token: str) -> tuple[str, str, datetime, str]:
    """Inverse of `encode_cursor`.

    Raises:
        MalformedPageToken: (a ValueError) a token not issued here (`common.kernel.page_tokens`).
    """
    subject, predicate, valid_from, fact_id = decode_page_token(token, length=4)
    return subject, predicate, token_instant(valid_from), fact_id
