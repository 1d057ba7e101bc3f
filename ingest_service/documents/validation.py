"""Validation of DocumentService writes (Retain, PutChunks): the requests in domain form and their field
checks (docs/explanation/knowledge-model.md; field names of protos/memory/v1/document_service.proto).

Transport free: violations are raised as `common.kernel.errors.InvalidArgument`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from typing import Any

from common.kernel.errors import ViolationCollector
from common.kernel.field_checks import check_namespace
from common.kernel.field_checks import check_scopes
from common.kernel.identifiers import MAX_KEY_LENGTH
from common.kernel.pii import check_pii_categories
from common.kernel.storable_values import unstorable_paths
from ingest_service.validation.limits import MAX_CHUNK_TEXT_BYTES
from ingest_service.validation.limits import MAX_CHUNKS_PER_CALL
from ingest_service.validation.limits import MAX_DOCUMENT_CONTENT_BYTES
from ingest_service.validation.limits import MAX_DOCUMENT_SOURCE_PATH_CHARS
from ingest_service.validation.limits import MAX_LINKS
from ingest_service.validation.limits import MAX_META_BYTES
from ingest_service.validation.limits import MAX_PROVENANCE_BYTES
from ingest_service.validation.limits import MAX_TITLE_CHARS
from ingest_service.validation.limits import MAX_TRACE_ID_CHARS
from ingest_service.validation.limits import PROTECTED_KEY_PREFIXES
from ingest_service.validation.limits import PROTECTED_TYPES
from ingest_service.validation.limits import RESERVED_KEY_MESSAGE
from ingest_service.validation.limits import TYPE_PATTERN
from ingest_service.validation.limits import json_bytes

# Chunk meta keys holding the personal data marks (common.kernel.pii.PiiMarks); requests pass them in fields.
PII_META_KEYS = ("pii", "pii_categories")


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
    original: bytes = b""
    media_type: str = ""


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


def _check_common(check: ViolationCollector, request: RetainInput | PutChunksInput) -> None:
    """The checks Retain and PutChunks share: namespace, key, type, title, source_path, links, scopes,
    meta and provenance."""
    natural_key, node_type = request.natural_key, request.type
    check_namespace(check, request.namespace)
    _check_key(check, "natural_key", natural_key)
    if natural_key.startswith(PROTECTED_KEY_PREFIXES):
        check.add("natural_key", RESERVED_KEY_MESSAGE)
    if node_type and not TYPE_PATTERN.match(node_type):
        check.add("type", f"must match {TYPE_PATTERN.pattern}")
    elif node_type in PROTECTED_TYPES:
        check.add("type", f"{node_type!r} is a protected type written only by the audit trail")
    _check_text(check, "title", request.title, MAX_TITLE_CHARS, required=False)
    _check_text(check, "source_path", request.source_path, MAX_DOCUMENT_SOURCE_PATH_CHARS, required=False)
    links = request.links
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
    check_scopes(check, request.scopes, "workspace:alpha, task:PROJ-1")
    for name, value, limit in (
        ("meta", request.meta, MAX_META_BYTES),
        ("provenance", request.provenance, MAX_PROVENANCE_BYTES),
    ):
        _check_storable(check, name, value)
        if json_bytes(value) > limit:
            check.add(name, f"larger than {limit} bytes as JSON")
    _check_reserved_meta(check, "meta", request.meta)


def _check_reserved_meta(check: ViolationCollector, path: str, meta: Mapping[str, Any]) -> None:
    """Meta keys the writer sets itself (``scopes`` and the personal data marks) are refused."""
    if "scopes" in meta:
        check.add(f"{path}.scopes", "reserved: pass scopes in the scopes field")
    for reserved in PII_META_KEYS:
        if reserved in meta:
            check.add(f"{path}.{reserved}", "reserved: pass personal data marks in pii and pii_categories")


def _check_storable(check: ViolationCollector, path: str, value: Any) -> None:
    """A violation per key or value of ``value`` the database cannot store (U+0000, non-finite numbers:
    `common.kernel.storable_values.unstorable_paths`), under its own path (``meta.k``)."""
    for where, description in unstorable_paths(value, path):
        check.add(where, description)


def validate_retain(request: RetainInput) -> None:
    """Raises `InvalidArgument` with every field violation of a Retain request (proto field names)."""
    check = ViolationCollector()
    _check_common(check, request)
    size = len(request.content.encode("utf-8", errors="surrogatepass"))
    if size > MAX_DOCUMENT_CONTENT_BYTES:
        check.add("content", f"at most {MAX_DOCUMENT_CONTENT_BYTES} bytes (8 MiB) of UTF-8, got {size}")
    elif _has_nul(request.content):
        check.add("content", "must not contain NUL characters")
    elif request.original and request.content:
        check.add("content", "must be empty when original is sent (the text is converted from it)")
    if request.media_type and not request.original:
        check.add("media_type", "only with original")
    if len(request.trace_id) > MAX_TRACE_ID_CHARS or _has_nul(request.trace_id):
        check.add("trace_id", f"at most {MAX_TRACE_ID_CHARS} characters, no NUL")
    check_pii_categories(check, "pii_categories", request.pii_categories)
    check.raise_if_any()


def validate_put_chunks(request: PutChunksInput) -> None:
    """Raises `InvalidArgument` with every field violation of a PutChunks request."""
    check = ViolationCollector()
    _check_common(check, request)
    if not request.chunks:
        check.add("chunks", "at least one chunk is required")
    elif len(request.chunks) > MAX_CHUNKS_PER_CALL:
        check.add("chunks", f"at most {MAX_CHUNKS_PER_CALL} chunks per call, got {len(request.chunks)}")
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
            _check_text(check, f"{path}.heading", chunk.heading, MAX_TITLE_CHARS, required=False)
            _check_storable(check, f"{path}.meta", chunk.meta)
            if json_bytes(chunk.meta) > MAX_META_BYTES:
                check.add(f"{path}.meta", f"larger than {MAX_META_BYTES} bytes as JSON")
            _check_reserved_meta(check, f"{path}.meta", chunk.meta)
    check_pii_categories(check, "pii_categories", request.pii_categories)
    check.raise_if_any()
