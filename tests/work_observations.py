"""The ``work.assigned`` observation (as the JSON of knowledge.Observation) that the fact tests record over
the recorder and over gRPC: one builder, each test naming only its source and what it adds."""

from __future__ import annotations

from typing import Any


def work_assigned(
    namespace: str,
    external_id: str,
    occurred_at: str,
    assertions: list[dict[str, Any]],
    source: tuple[str, str] = ("tracker", "people"),
    content: str = "",
    **fields: Any,
) -> dict[str, Any]:
    """A ``work.assigned`` observation from ``source`` (system, stream); ``fields`` add to it."""
    system, stream = source
    return {
        "namespace": namespace,
        "source": {"system": system, "stream": stream, "external_id": external_id},
        "kind": "work.assigned",
        "occurred_at": occurred_at,
        "content": content or f"event {external_id}",
        "assertions": assertions,
        **fields,
    }
