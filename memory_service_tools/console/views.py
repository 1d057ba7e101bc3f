"""What every page reads from its address (namespace, as-of instant, paging) and small value formatters."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC
from datetime import datetime
from typing import Any

from google.protobuf import json_format
from google.protobuf.struct_pb2 import Struct
from google.protobuf.timestamp_pb2 import Timestamp
from starlette.requests import Request


class BadAddress(ValueError):
    """A query parameter the console itself cannot read (shown like a service's field violation)."""

    def __init__(self, name: str, description: str) -> None:
        super().__init__(f"{name}: {description}")
        self.name = name
        self.description = description


def parse_instant(text: str, name: str = "as_of") -> datetime | None:
    """An ISO 8601 instant (``2026-10-15T12:00:00Z``; without a zone: UTC); None for ``""``.

    Raises:
        BadAddress: ``text`` is not an ISO 8601 instant.
    """
    text = text.strip()
    if not text:
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise BadAddress(name, f"{text!r} is not an ISO 8601 instant (e.g. 2026-10-15T12:00:00Z)") from None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def to_timestamp(value: datetime | None) -> Timestamp | None:
    """The protobuf Timestamp of ``value`` (None stays None: the field is left unset)."""
    if value is None:
        return None
    stamp = Timestamp()
    stamp.FromDatetime(value.astimezone(UTC))
    return stamp


def from_timestamp(stamp: Timestamp) -> datetime | None:
    """The instant of a Timestamp field; None when unset (zero)."""
    if stamp.seconds == 0 and stamp.nanos == 0:
        return None
    return stamp.ToDatetime(tzinfo=UTC)


def instant_text(value: datetime | None) -> str:
    """``2026-10-15T12:00:00Z`` (seconds), or ``""``."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if value else ""


def struct_dict(value: Struct) -> dict[str, Any]:
    """A Struct as a plain dict."""
    return json_format.MessageToDict(value)


def int_param(request: Request, name: str, default: int, low: int, high: int) -> int:
    """An integer query parameter within ``[low, high]`` (``default`` when absent).

    Raises:
        BadAddress: not an integer, or out of range.
    """
    text = request.query_params.get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise BadAddress(name, f"{text!r} is not an integer") from None
    if not low <= value <= high:
        raise BadAddress(name, f"{value} is outside {low}..{high}")
    return value


@dataclass(frozen=True)
class Address:
    """The parts of a page's address every page keeps: the namespace and the as-of instant."""

    namespace: str
    as_of: datetime | None
    as_of_text: str

    @classmethod
    def of(cls, request: Request) -> Address:
        """Reads ``ns`` and ``as_of`` from the query string.

        Raises:
            BadAddress: ``as_of`` is not an instant.
        """
        raw = request.query_params.get("as_of", "")
        as_of = parse_instant(raw)
        return cls(request.query_params.get("ns", "").strip(), as_of, instant_text(as_of))
