"""Proto <-> domain mapping of memory records, shared by MemoryService and MemoryQueryService.

`scope_of` resolves the caller's `MemoryScope` from the authenticated principal, the ``x-project-id``
metadata and the request's ``user_id``; `memory_to_proto`, `new_memory_input` and `filter_query` map the
messages of ``memory_record.proto`` and ``memory_service.proto``.
"""

from __future__ import annotations

from typing import Any

import grpc

from common.auth.principals import Right
from common.auth.principals import current_principal
from common.domain.memory_records import MemoryRecord
from common.domain.memory_records import memory_query
from common.domain.memory_scope import PROJECT_METADATA
from common.domain.memory_scope import MemoryScope
from common.domain.memory_scope import resolve_memory_scope
from common.grpc.proto_mapping import dict_to_struct
from common.grpc.proto_mapping import instant
from common.grpc.proto_mapping import json_form
from common.grpc.proto_mapping import timestamp
from common.kernel.errors import FieldViolation
from common.kernel.errors import InvalidArgument
from common.kernel.identifiers import integral_numbers
from common.storage.memories.store import MemoryQuery
from memory_service_grpc_client.memory.v1 import memory_record_pb2
from memory_service_grpc_client.memory.v1 import memory_service_pb2

_TIER_NAMES = {
    memory_record_pb2.MEMORY_TIER_HOT: "hot",
    memory_record_pb2.MEMORY_TIER_WARM: "warm",
    memory_record_pb2.MEMORY_TIER_COLD: "cold",
}
_TIER_VALUES = {name: value for value, name in _TIER_NAMES.items()}
_TYPE_PREFIX = "MEMORY_TYPE_"


def tier_name(value: int) -> str:
    """``MEMORY_TIER_HOT`` -> ``"hot"``; ``""`` for unspecified."""
    return _TIER_NAMES.get(value, "")  # type: ignore[call-overload]


def memory_type_name(value: int) -> str:
    """``MEMORY_TYPE_FACT`` -> ``"fact"``; ``""`` for unspecified or unknown numbers."""
    if value == memory_record_pb2.MEMORY_TYPE_UNSPECIFIED:
        return ""
    try:
        return memory_record_pb2.MemoryType.Name(value)[len(_TYPE_PREFIX) :].lower()  # type: ignore[arg-type]
    except ValueError:
        return f"unknown-{value}"  # refused by the validator (not one of MEMORY_TYPES)


def memory_type_value(name: str) -> int:
    """``"fact"`` -> ``MEMORY_TYPE_FACT``; 0 for ``""``."""
    if not name:
        return memory_record_pb2.MEMORY_TYPE_UNSPECIFIED
    return int(memory_record_pb2.MemoryType.Value(_TYPE_PREFIX + name.upper()))


def scope_of(context: grpc.ServicerContext, user_id: str, right: Right) -> MemoryScope:
    """The caller's scope (see `common.domain.memory_scope.resolve_memory_scope`)."""
    project = ""
    for key, value in context.invocation_metadata() or ():
        if key == PROJECT_METADATA:
            project = value if isinstance(value, str) else value.decode("utf-8", "replace")
    return resolve_memory_scope(current_principal(), project, user_id, right)


def memory_to_proto(record: MemoryRecord) -> memory_record_pb2.Memory:
    """The `memory.v1.Memory` of a record."""
    message = memory_record_pb2.Memory(
        memory_id=record.memory_id,
        scope=memory_record_pb2.MemoryScope(**record.scope),
        text=record.text,
        summary=record.summary,
        source=record.source,
        event_type=record.event_type,
        tags=list(record.tags),
        importance=record.importance,
        tier=_TIER_VALUES.get(record.tier, memory_record_pb2.MEMORY_TIER_UNSPECIFIED),  # type: ignore[arg-type]
        metadata=dict_to_struct(record.metadata),
        parent_id=record.parent_id,
        is_summary=record.is_summary,
        lossless=record.lossless,
        summarized_ids=list(record.summarized_ids),
        summary_id=record.summary_id,
        expired=record.expired,
        create_time=timestamp(record.created_at),
        update_time=timestamp(record.updated_at),
        recall_count=record.recall_count,
        version=record.version,
        enriched_version=record.enriched_version,
        key_points=list(record.key_points),
        insights=list(record.insights),
        entities=list(record.entities),
        topics=list(record.topics),
        memory_type=memory_type_value(record.memory_type),  # type: ignore[arg-type]
        idempotency_key=record.idempotency_key,
        provenance=dict_to_struct(record.provenance),
    )
    if record.quality_score is not None:
        message.quality_score = record.quality_score
    if record.expires_at is not None:
        message.expire_time.CopyFrom(timestamp(record.expires_at))
    if record.last_recalled_at is not None:
        message.last_recall_time.CopyFrom(timestamp(record.last_recalled_at))
    return message


def _instant_or_none(message: Any) -> Any:
    """`instant` of a Timestamp, None when it is out of range (the validator then names the field)."""
    try:
        return instant(message)
    except (ValueError, OverflowError):
        return None


def new_memory_input(message: memory_service_pb2.NewMemory) -> Any:
    """The domain form of a `memory.v1.NewMemory` (`ingest_service.memories.validation.NewMemoryInput`
    fields as keyword arguments; the caller builds it, so the transport stays free of service imports)."""
    # The item's JSON form: a non-finite number in a Struct is passed on for the validator to name.
    form, _ = json_form(message)
    return {
        "text": message.text,
        "idempotency_key": message.idempotency_key,
        "summary": message.summary,
        "source": message.source,
        "event_type": message.event_type,
        "tags": tuple(message.tags),
        "importance": message.importance if message.HasField("importance") else None,
        "metadata": dict(integral_numbers(form.get("metadata") or {})),
        "memory_type": memory_type_name(message.memory_type),
        "expire_time": _instant_or_none(message.expire_time) if message.HasField("expire_time") else None,
        "ttl_seconds": message.ttl.seconds + message.ttl.nanos / 1e9 if message.HasField("ttl") else None,
        "unreadable": ("expire_time",)
        if message.HasField("expire_time") and _instant_or_none(message.expire_time) is None
        else (),
        "tier": tier_name(message.tier),
        "provenance": dict(integral_numbers(form.get("provenance") or {})),
    }


def filter_query(
    scope: MemoryScope,
    message: memory_record_pb2.MemoryFilter,
    *,
    include_expired: bool = False,
    include_hidden: bool = False,
) -> MemoryQuery:
    """The `MemoryQuery` of a scope and a `memory.v1.MemoryFilter`.

    Raises:
        InvalidArgument: ``filter.min_importance`` outside [0, 1]; ``filter.tiers[i]`` or
            ``filter.memory_types[i]`` unspecified or not a value of its enum.
    """
    known = {
        "tiers": set(memory_record_pb2.MemoryTier.values()) - {memory_record_pb2.MEMORY_TIER_UNSPECIFIED},
        "memory_types": set(memory_record_pb2.MemoryType.values())
        - {memory_record_pb2.MEMORY_TYPE_UNSPECIFIED},
    }
    unknown = [
        FieldViolation(f"filter.{field}[{index}]", f"unknown or unspecified value {value}")
        for field, values in (("tiers", message.tiers), ("memory_types", message.memory_types))
        for index, value in enumerate(values)
        if value not in known[field]
    ]
    if unknown:
        raise InvalidArgument(unknown)
    return memory_query(
        scope,
        tags=tuple(message.tags),
        source=message.source,
        event_type=message.event_type,
        tiers=tuple(tier_name(v) for v in message.tiers),
        memory_types=tuple(memory_type_name(v) for v in message.memory_types),
        created_from=instant(message.create_time_start) if message.HasField("create_time_start") else None,
        created_to=instant(message.create_time_end) if message.HasField("create_time_end") else None,
        min_importance=message.min_importance,
        is_summary=message.is_summary if message.HasField("is_summary") else None,
        include_expired=include_expired,
        include_hidden=include_hidden,
    )


__all__ = [
    "filter_query",
    "memory_to_proto",
    "memory_type_name",
    "memory_type_value",
    "new_memory_input",
    "scope_of",
    "tier_name",
]
