"""Mapping of stored records onto memory.v1 messages, shared by the servicers of both services.

Transport helpers only (protobuf, no grpc, no SQL): timestamps, Structs, `memory.v1.Fact` from a stored
fact row and `memory.v1.Observation` from a stored observation view.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from google.protobuf import json_format, struct_pb2, timestamp_pb2
from memory.v1 import audit_service_pb2, knowledge_pb2

from common.domain.audit import AuditEvent
from common.domain.observation_view import ObservationView
from common.kernel.identifiers import integral_numbers
from common.storage.fact_store import FactRow


def timestamp(value: datetime) -> timestamp_pb2.Timestamp:
    """An aware datetime as a `google.protobuf.Timestamp`."""
    message = timestamp_pb2.Timestamp()
    message.FromDatetime(value.astimezone(UTC))
    return message


def instant(message: timestamp_pb2.Timestamp) -> datetime:
    """A `google.protobuf.Timestamp` as an aware UTC datetime."""
    return message.ToDatetime(tzinfo=UTC)


def struct_to_dict(message: struct_pb2.Struct) -> dict[str, Any]:
    """A `google.protobuf.Struct` as a plain dict; integral numbers become ints (Struct holds doubles only)."""
    return dict(integral_numbers(json_format.MessageToDict(message)))


def dict_to_struct(mapping: Mapping[str, Any]) -> struct_pb2.Struct:
    """A JSON-like mapping as a `google.protobuf.Struct` (numbers become doubles)."""
    message = struct_pb2.Struct()
    if mapping:
        message.update(dict(mapping))
    return message


_MIN_TIMESTAMP_SECONDS = -62135596800  # 0001-01-01T00:00:00Z
_MAX_TIMESTAMP_SECONDS = 253402300799  # 9999-12-31T23:59:59Z


def fact_assertion_to_dict(message: knowledge_pb2.FactAssertion) -> dict[str, Any]:
    """A FactAssertion in proto3-JSON form with proto field names, for the domain's validation.

    An out-of-range Timestamp (which proto3 JSON cannot represent) is passed on as a descriptive string
    the validation rejects, so the caller gets a field violation (``facts[1].valid_from``) instead of an
    internal error.
    """
    invalid: dict[str, str] = {}
    for name in ("valid_from", "valid_to"):
        if message.HasField(name):
            value = getattr(message, name)
            if not (
                _MIN_TIMESTAMP_SECONDS <= value.seconds <= _MAX_TIMESTAMP_SECONDS and 0 <= value.nanos < 10**9
            ):
                invalid[name] = f"Timestamp(seconds={value.seconds}, nanos={value.nanos})"
    if not invalid:
        return json_format.MessageToDict(message, preserving_proto_field_name=True)
    copy = knowledge_pb2.FactAssertion()
    copy.CopyFrom(message)
    for name in invalid:
        copy.ClearField(name)
    return {**json_format.MessageToDict(copy, preserving_proto_field_name=True), **invalid}


def fact_to_proto(row: FactRow, *, conflict: bool = False) -> knowledge_pb2.Fact:
    """A stored fact as memory.v1.Fact (valid_to absent while the fact is current)."""
    fact = knowledge_pb2.Fact(
        fact_id=row.fact_id,
        subject=row.subject_key,
        predicate=row.predicate,
        object=row.object_key,
        valid_from=timestamp(row.valid_from),
        observed_at=timestamp(row.observed_at),
        evidence=row.evidence,
        confidence=row.confidence,
        observation_ids=list(row.observation_ids),
        supersedes=row.supersedes or "",
        superseded_by=row.superseded_by or "",
        conflict=conflict,
        evidence_lost=row.evidence_lost,
        origin=row.origin,
        scopes=list(row.scopes),
        attributes=dict_to_struct(row.attributes),
        namespace=row.namespace,
        source_path=row.source_path,
    )
    if row.valid_to is not None:
        fact.valid_to.CopyFrom(timestamp(row.valid_to))
    return fact


def observation_to_proto(view: ObservationView) -> knowledge_pb2.Observation:
    """A stored observation as memory.v1.Observation (input fields in their proto3-JSON form as stored,
    plus the output-only observation_id, status, received_time and status_details)."""
    message = knowledge_pb2.Observation()
    json_format.ParseDict(view.fields, message, ignore_unknown_fields=True)
    message.observation_id = view.observation_id
    message.status = view.status
    message.received_time.CopyFrom(timestamp(view.received_at))
    message.status_details.extend(view.status_details)
    return message


def audit_event_to_proto(event: AuditEvent) -> audit_service_pb2.AuditEvent:
    """A stored `common.domain.audit.AuditEvent` as `memory.v1.AuditEvent`."""
    return audit_service_pb2.AuditEvent(
        event_id=event.event_id,
        action=event.action,
        trace_id=event.trace_id,
        principal=event.principal,
        target_key=event.target_key,
        details=dict_to_struct(event.details),
        scopes=list(event.scopes),
        record_time=timestamp(event.recorded_at),
        request_id=event.request_id,
        client_event_id=event.client_event_id,
    )


def explain_parse_error(error: Exception) -> str:
    """The one-line message of a proto3 JSON parse error (`json_format.ParseError`), with the fix added
    for the two usual mistakes in hand-written files: an instant without a UTC offset (protobuf's
    Timestamp is RFC 3339 and says only "time data ... does not match format") and an actor or subject
    given as a ``"type:id"`` string (protobuf says a ``Participant`` "has no field named" its first letter).
    """
    text = " ".join(str(error).split())
    if "time data" in text or "timezone offset" in text.lower():
        text += " (instants are RFC 3339 with a UTC offset, e.g. 2026-01-01T00:00:00Z or 2026-01-01T03:00:00+03:00)"
    if "memory.v1.Participant" in text and "has no field named" in text:
        text += ' (actor and subject are objects {"type": "person", "id": "alice"}, not "person:alice")'
    return text
