"""The filters of a change feed subscriber (WatchChanges and webhook subscriptions): checked once here.

Event types are ``family.what`` (``fact.superseded``) or a whole family (``fact.*``); key prefixes match the
item key or the subject key; predicates are fact predicates.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from common.kernel.errors import FieldViolation
from common.storage.change_feed.outbox import ChangeFilter

__all__ = ["MAX_FILTER_VALUES", "change_filter_violations"]

MAX_FILTER_VALUES = 64
_EVENT_TYPE = re.compile(r"^[a-z][a-z_]{0,31}(\.([a-z][a-z_]{0,63}|\*))$")
_PREDICATE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


def change_filter_violations(filters: ChangeFilter) -> list[FieldViolation]:
    """Every bad value of ``filters``, named like the request fields (``event_types[2]``)."""
    violations: list[FieldViolation] = []
    checks: list[tuple[str, tuple[str, ...], Callable[[str], bool], str]] = [
        (
            "event_types",
            filters.event_types,
            lambda v: bool(_EVENT_TYPE.match(v)),
            "an event type such as fact.superseded, or a family such as fact.*",
        ),
        ("key_prefixes", filters.key_prefixes, lambda v: 0 < len(v) <= 512, "1..512 characters"),
        (
            "predicates",
            filters.predicates,
            lambda v: bool(_PREDICATE.match(v)),
            "pattern [A-Za-z_][A-Za-z0-9_]{0,127}",
        ),
    ]
    for name, values, valid, description in checks:
        if len(values) > MAX_FILTER_VALUES:
            violations.append(FieldViolation(name, f"at most {MAX_FILTER_VALUES} values"))
        violations += [
            FieldViolation(f"{name}[{i}]", description) for i, v in enumerate(values) if not valid(v)
        ]
    return violations
