"""Documents and their chunks (docs/explanation/knowledge-model.md).

`DocumentWriter.retain` stores an article: the node (type ``document`` by default) keeps the FULL original
text, byte for byte, in ``props.content``; the body (the text without a leading YAML front matter block)
is cut into Markdown-aware chunks, each embedded as ``"<title> — <heading>\\n<text>"`` and stored with
``meta`` = request meta + ``scopes``; ``links`` become LINKS_TO edges to the nodes that exist (the others
are reported, not an error). `DocumentWriter.put_chunks` stores a pre-chunked document (no original text).

Embedding happens before the transaction, so the transaction only holds rows for the writes; chunks
whose embedding input did not change reuse their stored vector. A write is three steps,
`DocumentWriter.prepare_retain` (checks, chunks, the inputs to embed), `DocumentWriter.embed` (one model
call for any number of prepared documents) and `DocumentWriter.write_prepared` (the transaction), which
`retain` runs in a row and a vault run overlaps across documents (`ingest_service.documents.pipeline`).
One transaction writes the node, its chunks and its links. Writing the same input twice changes nothing
but the node's ``last_seen``: the vertex properties are compared by hash (`GraphStore.upsert_node`),
equal chunk rows are not rewritten (`ChunkStore.replace_chunks`), and the LINKS_TO edges are rewritten
only when the node itself changed (the resolved link targets are part of its properties,
``props.links``).

The requests and their validation are in `ingest_service.documents.validation`, the node and chunks a
request becomes in `ingest_service.documents.preparation`. This module is transport free: errors are `common.kernel.errors` exceptions, which the transport maps to status codes.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import UTC
from datetime import datetime
from typing import Any

import numpy as np

from common.domain.write_access import WriteAccess
from common.kernel.config import Settings
from common.kernel.errors import FailedPrecondition
from common.kernel.errors import InvalidArgument
from common.kernel.pii import PiiMarks
from common.packs.kind_validation import KindValidator
from common.storage.change_feed.outbox import ChangeInput
from common.storage.change_feed.outbox import ChangeOutbox
from common.storage.chunks.store import ChunkStore
from common.storage.chunks.store import ChunkWrite
from common.storage.chunks.store import NodeRef
from common.storage.chunks.store import embedding_input
from common.storage.database import Database
from common.storage.document_original_store import DocumentOriginalStore
from common.storage.graph.store import GraphStore
from common.storage.graph.store import NodeWrite
from common.storage.vault_store import VaultStore
from common.text_models.embeddings.provider import PassageEncoder
from ingest_service.documents.conversion.conversion import DocumentConverter
from ingest_service.documents.conversion.converted_chunks import converter_of
from ingest_service.documents.model import AgentOwnedKey
from ingest_service.documents.model import DocumentResult
from ingest_service.documents.model import PreparedChunk
from ingest_service.documents.model import PreparedDocument
from ingest_service.documents.model import VaultProjection
from ingest_service.documents.preparation import put_chunks_parts
from ingest_service.documents.preparation import retain_parts
from ingest_service.documents.validation import PutChunksInput
from ingest_service.documents.validation import RetainInput
from ingest_service.documents.validation import validate_put_chunks
from ingest_service.documents.validation import validate_retain
from ingest_service.facts.mentions import MentionLinker
from ingest_service.facts.mentions import MentionSource
from ingest_service.validation.limits import PROTECTED_TYPES

log = logging.getLogger(__name__)

# -- the writer ----------------------------------------------------------------------------------------


class DocumentWriter:
    """Writes documents and their chunks; shared by the DocumentService and observation text fragments.

    Args:
        database: the process's database.
        encoder: the embedding provider (``encode_passages``).
        settings: reads ``chunk_max_chars`` and the table names.
    """

    def __init__(
        self,
        database: Database,
        encoder: PassageEncoder,
        settings: Settings,
        *,
        kinds: KindValidator | None = None,
        converter: DocumentConverter | None = None,
    ) -> None:
        self.database = database
        self.converter = converter or converter_of(settings)
        self.originals = DocumentOriginalStore(settings)
        self.encoder = encoder
        self.settings = settings
        self.kinds = kinds or KindValidator(database)
        self.graph = GraphStore(database)
        self.chunks = ChunkStore(settings)
        self.mentions = MentionLinker(self.graph)
        self.vault_claims = VaultStore(settings)
        self.changes = ChangeOutbox(database)

    # -- Retain ------------------------------------------------------------------------------------

    def retain(self, request: RetainInput, *, vault: VaultProjection | None = None) -> DocumentResult:
        """Upserts a document node with its full text, chunks and links (see the module doc).

        ``vault``: the write is a vault run's projection of the document (`VaultProjection`).

        Raises:
            InvalidArgument: field violations named like the RetainRequest fields.
            FailedPrecondition: the key belongs to a protected audit node.
            PermissionDenied: a workspace:/principal: scope the caller may not write (SCOPE_NOT_ALLOWED).
            NotFound: the key's node exists but is hidden from the caller's scopes (`common.domain.write_access`).
            AgentOwnedKey: with ``vault``, the key's node was written through the API.
            Unavailable: the database cannot be reached (nothing was written).
        """
        pending = self.prepare_retain(request, vault=vault is not None)
        self.embed([pending])
        return self.write_prepared(pending, vault=vault)

    def prepare_retain(self, request: RetainInput, *, vault: bool = False) -> PreparedDocument:
        """The first step of `retain`, without the model or a write: validates ``request``, checks the
        node's kind and the caller's scopes, cuts the body into chunks and finds which embedding inputs
        the node holds no vector for yet. `embed` then fills the vectors (of many documents at once) and
        `write_prepared` writes the document; `retain` is the three in a row, and a vault run embeds one
        batch of documents while it writes the one before (`ingest_service.vault.ingest`).

        ``vault``: the document is a vault run's projection (origin ``vault``).

        Raises:
            InvalidArgument: field violations named like the RetainRequest fields.
            PermissionDenied: a workspace:/principal: scope the caller may not write (SCOPE_NOT_ALLOWED).
            Unavailable: the database cannot be reached.
        """
        validate_retain(request)
        node, prepared, original = retain_parts(request, self.settings, self.converter)
        if vault:
            node.origin = "vault"
        document = self._prepare(node, prepared, list(request.links), delete_beyond=True)
        document.original = original
        return document

    def plan_retain(self, request: RetainInput) -> DocumentResult:
        """What `retain` of ``request`` would write, writing nothing (a dry vault run): the chunks the
        document is cut into (``chunk_count``, ``chunks_written``: every one is written, a run marks each
        with its id) and the chunk texts the embedding model would get (``chunks_embedded``: those whose
        embedding input the node does not hold yet). The encoder is not called.

        Raises:
            InvalidArgument: field violations named like the RetainRequest fields.
            PermissionDenied: a workspace:/principal: scope the caller may not write (SCOPE_NOT_ALLOWED).
        """
        document = self.prepare_retain(request)
        return DocumentResult(
            natural_key=document.node.natural_key,
            created=False,
            updated=False,
            chunk_count=len(document.chunks),
            chunks_written=len(document.chunks),
            chunks_deleted=0,
            linked=(),
            missing_links=(),
            chunks_embedded=len(document.missing),
        )

    # -- PutChunks ---------------------------------------------------------------------------------

    def put_chunks(self, request: PutChunksInput) -> DocumentResult:
        """Upserts a document node from pre-cut chunks; chunk i replaces (namespace, natural_key, chunk_order).

        The node keeps no original text (GetSource re-assembles the chunks). Chunks of the node whose
        order is not in the request stay as they are, so a long document may be sent in several calls;
        they keep the title they were embedded with, so a changed title should be sent with every chunk.

        Raises:
            InvalidArgument: field violations named like the PutChunksRequest fields (``chunks[0].text``).
            FailedPrecondition: the key belongs to a protected audit node.
            PermissionDenied: a workspace:/principal: scope the caller may not write (SCOPE_NOT_ALLOWED).
            NotFound: the key's node exists but is hidden from the caller's scopes (`common.domain.write_access`).
            Unavailable: the database cannot be reached (nothing was written).
        """
        validate_put_chunks(request)
        node, prepared = put_chunks_parts(
            request, self._stored_marks(request.namespace, request.natural_key), self.settings
        )
        pending = self._prepare(node, prepared, list(request.links), delete_beyond=False)
        self.embed([pending])
        return self.write_prepared(pending)

    # -- shared ------------------------------------------------------------------------------------

    def _stored_marks(self, namespace: str, natural_key: str) -> PiiMarks:
        """The personal data marks the node holds now (none when it does not exist)."""
        with self.database.connection() as conn:
            node = self.graph.get_node(conn, namespace, natural_key)
        return PiiMarks.from_props((node or {}).get("props"))

    def embed(self, documents: Sequence[PreparedDocument]) -> int:
        """Fills the vectors of prepared documents: one ``encode_passages`` call for the distinct
        embedding inputs of all of them that no node holds a vector for; returns how many texts the
        model got. A document's vectors are filled once (a second call skips it).

        Raises:
            whatever the encoder raises (no document is changed then).
        """
        missing = sorted(
            {text for document in documents if document.vectors is None for text in document.missing}
        )
        vectors = dict(zip(missing, self.encoder.encode_passages(missing))) if missing else {}
        for document in documents:
            if document.vectors is None:
                document.vectors = [
                    np.asarray(vectors[text] if text in vectors else document.stored[text], dtype=np.float32)
                    for text in document.inputs
                ]
        return len(missing)

    def _missing_inputs(
        self, namespace: str, natural_key: str, inputs: Sequence[str]
    ) -> tuple[list[str], dict[str, Any]]:
        """The distinct embedding inputs of ``inputs`` the node holds no vector for (sorted), and the
        node's stored vectors by embedding input."""
        if not inputs:
            return [], {}
        with self.database.connection() as conn:
            stored: dict[str, Any] = dict(self.chunks.existing_embeddings(conn, namespace, natural_key))
        return sorted({text for text in inputs if stored.get(text) is None}), stored

    def _prepare(
        self, node: NodeWrite, prepared: list[PreparedChunk], links: list[str], *, delete_beyond: bool
    ) -> PreparedDocument:
        """The checks before the model (kind, write scopes) and the embedding inputs of ``prepared``."""
        kinds = self.kinds.for_namespace(node.namespace)
        if kinds.active:
            # Strict mode: the type must be a base kind or a pack kind, a pack kind's key must fit its
            # naturalKey (fields named like the request: type, natural_key). Checked before embedding.
            _, node.node_type, violations = kinds.check_entity(
                node.natural_key, node.node_type, None, "", key_path="natural_key"
            )
            if violations:
                raise InvalidArgument(violations)
        # Write-side visibility scopes: only scopes the caller holds; no hidden node overwritten.
        access = WriteAccess.of_caller()
        access.require_scopes(node.scopes())
        inputs = [embedding_input(node.title, chunk.heading, chunk.text) for chunk in prepared]
        missing, stored = self._missing_inputs(node.namespace, node.natural_key, inputs)
        return PreparedDocument(node, prepared, links, delete_beyond, kinds, access, inputs, missing, stored)

    def write_prepared(
        self, document: PreparedDocument, *, vault: VaultProjection | None = None
    ) -> DocumentResult:
        """The last step of `retain` (and of `put_chunks`): writes an embedded `PreparedDocument` in one
        transaction (see the module doc).

        ``vault``: the write is a vault run's projection of the document (`VaultProjection`).

        Raises:
            ValueError: ``document`` has no vectors yet (`embed` first).
            FailedPrecondition: the key belongs to a protected audit node.
            NotFound: the key's node exists but is hidden from the caller's scopes (`common.domain.write_access`).
            AgentOwnedKey: with ``vault``, the key's node was written through the API.
            Unavailable: the database cannot be reached (nothing was written).
        """
        if document.vectors is None:
            raise ValueError("write_prepared: the document has no vectors yet (call embed first)")
        node, prepared, links, delete_beyond = (
            document.node,
            document.chunks,
            document.links,
            document.delete_beyond,
        )
        kinds, access, embedded = document.kinds, document.access, len(document.missing)
        writes = [
            ChunkWrite(
                chunk_order=chunk.order,
                heading=chunk.heading,
                text=chunk.text,
                embedding=vector,
                meta=chunk.meta,
            )
            for chunk, vector in zip(prepared, document.vectors)
        ]
        now = datetime.now(UTC)
        with self.database.connection() as conn:
            access.require_visible_nodes(conn, self.graph, node.namespace, [node.natural_key])
            existing = self.graph.lock_node(conn, node.namespace, node.natural_key)  # its type, not its label
            if existing is not None and existing["node_type"] in PROTECTED_TYPES:
                raise FailedPrecondition(
                    f"{node.natural_key!r} is a protected {existing['node_type']} node and cannot be overwritten",
                    reason="PROTECTED_NODE",
                )
            if vault is not None and existing is not None and existing["origin"] != "vault":
                if not existing["placeholder"]:
                    raise AgentOwnedKey(
                        f"{node.natural_key!r} was written through the API: the vault leaves it as it is",
                        reason="AGENT_OWNED_KEY",
                    )
                self.vault_claims.claim_node(conn, node.namespace, node.natural_key)
            elif existing is not None and existing["origin"] == "vault" and not existing["placeholder"]:
                # The creator owns the key: an agent's Retain of a vault-owned key is
                # journaled and its chunks replaced when the next vault run takes the key back.
                if vault is None and delete_beyond:  # a Retain; PutChunks adds the agent's own chunks
                    self.vault_claims.record_agent_retain(
                        conn,
                        node.namespace,
                        node.natural_key,
                        [(c.order, c.heading, c.text) for c in prepared],
                    )
                elif vault is not None:
                    self.vault_claims.delete_agent_retained_chunks(conn, node.namespace, node.natural_key)
            targets = self.graph.node_labels(conn, node.namespace, links, visibility=access.visibility)
            linked = [link for link in links if link in targets]
            missing = [link for link in links if link not in targets]
            if vault is None:  # a vault run writes its links at the end of the run
                node.props["links"] = sorted(linked)
            result = self.graph.upsert_node(conn, node, now=now, overwrite=True)
            if document.original is not None:
                self.originals.put(conn, node.namespace, node.natural_key, *document.original)
            elif delete_beyond:  # a Retain of text replaces a document converted from a file
                self.originals.forget(conn, node.namespace, node.natural_key)
            written = self.chunks.replace_chunks(
                conn,
                NodeRef(
                    namespace=node.namespace,
                    node_key=node.natural_key,
                    node_type=node.node_type,
                    title=node.title,
                    source_path=node.source_path,
                ),
                writes,
                delete_beyond=delete_beyond,
                seen_run=vault.run_id if vault is not None else None,
            )
            if vault is None and (result.created or result.updated):
                self.graph.replace_links(
                    conn,
                    node.namespace,
                    node.natural_key,
                    result.label,
                    {key: targets[key] for key in linked},
                )
            # Identifiers of pack kinds in the text link the document to existing nodes.
            self.mentions.link(
                conn,
                kinds,
                MentionSource(
                    namespace=node.namespace,
                    natural_key=node.natural_key,
                    texts=[node.title, *(chunk.text for chunk in prepared)],
                    scopes=node.scopes(),
                    source_path=node.source_path,
                    complete=delete_beyond,
                ),
                now=now,
            )
            if vault is not None:
                vault.record(conn)
            if result.created or result.updated or written.written or written.deleted:
                self.changes.append(conn, [_retained_change(node, written.chunk_count, vault)])
        if missing:
            log.info(
                "%s %s: %d link(s) to missing nodes skipped", node.namespace, node.natural_key, len(missing)
            )
        return DocumentResult(
            natural_key=node.natural_key,
            created=result.created,
            updated=result.updated,
            chunk_count=written.chunk_count,
            chunks_written=written.written,
            chunks_deleted=written.deleted,
            linked=tuple(linked),
            missing_links=tuple(missing),
            chunks_embedded=embedded,
            original=document.original[0] if document.original is not None else None,
        )


def _retained_change(node: NodeWrite, chunk_count: int, vault: VaultProjection | None) -> ChangeInput:
    """The change feed's ``document.retained`` event of a document write (no table row states it)."""
    return ChangeInput(
        namespace=node.namespace,
        event_type="document.retained",
        item_key=node.natural_key,
        subject_key=node.natural_key,
        scopes=node.scopes(),
        payload={
            "node_type": node.node_type,
            "title": node.title,
            "source_path": node.source_path,
            "chunk_count": chunk_count,
            "origin": "vault" if vault is not None else "agent",
        },
    )


__all__ = ["DocumentWriter"]
