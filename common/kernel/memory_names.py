"""Names of memory records (docs/how-to/memory-records.md; docs/explanation/knowledge-model.md style).

A memory lives in one namespace per organisation, environment and project, so that every query on it is
physically scoped (docs/how-to/memory-records.md: a collection per ``org/env/project``), and carries the
visibility scope of its owner, so that inside the namespace one user never sees another's memories:

* namespace: ``"org:<organization_id>:env:<environment>"`` plus ``":proj:<project_id>"`` when the request
  has a project (`memory_namespace`). A project id is ``[A-Za-z0-9][A-Za-z0-9._-]{0,39}`` (the documented
  ``prj_8f3a`` as it is), characters every namespace may hold (``NAMESPACE_PATTERN``) and never ``:``,
  so the project is the rest of the namespace after ``:proj:``: the mapping is one-to-one
  (`memory_scope_of_namespace` inverts it), and ``prj_8f3a`` and ``prj-8f3a`` are two projects.
* owner scope: ``"principal:memory-user/<organization_id>/<environment>/<user_id>"`` (`owner_scope`), a
  restricting visibility scope (`common.storage.visibility`) on the memory's node, chunk and row.
* ``memory_id = "mem-" + sha256(f"{namespace}|{user_id}|{identity}")[:24]`` (hex of the UTF-8 bytes),
  identity = the client's idempotency key, or ``"sha256:" + sha256(canonical JSON of {text, source,
  event_type, tags, metadata})`` (sorted keys, no spaces, non-ASCII kept) when the item has none
  (`memory_id`, `content_identity`).
* summary group: ``"group-" + sha256("|".join(sorted(member ids)))[:24]`` (`summary_group_id`); the summary
  record's identity is ``"summary:" + group id``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

ENVIRONMENTS: tuple[str, ...] = ("development", "staging", "production")
"""docs/how-to/memory-records.md: the environments of an API key."""

ORGANIZATION_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.-]{0,39}$")
PROJECT_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,39}$")
USER_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.@-]{0,127}$")
OWNER_SCOPE_PREFIX = "principal:memory-user/"
MAX_MEMORY_LABEL_LENGTH = 64  # characters of a memory's source, event type and each tag

_NAMESPACE = re.compile(
    r"^org:(?P<org>[A-Za-z0-9][A-Za-z0-9.-]{0,39}):env:(?P<env>development|staging|production)"
    r"(?::proj:(?P<project>[A-Za-z0-9][A-Za-z0-9._-]{0,39}))?$"
)


def memory_namespace(organization_id: str, environment: str, project_id: str = "") -> str:
    """The namespace of a scope: ``org:<org>:env:<env>[:proj:<project>]`` (keys validated by the caller)."""
    base = f"org:{organization_id}:env:{environment}"
    return f"{base}:proj:{project_id}" if project_id else base


def memory_base_namespace(namespace: str) -> str | None:
    """The organisation-environment namespace above a memory namespace (itself for a base one), or None
    for a namespace that is not a memory namespace. A grant on the base covers its projects."""
    match = _NAMESPACE.match(namespace)
    if match is None:
        return None
    return memory_namespace(match["org"], match["env"])


def memory_scope_of_namespace(namespace: str) -> tuple[str, str, str] | None:
    """(organization, environment, project or "") of a memory namespace, or None for any other: the
    inverse of `memory_namespace`."""
    match = _NAMESPACE.match(namespace)
    if match is None:
        return None
    return match["org"], match["env"], match["project"] or ""


def owner_scope(organization_id: str, environment: str, user_id: str) -> str:
    """The owner's visibility scope: ``principal:memory-user/<org>/<env>/<user>``."""
    return f"{OWNER_SCOPE_PREFIX}{organization_id}/{environment}/{user_id}"


def _canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def content_identity(
    text: str, source: str, event_type: str, tags: Sequence[str], metadata: Mapping[str, Any]
) -> str:
    """The identity of an item without an idempotency key: ``"sha256:" + sha256(canonical JSON)``."""
    document = {
        "text": text,
        "source": source,
        "event_type": event_type,
        "tags": list(tags),
        "metadata": dict(metadata),
    }
    return "sha256:" + hashlib.sha256(_canonical_json(document).encode("utf-8")).hexdigest()


def memory_id(namespace: str, user_id: str, identity: str) -> str:
    """``"mem-" + sha256(f"{namespace}|{user_id}|{identity}")[:24]``."""
    digest = hashlib.sha256(f"{namespace}|{user_id}|{identity}".encode()).hexdigest()
    return "mem-" + digest[:24]


def summary_group_id(member_ids: Sequence[str]) -> str:
    """``"group-" + sha256("|".join(sorted(member_ids)))[:24]``: the default group of a summary."""
    return "group-" + hashlib.sha256("|".join(sorted(member_ids)).encode()).hexdigest()[:24]


__all__ = [
    "ENVIRONMENTS",
    "MAX_MEMORY_LABEL_LENGTH",
    "ORGANIZATION_PATTERN",
    "OWNER_SCOPE_PREFIX",
    "PROJECT_PATTERN",
    "USER_PATTERN",
    "content_identity",
    "memory_base_namespace",
    "memory_id",
    "memory_namespace",
    "memory_scope_of_namespace",
    "owner_scope",
    "summary_group_id",
]
