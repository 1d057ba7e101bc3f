"""Snapshot files for ``cb reconcile``: JSONL in the proto3 JSON form of ReconcileStreamRequest
(docs/explanation/architecture.md: the CLI reads the JSON form of requests), turned lazily into the messages of
SnapshotService.ReconcileStream.

The first non-blank line is the header, ``{"header": {"namespace", "source", "scope", "snapshot_id",
"snapshot_time"}}``; every later line is ``{"items": {"entities": [...], "facts": [...]}}`` with any number
of items (one per line is fine). Lines are regrouped into parts of at most ``part_items`` items, so a file
of 100,000 one-item lines is sent as 100 messages, and neither the file nor the snapshot is ever held in
memory whole. The end message (the numbers of entities and facts read) follows the last line.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Iterator

from google.protobuf import json_format

from common.grpc.proto_mapping import explain_parse_error
from memory_service_grpc_client.memory.v1 import snapshot_service_pb2


class SnapshotFileError(ValueError):
    """A line of a snapshot file is not a valid message; ``line`` is its 1-based number."""

    def __init__(self, line: int, reason: str) -> None:
        super().__init__(f"line {line}: {reason}")
        self.line = line
        self.reason = reason


def stream_requests(
    lines: Iterable[bytes | str],
    *,
    namespace: str | None = None,
    allow_mass_sweep: bool = False,
    part_items: int = 1000,
    on_line: Callable[[int], None] | None = None,
) -> Iterator[snapshot_service_pb2.ReconcileStreamRequest]:
    """The ReconcileStream messages of a snapshot file: the header, parts of ``part_items`` items, the end.

    Args:
        lines: the file's lines (bytes or text, UTF-8).
        namespace: replaces the header's namespace when given.
        allow_mass_sweep: sets the header's allow_mass_sweep (the file's own value is kept when False).
        part_items: entities + facts per part message (>= 1).
        on_line: called with the number of the line just read (progress).

    Raises:
        SnapshotFileError: a line is not JSON, not a ReconcileStreamRequest, the first one is not the
            header, or a later one is.
    """
    part = snapshot_service_pb2.ReconcileStreamItems()
    size = entities = facts = 0
    header_seen = False
    for number, raw in enumerate(lines, start=1):
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        if not text.strip():
            continue
        try:
            message = json_format.ParseDict(json.loads(text), snapshot_service_pb2.ReconcileStreamRequest())
        except (ValueError, json_format.ParseError) as error:
            raise SnapshotFileError(
                number, f"not a ReconcileStreamRequest in proto3 JSON: {explain_parse_error(error)}"
            ) from None
        which = message.WhichOneof("part")
        if not header_seen:
            if which != "header":
                raise SnapshotFileError(number, 'the first line must be the header: {"header": {...}}')
            if namespace is not None:
                message.header.namespace = namespace
            if allow_mass_sweep:
                message.header.allow_mass_sweep = True
            header_seen = True
            yield message
        elif which != "items":
            raise SnapshotFileError(
                number, 'only the first line is a header; later lines are {"items": {...}}'
            )
        else:
            part.entities.extend(message.items.entities)
            part.facts.extend(message.items.facts)
            entities += len(message.items.entities)
            facts += len(message.items.facts)
            size += len(message.items.entities) + len(message.items.facts)
            if size >= part_items:
                yield snapshot_service_pb2.ReconcileStreamRequest(items=part)
                part, size = snapshot_service_pb2.ReconcileStreamItems(), 0
        if on_line is not None:
            on_line(number)
    if not header_seen:
        raise SnapshotFileError(0, "empty file: the first line must be the header")
    if size:
        yield snapshot_service_pb2.ReconcileStreamRequest(items=part)
    yield snapshot_service_pb2.ReconcileStreamRequest(
        end=snapshot_service_pb2.ReconcileStreamEnd(entity_count=entities, fact_count=facts)
    )
