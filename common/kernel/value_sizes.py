"""Sizes of free-form JSON values (meta, attributes, provenance) as every limit counts them, and the
limits both sides share: a read filter can never be larger than what a write accepts."""

from __future__ import annotations

import json

__all__ = ["MAX_META_BYTES", "json_bytes"]

MAX_META_BYTES = 64 * 1024  # a document's meta, as compact JSON (and so a Search meta filter)


def json_bytes(value: object) -> int:
    """The size of ``value`` as compact JSON in UTF-8 (non-ASCII kept), as the size limits count it."""
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str).encode("utf-8"))
