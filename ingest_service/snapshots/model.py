"""What a snapshot is made of (docs/explanation/knowledge-model.md; docs/how-to/domain-packs.md;
`ingest_service.snapshots.reconciler` reconciles it): its header and parts, the validation of its items, the keys and
hashes the snapshot journal keeps of them, and the counts a run reports.

An entity item is identified by its natural key, a fact item by (subject, predicate, object)
(`fact_item_key`); the hash of an item (`SnapshotEntity.digest`, `fact_digest`) tells whether it changed
since the previous snapshot of the same (source, scope). Paths of violations carry the item's position in
the whole snapshot (``entities[i]``, ``facts[j]``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from common.kernel.errors import FieldViolation
from common.kernel.errors import ViolationCollector
from common.kernel.identifiers import NAMESPACE_PATTERN
from common.kernel.identifiers import NAMESPACE_VIOLATION
from common.kernel.identifiers import canonical_instant
from common.kernel.identifiers import canonical_json
from common.packs.kind_validation import NamespaceKinds
from common.storage.snapshot_store import ITEM_SEPARATOR
from ingest_service.facts.engine import FactInput
from ingest_service.facts.validation import resolve_fact_kinds
from ingest_service.facts.validation import validate_fact_assertion
from ingest_service.validation.fields import FieldChecker
from ingest_service.validation.limits import MAX_ATTRIBUTES_BYTES
from ingest_service.validation.limits import MAX_NAME_CHARS
from ingest_service.validation.limits import MAX_TITLE_CHARS


@dataclass
class ReconcileCounts:
    """What a run changed (mirrors memory.v1.ReconcileCounts)."""

    entities_created: int = 0
    entities_updated: int = 0
    entities_unchanged: int = 0
    facts_created: int = 0
    facts_updated: int = 0
    facts_unchanged: int = 0
    facts_closed: int = 0


@dataclass(frozen=True)
class ReconcileResult:
    """Outcome of a run; ``unchanged``: the snapshot_id was reconciled before and nothing was read."""

    snapshot_id: str
    counts: ReconcileCounts
    unchanged: bool
    previous_snapshot_id: str


@dataclass(frozen=True)
class SnapshotHeader:
    """Which snapshot a run carries: ReconcileRequest's (and ReconcileStreamHeader's) scalar fields."""

    namespace: str
    source: str
    scope: str
    snapshot_id: str
    snapshot_time: datetime | None
    allow_mass_sweep: bool = False


@dataclass(frozen=True)
class SnapshotPart:
    """The next items of a snapshot: entity and fact assertions in proto3-JSON form (proto field names)."""

    entities: Sequence[Any] = ()
    facts: Sequence[Any] = ()


def header_violations(header: SnapshotHeader) -> ViolationCollector:
    """The field violations of a snapshot's header (not raised: the unary call adds its size check)."""
    check = ViolationCollector()
    if not NAMESPACE_PATTERN.match(header.namespace):
        check.add("namespace", NAMESPACE_VIOLATION)
    for name in ("source", "scope", "snapshot_id"):
        value = getattr(header, name)
        if not value or len(value) > MAX_NAME_CHARS or "\x00" in value:
            check.add(name, f"required, 1..{MAX_NAME_CHARS} characters, no NUL")
    if header.snapshot_time is None:
        check.add("snapshot_time", "required")
    return check


@dataclass(frozen=True)
class SnapshotEntity:
    """A valid entity item: its position in the snapshot, resolved key and type, and its item hash."""

    position: int
    key: str
    node_type: str
    title: str
    attributes: dict[str, Any]
    digest: str


def _digest(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


def fact_item_key(subject: str, predicate: str, object_: str) -> str:
    """The journal key of a fact: its (subject, predicate, object)."""
    return ITEM_SEPARATOR.join((subject, predicate, object_))


def fact_digest(fact: FactInput) -> str:
    """The item hash of a fact: everything of it but its journal key (SHA-256 of the canonical JSON)."""
    return _digest(
        {
            "valid_from": canonical_instant(fact.valid_from),
            "valid_to": canonical_instant(fact.valid_to) if fact.valid_to else None,
            "evidence": fact.evidence,
            "confidence": fact.confidence,
            "scopes": fact.scopes,
            "attributes": fact.attributes,
        }
    )


def validate_entities(
    batch: list[tuple[int, Any]], kinds: NamespaceKinds
) -> tuple[list[SnapshotEntity], list[FieldViolation]]:
    """Checks entity items ``(position, proto3-JSON dict)``; keys and types are resolved by the
    namespace's packs. Returns the valid entities and the violations (paths ``entities[i].key``)."""
    checker = FieldChecker()
    entities: list[SnapshotEntity] = []
    for position, raw in batch:
        path = f"entities[{position}]"
        before = len(checker.violations)
        if not isinstance(raw, dict):
            checker.add(path, "must be an entity assertion object")
            continue
        key = checker.entity_key(raw.get("key"), f"{path}.key")
        node_type = checker.node_type(raw.get("type"), f"{path}.type")
        if raw.get("type") and not node_type:
            continue
        attributes = raw.get("attributes") or {}
        if not isinstance(attributes, dict):
            checker.add(f"{path}.attributes", "must be an object")
            continue
        checker.text(raw.get("title"), f"{path}.title", MAX_TITLE_CHARS)
        checker.json_size(attributes, f"{path}.attributes", MAX_ATTRIBUTES_BYTES)
        if key is None or len(checker.violations) > before:
            continue
        implied = str(node_type) or (key.partition(":")[0] if ":" in key else "entity")
        key, implied, violations = kinds.check_entity(key, implied, attributes, path)
        checker.violations.extend(violations)
        title = str(raw.get("title") or key)
        digest = _digest({"type": implied, "title": title, "attributes": attributes})
        entities.append(SnapshotEntity(position, key, implied, title, dict(attributes), digest))
    return entities, checker.violations


def validate_facts(
    batch: list[tuple[int, Any]], kinds: NamespaceKinds, snapshot_time: datetime
) -> tuple[list[FactInput], dict[int, str], list[FieldViolation]]:
    """Checks fact items ``(position, proto3-JSON dict)`` like any fact assertion (``valid_from``
    defaults to ``snapshot_time``); ``supersedes`` is refused (absent facts are closed instead) and the
    ends are resolved by the namespace's packs.

    Returns:
        The facts (a fact with pack violations is kept, the run fails anyway), for each open fact of a
        strict cardinality-one relation its cardinality key ``subject<ITEM_SEPARATOR>predicate`` by
        position, and the violations (paths ``facts[i]``).
    """
    checker = FieldChecker()
    facts: list[FactInput] = []
    cardinality: dict[int, str] = {}
    for position, raw in batch:
        path = f"facts[{position}]"
        fact = validate_fact_assertion(checker, raw, path, index=position, default_valid_from=snapshot_time)
        if fact is None:
            continue
        if fact.supersedes:
            checker.add(f"{path}.supersedes", "not used in snapshots: absent facts are closed instead")
            continue
        fact, violations = resolve_fact_kinds(kinds, fact)
        checker.violations.extend(violations)
        relation = kinds.relations.get(fact.predicate)
        if kinds.strict and relation is not None and relation.cardinality == "one" and fact.valid_to is None:
            cardinality[position] = ITEM_SEPARATOR.join((fact.subject, fact.predicate))
        facts.append(fact)
    return facts, cardinality, checker.violations
