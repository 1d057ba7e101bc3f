"""Documents and their chunks (seed 000 "Чанки и документы", "Оригинал статьи хранится в узле").

`DocumentWriter.retain` stores an article: the node (type ``document`` by default) keeps the FULL original
text, byte for byte, in ``props.content``; the body (the text without a leading YAML front matter block)
is cut into Markdown-aware chunks, each embedded as ``"<title> — <heading>\\n<text>"`` and stored with
``meta`` = request meta + ``scopes``; ``links`` become LINKS_TO edges to the nodes that exist (the others
are reported, not an error). `DocumentWriter.put_chunks` stores a pre-chunked document (no original text).

Embedding happens before the transaction, so the transaction only holds rows for the writes; chunks
whose embedding input did not change reuse their stored vector. One transaction writes the node, its
chunks and its links. Writing the same input twice changes nothing but the node's ``last_seen``: the
vertex properties are compared by hash (`GraphStore.upsert_node`), equal chunk rows are not rewritten
(`ChunkStore.replace_chunks`), and the LINKS_TO edges are rewritten only when the node itself changed
(the resolved link targets are part of its properties, ``props.links``).

This module is transport free: errors are `common.errors` exceptions, the servicer maps them.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import numpy as np

from common.kernel.config import Settings
from common.storage.database import Database
from common.kernel.errors import FailedPrecondition, InvalidArgument, ViolationCollector
from common.packs.kind_validation import KindValidator
from common.kernel.pii import PiiMarks, check_pii_categories
from common.storage.chunk_store import ChunkStore, ChunkWrite, NodeRef, embedding_input
from common.storage.graph_store import GraphStore, NodeWrite
from common.domain.write_access import WriteAccess
from ingest_service.chunking import chunk_markdown
from ingest_service.identifier_extraction import MentionLinker, MentionSource
from ingest_service.observation_validation import MAX_KEY_LENGTH, MAX_SCOPES, NAMESPACE_PATTERN, SCOPE_PATTERN

log = logging.getLogger(__name__)

MAX_CONTENT_BYTES = 8 * 1024 * 1024
MAX_TITLE_LENGTH = 1024
MAX_SOURCE_PATH_LENGTH = 4096
MAX_LINKS = 1000
MAX_CHUNKS = 10000
# PutChunks keeps the client's cut, so an oversized chunk is refused rather than split (full-text vectors
# are limited to 1 MB; embedders read a few hundred tokens anyway).
MAX_CHUNK_TEXT_BYTES = 256 * 1024
MAX_TRACE_ID_LENGTH = 256
# A chunk longer than this (one huge code block, a file without line breaks) is cut further, at line
# boundaries where possible: full-text vectors are limited to 1 MB and embedders read a few hundred tokens.
HARD_CHUNK_CHARS = 16000
DEFAULT_TYPE = "document"
# Audit trail nodes (seed 000 "Аудит-контур"): a document write must neither create nor overwrite them.
PROTECTED_TYPES = frozenset({"audit_event", "pc_trace"})
_TYPE_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")
# Chunk meta keys holding the personal data marks (common.pii.PiiMarks); requests pass them in fields.
_PII_META_KEYS = ("pii", "pii_categories")
# A leading YAML front matter block: "---" on the first line, then everything up to the next line that is
# exactly "---" or "..." (trailing blanks allowed). Only the first block is front matter; a second "---"
# block belongs to the body (the docs vault has 101 files with one, see the corpora README).
_FRONT_MATTER = re.compile(r"\A\ufeff?---[ \t]*\r?\n(?:.*?\r?\n)?(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.DOTALL)


class PassageEncoder(Protocol):
    """What the writer needs from `common.embeddings.EmbeddingProvider`."""

    model_id: str
    dimension: int

    def encode_passages(self, texts: Sequence[str]) -> np.ndarray: ...


@dataclass(frozen=True)
class RetainInput:
    """A RetainRequest in domain form (see protos/memory/v1/document_service.proto)."""

    namespace: str
    natural_key: str
    content: str
    type: str = ""
    title: str = ""
    links: tuple[str, ...] = ()
    source_path: str = ""
    provenance: Mapping[str, Any] = field(default_factory=dict)
    scopes: tuple[str, ...] = ()
    meta: Mapping[str, Any] = field(default_factory=dict)
    pii: bool = False
    pii_categories: tuple[str, ...] = ()
    trace_id: str = ""


@dataclass(frozen=True)
class ChunkInput:
    """One pre-cut fragment of a PutChunks request."""

    chunk_order: int
    heading: str
    text: str
    meta: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PutChunksInput:
    """A PutChunksRequest in domain form."""

    namespace: str
    natural_key: str
    chunks: tuple[ChunkInput, ...]
    type: str = ""
    title: str = ""
    source_path: str = ""
    provenance: Mapping[str, Any] = field(default_factory=dict)
    scopes: tuple[str, ...] = ()
    meta: Mapping[str, Any] = field(default_factory=dict)
    links: tuple[str, ...] = ()
    pii: bool = False
    pii_categories: tuple[str, ...] = ()


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
    """

    natural_key: str
    created: bool
    updated: bool
    chunk_count: int
    chunks_written: int
    chunks_deleted: int
    linked: tuple[str, ...]
    missing_links: tuple[str, ...]


def strip_front_matter(content: str) -> str:
    """The body of a Markdown document: ``content`` without a leading YAML front matter block.

    Only a block that starts on the very first line (``---``, optionally after a BOM) and is closed by a
    line ``---`` or ``...`` counts; otherwise ``content`` is returned unchanged. The YAML is not parsed,
    so malformed front matter never fails a write.
    """
    match = _FRONT_MATTER.match(content)
    return content[match.end() :] if match else content


def bounded_chunks(
    pieces: Sequence[tuple[str, str]], hard_chars: int = HARD_CHUNK_CHARS
) -> list[tuple[str, str]]:
    """Cuts (heading, text) pieces longer than ``hard_chars`` at line boundaries (or hard, inside a line).

    Returns the pieces in order, each at most ``hard_chars`` characters, none blank.
    """
    out: list[tuple[str, str]] = []
    for heading, text in pieces:
        if len(text) <= hard_chars:
            out.append((heading, text))
            continue
        current = ""
        for line in text.splitlines(keepends=True):
            while len(line) > hard_chars:
                if current.strip():
                    out.append((heading, current.rstrip()))
                current = ""
                out.append((heading, line[:hard_chars]))
                line = line[hard_chars:]
            if len(current) + len(line) > hard_chars and current.strip():
                out.append((heading, current.rstrip()))
                current = ""
            current += line
        if current.strip():
            out.append((heading, current.rstrip()))
    return [(heading, text) for heading, text in out if text.strip()]


# -- validation ----------------------------------------------------------------------------------------


def _has_nul(value: str) -> bool:
    return "\x00" in value


def _check_text(check: ViolationCollector, path: str, value: str, limit: int, *, required: bool) -> None:
    if required and not value.strip():
        check.add(path, "required")
    elif len(value) > limit:
        check.add(path, f"at most {limit} characters, got {len(value)}")
    elif _has_nul(value):
        check.add(path, "must not contain NUL characters")


def _check_key(check: ViolationCollector, path: str, value: str) -> None:
    if not value.strip():
        check.add(path, "required: a natural key such as doc:apt/README or a URL")
    elif value != value.strip():
        check.add(path, "must not start or end with whitespace")
    elif len(value) > MAX_KEY_LENGTH:
        check.add(path, f"at most {MAX_KEY_LENGTH} characters, got {len(value)}")
    elif _has_nul(value) or any(ch in value for ch in "\r\n\t"):
        check.add(path, "must not contain NUL, tab or line break characters")


def _check_namespace(check: ViolationCollector, namespace: str) -> None:
    if not namespace:
        check.add("namespace", "required")
    elif not NAMESPACE_PATTERN.match(namespace):
        check.add("namespace", f"must match {NAMESPACE_PATTERN.pattern}")


def _check_common(
    check: ViolationCollector,
    *,
    namespace: str,
    natural_key: str,
    node_type: str,
    title: str,
    source_path: str,
    links: Sequence[str],
    scopes: Sequence[str],
    meta: Mapping[str, Any],
    provenance: Mapping[str, Any],
) -> None:
    _check_namespace(check, namespace)
    _check_key(check, "natural_key", natural_key)
    if natural_key.startswith(tuple(f"{protected}:" for protected in sorted(PROTECTED_TYPES))):
        # Keys of audit nodes (audit_event:<id>, pc_trace:<trace_id>) are the audit trail's alone.
        check.add("natural_key", "the prefixes audit_event: and pc_trace: are reserved for the audit trail")
    if node_type and not _TYPE_PATTERN.match(node_type):
        check.add("type", f"must match {_TYPE_PATTERN.pattern}")
    elif node_type in PROTECTED_TYPES:
        check.add("type", f"{node_type!r} is a protected type written only by the audit trail")
    _check_text(check, "title", title, MAX_TITLE_LENGTH, required=False)
    _check_text(check, "source_path", source_path, MAX_SOURCE_PATH_LENGTH, required=False)
    if len(links) > MAX_LINKS:
        check.add("links", f"at most {MAX_LINKS} links, got {len(links)}")
    else:
        seen: set[str] = set()
        for index, link in enumerate(links):
            before = len(check.violations)
            _check_key(check, f"links[{index}]", link)
            if len(check.violations) > before:
                continue
            if link == natural_key:
                check.add(f"links[{index}]", "a document cannot link to itself")
            elif link in seen:
                check.add(f"links[{index}]", f"duplicate link {link!r}")
            seen.add(link)
    if len(scopes) > MAX_SCOPES:
        check.add("scopes", f"at most {MAX_SCOPES} scopes, got {len(scopes)}")
    else:
        for index, scope in enumerate(scopes):
            if not SCOPE_PATTERN.match(scope):
                check.add(f"scopes[{index}]", "must look like type:id (e.g. workspace:alpha, task:PROJ-1)")
    for name, value in (("meta", meta), ("provenance", provenance)):
        if _contains_nul(value):
            check.add(name, "must not contain NUL characters")
    if "scopes" in meta:
        check.add("meta.scopes", "reserved: pass scopes in the scopes field")
    for reserved in _PII_META_KEYS:
        if reserved in meta:
            check.add(f"meta.{reserved}", "reserved: pass personal data marks in pii and pii_categories")


def _contains_nul(value: Any) -> bool:
    if isinstance(value, str):
        return _has_nul(value)
    if isinstance(value, Mapping):
        return any(_has_nul(str(k)) or _contains_nul(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(_contains_nul(v) for v in value)
    return False


def validate_retain(request: RetainInput) -> None:
    """Raises `InvalidArgument` with every field violation of a Retain request (proto field names)."""
    check = ViolationCollector()
    _check_common(
        check,
        namespace=request.namespace,
        natural_key=request.natural_key,
        node_type=request.type,
        title=request.title,
        source_path=request.source_path,
        links=request.links,
        scopes=request.scopes,
        meta=request.meta,
        provenance=request.provenance,
    )
    size = len(request.content.encode("utf-8", errors="surrogatepass"))
    if size > MAX_CONTENT_BYTES:
        check.add("content", f"at most {MAX_CONTENT_BYTES} bytes (8 MiB) of UTF-8, got {size}")
    elif _has_nul(request.content):
        check.add("content", "must not contain NUL characters")
    if len(request.trace_id) > MAX_TRACE_ID_LENGTH or _has_nul(request.trace_id):
        check.add("trace_id", f"at most {MAX_TRACE_ID_LENGTH} characters, no NUL")
    check_pii_categories(check, "pii_categories", request.pii_categories)
    check.raise_if_any()


def validate_put_chunks(request: PutChunksInput) -> None:
    """Raises `InvalidArgument` with every field violation of a PutChunks request."""
    check = ViolationCollector()
    _check_common(
        check,
        namespace=request.namespace,
        natural_key=request.natural_key,
        node_type=request.type,
        title=request.title,
        source_path=request.source_path,
        links=request.links,
        scopes=request.scopes,
        meta=request.meta,
        provenance=request.provenance,
    )
    if not request.chunks:
        check.add("chunks", "at least one chunk is required")
    elif len(request.chunks) > MAX_CHUNKS:
        check.add("chunks", f"at most {MAX_CHUNKS} chunks per call, got {len(request.chunks)}")
    else:
        orders: dict[int, int] = {}
        for index, chunk in enumerate(request.chunks):
            path = f"chunks[{index}]"
            if chunk.chunk_order < 0:
                check.add(f"{path}.chunk_order", "must be >= 0")
            elif chunk.chunk_order in orders:
                check.add(
                    f"{path}.chunk_order", f"duplicate of chunks[{orders[chunk.chunk_order]}].chunk_order"
                )
            else:
                orders[chunk.chunk_order] = index
            if not chunk.text.strip():
                check.add(f"{path}.text", "required: non-blank text")
            elif len(chunk.text.encode("utf-8", errors="surrogatepass")) > MAX_CHUNK_TEXT_BYTES:
                check.add(f"{path}.text", f"at most {MAX_CHUNK_TEXT_BYTES} bytes of UTF-8")
            elif _has_nul(chunk.text):
                check.add(f"{path}.text", "must not contain NUL characters")
            _check_text(check, f"{path}.heading", chunk.heading, MAX_TITLE_LENGTH, required=False)
            if _contains_nul(chunk.meta):
                check.add(f"{path}.meta", "must not contain NUL characters")
            if "scopes" in chunk.meta:
                check.add(f"{path}.meta.scopes", "reserved: pass scopes in the scopes field")
            for reserved in _PII_META_KEYS:
                if reserved in chunk.meta:
                    check.add(
                        f"{path}.meta.{reserved}",
                        "reserved: pass personal data marks in pii and pii_categories",
                    )
    check_pii_categories(check, "pii_categories", request.pii_categories)
    check.raise_if_any()


# -- the writer ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _PreparedChunk:
    order: int
    heading: str
    text: str
    meta: dict[str, Any]


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
    ) -> None:
        self.database = database
        self.encoder = encoder
        self.settings = settings
        self.kinds = kinds or KindValidator(database)
        self.graph = GraphStore(database)
        self.chunks = ChunkStore(settings)
        self.mentions = MentionLinker(self.graph)

    # -- Retain ------------------------------------------------------------------------------------

    def retain(self, request: RetainInput) -> DocumentResult:
        """Upserts a document node with its full text, chunks and links (see the module doc).

        Raises:
            InvalidArgument: field violations named like the RetainRequest fields.
            FailedPrecondition: the key belongs to a protected audit node.
            PermissionDenied: a workspace:/principal: scope the caller may not write (SCOPE_NOT_ALLOWED).
            NotFound: the key's node exists but is hidden from the caller's scopes (`common.write_access`).
            Unavailable: the database cannot be reached (nothing was written).
        """
        validate_retain(request)
        title = request.title or request.natural_key
        node_type = request.type or DEFAULT_TYPE
        # Personal data marks (seed 000 "Персональные данные"): explicit ones plus, with CB_PII_PROTECTION,
        # what the detector finds; mirrored into every chunk's meta for the output masking.
        marks = PiiMarks.of(
            pii=request.pii,
            categories=request.pii_categories,
            values=(title, request.content, request.meta, request.provenance),
            protection=self.settings.pii_protection,
        )
        meta = _chunk_meta(request.meta, request.scopes, marks)
        body = strip_front_matter(request.content)
        pieces = bounded_chunks(
            [(chunk.heading, chunk.text) for chunk in chunk_markdown(body, self.settings.chunk_max_chars)]
        )
        prepared = [
            _PreparedChunk(order, heading, text, meta) for order, (heading, text) in enumerate(pieces)
        ]
        props: dict[str, Any] = {
            "content": request.content,
            "provenance": dict(request.provenance),
            "scopes": list(request.scopes),
            "meta": dict(request.meta),
            **marks.as_props(),
            "trace_id": request.trace_id,
        }
        node = NodeWrite(
            namespace=request.namespace,
            natural_key=request.natural_key,
            node_type=node_type,
            title=title,
            source_path=request.source_path,
            origin="agent",
            props=props,
        )
        return self._write(node, prepared, list(request.links), delete_beyond=True)

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
            NotFound: the key's node exists but is hidden from the caller's scopes (`common.write_access`).
            Unavailable: the database cannot be reached (nothing was written).
        """
        validate_put_chunks(request)
        title = request.title or request.natural_key
        node_type = request.type or DEFAULT_TYPE
        base_meta = dict(request.meta)
        # Marks add up over calls (a document may come in several PutChunks calls): this call's explicit
        # and detected marks joined with those the node holds.
        marks = self._stored_marks(request.namespace, request.natural_key).union(
            PiiMarks.of(
                pii=request.pii,
                categories=request.pii_categories,
                values=(
                    title,
                    request.meta,
                    request.provenance,
                    *((chunk.heading, chunk.text, chunk.meta) for chunk in request.chunks),
                ),
                protection=self.settings.pii_protection,
            )
        )
        prepared = [
            _PreparedChunk(
                chunk.chunk_order,
                chunk.heading,
                chunk.text,
                _chunk_meta({**base_meta, **chunk.meta}, request.scopes, marks),
            )
            for chunk in sorted(request.chunks, key=lambda c: c.chunk_order)
        ]
        props: dict[str, Any] = {
            "provenance": dict(request.provenance),
            "scopes": list(request.scopes),
            "meta": base_meta,
        }
        if marks.marked:
            props.update(marks.as_props())
        node = NodeWrite(
            namespace=request.namespace,
            natural_key=request.natural_key,
            node_type=node_type,
            title=title,
            source_path=request.source_path,
            origin="agent",
            props=props,
        )
        return self._write(node, prepared, list(request.links), delete_beyond=False)

    # -- shared ------------------------------------------------------------------------------------

    def _stored_marks(self, namespace: str, natural_key: str) -> PiiMarks:
        """The personal data marks the node holds now (none when it does not exist)."""
        with self.database.connection() as conn:
            node = self.graph.get_node(conn, namespace, natural_key)
        return PiiMarks.from_props((node or {}).get("props"))

    def _embed(
        self, namespace: str, natural_key: str, title: str, prepared: Sequence[_PreparedChunk]
    ) -> list[np.ndarray]:
        """Vectors of the prepared chunks: reused when the node already holds the same embedding input."""
        inputs = [embedding_input(title, chunk.heading, chunk.text) for chunk in prepared]
        if not inputs:
            return []
        with self.database.connection() as conn:
            stored = self.chunks.existing_embeddings(conn, namespace, natural_key)
        missing = sorted({text for text in inputs if text not in stored or stored[text] is None})
        if missing:
            vectors = self.encoder.encode_passages(missing)
            stored.update(zip(missing, vectors))
        return [np.asarray(stored[text], dtype=np.float32) for text in inputs]

    def _write(
        self, node: NodeWrite, prepared: list[_PreparedChunk], links: list[str], *, delete_beyond: bool
    ) -> DocumentResult:
        kinds = self.kinds.for_namespace(node.namespace)
        if kinds.active:
            # Strict mode: the type must be a base kind or a pack kind, a pack kind's key must fit its
            # naturalKey (fields named like the request: type, natural_key). Checked before embedding.
            _, node.node_type, violations = kinds.check_entity(
                node.natural_key, node.node_type, None, "", key_path="natural_key"
            )
            if violations:
                raise InvalidArgument(violations)
        # Write-side visibility scopes (issue 5 §3): only scopes the caller holds; no hidden node overwritten.
        access = WriteAccess.of_caller()
        access.require_scopes(node.scopes())
        vectors = self._embed(node.namespace, node.natural_key, node.title, prepared)
        writes = [
            ChunkWrite(
                chunk_order=chunk.order,
                heading=chunk.heading,
                text=chunk.text,
                embedding=vector,
                meta=chunk.meta,
            )
            for chunk, vector in zip(prepared, vectors)
        ]
        now = datetime.now(UTC)
        with self.database.connection() as conn:
            access.require_visible_nodes(conn, self.graph, node.namespace, [node.natural_key])
            existing = self.graph.node_labels(conn, node.namespace, [node.natural_key]).get(node.natural_key)
            if existing in PROTECTED_TYPES:
                raise FailedPrecondition(
                    f"{node.natural_key!r} is a protected {existing} node and cannot be overwritten",
                    reason="PROTECTED_NODE",
                )
            targets = self.graph.node_labels(conn, node.namespace, links, visibility=access.visibility)
            linked = [link for link in links if link in targets]
            missing = [link for link in links if link not in targets]
            node.props["links"] = sorted(linked)
            result = self.graph.upsert_node(conn, node, now=now, overwrite=True)
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
            )
            if result.created or result.updated:
                self.graph.replace_links(
                    conn,
                    node.namespace,
                    node.natural_key,
                    result.label,
                    {key: targets[key] for key in linked},
                )
            # Identifiers of pack kinds in the text link the document to existing nodes (issue 4 §4).
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
        )


def _chunk_meta(
    meta: Mapping[str, Any], scopes: Sequence[str], marks: PiiMarks | None = None
) -> dict[str, Any]:
    """Chunk meta: the request's consumer tags plus ``scopes`` (when there are any) and the node's
    personal data marks ``pii`` / ``pii_categories`` (when it has any)."""
    out = dict(meta)
    if scopes:
        out["scopes"] = list(scopes)
    if marks is not None and marks.marked:
        out.update(marks.as_props())
    return out


__all__ = [
    "ChunkInput",
    "DocumentResult",
    "DocumentWriter",
    "PutChunksInput",
    "RetainInput",
    "bounded_chunks",
    "strip_front_matter",
    "validate_put_chunks",
    "validate_retain",
]
