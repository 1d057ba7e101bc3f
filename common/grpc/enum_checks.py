"""Unknown enum numbers anywhere in a request (AIP-193 field violations), found from the descriptors.

proto3 enums are open: a client may send any int32 for an enum field and protobuf keeps it, so a handler
that maps numbers to names (``tier: 99``) would otherwise store a default or fail deep inside. One walk
over the set fields of every request, recursively (repeated fields, maps, oneofs, nested and well-known
messages), finds each number its enum does not define; `common.grpc.request_checks` refuses the request
with one violation per such field before any handler runs. Whether a defined value (``*_UNSPECIFIED``)
is acceptable stays the handler's decision.
"""

from __future__ import annotations

from google.protobuf.descriptor import EnumDescriptor
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from common.kernel.errors import FieldViolation

__all__ = ["enum_violations"]

MAX_DEPTH = 100  # protobuf refuses deeper requests when parsing them


def enum_violations(message: Message, prefix: str = "") -> list[FieldViolation]:
    """A violation for every enum number of ``message`` (set fields, at any depth) its enum does not
    define; paths in proto field names, ``a.b[2].c`` for repeated fields and ``m["key"]`` for maps."""
    found: list[FieldViolation] = []
    _walk(message, prefix, found, 0)
    return found


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _description(enum: EnumDescriptor, number: int) -> str:
    names = ", ".join(value.name for value in enum.values)
    return f"{number} is not a value of {enum.full_name} ({names})"


def _check(enum: EnumDescriptor, number: int, path: str, found: list[FieldViolation]) -> None:
    if enum.values_by_number.get(number) is None:
        found.append(FieldViolation(path, _description(enum, number)))


def _walk(message: Message, path: str, found: list[FieldViolation], depth: int) -> None:
    if depth > MAX_DEPTH:
        return
    for field, value in message.ListFields():
        where = _join(path, field.name)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            for key in sorted(value):
                entry = f"{where}[{key!r}]".replace("'", '"')
                if value_field.type == FieldDescriptor.TYPE_ENUM:
                    _check(value_field.enum_type, value[key], entry, found)
                elif value_field.type == FieldDescriptor.TYPE_MESSAGE:
                    _walk(value[key], entry, found, depth + 1)
        elif field.type == FieldDescriptor.TYPE_ENUM:
            if field.is_repeated:
                for index, number in enumerate(value):
                    _check(field.enum_type, number, f"{where}[{index}]", found)
            else:
                _check(field.enum_type, value, where, found)
        elif field.type in (FieldDescriptor.TYPE_MESSAGE, FieldDescriptor.TYPE_GROUP):
            if field.is_repeated:
                for index, item in enumerate(value):
                    _walk(item, f"{where}[{index}]", found, depth + 1)
            else:
                _walk(value, where, found, depth + 1)
