"""Hypothesis strategies that build arbitrary memory.v1 requests from the proto descriptors.

`request_strategy(descriptor, namespace)` walks a message descriptor and draws every field: strings
(random text, values that pass the field's usual pattern, the same with U+0000 inside, now and then a
1 MB one), numbers at and beyond their type's bounds, random enum numbers (proto3 enums are open),
repeated fields of random length, maps, Timestamps in and out of range (seconds 1e13, negative nanos),
Structs with NUL keys, non-finite numbers and nesting deeper than protobuf parses. Fields named
``namespace`` mostly get the example's namespace, so what a refused write would leave is countable.

`raw_request_strategy` adds what a Python client cannot send: the serialized request with an invalid
UTF-8 string (a lone surrogate, a bare continuation byte) or a Struct nested deeper than protobuf parses
appended to one of its fields, at the top level or nested.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import struct_pb2
from google.protobuf import timestamp_pb2
from google.protobuf.descriptor import Descriptor
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass
from hypothesis import strategies as st

# Values that pass the usual checks of a field with this name, so a draw reaches the database.
PLAUSIBLE: dict[str, list[str]] = {
    "kind": ["note", "status.changed"],
    "system": ["fuzz"],
    "stream": ["s1"],
    "external_id": ["e1", ""],
    "type": ["person", "document"],
    "id": ["alice", "bob"],
    "key": ["person:alice", "doc:a"],
    "natural_key": ["doc:a", "person:alice"],
    "subject": ["person:alice"],
    "object": ["person:bob"],
    "predicate": ["knows", "works_at"],
    "scopes": ["workspace:x", "task:t1"],
    "title": ["A title"],
    "heading": ["Intro"],
    "content": ["Some text about alice and PROJ-1234."],
    "text": ["Some text about alice."],
    "query": ["alice", "PROJ-1234"],
    "anchors": ["person:alice"],
    "source": ["crm"],
    "scope": ["all"],
    "snapshot_id": ["snap-1"],
    "name": ["pack.fuzz"],
    "version": ["1.0.0"],
    "action": ["note"],
    "reason": ["because"],
    "trace_id": ["trace-1"],
    "source_path": ["a/b.md"],
    "observation_id": ["obs-0123456789abcdef01234567"],
    "fact_id": ["fact-0123456789abcdef01234567"],
    "evidence": ["asserted", "extracted"],
}
HUGE = "k" * (1024 * 1024)


def _with_nul(value: str) -> str:
    middle = len(value) // 2
    return value[:middle] + "\x00" + value[middle:]


def string_strategy(name: str, namespace: str) -> st.SearchStrategy[str]:
    """A string for a field called ``name``."""
    plausible = ["ns"] if name != "namespace" else [namespace]
    plausible = PLAUSIBLE.get(name, plausible) if name != "namespace" else plausible
    return st.one_of(
        st.sampled_from(plausible),
        st.sampled_from(plausible).map(_with_nul),
        st.text(max_size=12),
        st.sampled_from(["", "\x00", " padded ", "a" * 300, "$$'\\\n", HUGE]),
    )


INT_BOUNDS = {
    FieldDescriptor.TYPE_INT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SINT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_INT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SINT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_FIXED32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1),
    FieldDescriptor.TYPE_FIXED64: (0, 2**64 - 1),
}


def _int_strategy(field_type: int) -> st.SearchStrategy[int]:
    low, high = INT_BOUNDS[field_type]
    edges = [v for v in (low, high, -1, 0, 1, 5, 1001, 10**6) if low <= v <= high]
    return st.one_of(st.sampled_from(edges), st.integers(low, high))


def timestamp_strategy() -> st.SearchStrategy[timestamp_pb2.Timestamp]:
    seconds = st.one_of(
        st.sampled_from([0, 1_780_000_000, 10**13, -(10**13), -62135596801, 253402300800]),
        st.integers(-(2**63), 2**63 - 1),
    )
    nanos = st.sampled_from([0, 500, -1, 10**9, -(2**31), 2**31 - 1])
    return st.builds(lambda s, n: timestamp_pb2.Timestamp(seconds=s, nanos=n), seconds, nanos)


def _json_leaves() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.none(),
        st.booleans(),
        st.floats(allow_nan=True, allow_infinity=True),
        st.sampled_from(["alice", "a\x00b", "\x00", "", HUGE]),
        st.text(max_size=8),
    )


def _json_keys() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(["k", "\x00", "key\x00", "collection", "email@x.ru"]), st.text(max_size=8)
    )


def _deep_value(depth: int) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = {"n": value}
    return value


def struct_strategy() -> st.SearchStrategy[struct_pb2.Struct]:
    values = st.recursive(
        _json_leaves(),
        lambda inner: st.one_of(
            st.lists(inner, max_size=3), st.dictionaries(_json_keys(), inner, max_size=3)
        ),
        max_leaves=8,
    )
    mapping = st.one_of(
        st.dictionaries(_json_keys(), values, max_size=4),
        st.sampled_from([10, 30]).map(lambda depth: {"deep": _deep_value(depth)}),
    )

    def build(value: dict[str, Any]) -> struct_pb2.Struct:
        message = struct_pb2.Struct()
        _fill_struct(message, value)
        return message

    return mapping.map(build)


def _fill_value(target: struct_pb2.Value, value: Any) -> None:
    if value is None:
        target.null_value = struct_pb2.NULL_VALUE
    elif isinstance(value, bool):
        target.bool_value = value
    elif isinstance(value, float):
        target.number_value = value
    elif isinstance(value, str):
        target.string_value = value
    elif isinstance(value, list):
        target.list_value.SetInParent()
        for item in value:
            _fill_value(target.list_value.values.add(), item)
    else:
        target.struct_value.SetInParent()
        _fill_struct(target.struct_value, value)


def _fill_struct(target: struct_pb2.Struct, value: dict[str, Any]) -> None:
    for key, item in value.items():
        _fill_value(target.fields[key], item)


def _scalar_strategy(field: FieldDescriptor, namespace: str) -> st.SearchStrategy[Any]:
    if field.type == FieldDescriptor.TYPE_STRING:
        return string_strategy(field.name, namespace)
    if field.type == FieldDescriptor.TYPE_BYTES:
        return st.binary(max_size=16)
    if field.type == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if field.type in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        edges = [0.0, 0.5, 1.0, -1.0, 1e308, float("nan"), float("inf"), float("-inf")]
        return st.one_of(st.sampled_from(edges), st.floats(width=32 if field.type == 2 else 64))
    if field.type == FieldDescriptor.TYPE_ENUM:
        known = [value.number for value in field.enum_type.values]
        return st.one_of(st.sampled_from(known), st.integers(-(2**31), 2**31 - 1))
    return _int_strategy(field.type)


def _field_value_strategy(field: FieldDescriptor, namespace: str, depth: int) -> st.SearchStrategy[Any]:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return message_strategy(field.message_type, namespace, depth + 1)
    return _scalar_strategy(field, namespace)


def message_strategy(descriptor: Descriptor, namespace: str, depth: int = 0) -> st.SearchStrategy[Message]:
    """An arbitrary message of ``descriptor``: each field drawn or left unset; depth-limited."""
    if descriptor.full_name == "google.protobuf.Timestamp":
        return timestamp_strategy()
    if descriptor.full_name == "google.protobuf.Struct":
        return struct_strategy()
    if descriptor.full_name == "google.protobuf.Value":
        return struct_strategy().map(lambda s: struct_pb2.Value(struct_value=s))
    cls = GetMessageClass(descriptor)
    if depth > 4 or not descriptor.fields:
        return st.builds(cls)

    @st.composite
    def build(draw: st.DrawFn) -> Message:
        message = cls()
        for field in descriptor.fields:
            if field.name == "namespace" and field.type == FieldDescriptor.TYPE_STRING:
                value = draw(
                    st.one_of(st.just(namespace), st.just(namespace), string_strategy("x", namespace))
                )
                setattr(message, field.name, value)
                continue
            if not draw(st.booleans()):
                continue
            if field.message_type is not None and field.message_type.GetOptions().map_entry:
                key_field = field.message_type.fields_by_name["key"]
                value_field = field.message_type.fields_by_name["value"]
                entries = draw(
                    st.dictionaries(
                        _scalar_strategy(key_field, namespace),
                        _field_value_strategy(value_field, namespace, depth),
                        max_size=3,
                    )
                )
                target = getattr(message, field.name)
                for key, value in entries.items():
                    if value_field.type == FieldDescriptor.TYPE_MESSAGE:
                        target[key].CopyFrom(value)
                    else:
                        target[key] = value
                continue
            if field.is_repeated:
                size = draw(st.sampled_from([0, 1, 2, 3, 6]))
                values = [draw(_field_value_strategy(field, namespace, depth)) for _ in range(size)]
                target = getattr(message, field.name)
                for value in values:
                    if field.type == FieldDescriptor.TYPE_MESSAGE:
                        target.add().CopyFrom(value)
                    else:
                        target.append(value)
                continue
            value = draw(_field_value_strategy(field, namespace, depth))
            if field.type == FieldDescriptor.TYPE_MESSAGE:
                getattr(message, field.name).CopyFrom(value)
            else:
                setattr(message, field.name, value)
        return message

    return build()


INVALID_UTF8 = [b"\xed\xa0\x80", b"\x80", b"\xff\xfe", b"a\xc3"]


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field_paths(descriptor: Descriptor, leaf: Any, depth: int = 0) -> list[list[FieldDescriptor]]:
    """Paths of message fields ending in a field for which ``leaf(field)`` holds, three levels at most."""
    paths: list[list[FieldDescriptor]] = []
    for field in descriptor.fields:
        if leaf(field):
            paths.append([field])
        elif (
            field.type == FieldDescriptor.TYPE_MESSAGE
            and depth < 2
            and not field.message_type.GetOptions().map_entry
            and field.message_type.full_name not in ("google.protobuf.Struct", "google.protobuf.Value")
        ):
            paths.extend([field, *rest] for rest in _field_paths(field.message_type, leaf, depth + 1))
    return paths


def length_delimited(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def deep_struct_bytes(levels: int) -> bytes:
    """A Struct ``{"n": {"n": ...}}`` ``levels`` deep, as bytes (three messages a level: Struct, its map
    entry, Value), which no Python message can hold past protobuf's depth limit."""
    inner = b""
    for _ in range(levels):
        entry = length_delimited(1, b"n") + length_delimited(2, length_delimited(5, inner))
        inner = length_delimited(1, entry)
    return inner


def _is_string(field: FieldDescriptor) -> bool:
    return field.type == FieldDescriptor.TYPE_STRING


def _is_struct(field: FieldDescriptor) -> bool:
    return field.message_type is not None and field.message_type.full_name == "google.protobuf.Struct"


def raw_request_strategy(descriptor: Descriptor, namespace: str) -> st.SearchStrategy[bytes]:
    """A serialized request of ``descriptor`` with, appended, an invalid UTF-8 value in one of its string
    fields or a Struct nested deeper than protobuf parses, at the top level or nested in message fields
    (protobuf merges what is appended into the message, so the server always sees the bad value)."""
    strings = _field_paths(descriptor, _is_string)
    structs = _field_paths(descriptor, _is_struct)

    @st.composite
    def build(draw: st.DrawFn) -> bytes:
        message = draw(message_strategy(descriptor, namespace))
        payload = message.SerializeToString()
        if structs and (not strings or draw(st.booleans())):
            path = draw(st.sampled_from(structs))
            value = deep_struct_bytes(draw(st.sampled_from([40, 200])))
        elif strings:
            path = draw(st.sampled_from(strings))
            value = draw(st.sampled_from(INVALID_UTF8))
        else:
            return payload
        for field in reversed(path):
            value = length_delimited(field.number, value)
        return payload + value

    return build()
