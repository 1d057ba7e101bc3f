"""Identifiers and canonical time (DESIGN.md §3; clients compute the same values).

- Canonical instant: UTC, ``%Y-%m-%dT%H:%M:%SZ``, with ``.%f`` before ``Z`` only when microseconds != 0.
- ``fact_id = "fact-" + sha256(f"{namespace}|{subject_key}|{predicate}|{object_key}|{valid_from}")[:24]``.
- ``observation_id = "obs-" + sha256(f"{namespace}|{system}|{stream}|{identity}")[:24]``.
- AGE label of a type: characters outside ``[A-Za-z0-9_]`` become ``_``, a leading digit gets a ``_``
  prefix, empty becomes ``entity``.
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import UTC, datetime
from typing import Any

_LABEL_INVALID = re.compile(r"[^A-Za-z0-9_]")

# Shapes of the identifiers every request carries (seed 000 "Наблюдения": scopes ``type:id``, at most 20).
NAMESPACE_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
SCOPE_PATTERN = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,63}:[^\s]{1,256}$")
MAX_SCOPES = 20
MAX_KEY_LENGTH = 512  # characters of a natural key


def canonical_instant(value: datetime) -> str:
    """Formats an aware datetime as the canonical UTC string.

    Raises:
        ValueError: when ``value`` has no UTC offset (naive datetimes are ambiguous).
    """
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError("instant has no UTC offset")
    utc = value.astimezone(UTC)
    if utc.microsecond:
        return utc.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return utc.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_instant(text: str, *, assume_utc: bool = False) -> datetime:
    """Parses an ISO-8601 instant that carries an offset (``Z`` or ``+hh:mm``) into an aware UTC datetime.

    Args:
        text: the instant, e.g. ``2024-05-01T10:00:00Z`` or ``2024-05-01T13:00:00+03:00``.
        assume_utc: read a value without an offset (``2024-05-01``, ``2024-05-01T10:00``) as UTC
            instead of refusing it (the command line's ``--as-of``).

    Raises:
        ValueError: malformed text, or no offset (unless ``assume_utc``).
    """
    candidate = text.strip()
    if candidate.endswith(("Z", "z")):
        candidate = candidate[:-1] + "+00:00"
    parsed = datetime.fromisoformat(candidate)
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        if not assume_utc:
            raise ValueError(f"instant {text!r} has no UTC offset")
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC)


def _sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def fact_id(namespace: str, subject_key: str, predicate: str, object_key: str, valid_from: datetime) -> str:
    """The deterministic fact identifier (seed 000 "Факты"; DESIGN §3)."""
    material = f"{namespace}|{subject_key}|{predicate}|{object_key}|{canonical_instant(valid_from)}"
    return "fact-" + _sha256_hex(material)[:24]


def canonical_json(value: Any) -> str:
    """Canonical JSON: sorted keys, no spaces, UTF-8 with non-ASCII kept as is."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def integral_numbers(value: Any) -> Any:
    """JSON does not tell 1 from 1.0, protobuf's Struct turns every number into a double: integral
    floats become ints so the identity is the same whichever way the client sent the number."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {key: integral_numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [integral_numbers(item) for item in value]
    return value


def content_identity(content_fields: dict[str, Any]) -> str:
    """Identity of an observation without external_id: ``"sha256:" + sha256(canonical JSON)``.

    ``content_fields`` is ``{kind, occurred_at, actor, subject, content, data, assertions}`` with every
    instant already canonical (see `canonical_instant`); integral numbers are written as integers.
    """
    return "sha256:" + _sha256_hex(canonical_json(integral_numbers(content_fields)))


def observation_id(namespace: str, system: str, stream: str, identity: str) -> str:
    """The deterministic observation identifier (DESIGN §3)."""
    return "obs-" + _sha256_hex(f"{namespace}|{system}|{stream}|{identity}")[:24]


def age_label(node_type: str) -> str:
    """AGE label for a node type or edge predicate (DESIGN §3)."""
    label = _LABEL_INVALID.sub("_", node_type)
    if not label:
        return "entity"
    if label[0].isdigit():
        return "_" + label
    return label


def entity_key(type_: str, id_: str) -> str:
    """Natural key of an entity given as ``{type, id}``."""
    return f"{type_}:{id_}"
