"""A stored observation as its callers see it (docs/explanation/knowledge-model.md), transport free.

`observation_view` turns a row of the observations table into the proto3-JSON field map of
memory.v1.Observation plus the output-only parts (id, status, received time, status details).
Used by ObservationQueryService.GetObservation and by ObservationService.RedactObservation's response.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field
from datetime import datetime
from typing import Any

from common.kernel.identifiers import canonical_instant

RECEIVED = "received"
PROCESSED = "processed"
PARTIALLY_PROCESSED = "partially_processed"
FAILED = "failed"
REDACTED = "redacted"


@dataclass(frozen=True)
class ObservationView:
    """One stored observation.

    Attributes:
        observation_id: ``obs-<sha256[:24]>``.
        status: received, processed, partially_processed, failed or redacted.
        received_at: when the service stored it (aware UTC).
        status_details: for partially_processed, every rejected assertion as ``"<field path>: <reason>"``;
            for redacted, the reason given (none when it was empty).
        fields: the input fields in proto3-JSON form with proto field names (namespace, source, kind,
            occurred_at, actor, subject, scopes, content, data, assertions, provenance).
    """

    observation_id: str
    status: str
    received_at: datetime
    status_details: list[str] = field(default_factory=list)
    fields: dict[str, Any] = field(default_factory=dict)


def status_details(status: str, detail: dict[str, Any] | None) -> list[str]:
    """The human-readable details of a status from the stored ``status_detail`` jsonb.

    ``{"rejected": [{"field", "reason"}]}`` (partially_processed) gives ``"field: reason"`` per assertion;
    ``{"reason": "..."}`` (redacted) gives the reason when it is not empty.
    """
    detail = detail or {}
    lines: list[str] = []
    for rejected in detail.get("rejected") or []:
        if isinstance(rejected, dict):
            lines.append(f"{rejected.get('field', '')}: {rejected.get('reason', '')}")
    if status == REDACTED and detail.get("reason"):
        lines.append(str(detail["reason"]))
    return lines


def observation_view(row: dict[str, Any]) -> ObservationView:
    """The view of a row of the observations table (`ObservationStore.get`)."""
    source: dict[str, Any] = {"system": row["source_system"], "stream": row["source_stream"]}
    if row.get("source_external_id"):
        source["external_id"] = row["source_external_id"]
    fields: dict[str, Any] = {
        "namespace": row["namespace"],
        "source": source,
        "kind": row["kind"],
        "occurred_at": canonical_instant(row["occurred_at"]),
        "scopes": list(row.get("scopes") or []),
        "content": row.get("content") or "",
        "data": row.get("data") or {},
        "assertions": row.get("assertions") or [],
        "provenance": row.get("provenance") or {},
    }
    for name in ("actor", "subject"):
        if row.get(name):
            fields[name] = row[name]
    return ObservationView(
        observation_id=row["observation_id"],
        status=row["status"],
        received_at=row["received_at"],
        status_details=status_details(row["status"], row.get("status_detail")),
        fields=fields,
    )
