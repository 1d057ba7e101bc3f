"""The field checker every write-side validator shares (observations, AssertFacts, snapshots).

`FieldChecker` collects field violations with paths relative to a prefix (``observations[3]``,
``facts[1]``) and holds the checks several validators make: instants, node types, entity keys (audit
trail keys refused), values the database cannot store (`storable`), sizes of
free-form maps (`json_size`) and of titles (`text`), with the limits of `ingest_service.validation.limits`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from common.kernel.errors import FieldViolation
from common.kernel.identifiers import MAX_KEY_LENGTH
from common.kernel.identifiers import MAX_SCOPES
from common.kernel.identifiers import SCOPE_PATTERN
from common.kernel.identifiers import entity_key
from common.kernel.identifiers import parse_instant
from common.kernel.storable_values import unstorable_paths
from ingest_service.validation.limits import PROTECTED_KEY_PREFIXES
from ingest_service.validation.limits import PROTECTED_TYPES
from ingest_service.validation.limits import RESERVED_KEY_MESSAGE
from ingest_service.validation.limits import TYPE_PATTERN
from ingest_service.validation.limits import json_bytes


def join_path(base: str, name: str) -> str:
    """``base.name``, or whichever of the two is not empty."""
    return f"{base}.{name}" if base and name else base or name


class FieldChecker:
    """Collects field violations with paths relative to ``prefix`` (``observations[3]``, ``facts[1]``, "")."""

    def __init__(self, prefix: str = "") -> None:
        self.prefix = prefix
        self.violations: list[FieldViolation] = []

    def add(self, path: str, description: str) -> None:
        self.violations.append(FieldViolation(join_path(self.prefix, path), description))

    def storable(self, value: Any, path: str) -> None:
        """A violation for each string, key or number of ``value`` the database cannot store (U+0000,
        non-finite numbers: `common.kernel.storable_values.unstorable_paths`), under ``path``."""
        for where, description in unstorable_paths(value, path):
            self.add(where, description)

    def json_size(self, value: Any, path: str, limit: int) -> None:
        """A violation when ``value`` is larger than ``limit`` bytes as compact JSON (`json_bytes`)."""
        if json_bytes(value) > limit:
            self.add(path, f"larger than {limit} bytes as JSON")

    def text(self, value: Any, path: str, limit: int) -> None:
        """A violation when ``value`` is not a string of at most ``limit`` characters."""
        if value is not None and (not isinstance(value, str) or len(value) > limit):
            self.add(path, f"a string of at most {limit} characters")

    def instant(self, value: Any, path: str, *, required: bool) -> datetime | None:
        if value in (None, ""):
            if required:
                self.add(path, "required: an ISO-8601 instant with a UTC offset")
            return None
        if not isinstance(value, str):
            self.add(path, "must be an ISO-8601 string")
            return None
        try:
            return parse_instant(value)
        except ValueError:
            self.add(
                path, f"{value!r} is not an ISO-8601 instant with a UTC offset (e.g. 2026-08-01T00:00:00Z)"
            )
            return None

    def node_type(self, value: Any, path: str) -> str:
        """An optional node type (``""`` when absent): the type pattern, and never a type of the audit
        trail (`PROTECTED_TYPES`); a violation leaves ``""``."""
        if not value:
            return ""
        if not isinstance(value, str) or not TYPE_PATTERN.match(value):
            self.add(path, "pattern [A-Za-z_][A-Za-z0-9_.-]{0,63}")
            return ""
        if value in PROTECTED_TYPES:
            self.add(path, f"{value!r} is a protected type written only by the audit trail")
            return ""
        return value

    def _unreserved(self, key: str, path: str) -> str | None:
        if key.startswith(PROTECTED_KEY_PREFIXES):
            self.add(path, RESERVED_KEY_MESSAGE)
            return None
        return key

    def entity_key(self, value: Any, path: str) -> str | None:
        """A key is a non-empty string or {type, id}; returns the natural key. Keys of the audit trail
        (``audit_event:``, ``pc_trace:``) are refused on every write path."""
        if isinstance(value, str):
            key = value.strip()
            if not key:
                self.add(path, "must not be empty")
                return None
            if len(key) > MAX_KEY_LENGTH:
                self.add(path, f"longer than {MAX_KEY_LENGTH} characters")
                return None
            if key != value:
                self.add(path, "must not start or end with whitespace")
                return None
            return self._unreserved(key, path)
        if isinstance(value, dict):
            type_, id_ = value.get("type"), value.get("id")
            extra = set(value) - {"type", "id"}
            if extra:
                self.add(path, f"unknown fields {sorted(extra)}: a key is a string or {{type, id}}")
                return None
            ok = True
            if not isinstance(type_, str) or not TYPE_PATTERN.match(type_):
                self.add(f"{path}.type", "required, pattern [A-Za-z_][A-Za-z0-9_.-]{0,63}")
                ok = False
            if not isinstance(id_, str) or not id_.strip() or len(id_) > MAX_KEY_LENGTH:
                self.add(f"{path}.id", f"required, 1..{MAX_KEY_LENGTH} characters")
                ok = False
            return self._unreserved(entity_key(type_, id_), path) if ok else None  # type: ignore[arg-type]
        if value is None:
            self.add(path, "required: a string key or {type, id}")
        else:
            self.add(path, "must be a string key or {type, id}")
        return None


def validate_scopes(checker: FieldChecker, scopes: Any, path: str) -> list[str]:
    if not scopes:
        return []
    if not isinstance(scopes, list):
        checker.add(path, "must be a list of type:id strings")
        return []
    if len(scopes) > MAX_SCOPES:
        checker.add(path, f"at most {MAX_SCOPES} scopes, got {len(scopes)}")
    for index, scope in enumerate(scopes):
        if not isinstance(scope, str) or not SCOPE_PATTERN.match(scope):
            checker.add(f"{path}[{index}]", "must have the form type:id (e.g. workspace:sales)")
    return [str(scope) for scope in scopes]
