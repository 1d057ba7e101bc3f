"""The write side's limits on the filters of every read request (keys, predicates, types, namespaces,
a meta containment filter).

A read filter names what a write stored, so it can never be longer than the write side accepts: a 1 MB
subject only makes the database compare it. `READ_FILTER_LIMITS` lists, per request message of the read
RPCs, each string field that names stored data and the limit of the thing it names;
`read_filter_violations` gives a field violation for each value beyond it (a Struct filter such as
Search's ``meta`` is measured as compact JSON, as the write side measures what it names).
`common.grpc.request_checks` runs it on every request before a handler sees it, so no reader has to
remember it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import Message
from google.protobuf.struct_pb2 import Struct

from common.domain.audit import MAX_TRACE_ID_LENGTH
from common.kernel.errors import FieldViolation
from common.kernel.identifiers import MAX_KEY_LENGTH
from common.kernel.identifiers import MAX_PREDICATE_LENGTH
from common.kernel.identifiers import MAX_TYPE_LENGTH
from common.kernel.identifiers import NAMESPACE_PATTERN
from common.kernel.memory_names import MAX_MEMORY_LABEL_LENGTH
from common.kernel.memory_names import USER_PATTERN
from common.kernel.value_sizes import MAX_META_BYTES
from common.kernel.value_sizes import json_bytes

__all__ = ["READ_FILTER_LIMITS", "Limit", "read_filter_violations"]

MAX_PAGE_TOKEN_LENGTH = 4096  # a page token the service issued is far shorter
MAX_USER_LENGTH = 128  # USER_PATTERN's length


@dataclass(frozen=True)
class Limit:
    """What one filter field may hold: at most ``chars`` characters, matching ``pattern`` when set and
    non-empty."""

    chars: int
    what: str
    pattern: re.Pattern[str] | None = None
    as_json: bool = False  # a Struct filter: ``chars`` counts bytes of its compact JSON (`json_bytes`)

    def violation(self, value: Any) -> str | None:
        """Why ``value`` breaks the limit, or None."""
        if self.as_json:
            size = json_bytes(value)
            if size > self.chars:
                return f"at most {self.chars} bytes as JSON ({self.what}), got {size}"
            return None
        if len(value) > self.chars:
            return f"at most {self.chars} characters ({self.what}), got {len(value)}"
        if value and self.pattern is not None and not self.pattern.match(value):
            return f"must match {self.pattern.pattern} ({self.what})"
        return None


NAMESPACE = Limit(128, "a namespace", NAMESPACE_PATTERN)
KEY = Limit(MAX_KEY_LENGTH, "the longest natural key a write accepts")
PREDICATE = Limit(MAX_PREDICATE_LENGTH, "the longest predicate a write accepts")
TYPE = Limit(MAX_TYPE_LENGTH, "the longest node type a write accepts")
TRACE_ID = Limit(MAX_TRACE_ID_LENGTH, "the longest trace id a write accepts")
PAGE_TOKEN = Limit(MAX_PAGE_TOKEN_LENGTH, "pass the next_page_token of a previous response unchanged")
MEMORY_LABEL = Limit(MAX_MEMORY_LABEL_LENGTH, "the longest memory source, event type or tag a write accepts")
USER = Limit(MAX_USER_LENGTH, "a user id", USER_PATTERN)
META = Limit(MAX_META_BYTES, "the largest document meta a write accepts", as_json=True)

_MEMORY_FILTER = {
    "filter.tags": MEMORY_LABEL,
    "filter.source": MEMORY_LABEL,
    "filter.event_type": MEMORY_LABEL,
}

READ_FILTER_LIMITS: dict[str, dict[str, Limit]] = {
    "memory.v1.ListFactsRequest": {
        "namespace": NAMESPACE,
        "subject": KEY,
        "predicate": PREDICATE,
        "object": KEY,
        "page_token": PAGE_TOKEN,
    },
    "memory.v1.SearchRequest": {"namespace": NAMESPACE, "node_keys": KEY, "types": TYPE, "meta": META},
    "memory.v1.GetSourceRequest": {"namespace": NAMESPACE, "natural_key": KEY},
    "memory.v1.CompileContextRequest": {"namespace": NAMESPACE, "anchors": KEY, "trace_id": TRACE_ID},
    "memory.v1.CompileTypedContextRequest": {
        "namespace": NAMESPACE,
        "anchors": KEY,
        "relations": PREDICATE,
        "trace_id": TRACE_ID,
    },
    "memory.v1.GetObservationRequest": {"namespace": NAMESPACE, "observation_id": KEY},
    "memory.v1.GetTraceRequest": {"namespace": NAMESPACE, "trace_id": TRACE_ID},
    "memory.v1.RecallMemoriesRequest": {**_MEMORY_FILTER, "user_id": USER},
    "memory.v1.ListMemoriesRequest": {**_MEMORY_FILTER, "user_id": USER, "page_token": PAGE_TOKEN},
    "memory.v1.GetMemoryRequest": {"memory_id": KEY, "user_id": USER},
    "memory.v1.SummarizeMemoriesRequest": dict(_MEMORY_FILTER),
    "memory.v1.ListNamespacesRequest": {"prefix": Limit(128, "a namespace prefix"), "page_token": PAGE_TOKEN},
    "memory.v1.GetNamespaceStatsRequest": {"namespace": NAMESPACE},
}


def _values(message: Message, dotted: str) -> list[tuple[str, Any]]:
    """(path, value) of the string or Struct field ``dotted`` of ``message`` (one level of nesting, repeated
    fields indexed); nothing when an enclosing message is not set."""
    head, _, rest = dotted.partition(".")
    if rest:
        if not message.HasField(head):
            return []
        return [(f"{head}.{path}", value) for path, value in _values(getattr(message, head), rest)]
    value = getattr(message, head)
    if isinstance(value, Struct):
        if not message.HasField(head):
            return []
        try:
            return [(head, json_format.MessageToDict(value))]
        except ValueError:  # a non-finite number, which `unstorable_paths` reports as its own violation
            return []
    if isinstance(value, str):
        return [(head, value)] if value else []
    return [(f"{head}[{index}]", item) for index, item in enumerate(value)]


def read_filter_violations(message: Message, prefix: str = "") -> list[FieldViolation]:
    """The violations of ``message``'s read filters (`READ_FILTER_LIMITS`; none for other messages)."""
    limits = READ_FILTER_LIMITS.get(message.DESCRIPTOR.full_name)
    if not limits:
        return []
    found: list[FieldViolation] = []
    for dotted, limit in limits.items():
        for path, value in _values(message, dotted):
            why = limit.violation(value)
            if why is not None:
                found.append(FieldViolation(f"{prefix}.{path}" if prefix else path, why))
    return found
