"""One file of a vault run read into what the run projects: the RetainInput of the document (the Retain
projection is reused as it is, `ingest_service.documents.writer`), its links as written, and its fingerprint.

The file's frontmatter is mapped by `common.domain.document_frontmatter` (with aliases and relations,
`VAULT_FIELDS`); the natural key defaults to ``doc:<path without .md>``, the title to the body's first
level-1 heading (then, as in Retain, to the key); ``source_path`` is the path;
the provenance is the client's (Git fields, docs/explanation/knowledge-model.md) plus ``path``,
``content_hash`` (sha256 hex of the UTF-8 text) and ``indexed_at`` (when this text was first projected).
"""

from __future__ import annotations

import hashlib
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from typing import Any

from common.domain.document_frontmatter import VAULT_FIELDS
from common.domain.document_frontmatter import FrontmatterError
from common.domain.document_frontmatter import default_natural_key
from common.domain.document_frontmatter import document_fields
from common.domain.document_frontmatter import read_frontmatter
from common.kernel.errors import InvalidArgument
from common.kernel.errors import ViolationCollector
from common.storage.vault_store import fingerprint
from ingest_service.documents.front_matter import strip_front_matter
from ingest_service.documents.validation import RetainInput
from ingest_service.vault.links import PREDICATE_PATTERN
from ingest_service.vault.links import LinkReference
from ingest_service.vault.links import VaultEntry
from ingest_service.vault.links import body_outline

MAX_PATH_LENGTH = 4096


@dataclass(frozen=True)
class VaultFile:
    """A document as a client sends it: path relative to the vault's root, full text, provenance; or,
    for a file that is not Markdown (PDF, DOCX, HTML, ...), its bytes and media type instead of text."""

    path: str
    content: str
    provenance: Mapping[str, Any] = field(default_factory=dict)
    original: bytes = b""
    media_type: str = ""


@dataclass(frozen=True)
class ParsedDocument:
    """A vault file read for projection.

    Attributes:
        retain: the document as a Retain request (without links: the run writes them at its end).
        entry: key, path, title and aliases, for link resolution.
        references: the document's links and relations as written.
        fingerprint: `common.storage.vault_store.fingerprint` of path, text and provenance.
    """

    retain: RetainInput
    entry: VaultEntry
    references: tuple[LinkReference, ...]
    fingerprint: str

    def journal(self) -> dict[str, Any]:
        """What the run journals of the document (``vault_documents.links``), so a later run that finds
        it unchanged resolves its links without reading it again."""
        return {
            "title": self.entry.title,
            "aliases": list(self.entry.aliases),
            "scopes": list(self.retain.scopes),
            "references": [[r.kind, r.target, r.relation] for r in self.references],
        }


def check_path(path: str, index: int) -> None:
    """Raises `InvalidArgument` (field ``documents[index].path``) for a path that is empty, absolute,
    leaves the root, uses backslashes or NUL, or is longer than `MAX_PATH_LENGTH`."""
    check = ViolationCollector()
    name = f"documents[{index}].path"
    if not path.strip():
        check.add(name, "required")
    elif len(path) > MAX_PATH_LENGTH or "\x00" in path or "\\" in path:
        check.add(name, f"at most {MAX_PATH_LENGTH} characters, POSIX separators, no NUL")
    elif path.startswith("/") or posixpath.normpath(path) != path or path.split("/", 1)[0] == "..":
        check.add(name, "a normalised path relative to the vault's root (no leading /, no . or .. parts)")
    check.raise_if_any()


def file_provenance(file: VaultFile) -> dict[str, Any]:
    """The provenance a document is projected with, ``indexed_at`` aside: the client's plus ``path`` and
    ``content_hash`` (sha256 hex of the UTF-8 text, or of the original file's bytes)."""
    data = file.original or file.content.encode("utf-8")
    return {
        **dict(file.provenance),
        "path": file.path,
        "content_hash": hashlib.sha256(data).hexdigest(),
    }


def file_fingerprint(file: VaultFile) -> str:
    """The fingerprint of ``file`` without parsing it (equal to `ParsedDocument.fingerprint`)."""
    return fingerprint(file.path, file.content, file_provenance(file))


def parse_file(namespace: str, file: VaultFile, index: int, *, indexed_at: str = "") -> ParsedDocument:
    """Reads ``file`` (the ``index``-th document of the run) into a `ParsedDocument`; ``indexed_at`` (an
    ISO instant) goes into the provenance.

    Raises:
        InvalidArgument: a bad path, or frontmatter that cannot be mapped (field ``documents[i].content``).
    """
    check_path(file.path, index)
    if file.original:
        return _parse_original(namespace, file, index, indexed_at)
    try:
        fields = document_fields(read_frontmatter(file.content), consumed=VAULT_FIELDS)
    except FrontmatterError as error:
        raise InvalidArgument.single(f"documents[{index}].content", str(error)) from error
    provenance = file_provenance(file)
    if indexed_at:
        provenance["indexed_at"] = indexed_at
    natural_key = fields.natural_key or default_natural_key(file.path)
    references = [LinkReference("frontmatter", target) for target in fields.links]
    for relation, target in fields.relations:
        predicate = relation.upper()
        if not PREDICATE_PATTERN.match(predicate):
            raise InvalidArgument.single(
                f"documents[{index}].content", f"frontmatter relation {relation!r}: not a predicate name"
            )
        references.append(LinkReference("relation", target, predicate))
    links, first_heading = body_outline(strip_front_matter(file.content))
    references.extend(links)
    title = fields.title or first_heading
    retain = RetainInput(
        namespace=namespace,
        natural_key=natural_key,
        content=file.content,
        type=fields.type,
        title=title,
        source_path=file.path,
        provenance=provenance,
        scopes=fields.scopes,
        meta=fields.meta,
        pii=fields.pii,
        pii_categories=fields.pii_categories,
    )
    return ParsedDocument(
        retain=retain,
        entry=VaultEntry(natural_key, file.path, title or natural_key, fields.aliases),
        references=tuple(references),
        fingerprint=fingerprint(file.path, file.content, provenance),
    )


def _parse_original(namespace: str, file: VaultFile, index: int, indexed_at: str) -> ParsedDocument:
    """`parse_file` of a file sent as bytes: no frontmatter or links are read; the key is
    ``doc:<path>`` (extension kept, so manual.pdf and manual.md do not collide), the title the file name;
    the conversion happens when the document is prepared (`DocumentWriter.prepare_retain`)."""
    if file.content:
        raise InvalidArgument.single(f"documents[{index}].content", "must be empty when original is sent")
    provenance = file_provenance(file)
    if indexed_at:
        provenance["indexed_at"] = indexed_at
    natural_key = f"doc:{file.path}"
    title = posixpath.basename(file.path)
    retain = RetainInput(
        namespace=namespace,
        natural_key=natural_key,
        content="",
        title=title,
        source_path=file.path,
        provenance=provenance,
        original=file.original,
        media_type=file.media_type,
    )
    return ParsedDocument(
        retain=retain,
        entry=VaultEntry(natural_key, file.path, title, ()),
        references=(),
        fingerprint=fingerprint(file.path, file.content, provenance),
    )


def entry_of_journal(natural_key: str, path: str, journal: Mapping[str, Any]) -> VaultEntry:
    """The `VaultEntry` of an unchanged document from its journal (`ParsedDocument.journal`)."""
    return VaultEntry(
        natural_key, path, str(journal.get("title") or natural_key), tuple(journal.get("aliases") or ())
    )


def references_of_journal(journal: Mapping[str, Any]) -> tuple[LinkReference, ...]:
    """The link references of an unchanged document from its journal."""
    return tuple(LinkReference(str(k), str(t), str(r)) for k, t, r in journal.get("references") or ())


__all__ = [
    "ParsedDocument",
    "VaultFile",
    "check_path",
    "entry_of_journal",
    "file_fingerprint",
    "file_provenance",
    "parse_file",
    "references_of_journal",
]
