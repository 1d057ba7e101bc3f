"""Checks every request passes before a handler sees it ("No input reaches INTERNAL").

- `tolerant_deserializer`: a request protobuf cannot parse (invalid UTF-8 in a string field, nesting
  deeper than protobuf's limit of 100, malformed wire data) is INVALID_ARGUMENT naming the problem,
  where gRPC itself would answer INTERNAL ("Exception deserializing request!").
- `request_violations`: enum numbers their enum does not define anywhere in the request, batch items
  included (`common.grpc.enum_checks`), read filters beyond the write side's limits
  (`common.grpc.read_filter_limits`), out-of-range Timestamps anywhere in the request, and strings,
  Struct keys or values the database cannot store (`common.kernel.storable_values.unstorable_paths`:
  U+0000, non-finite numbers), each as a field violation with its path.

The request-check interceptor (`common.grpc.interceptors`, innermost, after auth) installs the
deserializer and runs `raise_if_invalid` (for a client stream `checked_stream`, message by message); the
auth interceptor refuses an `UnparsedRequest` right after authentication (`raise_if_unparsed`).

The items of a batch (`BATCH_ITEM_FIELDS`: RecordObservationsRequest.observations,
AssertFactsRequest.facts) are not checked here: their validators run the same checks per item, so a
bad item fails alone (docs/explanation/knowledge-model.md: per-item results).
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterator
from typing import Any

from google.protobuf.message import DecodeError
from google.protobuf.message import Message

from common.grpc.enum_checks import enum_violations
from common.grpc.proto_mapping import json_form
from common.grpc.read_filter_limits import read_filter_violations
from common.kernel.errors import FieldViolation
from common.kernel.errors import InvalidArgument
from common.kernel.storable_values import unstorable_paths

__all__ = [
    "BATCH_ITEM_FIELDS",
    "UnparsedRequest",
    "checked_stream",
    "raise_if_invalid",
    "raise_if_unparsed",
    "request_violations",
    "tolerant_deserializer",
]

BATCH_ITEM_FIELDS: dict[str, frozenset[str]] = {
    "memory.v1.RecordObservationsRequest": frozenset({"observations"}),
    "memory.v1.AssertFactsRequest": frozenset({"facts"}),
    # Memory records: each item's text and metadata are checked by its validator, per item.
    "memory.v1.AddMemoriesRequest": frozenset({"memories"}),
}
PROTOBUF_MAX_DEPTH = 100  # upb's default recursion limit when parsing


class UnparsedRequest:
    """Stands for a request whose bytes protobuf could not parse; the interceptor refuses it."""

    def __init__(self, message_name: str, error: Exception) -> None:
        self.message_name = message_name
        self.error = error

    def violation(self) -> InvalidArgument:
        text = str(self.error)
        if "MaxDepth" in text or "recursion" in text.lower():
            problem = f"nested deeper than {PROTOBUF_MAX_DEPTH} messages (a Struct level counts as three)"
        elif "UTF-8" in text:
            problem = "a string field holds invalid UTF-8 (e.g. an unpaired surrogate or a stray byte)"
        else:
            problem = "malformed protobuf wire data"
        return InvalidArgument(
            [FieldViolation("", f"{self.message_name} could not be parsed: {problem}")],
            message=f"request could not be parsed: {problem}",
        )


def tolerant_deserializer(
    deserializer: Callable[[bytes], Any] | None,
) -> Callable[[bytes], Any] | None:
    """``deserializer`` (a message class's ``FromString``) that returns an `UnparsedRequest` instead of
    raising `DecodeError`; None stays None."""
    if deserializer is None:
        return None
    owner = getattr(deserializer, "__self__", None)
    name = getattr(getattr(owner, "DESCRIPTOR", None), "full_name", "the request")

    def parse(data: bytes) -> Any:
        try:
            return deserializer(data)
        except DecodeError as error:
            return UnparsedRequest(name, error)

    return parse


def request_violations(message: Message, prefix: str = "") -> list[FieldViolation]:
    """Field violations of ``message`` as a whole request: out-of-range Timestamps and unstorable values
    (`unstorable_paths`), outside the batch item fields of `BATCH_ITEM_FIELDS`; unknown enum numbers
    (`enum_violations`) everywhere; read filters beyond their limits (`read_filter_violations`)."""
    checked = [*enum_violations(message, prefix), *read_filter_violations(message, prefix)]
    skipped = BATCH_ITEM_FIELDS.get(message.DESCRIPTOR.full_name, frozenset())
    if skipped:
        copy = type(message)()
        copy.CopyFrom(message)
        for name in skipped:
            copy.ClearField(name)
        message = copy
    form, timestamps = json_form(message)
    found = list(dict.fromkeys([*timestamps, *unstorable_paths(form)]))
    join = (lambda path: f"{prefix}.{path}" if path else prefix) if prefix else (lambda path: path)
    return checked + [FieldViolation(join(path), description) for path, description in found]


def raise_if_unparsed(request: Any) -> None:
    """Raises `InvalidArgument` naming the parse problem when ``request`` is an `UnparsedRequest`."""
    if isinstance(request, UnparsedRequest):
        raise request.violation()


def raise_if_invalid(request: Any, prefix: str = "") -> None:
    """Raises `InvalidArgument` for an `UnparsedRequest` or a request with `request_violations`.

    Raises:
        InvalidArgument: naming each offending field (or the parse problem).
    """
    raise_if_unparsed(request)
    if isinstance(request, Message):
        violations = request_violations(request, prefix)
        if violations:
            raise InvalidArgument(violations)


def checked_stream(requests: Iterator[Any]) -> Iterator[Any]:
    """The messages of a client stream, each checked (`raise_if_invalid`, paths ``messages[i].<field>``)
    before the handler sees it."""
    for index, request in enumerate(requests):
        raise_if_invalid(request, f"messages[{index}]")
        yield request
