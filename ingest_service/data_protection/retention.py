"""Retention per data class: namespace rules saying how long data lives, enforced by the worker.

A rule names a namespace, a data class and a selector, and a maximum age:

* ``observations`` (selector: a kind, or '' for every kind), aged by ``occurred_at``: purged as
  PurgeObservation purges (audited per observation);
* ``memories`` (selector: a tier hot / warm / cold, or ''), aged by the last use: deleted as
  DeleteMemory deletes (audited);
* ``documents`` (selector: a collection, the consumer tag ``{"collection": ...}`` given at Retain, or ''
  for every document), aged by when the document was last retained: deleted as DeleteNode deletes them
  (chunks, embeddings, facts, original; audited per document);
* ``personal_data`` (selector: a personal-data category such as ``email``, or '' for any), the items
  whose chunks are marked as personal data, aged by when they were last written: an episode's
  observation is purged as PurgeObservation purges it, any other node deleted as DeleteNode deletes it;
* ``context_traces`` (selector ''), aged by creation: deleted in batches, one audit event per batch;
* ``audit_events`` (selector ''), aged by when they were recorded, never younger than the operator's
  floor (`Settings.audit_retention_floor_days`): deleted in batches, one audit event per batch that says
  how many went and the cut-off (the trail keeps that it was shortened).

`RetentionEnforcer.enforce` runs every rule judged at ``now`` (a parameter: tests move the clock), in
batches of `Settings.memory_maintenance_batch` items per transaction; a legal hold on the namespace
stops the rule (reported, nothing deleted), a hold on one subject stops only the items it covers. The
worker (`ingest_service.worker`) calls it with the maintenance round. `preview` says what is due.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC
from datetime import datetime
from datetime import timedelta
from typing import Any

from common.domain.audit import AuditEventInput
from common.domain.audit import AuditTrail
from common.domain.audit import default_trace_id
from common.domain.write_access import WriteAccess
from common.kernel.errors import FailedPrecondition
from common.kernel.errors import NotFound
from common.kernel.errors import ViolationCollector
from common.kernel.field_checks import check_namespace
from common.kernel.pii import PII_CATEGORY_PATTERN
from common.storage.data_protection.retention_store import DUE_ITEMS
from common.storage.data_protection.retention_store import RetentionRule
from common.storage.data_protection.retention_store import RetentionStore
from common.storage.database import Database
from common.storage.visibility import EVERYTHING
from ingest_service.documents.node_deletion import DeleteNodeInput
from ingest_service.documents.node_deletion import NodeDeleter
from ingest_service.memories.writer import MemoryWriter
from ingest_service.observations.removal import ObservationRemover
from ingest_service.validation.legal_holds import ensure_not_held

log = logging.getLogger(__name__)

DATA_CLASSES = ("observations", "memories", "documents", "personal_data", "context_traces", "audit_events")
BATCHED_CLASSES = ("context_traces", "audit_events")  # deleted by age in one statement per batch
MEMORY_TIERS = ("hot", "warm", "cold")
MIN_MAX_AGE = timedelta(hours=1)


@dataclass(frozen=True)
class RulePreview:
    """One rule judged at an instant: its cut-off, how many items are due, the hold that stops it."""

    rule: RetentionRule
    cutoff: datetime
    due: int
    blocked_by_hold: str = ""


@dataclass(frozen=True)
class RuleOutcome:
    """What one rule deleted in a sweep (``blocked_by_hold``: the hold that stopped it)."""

    rule: RetentionRule
    deleted: int
    blocked_by_hold: str = ""


def validate_rule(rule: RetentionRule, audit_floor: timedelta = timedelta(days=365)) -> None:
    """Raises `InvalidArgument` with the field violations of a rule (names of RetentionRule);
    ``audit_floor`` is the shortest age audit events may be given."""
    check = ViolationCollector()
    check_namespace(check, rule.namespace, "rule.namespace")
    if rule.data_class not in DATA_CLASSES:
        check.add("rule.data_class", f"one of {', '.join(DATA_CLASSES)}")
    if rule.data_class == "memories" and rule.selector not in ("", *MEMORY_TIERS):
        check.add("rule.selector", "a memory tier: hot, warm or cold (or empty for all)")
    if rule.data_class == "personal_data" and rule.selector and not PII_CATEGORY_PATTERN.match(rule.selector):
        check.add("rule.selector", "a personal-data category such as email, phone, fio (or empty for any)")
    if rule.data_class in BATCHED_CLASSES and rule.selector:
        check.add("rule.selector", f"{rule.data_class.replace('_', ' ')} have no selector")
    if len(rule.selector) > 200:
        check.add("rule.selector", "at most 200 characters")
    if rule.max_age < MIN_MAX_AGE:
        check.add("rule.max_age", "at least one hour")
    elif rule.data_class == "audit_events" and rule.max_age < audit_floor:
        check.add(
            "rule.max_age",
            f"audit events are kept at least {audit_floor.days} days (the operator's floor,"
            " CB_AUDIT_RETENTION_FLOOR_DAYS)",
        )
    check.raise_if_any()


class RetentionEnforcer:
    """Stores retention rules, previews and enforces them (see the module doc)."""

    def __init__(
        self,
        database: Database,
        remover: ObservationRemover,
        memories: MemoryWriter,
        audit: AuditTrail | None = None,
        nodes: NodeDeleter | None = None,
    ) -> None:
        self.database = database
        self.remover = remover
        self.memories = memories
        self.audit = audit or AuditTrail(database)
        self.nodes = nodes or NodeDeleter(database, self.audit)
        self.store = RetentionStore(database.settings)
        self.batch = max(1, database.settings.memory_maintenance_batch)

    def set_rule(self, rule: RetentionRule) -> RetentionRule:
        """Creates or replaces ``rule``; audited (action ``retention_rule.set``) in the same transaction.

        Raises:
            InvalidArgument: see `validate_rule`.
        """
        validate_rule(rule, timedelta(days=self.database.settings.audit_retention_floor_days))
        self.audit.prepare()

        def work(conn: Any) -> None:
            self.store.put_rule(conn, rule, datetime.now(UTC))
            self._audit_rule(conn, rule.namespace, "retention_rule.set", rule.data_class, rule.selector, rule.max_age)

        self.database.run_transaction(work)
        return rule

    def delete_rule(self, namespace: str, data_class: str, selector: str) -> None:
        """Removes a rule; audited (action ``retention_rule.delete``) in the same transaction.

        Raises:
            NotFound: no such rule.
        """
        self.audit.prepare()

        def work(conn: Any) -> bool:
            if not self.store.delete_rule(conn, namespace, data_class, selector):
                return False
            self._audit_rule(conn, namespace, "retention_rule.delete", data_class, selector, None)
            return True

        if not self.database.run_transaction(work):
            raise NotFound(f"no retention rule {data_class}/{selector or '*'} in namespace {namespace}")

    def _audit_rule(
        self, conn: Any, namespace: str, action: str, data_class: str, selector: str, max_age: timedelta | None
    ) -> None:
        details: dict[str, Any] = {"data_class": data_class, "selector": selector}
        if max_age is not None:
            details["max_age_seconds"] = int(max_age.total_seconds())
        self.audit.record_in(
            conn,
            AuditEventInput(
                namespace=namespace,
                action=action,
                trace_id=default_trace_id(),
                target_key=f"{data_class}/{selector or '*'}",
                details=details,
            ),
        )

    def preview(self, namespace: str, now: datetime | None = None) -> list[RulePreview]:
        """Every rule of ``namespace`` with its cut-off at ``now`` and how many items are due."""
        at = now or datetime.now(UTC)
        out: list[RulePreview] = []
        with self.database.connection() as conn:
            for rule in self.store.rules(conn, namespace):
                cutoff = at - rule.max_age
                out.append(RulePreview(rule, cutoff, self._due(conn, rule, cutoff), self._hold(conn, rule)))
        return out

    def enforce(self, now: datetime | None = None, namespaces: tuple[str, ...] = ()) -> list[RuleOutcome]:
        """Deletes what every rule (of ``namespaces``; all when empty) says is past its age at ``now``."""
        at = now or datetime.now(UTC)
        self.audit.prepare()
        with self.database.connection() as conn:
            rules = [r for r in self.store.rules(conn) if not namespaces or r.namespace in namespaces]
        outcomes: list[RuleOutcome] = []
        for rule in rules:
            outcomes.append(self._enforce_rule(rule, at - rule.max_age))
        for outcome in outcomes:
            if outcome.deleted or outcome.blocked_by_hold:
                log.info(
                    "retention %s: %d deleted %s", outcome.rule, outcome.deleted, outcome.blocked_by_hold
                )
        return outcomes

    # -- per class ---------------------------------------------------------------------------------

    def _hold(self, conn: Any, rule: RetentionRule) -> str:
        try:
            ensure_not_held(conn, self.database.settings, rule.namespace, [])
        except FailedPrecondition as held:
            return str(getattr(held, "metadata", {}).get("hold_id", "held"))
        return ""

    def _due(self, conn: Any, rule: RetentionRule, cutoff: datetime) -> int:
        if rule.data_class in DUE_ITEMS:
            return self.store.count_due(conn, rule, cutoff)
        if rule.data_class == "audit_events":
            return self.audit.store.count_events_recorded_before(conn, rule.namespace, cutoff)
        return self.store.count_traces_older_than(conn, rule.namespace, cutoff)

    def _enforce_rule(self, rule: RetentionRule, cutoff: datetime) -> RuleOutcome:
        if rule.data_class == "audit_events":
            # the sweep's own audit events are newer than its start: never due, even with a clock moved on
            cutoff = min(cutoff, datetime.now(UTC))
        with self.database.connection() as conn:
            hold = self._hold(conn, rule)
        if hold:
            return RuleOutcome(rule, 0, hold)
        deleted = 0
        skipped: set[str] = set()
        held_by = ""
        while True:
            with self.database.connection() as conn:
                batch = self._batch(conn, rule, cutoff, len(skipped) + self.batch)
            batch = [item for item in batch if item[0] not in skipped]
            if not batch:
                return RuleOutcome(rule, deleted, held_by)
            for item in batch:
                try:
                    deleted += self._delete(rule, item)
                except FailedPrecondition as held:  # a hold on one subject: the item stays
                    held_by = str(getattr(held, "metadata", {}).get("hold_id", "held"))
                    skipped.add(item[0])
                except NotFound:  # gone meanwhile
                    skipped.add(item[0])
            if rule.data_class in BATCHED_CLASSES:
                continue

    def _batch(self, conn: Any, rule: RetentionRule, cutoff: datetime, limit: int) -> list[tuple[str, str]]:
        if rule.data_class in DUE_ITEMS:
            return self.store.due_items(conn, rule, cutoff, limit)
        due = self._due(conn, rule, cutoff)
        return [(rule.data_class, str(cutoff))] if due else []

    def _delete(self, rule: RetentionRule, item: tuple[str, str]) -> int:
        access = WriteAccess(EVERYTHING)
        reason = f"retention {rule.data_class}/{rule.selector or '*'}"
        if rule.data_class == "observations":
            self.remover.purge(rule.namespace, item[0], reason, access=access)
            return 1
        if rule.data_class == "personal_data" and item[1]:  # an episode: its observation goes with it
            self.remover.purge(rule.namespace, item[1], reason, access=access)
            return 1
        if rule.data_class in ("documents", "personal_data"):
            self.nodes.delete(DeleteNodeInput(rule.namespace, item[0], reason=reason), access=access)
            return 1
        if rule.data_class == "memories":
            self.database.run_transaction(
                lambda conn: self.memories.delete_in(conn, rule.namespace, item[1], item[0], "retention")
            )
            return 1
        cutoff = datetime.fromisoformat(item[1])

        def by_age(conn: Any) -> int:
            ensure_not_held(conn, self.database.settings, rule.namespace, [])
            if rule.data_class == "audit_events":
                events = self.audit.store.events_recorded_before(conn, rule.namespace, cutoff, self.batch)
                gone = self.audit.store.delete_events(conn, rule.namespace, events)
            else:
                gone = self.store.delete_traces_older_than(conn, rule.namespace, cutoff, self.batch)
            details = {
                "operation": "retention",
                "data_class": rule.data_class,
                "deleted": gone,
                "cutoff": cutoff.isoformat(),
            }
            self.audit.record_deletion_in(conn, rule.namespace, rule.data_class, details, trace_id=default_trace_id())
            return gone

        return self.database.run_transaction(by_age)


__all__ = ["DATA_CLASSES", "RetentionEnforcer", "RuleOutcome", "RulePreview", "validate_rule"]
