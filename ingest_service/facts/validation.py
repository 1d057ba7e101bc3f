"""Validation of fact assertions wherever they come from (an observation's assertions, AssertFacts,
snapshots): the normalised `FactInput` or field violations, and the namespace's domain packs applied.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any

from common.kernel.errors import FieldViolation
from common.packs.kind_validation import NamespaceKinds
from ingest_service.facts.engine import FactInput
from ingest_service.validation.fields import FieldChecker
from ingest_service.validation.fields import join_path
from ingest_service.validation.fields import validate_scopes
from ingest_service.validation.limits import EVIDENCE_CLASSES
from ingest_service.validation.limits import FACT_ID_PATTERN
from ingest_service.validation.limits import MAX_ATTRIBUTES_BYTES
from ingest_service.validation.limits import PREDICATE_PATTERN
from ingest_service.validation.limits import PROTECTED_PREDICATES


def validate_fact_assertion(
    checker: FieldChecker,
    raw: Any,
    path: str,
    *,
    index: int,
    default_valid_from: datetime | None,
    allow_supersede_live: bool = False,
) -> FactInput | None:
    """Checks one fact assertion (memory.v1.FactAssertion in proto3-JSON form) wherever it comes from: an
    observation's ``assertions[i].fact``, a ``FactService.AssertFacts`` item ``facts[i]`` or a snapshot's
    ``facts[i]``.

    Violations go to ``checker`` under ``path`` (``assertions[2].fact.valid_from``, ``facts[1].valid_from``).
    ``valid_from`` defaults to ``default_valid_from`` (the observation's occurred_at, or the request time
    for AssertFacts, or the snapshot time); ``valid_to`` must not be before it. Returns the normalised
    fact (``field`` is ``path``; the write path sets its provenance: namespace, observation, origin), or
    None when any of its fields is invalid.
    """
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        checker.add(path, "must be a fact assertion object")
        return None
    before = len(checker.violations)
    checker.storable(raw, path)
    subject_key = checker.entity_key(raw.get("subject"), join_path(path, "subject"))
    object_key = checker.entity_key(raw.get("object"), join_path(path, "object"))
    predicate = raw.get("predicate", "")
    if not isinstance(predicate, str) or not PREDICATE_PATTERN.match(predicate):
        checker.add(join_path(path, "predicate"), "required, pattern [A-Za-z_][A-Za-z0-9_]{0,127}")
    elif predicate in PROTECTED_PREDICATES:
        checker.add(join_path(path, "predicate"), f"{predicate} is reserved for the audit trail")
    valid_from = checker.instant(raw.get("valid_from"), join_path(path, "valid_from"), required=False)
    valid_to = checker.instant(raw.get("valid_to"), join_path(path, "valid_to"), required=False)
    start = valid_from or default_valid_from
    if start is not None and valid_to is not None and valid_to < start:
        checker.add(join_path(path, "valid_to"), "must not be before valid_from")
    evidence = raw.get("evidence") or "asserted"
    if evidence not in EVIDENCE_CLASSES:
        checker.add(join_path(path, "evidence"), f"one of {sorted(EVIDENCE_CLASSES)}")
    confidence = raw.get("confidence", 1.0)
    if (
        isinstance(confidence, bool)
        or not isinstance(confidence, (int, float))
        or not 0.0 <= float(confidence) <= 1.0
    ):
        checker.add(join_path(path, "confidence"), "a number in [0, 1]")
        confidence = 1.0
    supersedes = raw.get("supersedes") or None
    if supersedes is not None and not FACT_ID_PATTERN.match(str(supersedes)):
        checker.add(join_path(path, "supersedes"), "must be a fact_id (fact-<24 hex>)")
    if raw.get("supersede_live"):
        if not allow_supersede_live:
            checker.add(join_path(path, "supersede_live"), "only FactService.AssertFacts supersedes live versions")
        elif supersedes is not None:
            checker.add(join_path(path, "supersede_live"), "either supersedes or supersede_live, not both")
    scopes = validate_scopes(checker, raw.get("scopes"), join_path(path, "scopes"))
    attributes = raw.get("attributes") or {}
    if not isinstance(attributes, dict):
        checker.add(join_path(path, "attributes"), "must be an object")
    checker.json_size(attributes, join_path(path, "attributes"), MAX_ATTRIBUTES_BYTES)
    if len(checker.violations) > before or not (subject_key and object_key and start):
        return None
    return FactInput(
        field=path,
        index=index,
        subject=subject_key,
        predicate=str(predicate),
        object=object_key,
        valid_from=start,
        valid_to=valid_to,
        evidence=str(evidence),
        confidence=float(confidence),
        supersedes=str(supersedes) if supersedes else None,
        scopes=scopes,
        attributes=dict(attributes),
    )


def resolve_fact_kinds(kinds: NamespaceKinds, fact: FactInput) -> tuple[FactInput, list[FieldViolation]]:
    """``fact`` with its subject and object resolved by the namespace's domain packs (canonical keys), and
    the pack violations under ``fact.field`` (strict mode: unknown relation, kinds outside the relation's
    fromKinds/toKinds). Without packs the fact is returned unchanged with no violations."""
    subject, object_, violations = kinds.check_fact(fact.subject, fact.predicate, fact.object, fact.field)
    return dataclasses.replace(fact, subject=subject, object=object_), violations
