"""The limits a conversion runs under: input size, zip expansion, pages, cells, CPU time, memory, wall time.

Operators set them with ``CB_DOCUMENT_*`` settings (`common.kernel.config.Settings`); the defaults
fit a 2-core machine and documents a company keeps (manuals of hundreds of pages).
"""

from __future__ import annotations

import io
import zipfile
from dataclasses import asdict
from dataclasses import dataclass
from typing import Any

from ingest_service.documents.conversion.converted import ConversionError

MIB = 1024 * 1024


@dataclass(frozen=True)
class ConversionLimits:
    """Bounds of one conversion.

    Attributes:
        max_bytes: the original's size; larger ones are refused before any parsing.
        max_unzipped_bytes: what a zip container's entries may expand to (declared sizes, checked
            before opening; reading stops at the declared size, so a lying header cannot exceed it).
        max_zip_ratio: expansion ratio of the whole container (a zip bomb's is in the thousands).
        max_zip_entries: entries of a zip container.
        max_pages: pages of a PDF (counted before any page is read).
        max_cells: cells of a workbook, all sheets.
        cpu_seconds: CPU time of the child process (RLIMIT_CPU).
        memory_bytes: address space of the child process (RLIMIT_AS).
        wall_seconds: the child is killed after this long.
        max_markdown_bytes: the Markdown it may produce (the document text limit).
        ocr: read pages without a text layer with Tesseract.
        ocr_languages: Tesseract's language list (``"eng+rus"``).
    """

    max_bytes: int = 48 * MIB
    max_unzipped_bytes: int = 512 * MIB
    max_zip_ratio: int = 200
    max_zip_entries: int = 20000
    max_pages: int = 5000
    max_cells: int = 2_000_000
    cpu_seconds: int = 120
    memory_bytes: int = 2048 * MIB
    wall_seconds: float = 180.0
    max_markdown_bytes: int = 8 * MIB
    ocr: bool = False
    ocr_languages: str = "eng+rus"

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def check_zip(data: bytes, limits: ConversionLimits) -> None:
    """Refuses a zip container whose central directory declares too many entries or too many bytes.

    Raises:
        ConversionError: the container is not a zip, or exceeds `ConversionLimits`.
    """
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            infos = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError) as error:
        raise ConversionError(f"not a readable zip container: {error}") from error
    if len(infos) > limits.max_zip_entries:
        raise ConversionError(
            f"the zip container has {len(infos)} entries, more than {limits.max_zip_entries}"
        )
    total = sum(info.file_size for info in infos)
    if total > limits.max_unzipped_bytes:
        raise ConversionError(
            f"the zip container expands to {total} bytes, more than the limit of {limits.max_unzipped_bytes}"
        )
    if total > max(len(data), 1) * limits.max_zip_ratio and total > 16 * MIB:
        raise ConversionError(
            f"the zip container expands {total // max(len(data), 1)}-fold, more than {limits.max_zip_ratio}-fold"
        )


__all__ = ["MIB", "ConversionLimits", "check_zip"]
