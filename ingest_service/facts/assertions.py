"""Agent-origin facts: FactService.AssertFacts and CloseFact in domain form
(docs/explanation/knowledge-model.md).

**AssertFacts** applies the rules of observation facts through the same `FactEngine` (deterministic
fact_id, idempotent strengthening, supersession both ways, rejection of a supersession of another
subject/predicate) after the same validation (`validate_fact_assertion`, paths ``facts[i].<field>``).
``valid_from`` defaults to the request time. The facts have origin ``"agent"``, no observation, the
request's ``source_path`` as citation target, and ``agent_asserted``: their evidence is the assertion
itself, which no redaction or purge can take away, so they never become evidence_lost (and an observation
fact that an agent also asserts keeps its evidence when its observations go). All valid items are
written in one transaction; an invalid or rejected item writes nothing and gets its violations; when no
item can be applied the call is INVALID_ARGUMENT with every violation and nothing is written.

**CloseFact** closes a fact's validity interval ("больше не работает над X"): ``valid_to`` becomes the
given instant (default now). It never widens the interval: closing a fact at or after its current
``valid_to`` changes nothing, so repeating the call is harmless. A ``valid_to`` before the fact's
``valid_from`` is INVALID_ARGUMENT (field ``valid_to``). The reason is logged (the audit trail will
record it once AuditService exists).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from dataclasses import field
from datetime import UTC
from datetime import datetime
from typing import Any

from common.domain.scope_inheritance import reaches_beyond
from common.domain.write_access import WriteAccess
from common.kernel.errors import FieldViolation
from common.kernel.errors import InvalidArgument
from common.kernel.errors import NotFound
from common.kernel.errors import ViolationCollector
from common.kernel.field_checks import check_text
from common.kernel.identifiers import NAMESPACE_PATTERN
from common.kernel.identifiers import NAMESPACE_VIOLATION
from common.kernel.identifiers import canonical_instant
from common.packs.kind_validation import KindValidator
from common.storage.database import Database
from common.storage.fact_rows import FactRow
from common.storage.graph.store import GraphStore
from ingest_service.facts.engine import AssertionRejected
from ingest_service.facts.engine import FactEngine
from ingest_service.facts.engine import FactInput
from ingest_service.facts.validation import resolve_fact_kinds
from ingest_service.facts.validation import validate_fact_assertion
from ingest_service.validation.fields import FieldChecker
from ingest_service.validation.limits import FACT_ID_PATTERN
from ingest_service.validation.limits import MAX_FACT_SOURCE_PATH_CHARS
from ingest_service.validation.limits import MAX_FACTS_PER_CALL
from ingest_service.validation.limits import check_reason

log = logging.getLogger(__name__)


@dataclass
class AssertResult:
    """Outcome of one asserted fact (mirrors memory.v1.AssertFactResult)."""

    fact_id: str = ""
    created: bool = False
    error: str = ""
    field_violations: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ClosedFact:
    """The fact after CloseFact, and whether it overlaps another live version (conflict)."""

    fact: FactRow
    conflict: bool


class FactAsserter:
    """Writes agent-origin facts and closes facts (see the module doc)."""

    def __init__(self, database: Database, *, kinds: KindValidator | None = None) -> None:
        self.database = database
        self.kinds = kinds or KindValidator(database)
        graph = GraphStore(database)
        self.engine = FactEngine(graph)
        self.facts = self.engine.facts

    def assert_facts(
        self,
        namespace: str,
        raw_facts: list[dict[str, Any]],
        *,
        source_path: str = "",
        now: datetime | None = None,
    ) -> list[AssertResult]:
        """Asserts ``raw_facts`` (memory.v1.FactAssertion in proto3-JSON form, proto field names), in order.

        Returns one result per item: the fact_id and whether it was created (False: strengthened), or the
        item's violations.

        Raises:
            InvalidArgument: bad namespace or source_path, no facts or more than 200, or no item that
                could be applied (every violation of every item).
            Unavailable: the database cannot be reached; nothing was written, retrying is safe.
        """
        now = now or datetime.now(UTC)
        request = ViolationCollector()
        if not NAMESPACE_PATTERN.match(namespace):
            request.add("namespace", NAMESPACE_VIOLATION)
        if not raw_facts:
            request.add("facts", "at least one fact is required")
        elif len(raw_facts) > MAX_FACTS_PER_CALL:
            request.add("facts", f"at most {MAX_FACTS_PER_CALL} facts per call, got {len(raw_facts)}")
        check_text(request, "source_path", source_path, MAX_FACT_SOURCE_PATH_CHARS)
        request.raise_if_any()

        checked: list[tuple[FactInput | None, list[FieldViolation]]] = []
        for index, raw in enumerate(raw_facts):
            checker = FieldChecker()
            fact = validate_fact_assertion(
                checker, raw, f"facts[{index}]", index=index, default_valid_from=now, allow_supersede_live=True
            )
            checked.append((fact, checker.violations))
        supersede_live = [bool(raw.get("supersede_live")) for raw in raw_facts]
        if all(fact is None for fact, _ in checked):
            raise InvalidArgument([violation for _, violations in checked for violation in violations])

        def work(conn: Any) -> list[AssertResult]:
            results: list[AssertResult] = []
            rejections: list[FieldViolation] = []
            kinds = self.kinds.for_namespace(namespace, conn)
            for position, (fact, violations) in enumerate(checked):
                if fact is None:
                    results.append(_failed(violations))
                    rejections.extend(violations)
                    continue
                fact, kind_violations = resolve_fact_kinds(kinds, fact)
                if kind_violations:
                    results.append(_failed(kind_violations))
                    rejections.extend(kind_violations)
                    continue
                write = dataclasses.replace(
                    fact, namespace=namespace, source_path=source_path, agent_asserted=True
                )
                older: list[str] = []
                if supersede_live[position]:
                    live = self._live_versions(conn, write)
                    if live:
                        write = dataclasses.replace(write, supersedes=live[-1])
                        older = live[:-1]
                [outcome] = self.engine.record(conn, [write], now=now)
                if isinstance(outcome, AssertionRejected):
                    violation = FieldViolation(outcome.field, outcome.reason)
                    results.append(_failed([violation]))
                    rejections.append(violation)
                    continue
                for fact_id in [] if outcome.withheld else older:
                    self.facts.close(conn, namespace, fact_id, write.valid_from, outcome.fact_id)
                results.append(AssertResult(fact_id=outcome.fact_id, created=outcome.created))
            if all(result.error for result in results):
                raise InvalidArgument(rejections)  # nothing was applied: roll back, report everything
            return results

        return self.database.run_transaction(work)

    def _live_versions(self, conn: Any, fact: FactInput) -> list[str]:
        """fact_ids of the live versions ``fact`` supersedes with ``supersede_live``: open facts of its
        (subject, predicate) with another object, valid from before it, visible to the caller and seen by
        no reader outside ``fact``'s scopes (a narrower write changes nothing wider), oldest first. The
        others are left alone, as if absent."""
        access = WriteAccess.of_caller()
        rows = [
            row
            for row in self.facts.open_facts(conn, fact.namespace, fact.subject, fact.predicate)
            if row.object_key != fact.object and row.valid_from < fact.valid_from and not row.evidence_lost
        ]
        visible = [
            row
            for row in rows
            if not reaches_beyond(row.scopes, fact.scopes)
            and (
                access.unrestricted
                or (
                    access.can_see(row.scopes)
                    and not access.hidden_nodes(conn, self.facts.graph, fact.namespace, [row.object_key])
                )
            )
        ]
        return [row.fact_id for row in sorted(visible, key=lambda row: (row.valid_from, row.fact_id))]

    def close_fact(
        self,
        namespace: str,
        fact_id: str,
        *,
        valid_to: datetime | None = None,
        reason: str = "",
        now: datetime | None = None,
    ) -> ClosedFact:
        """Closes the fact ``fact_id`` at ``valid_to`` (default ``now``); see the module doc.

        Raises:
            InvalidArgument: empty namespace, malformed fact_id, oversized reason, or ``valid_to`` before
                the fact's valid_from (field ``valid_to``).
            NotFound: no such fact in ``namespace``, or it is hidden from the caller's scopes.
            Unavailable: the database cannot be reached.
        """
        check = ViolationCollector()
        if not namespace.strip():
            check.add("namespace", "required")
        if not FACT_ID_PATTERN.match(fact_id):
            check.add("fact_id", "required: a fact_id (fact-<24 hex>)")
        check_reason(check, reason)
        check.raise_if_any()
        end = valid_to or now or datetime.now(UTC)
        access = WriteAccess.of_caller()

        def work(conn: Any) -> ClosedFact:
            row = self.facts.get(conn, namespace, fact_id, lock=True)
            # A fact hidden from the caller's scopes (its own or its ends') is not found.
            if row is None or access.fact_violations(
                conn,
                self.facts,
                namespace=namespace,
                path="fact_id",
                fact_id=fact_id,
                subject=row.subject_key,
                object_=row.object_key,
                scopes=(),
            ):
                raise NotFound(f"fact {fact_id} not found in namespace {namespace}")
            if end < row.valid_from:
                raise InvalidArgument.single(
                    "valid_to",
                    f"{canonical_instant(end)} is before the fact's valid_from {canonical_instant(row.valid_from)}",
                )
            if row.valid_to is None or end < row.valid_to:
                closed = self.engine.close(conn, namespace, fact_id, end)
                assert closed is not None
                row = closed
            return ClosedFact(row, row.fact_id in self.facts.conflicting_ids(conn, [row]))

        closed = self.database.run_transaction(work)
        log.info(
            "closed %s in %s at %s (reason %r)",
            fact_id,
            namespace,
            canonical_instant(closed.fact.valid_to or end),
            reason,
        )
        return closed


def _failed(violations: list[FieldViolation]) -> AssertResult:
    texts = [str(violation) for violation in violations]
    return AssertResult(error=texts[0] if texts else "invalid", field_violations=texts)
