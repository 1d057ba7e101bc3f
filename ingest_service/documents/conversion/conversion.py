"""The entry point the document writer calls: an original's bytes checked (size, true media type),
converted in the sandbox, and described (sha256, size, converter) for storage and GetSource."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from common.kernel.errors import InvalidArgument
from ingest_service.documents.conversion import media_types
from ingest_service.documents.conversion.converted import ConversionError
from ingest_service.documents.conversion.converted import Converted
from ingest_service.documents.conversion.limits import ConversionLimits
from ingest_service.documents.conversion.sandbox import ConversionSandbox


@dataclass(frozen=True)
class Original:
    """The exact bytes of a document as sent, with what describes them.

    Attributes:
        data: the bytes.
        media_type: the type they were converted as.
        sha256: hex digest of ``data`` (the key they are stored under).
    """

    data: bytes
    media_type: str
    sha256: str

    @property
    def size(self) -> int:
        return len(self.data)


@dataclass(frozen=True)
class Conversion:
    """An original and its Markdown."""

    original: Original
    converted: Converted


class DocumentConverter:
    """Checks and converts originals (see the module doc).

    Args:
        limits: bounds of every conversion (`ConversionLimits`).
        parallel: conversions running at once.
    """

    def __init__(self, limits: ConversionLimits | None = None, *, parallel: int = 2) -> None:
        self.limits = limits or ConversionLimits()
        self.sandbox = ConversionSandbox(self.limits, parallel=parallel)

    def check(self, data: bytes, declared: str, *, path: str = "") -> str:
        """The media type ``data`` is converted as, checked without converting.

        Raises:
            InvalidArgument: ``original`` too large or empty, ``media_type`` malformed, unsupported or
                contradicted by the bytes (fields named with the ``path`` prefix).
        """
        if not data:
            raise InvalidArgument.single(f"{path}original", "required: the document's bytes")
        if len(data) > self.limits.max_bytes:
            raise InvalidArgument.single(
                f"{path}original", f"at most {self.limits.max_bytes} bytes, got {len(data)}"
            )
        if declared and not media_types.MEDIA_TYPE_PATTERN.match(media_types.normalize(declared)):
            raise InvalidArgument.single(
                f"{path}media_type", "must look like type/subtype, e.g. application/pdf"
            )
        media_type, refusal = media_types.resolve(declared, data)
        if refusal:
            raise InvalidArgument.single(f"{path}media_type", refusal)
        return media_type

    def convert(self, data: bytes, declared: str, *, path: str = "") -> Conversion:
        """``data`` (declared as ``declared``, or sniffed when empty) converted to Markdown.

        Raises:
            InvalidArgument: as `check`; ``original`` that cannot be converted or exceeds a limit (the
                violation says which), or converts to no text.
        """
        media_type = self.check(data, declared, path=path)
        try:
            converted = self.sandbox.convert(data, media_type)
        except ConversionError as error:
            raise InvalidArgument.single(f"{path}original", str(error)) from error
        size = len(converted.markdown.encode("utf-8"))
        if size > self.limits.max_markdown_bytes:
            raise InvalidArgument.single(
                f"{path}original",
                f"converts to {size} bytes of Markdown, more than the limit of {self.limits.max_markdown_bytes}",
            )
        if not converted.markdown.strip() and not converted.pages:
            raise InvalidArgument.single(f"{path}original", f"no text found in the {media_type} document")
        return Conversion(Original(data, media_type, hashlib.sha256(data).hexdigest()), converted)


__all__ = ["Conversion", "DocumentConverter", "Original"]
