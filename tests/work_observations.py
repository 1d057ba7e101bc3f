"""The ``work.assigned`` observation (as the JSON of knowledge.Observation) that the fact tests record over
the recorder and over gRPC, and alice's WORKS_ON fact: one builder each, a test naming only what differs."""

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


def works_on(project: str, valid_from: str, **extra: Any) -> dict[str, Any]:
    """A FactAssertion (JSON) that person:alice WORKS_ON ``project`` from ``valid_from``."""
    fact = {"subject": "person:alice", "predicate": "WORKS_ON", "object": project, "valid_from": valid_from}
    return {**fact, **extra}
