"""Field checks several request validations share: each adds a field violation to a collector
(`common.kernel.errors.ViolationCollector` or any object with its ``add``) and raises nothing."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from common.kernel.errors import ViolationCollector
from common.kernel.identifiers import MAX_SCOPES
from common.kernel.identifiers import NAMESPACE_PATTERN
from common.kernel.identifiers import SCOPE_PATTERN


class Violations(Protocol):
    """What a check adds its violations to (`common.kernel.errors.ViolationCollector` or alike)."""

    def add(self, field_path: str, description: str) -> None: ...


def check_namespace(check: Violations, namespace: str, path: str = "namespace") -> None:
    """Adds a violation at ``path`` when ``namespace`` is empty (``required``) or does not match
    `NAMESPACE_PATTERN` (``must match <pattern>``)."""
    if not namespace:
        check.add(path, "required")
    elif not NAMESPACE_PATTERN.match(namespace):
        check.add(path, f"must match {NAMESPACE_PATTERN.pattern}")


def require_namespace(namespace: str) -> None:
    """`check_namespace` of a request whose only field to check is ``namespace``.

    Raises:
        InvalidArgument: ``namespace`` is empty or off the pattern (field ``namespace``).
    """
    check = ViolationCollector()
    check_namespace(check, namespace)
    check.raise_if_any()


def check_text(check: Violations, path: str, text: str, limit: int) -> None:
    """Adds a violation at ``path`` when ``text`` is longer than ``limit`` characters or holds a NUL."""
    if len(text) > limit or "\x00" in text:
        check.add(path, f"at most {limit} characters, no NUL")


def check_scopes(check: Violations, scopes: Sequence[str], example: str) -> None:
    """Adds a violation at ``scopes`` when there are more than `MAX_SCOPES`, otherwise one at
    ``scopes[i]`` for each scope off `SCOPE_PATTERN` (``must look like type:id (e.g. <example>)``)."""
    if len(scopes) > MAX_SCOPES:
        check.add("scopes", f"at most {MAX_SCOPES} scopes, got {len(scopes)}")
        return
    for index, scope in enumerate(scopes):
        if not SCOPE_PATTERN.match(scope):
            check.add(f"scopes[{index}]", f"must look like type:id (e.g. {example})")
