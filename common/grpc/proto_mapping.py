"""Mapping of stored records onto memory.v1 messages, shared by the servicers of both services.

Transport helpers only (protobuf, no grpc, no SQL): timestamps, Structs, `memory.v1.Fact` from a stored
fact row and `memory.v1.Observation` from a stored observation view.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC
from datetime import datetime
from typing import Any

from google.protobuf import json_format
from google.protobuf import struct_pb2
from google.protobuf import timestamp_pb2
from google.protobuf.message import Message

from common.domain.audit import AuditEvent
from common.domain.observation_view import ObservationView
from common.kernel.identifiers import integral_numbers
from common.storage.change_feed.outbox import ChangeFilter
from common.storage.fact_rows import FactRow
from memory_service_grpc_client.memory.v1 import audit_service_pb2
from memory_service_grpc_client.memory.v1 import knowledge_pb2


def timestamp(value: datetime) -> timestamp_pb2.Timestamp:
    """An aware datetime as a `google.protobuf.Timestamp`."""
    message = timestamp_pb2.Timestamp()
    message.FromDatetime(value.astimezone(UTC))
    return message


def instant(message: timestamp_pb2.Timestamp) -> datetime:
    """A `google.protobuf.Timestamp` as an aware UTC datetime."""
    return message.ToDatetime(tzinfo=UTC)


def optional_instant(message: Message, field_name: str) -> datetime | None:
    """The instant of the Timestamp field ``field_name`` of ``message``; None when the field is unset."""
    return instant(getattr(message, field_name)) if message.HasField(field_name) else None


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
_TIMESTAMP = "google.protobuf.Timestamp"
_JSON_TYPES = frozenset({"google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue"})
TIMESTAMP_RANGE = (
    "out of range: a Timestamp lies in 0001-01-01T00:00:00Z..9999-12-31T23:59:59Z, 0 <= nanos < 1e9"
)

_CHECKED_WELL_KNOWN = {
    "google.protobuf.Duration": "out of range: a Duration lies within +-315576000000 seconds, nanos of its sign",
    "google.protobuf.FieldMask": "paths must be lower_snake_case field names",
}

_Found = tuple[list[int | str], Any, str, str]  # (path in the JSON form, value there, path text, description)


def _valid_timestamp(value: timestamp_pb2.Timestamp) -> bool:
    return _MIN_TIMESTAMP_SECONDS <= value.seconds <= _MAX_TIMESTAMP_SECONDS and 0 <= value.nanos < 10**9


def _path_text(steps: list[int | str]) -> str:
    text = ""
    for step in steps:
        if isinstance(step, int):
            text += f"[{step}]"
        else:
            text = f"{text}.{step}" if text else step
    return text


def _json_value_fix(value: struct_pb2.Value, steps: list[int | str], found: list[_Found]) -> None:
    kind = value.WhichOneof("kind")
    if kind == "number_value" and not math.isfinite(value.number_value):
        found.append((steps, value.number_value, _path_text(steps), "must be a finite number"))
        value.null_value = struct_pb2.NULL_VALUE
    elif kind == "struct_value":
        for key, child in value.struct_value.fields.items():
            _json_value_fix(child, [*steps, key], found)
    elif kind == "list_value":
        for index, child in enumerate(value.list_value.values):
            _json_value_fix(child, [*steps, index], found)


def _fix_unrepresentable(message: Message, steps: list[int | str], found: list[_Found]) -> None:
    """Clears, in place, what proto3 JSON cannot represent (out-of-range Timestamps, non-finite numbers
    in Structs), recording each with its path in the JSON form."""
    name = message.DESCRIPTOR.full_name
    if name == "google.protobuf.Struct":
        for key, child in message.fields.items():
            _json_value_fix(child, [*steps, key], found)
        return
    if name == "google.protobuf.ListValue":
        for index, child in enumerate(message.values):
            _json_value_fix(child, [*steps, index], found)
        return
    if name == "google.protobuf.Value":
        _json_value_fix(message, steps, found)
        return
    for field, value in message.ListFields():
        if field.message_type is None:
            continue
        if field.message_type.GetOptions().map_entry:
            if field.message_type.fields_by_name["value"].message_type is None:
                continue
            items: list[tuple[int | str | None, Any]] = [(str(k), v) for k, v in value.items()]
        else:
            items = list(enumerate(value)) if field.is_repeated else [(None, value)]
        for index, item in items:
            step: list[int | str] = [*steps, field.name] if index is None else [*steps, field.name, index]
            if field.message_type.full_name in _CHECKED_WELL_KNOWN:
                # Duration and FieldMask (memory records): what their JSON form refuses (a Duration past
                # +-10,000 years, a mask path that is not lower_snake_case) fails under the field's path.
                try:
                    item.ToJsonString()
                except ValueError:
                    text = _CHECKED_WELL_KNOWN[field.message_type.full_name]
                    found.append((step, text, _path_text(step), text))
                    if index is None:
                        message.ClearField(field.name)
                    else:
                        item.Clear()
                continue
            if field.message_type.full_name == _TIMESTAMP:
                if not _valid_timestamp(item):
                    text = f"Timestamp(seconds={item.seconds}, nanos={item.nanos})"
                    found.append((step, text, _path_text(step), TIMESTAMP_RANGE))
                    if index is None:
                        message.ClearField(field.name)
                    else:
                        item.Clear()
            else:
                _fix_unrepresentable(item, step, found)


def json_form(message: Message) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """``message`` in proto3-JSON form with proto field names, for the domain's validation, whatever it
    holds; ``json_format`` alone raises on what proto3 JSON cannot represent.

    An out-of-range Timestamp (seconds 1e13, negative nanos) is passed on as the string
    ``"Timestamp(seconds=S, nanos=N)"``, which every instant check of the domain rejects under the
    field's own path (``assertions[0].fact.valid_to``); a non-finite number in a Struct is passed on as
    the float itself, which `common.kernel.storable_values.unstorable_paths` reports. Each is also
    returned as ``(path, description)``, so a whole-request check refuses it directly.

    A message that ``json_format`` prints is returned as printed, without the walk: ``json_format``
    raises (ValueError, or SerializeToJsonError for a nested field) for everything the walk clears
    (out-of-range Timestamps and Durations, FieldMask paths that are not lower_snake_case, non-finite
    numbers in Structs; test `test_json_form_walks_only_what_json_format_refuses`), and the walk with its
    copy of the message took a third of this function's time on valid batches (bench/RESULTS.md (git history)).
    """
    try:
        return json_format.MessageToDict(message, preserving_proto_field_name=True), []
    except (ValueError, json_format.Error):  # nested fields raise SerializeToJsonError
        pass  # something proto3 JSON cannot represent: find it, with its path
    copy = type(message)()
    copy.CopyFrom(message)
    found: list[_Found] = []
    _fix_unrepresentable(copy, [], found)
    form = json_format.MessageToDict(copy if found else message, preserving_proto_field_name=True)
    for steps, value, _text, _description in found:
        target: Any = form
        for step in steps[:-1]:
            target = target[step]
        last = steps[-1]
        if isinstance(target, dict) or isinstance(last, int) and last < len(target):
            target[last] = value
    return form, [(text, description) for _steps, _value, text, description in found]


def change_filter(request: Any) -> ChangeFilter:
    """The `ChangeFilter` of a request's ``event_types``, ``key_prefixes`` and ``predicates`` fields
    (WatchChangesRequest, CreateWebhookSubscriptionRequest)."""
    return ChangeFilter(
        event_types=tuple(request.event_types),
        key_prefixes=tuple(request.key_prefixes),
        predicates=tuple(request.predicates),
    )


def fact_assertion_to_dict(message: knowledge_pb2.FactAssertion) -> dict[str, Any]:
    """A FactAssertion in proto3-JSON form with proto field names (`json_form`): an out-of-range
    Timestamp becomes a descriptive string the validation rejects (``facts[1].valid_from``)."""
    return json_form(message)[0]


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
