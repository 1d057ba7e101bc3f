"""Markdown vaults for ``cb retain``: the ``*.md`` files of a folder, each read into the RetainRequest of
one document (content byte-for-byte, YAML frontmatter mapped onto the request's fields), and the files
the server converts (PDF, DOCX, HTML, ...), sent as their bytes with a media type.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from common.domain.document_frontmatter import FrontmatterError
from common.domain.document_frontmatter import default_natural_key
from common.domain.document_frontmatter import document_fields
from common.domain.document_frontmatter import read_frontmatter
from common.grpc.proto_mapping import dict_to_struct
from ingest_service.documents.conversion.media_types import EXTENSIONS
from ingest_service.documents.conversion.media_types import MARKDOWN
from ingest_service.documents.conversion.text_encoding import NotText
from ingest_service.documents.conversion.text_encoding import markdown_text
from memory_service_grpc_client.memory.v1 import document_service_pb2

__all__ = ["DocumentError", "default_natural_key", "find_documents", "read_document"]


class DocumentError(ValueError):
    """A Markdown file that cannot be sent (unreadable, not text, bad frontmatter)."""


def find_documents(root: Path) -> list[Path]:
    """Every ``*.md`` file, and every file of a format the server converts (``*.pdf``, ``*.docx``,
    ``*.html``, ...: `EXTENSIONS`), under ``root`` sorted by relative path; hidden folders skipped."""
    found = []
    for path in root.rglob("*"):
        if path.suffix.lower() not in EXTENSIONS:
            continue
        relative = path.relative_to(root)
        if any(part.startswith(".") for part in relative.parts[:-1]):
            continue
        if path.is_file():
            found.append(path)
    return sorted(found, key=lambda p: p.relative_to(root).as_posix())


def read_document(path: Path, root: Path, *, namespace: str) -> document_service_pb2.RetainRequest:
    """Builds the RetainRequest of one Markdown file of a vault.

    The content is the file byte-for-byte (decoded as UTF-8, else cp1251; newlines untouched; frontmatter included:
    the server strips it for chunking). Frontmatter (YAML) gives ``natural_key`` (default
    `default_natural_key`), ``title``, ``type``, ``links`` (string or list of natural keys), ``scopes``,
    ``pii``, ``pii_categories`` and ``meta`` (a mapping); any other scalar or list key (``project``,
    ``license``, ...) is added to ``meta``. ``source_path`` is the path relative to ``root``;
    ``provenance`` is ``{"path": <relative path>, "sha256": <hex of the bytes>}``.

    Raises:
        DocumentError: the file cannot be read, is not text, or its frontmatter is malformed.
    """
    relative = path.relative_to(root).as_posix()
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DocumentError(f"cannot read: {exc.strerror or exc}") from exc
    media_type = EXTENSIONS.get(path.suffix.lower(), MARKDOWN)
    if media_type != MARKDOWN:
        # Converted on the server; the key keeps the extension (manual.pdf and manual.md do not collide).
        return document_service_pb2.RetainRequest(
            namespace=namespace,
            natural_key=f"doc:{relative}",
            title=path.name,
            original=data,
            media_type=media_type,
            source_path=relative,
            provenance=dict_to_struct({"path": relative, "sha256": hashlib.sha256(data).hexdigest()}),
        )
    try:
        content = markdown_text(data)  # UTF-8 (else cp1251), newlines untouched, as the server decodes
    except NotText as exc:
        raise DocumentError(str(exc)) from exc
    try:
        fields = document_fields(read_frontmatter(content))
    except FrontmatterError as exc:
        raise DocumentError(str(exc)) from exc
    request = document_service_pb2.RetainRequest(
        namespace=namespace,
        natural_key=fields.natural_key or default_natural_key(relative),
        type=fields.type,
        title=fields.title,
        content=content,
        links=list(fields.links),
        source_path=relative,
        provenance=dict_to_struct({"path": relative, "sha256": hashlib.sha256(data).hexdigest()}),
        scopes=list(fields.scopes),
        pii=fields.pii,
        pii_categories=list(fields.pii_categories),
    )
    if fields.meta:
        request.meta.CopyFrom(dict_to_struct(fields.meta))
    return request
