"""Identifiers and canonical time (docs/explanation/knowledge-model.md; clients compute the same values).

- Canonical instant: UTC, ``%Y-%m-%dT%H:%M:%SZ``, with ``.%f`` before ``Z`` only when microseconds != 0.
- ``fact_id = "fact-" + sha256(f"{namespace}|{subject_key}|{predicate}|{object_key}|{valid_from}")[:24]``.
- ``observation_id = "obs-" + sha256(f"{namespace}|{system}|{stream}|{identity}")[:24]``.
- AGE label of a node type, a predicate or an internal edge: `graph_label` (it replaces the
  label rule of docs/explanation/knowledge-model.md, which let namespaces collide on one label).
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from datetime import UTC
from datetime import datetime
from typing import Any
from typing import Literal

_LABEL_INVALID = re.compile(r"[^A-Za-z0-9_]")
_LABEL_PLAIN = re.compile(r"^[A-Za-z0-9_]+$")

# Shapes of the identifiers every request carries (docs/explanation/knowledge-model.md: scopes ``type:id``, at
# most 20).
NAMESPACE_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
# The one-message violation of a namespace that is empty or off the pattern (`field_checks.check_namespace` says which).
NAMESPACE_VIOLATION = f"required, pattern {NAMESPACE_PATTERN.pattern[1:-1]}"
SCOPE_PATTERN = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,63}:[^\s]{1,256}$")
MAX_SCOPES = 20
MAX_KEY_LENGTH = 512  # characters of a natural key
MAX_PREDICATE_LENGTH = 128  # characters of a fact predicate (the write side's PREDICATE_PATTERN)
MAX_TYPE_LENGTH = 64  # characters of a node type (the write side's TYPE_PATTERN)


def canonical_instant(value: datetime) -> str:
    """Formats an aware datetime as the canonical UTC string.

    Raises:
        ValueError: when ``value`` has no UTC offset (naive datetimes are ambiguous).
    """
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError("instant has no UTC offset")
    return _canonical_utc(value.astimezone(UTC))


@functools.lru_cache(maxsize=8192)
def _canonical_utc(utc: datetime) -> str:
    """`canonical_instant` of a UTC datetime, memoised: a batch formats the same few instants (its
    ``now``, each observation's occurred_at) once per fact, edge and node it writes. Keyed by the UTC
    value, so two wall-clock-equal datetimes of a zone's repeated hour (``fold``) never share an entry."""
    if utc.year < 1000:  # strftime writes such a year without leading zeros; isoformat would pad it
        return utc.strftime("%Y-%m-%dT%H:%M:%S.%fZ" if utc.microsecond else "%Y-%m-%dT%H:%M:%SZ")
    # isoformat gives the same text 2.5x faster than strftime (5% of an observation batch)
    naive = utc.replace(tzinfo=None)
    return naive.isoformat(timespec="microseconds" if utc.microsecond else "seconds") + "Z"


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
    """The deterministic fact identifier (docs/explanation/knowledge-model.md)."""
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
    """The deterministic observation identifier (docs/explanation/knowledge-model.md)."""
    return "obs-" + _sha256_hex(f"{namespace}|{system}|{stream}|{identity}")[:24]


LabelKind = Literal["node_type", "predicate", "internal_edge"]
# The first letter of a label says its kind; the second says whether the name is spelled out ("_") or
# sanitised and hashed ("x"). AGE's own labels start with "_", the labels of the old mapping (before
# migration 0009) mostly with neither, so no name of one kind can ever produce a label of another.
_LABEL_PREFIXES: dict[str, str] = {"node_type": "n", "predicate": "p", "internal_edge": "i"}
# The edges the project writes itself that are not facts (document links, audit trail membership).
INTERNAL_EDGES = frozenset({"LINKS_TO", "IN_TRACE"})
# Predicates that are many-valued by construction, so two live facts with one subject and different
# objects are not a conflict (docs/explanation/knowledge-model.md flags a conflict only where one value is
# expected): MENTIONS, what a text names (identifier links, the entities of a memory's enrichment), names any
# number of things.
MULTI_VALUED_PREDICATES = frozenset({"MENTIONS"})
# Longest label: the label's index names (``<label>_properties_gin``, ``<label>_start_id_idx``) and id
# sequence (``<label>_id_seq``) must fit PostgreSQL's 63 bytes as well.
MAX_LABEL_LENGTH = 48
_READABLE_LENGTH = 24
_LABEL_HASH_LENGTH = 20  # hex digits of sha256 (80 bits)
# Every label `graph_label` can return (and no other).
GRAPH_LABEL_PATTERN = re.compile(
    r"^(?:[np]_[A-Za-z0-9_]{1,46}|[np]x_[A-Za-z0-9_]{0,24}_[0-9a-f]{20}|i_(?:LINKS_TO|IN_TRACE))$"
)


def graph_label(kind: LabelKind, name: str) -> str:
    """The AGE label of a node type, a fact predicate or an internal edge.

    Every label that stores data is derived here, and the mapping is injective across kinds and names:

    - ``n_<name>`` (node types, vertex labels), ``p_<name>`` (fact predicates, edge labels),
      ``i_<name>`` (the internal edges `INTERNAL_EDGES`) when ``name`` is made only of
      ``[A-Za-z0-9_]`` and fits (at most ``MAX_LABEL_LENGTH - 2`` characters);
    - otherwise ``nx_`` / ``px_`` + the first 24 characters of the name with every other character
      replaced by ``_`` + ``_`` + 20 hex digits of sha256 of the exact name (UTF-8), so names that
      sanitise alike (``a-b``, ``a.b``, ``a_b``) or share a long prefix get different labels.

    A label therefore starts with ``n`` (vertex) or ``p``/``i`` (edge): a vertex and an edge label never
    meet, a name can never produce AGE's ``_ag_label_vertex``/``_ag_label_edge`` nor an internal edge
    label, and every label is a valid identifier of at most ``MAX_LABEL_LENGTH`` characters. Clients
    never see labels: types and predicates are read from properties and columns.

    Example: ``graph_label("node_type", "person") == "n_person"``;
    ``graph_label("predicate", "depends-on")`` is ``"px_depends_on_"`` + 20 hex digits.

    Raises:
        ValueError: an unknown kind, or an internal edge name outside `INTERNAL_EDGES`.
    """
    prefix = _LABEL_PREFIXES.get(kind)
    if prefix is None:
        raise ValueError(f"unknown label kind {kind!r}")
    if kind == "internal_edge" and name not in INTERNAL_EDGES:
        raise ValueError(f"{name!r} is not an internal edge")
    if _LABEL_PLAIN.match(name) and len(name) <= MAX_LABEL_LENGTH - 2:
        return f"{prefix}_{name}"
    readable = _LABEL_INVALID.sub("_", name[:_READABLE_LENGTH])
    return f"{prefix}x_{readable}_{_sha256_hex(name)[:_LABEL_HASH_LENGTH]}"


def entity_key(type_: str, id_: str) -> str:
    """Natural key of an entity given as ``{type, id}``."""
    return f"{type_}:{id_}"
