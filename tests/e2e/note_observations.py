"""The ``note`` observation about ivan that the access tests record (console, visibility, auth, audit): one
builder, each test naming only its source system and what differs."""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format

from memory_service_grpc_client.memory.v1 import knowledge_pb2

NOTED = "2024-05-01T10:00:00Z"


def asserted_fact(subject: str, predicate: str, obj: str, when: str = NOTED) -> dict[str, Any]:
    """An assertion of one fact valid from ``when``."""
    return {"fact": {"subject": subject, "predicate": predicate, "object": obj, "valid_from": when}}


def note(
    namespace: str, system: str, external_id: str, content: str, stream: str = "notes", **fields: Any
) -> knowledge_pb2.Observation:
    """A ``note`` about person ivan at `NOTED` from ``system``'s ``stream``; ``fields`` add or replace."""
    raw = {
        "namespace": namespace,
        "source": {"system": system, "stream": stream, "external_id": external_id},
        "kind": "note",
        "occurred_at": NOTED,
        "subject": {"type": "person", "id": "ivan"},
        "content": content,
        **fields,
    }
    return json_format.ParseDict(raw, knowledge_pb2.Observation())
