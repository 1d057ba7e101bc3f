"""The values of a document write (`ingest_service.documents.writer`): what a write reports (`DocumentResult`),
how a vault run writes (`VaultProjection`, `AgentOwnedKey`) and a document between its three steps
(`PreparedDocument`: prepared, embedded, written)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from common.domain.write_access import WriteAccess
from common.kernel.errors import FailedPrecondition
from common.packs.kind_validation import NamespaceKinds
from common.storage.document_original_store import DocumentFile
from common.storage.graph.store import NodeWrite


@dataclass(frozen=True)
class DocumentResult:
    """Outcome of Retain or PutChunks.

    Attributes:
        natural_key: the node's key.
        created: the node did not exist before (a placeholder counts as existing).
        updated: the node's properties changed (False when the same input was written again).
        chunk_count: chunks the node has after the write.
        chunks_written: chunk rows inserted or changed.
        chunks_deleted: chunk rows removed (Retain of a shorter text).
        linked: links whose target exists (LINKS_TO edges), in request order.
        missing_links: links skipped because no such node exists in the namespace.
        chunks_embedded: chunk texts sent to the embedding model (the others reused a stored vector).
        original: for a document retained from a file, what it was converted as and by what.
    """

    natural_key: str
    created: bool
    updated: bool
    chunk_count: int
    chunks_written: int
    chunks_deleted: int
    linked: tuple[str, ...]
    missing_links: tuple[str, ...]
    chunks_embedded: int = 0
    original: DocumentFile | None = None

    @property
    def unchanged(self) -> bool:
        """True when the write changed nothing: an existing node with the same properties and no chunk
        row inserted, changed or removed (the same document sent again; RetainResponse.unchanged)."""
        return not (self.created or self.updated or self.chunks_written or self.chunks_deleted)


@dataclass(frozen=True)
class VaultProjection:
    """How a vault run writes a document (`ingest_service.vault.ingest`) instead of an API caller.

    The node gets origin ``"vault"`` and its chunks ``seen_run = run_id``; chunks written through the API
    on the node are neither overwritten nor deleted; links are left to the end of the run (the run knows
    all its documents only then), so ``links`` must be empty; a key whose node was written through the
    API (not a placeholder) is refused with `AgentOwnedKey`; a completed placeholder is claimed for the
    vault. ``record(conn)`` runs last, in the same transaction (the run's journal of the document).
    """

    run_id: str
    record: Callable[[Any], None]


class AgentOwnedKey(FailedPrecondition):
    """A vault run met a key whose node was written through the API: the creator owns it."""


@dataclass(frozen=True)
class PreparedChunk:
    """One chunk of a document to write: its order, heading, text and meta."""

    order: int
    heading: str
    text: str
    meta: dict[str, Any]


@dataclass
class PreparedDocument:
    """A document checked and cut into chunks, before the model and the transaction
    (`DocumentWriter.prepare_retain`, `DocumentWriter.embed`, `DocumentWriter.write_prepared`).

    Attributes:
        node: the document node to write.
        chunks: its chunks in order.
        links: the natural keys it links to (empty for a vault run's document).
        delete_beyond: chunks of the node beyond these are deleted (Retain), or kept (PutChunks).
        kinds: the namespace's kind rules (checked already).
        access: the caller's write access, taken when the document was prepared.
        inputs: the embedding input of each chunk.
        missing: the distinct inputs the node holds no vector for (sorted): what the model gets.
        stored: the node's stored vectors by embedding input (reused).
        vectors: one float32 vector (dimension,) per chunk once `DocumentWriter.embed` ran, else None.
        original: for a document retained from a file, its `DocumentFile` and bytes, else None.
    """

    node: NodeWrite
    chunks: list[PreparedChunk]
    links: list[str]
    delete_beyond: bool
    kinds: NamespaceKinds
    access: WriteAccess
    inputs: list[str]
    missing: list[str]
    stored: dict[str, Any]
    vectors: list[np.ndarray] | None = None
    # The original file of a Retain with ``original``: what it is, and its bytes (kept with the write).
    original: tuple[DocumentFile, bytes] | None = None


__all__ = ["AgentOwnedKey", "DocumentResult", "PreparedChunk", "PreparedDocument", "VaultProjection"]
