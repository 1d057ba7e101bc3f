"""The original files of documents retained from a file (migration 0032): the exact bytes, once per
namespace and sha256, and which original each document node was converted from. Named queries in
``sql/queries/document_originals.sql``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from common.kernel.config import Settings
from common.storage.named_queries import Queries


@dataclass(frozen=True)
class DocumentFile:
    """Which original a document was converted from, as what and by which converter.

    Attributes:
        sha256: hex digest of the original's bytes.
        media_type: the type it was converted as.
        size_bytes: its size.
        converter: the library that made the Markdown.
        converter_version: its version.
        page_status: per PDF page (element i is page i + 1): "text", "no_text_layer", "ocr", "ocr_empty".
    """

    sha256: str
    media_type: str
    size_bytes: int
    converter: str
    converter_version: str
    page_status: tuple[str, ...] = ()


class DocumentOriginalStore:
    """Reads and writes originals within the caller's transaction.

    Args:
        settings: table names.
    """

    def __init__(self, settings: Settings) -> None:
        self.queries = Queries.for_settings("document_originals.sql", settings)

    def put(
        self, conn: psycopg.Connection[Any], namespace: str, natural_key: str, file: DocumentFile, data: bytes
    ) -> None:
        """Keeps ``data`` (content-addressed) and records it as ``natural_key``'s original; an original
        the document named before and no other document names is deleted."""
        conn.execute(
            self.queries["insert_document_original"],
            (namespace, file.sha256, file.media_type, file.size_bytes, data),
        )
        row = conn.execute(
            self.queries["upsert_document_file"],
            {
                "namespace": namespace,
                "natural_key": natural_key,
                "sha256": file.sha256,
                "media_type": file.media_type,
                "size_bytes": file.size_bytes,
                "converter": file.converter,
                "converter_version": file.converter_version,
                "page_status": Jsonb(list(file.page_status)),
            },
        ).fetchone()
        if row is not None and row[0]:
            self._drop_unreferenced(conn, namespace, [row[0]])

    def forget(self, conn: psycopg.Connection[Any], namespace: str, natural_key: str) -> bool:
        """Removes ``natural_key``'s record of its original (and the bytes when no other document of the
        namespace names them); True when it had one. For a node deleted, or rewritten from text."""
        row = conn.execute(self.queries["delete_document_file"], (namespace, natural_key)).fetchone()
        if row is None:
            return False
        self._drop_unreferenced(conn, namespace, [row[0]])
        return True

    def _drop_unreferenced(
        self, conn: psycopg.Connection[Any], namespace: str, hashes: Sequence[str]
    ) -> None:
        for sha256 in hashes:
            conn.execute(self.queries["delete_unreferenced_original"], (namespace, sha256, namespace))

    def file(self, conn: psycopg.Connection[Any], namespace: str, natural_key: str) -> DocumentFile | None:
        """What ``natural_key`` was converted from, or None for a document written as text."""
        row = conn.execute(self.queries["select_document_file"], (namespace, natural_key)).fetchone()
        if row is None:
            return None
        return DocumentFile(row[0], row[1], int(row[2]), row[3], row[4], tuple(str(s) for s in row[5] or ()))

    def data(self, conn: psycopg.Connection[Any], namespace: str, sha256: str) -> bytes | None:
        """The exact bytes of an original, or None when no such original is kept."""
        row = conn.execute(self.queries["select_document_original_bytes"], (namespace, sha256)).fetchone()
        return None if row is None else bytes(row[0])


__all__ = ["DocumentFile", "DocumentOriginalStore"]
