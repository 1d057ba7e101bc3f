"""Validation of memory writes (limits documented in protos/memory/v1/memory_service.proto).

`NewMemoryInput` is one `memory.v1.NewMemory` as plain values; `check_new_memory` collects its field
violations under a prefix (``memories[3]`` for AddMemories, ``memory`` for UpdateMemory) with the shared
`FieldChecker`, so a bad item is refused with the exact field path and nothing of it is written.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from datetime import datetime
from datetime import timedelta
from typing import Any

from common.domain.memory_records import MEMORY_TYPES
from common.kernel.memory_names import MAX_MEMORY_LABEL_LENGTH
from common.storage.memories.store import TIERS
from ingest_service.validation.fields import FieldChecker

MAX_BATCH = 500
MAX_TEXT = 8000
MAX_SUMMARY = 2000
MAX_LABEL = MAX_MEMORY_LABEL_LENGTH
MAX_TAGS = 32
MAX_KEY = 200
MAX_METADATA_BYTES = 16 * 1024
MAX_TTL = timedelta(days=36525)
DEFAULT_IMPORTANCE = 0.5
UPDATABLE_PATHS = frozenset(
    {
        "text",
        "summary",
        "source",
        "event_type",
        "tags",
        "importance",
        "metadata",
        "memory_type",
        "expire_time",
        "ttl",
        "tier",
        "provenance",
    }
)


@dataclass(frozen=True)
class NewMemoryInput:
    """One memory to write (`memory.v1.NewMemory`); ``memory_type`` and ``tier`` lower case ("" = unset),
    ``ttl_seconds`` None when not given; ``unreadable``: fields the transport could not read (an
    out-of-range Timestamp), each a violation."""

    text: str = ""
    idempotency_key: str = ""
    summary: str = ""
    source: str = ""
    event_type: str = ""
    tags: tuple[str, ...] = ()
    importance: float | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    memory_type: str = ""
    expire_time: datetime | None = None
    ttl_seconds: float | None = None
    tier: str = ""
    provenance: Mapping[str, Any] = field(default_factory=dict)
    unreadable: tuple[str, ...] = ()

    def expiry(self, now: datetime) -> datetime | None:
        """``expire_time``, or ``now + ttl``, or None (call it on a validated item only)."""
        if self.ttl_seconds is not None:
            return now + timedelta(seconds=self.ttl_seconds)
        return self.expire_time

    def unique_tags(self) -> tuple[str, ...]:
        """The tags without duplicates, in order."""
        return tuple(dict.fromkeys(self.tags))


def check_new_memory(
    item: NewMemoryInput, check: FieldChecker, now: datetime, *, paths: frozenset[str] | None = None
) -> None:
    """Adds the violations of ``item`` to ``check``; ``paths`` limits the check to those fields (an update),
    None checks every field of an add (text required)."""

    def wanted(name: str) -> bool:
        return paths is None or name in paths

    if paths is None:
        if item.idempotency_key and len(item.idempotency_key) > MAX_KEY:
            check.add("idempotency_key", f"at most {MAX_KEY} characters")
        check.storable(item.idempotency_key, "idempotency_key")
    if wanted("text"):
        if not item.text.strip():
            check.add("text", "required: 1..8000 characters")
        elif len(item.text) > MAX_TEXT:
            check.add("text", f"at most {MAX_TEXT} characters")
        check.storable(item.text, "text")
    if wanted("summary"):
        check.text(item.summary, "summary", MAX_SUMMARY)
        check.storable(item.summary, "summary")
    for name in ("source", "event_type"):
        if wanted(name):
            check.text(getattr(item, name), name, MAX_LABEL)
            check.storable(getattr(item, name), name)
    if wanted("tags"):
        if len(item.tags) > MAX_TAGS:
            check.add("tags", f"at most {MAX_TAGS} tags")
        for index, tag in enumerate(item.tags):
            if not tag.strip() or len(tag) > MAX_LABEL:
                check.add(f"tags[{index}]", f"1..{MAX_LABEL} characters")
        check.storable(list(item.tags), "tags")
    importance = item.importance
    if (
        wanted("importance")
        and importance is not None
        and not (math.isfinite(importance) and 0 <= importance <= 1)
    ):
        check.add("importance", "must be in [0, 1]")
    for name in ("metadata", "provenance"):
        if wanted(name):
            value = dict(getattr(item, name))
            check.storable(value, name)
            check.json_size(value, name, MAX_METADATA_BYTES)
    if wanted("memory_type") and item.memory_type and item.memory_type not in MEMORY_TYPES:
        check.add("memory_type", f"one of {', '.join(MEMORY_TYPES)}")
    if wanted("tier") and item.tier and item.tier not in TIERS:
        check.add("tier", f"one of {', '.join(TIERS)}")
    for name in item.unreadable:
        check.add(name, "out of range: a Timestamp lies in 0001-01-01T00:00:00Z..9999-12-31T23:59:59Z")
    if (
        (wanted("expire_time") or wanted("ttl"))
        and item.expire_time is not None
        and item.ttl_seconds is not None
    ):
        check.add("ttl", "give expire_time or ttl, not both")
    ttl = item.ttl_seconds
    if wanted("ttl") and ttl is not None and not (math.isfinite(ttl) and 1 <= ttl <= MAX_TTL.total_seconds()):
        check.add("ttl", "between 1 second and 100 years")
    if wanted("expire_time") and item.expire_time is not None and item.expire_time <= now:
        check.add("expire_time", "must be in the future")


__all__ = [
    "DEFAULT_IMPORTANCE",
    "MAX_BATCH",
    "UPDATABLE_PATHS",
    "NewMemoryInput",
    "check_new_memory",
]
