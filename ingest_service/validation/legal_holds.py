"""Legal holds: a namespace or one subject whose data no deletion may touch until the hold is lifted.

A hold names a namespace and, optionally, a subject: a node key (``person:alice``), ``memory-user:<id>``
or an exact personal-data value. Every deletion path calls `ensure_not_held` inside its transaction
before it deletes anything: DeleteNode, DeleteMemory, the memory expiry sweep and the vault sweep (all
through `NodeDeleter.delete_in`), PurgeObservation, EraseSubject and the retention sweep. A held
deletion fails with FAILED_PRECONDITION, reason ``LEGAL_HOLD``, the hold's id and reason in the message
and in the ErrorInfo metadata (``hold_id``, ``hold_subject``: empty for a namespace hold). Setting and
lifting a hold are audited (actions ``legal_hold.set`` / ``legal_hold.lift``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from collections.abc import Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC
from datetime import datetime
from typing import Any

from common.auth.principals import current_principal
from common.domain.audit import AuditEventInput
from common.domain.audit import AuditTrail
from common.domain.audit import default_trace_id
from common.kernel.config import Settings
from common.kernel.errors import FailedPrecondition
from common.kernel.errors import NotFound
from common.kernel.errors import ViolationCollector
from common.kernel.field_checks import check_namespace
from common.kernel.field_checks import check_text
from common.kernel.field_checks import require_namespace
from common.kernel.identifiers import MAX_KEY_LENGTH
from common.storage.data_protection.legal_hold_store import HoldRow
from common.storage.data_protection.legal_hold_store import LegalHoldStore
from common.storage.database import Database
from ingest_service.validation.limits import check_reason

HOLD_REASON = "LEGAL_HOLD"


def caller_name() -> str:
    """The principal of the RPC being handled (``development`` without auth or outside an RPC)."""
    principal = current_principal()
    return principal.name if principal is not None else "development"


def ensure_not_held(conn: Any, settings: Settings, namespace: str, subject_keys: Sequence[str] = ()) -> None:
    """Raises when an active hold covers ``namespace`` or one of ``subject_keys``; call it in the
    deleting transaction, before the deletion (the hold row is share-locked until the commit). Inside
    `holds_noted_for_a_preview` the hold is noted instead.

    Raises:
        FailedPrecondition: reason ``LEGAL_HOLD``, ErrorInfo metadata ``hold_id`` and ``hold_subject``.
    """
    holds = LegalHoldStore().active_holds_touching(conn, namespace, subject_keys)
    if not holds:
        return
    hold = holds[0]
    noted = _preview_holds.get()
    if noted is not None:
        noted.append(hold)
        return
    what = f"subject {hold.subject_key!r}" if hold.subject_key else "the whole namespace"
    raise FailedPrecondition(
        f"legal hold {hold.hold_id} on {what} of namespace {namespace} forbids this deletion"
        f" (reason: {hold.reason or '-'}); an admin must lift it first",
        reason=HOLD_REASON,
        metadata={"hold_id": hold.hold_id, "hold_subject": hold.subject_key},
    )


# The holds met by a preview in progress on this thread (None: no preview, holds refuse).
_preview_holds: ContextVar[list[HoldRow] | None] = ContextVar("preview_holds", default=None)


@contextmanager
def holds_noted_for_a_preview() -> Iterator[list[HoldRow]]:
    """For a transaction that is always rolled back (a ``validate_only`` erasure): every hold
    `ensure_not_held` meets is noted in the yielded list instead of refusing, so the preview tells what
    the deletion removes once the holds are lifted, and which hold stands in its way. Never wrap a
    transaction that may commit."""
    noted: list[HoldRow] = []
    token = _preview_holds.set(noted)
    try:
        yield noted
    finally:
        _preview_holds.reset(token)


class LegalHolds:
    """Sets, lifts and lists legal holds (see the module doc)."""

    def __init__(self, database: Database, audit: AuditTrail | None = None) -> None:
        self.database = database
        self.audit = audit or AuditTrail(database)
        self.store = LegalHoldStore()

    def set_hold(self, namespace: str, subject_key: str, reason: str) -> HoldRow:
        """Places a hold on ``namespace`` (``subject_key`` empty) or on one subject; audited.

        Raises:
            InvalidArgument: a bad namespace, an over-long subject key or reason.
        """
        check = ViolationCollector()
        check_namespace(check, namespace)
        check_text(check, "subject_key", subject_key, MAX_KEY_LENGTH)
        check_reason(check, reason)
        check.raise_if_any()
        hold = HoldRow(
            hold_id="hold-" + uuid.uuid4().hex[:20],
            namespace=namespace,
            subject_key=subject_key.strip(),
            reason=reason,
            created_by=caller_name(),
            create_time=datetime.now(UTC),
            lifted_by="",
            lift_time=None,
        )
        self.audit.prepare()

        def work(conn: Any) -> HoldRow:
            self.store.insert_hold(conn, hold)
            self._audit(conn, "legal_hold.set", hold)
            return hold

        return self.database.run_transaction(work)

    def lift_hold(self, namespace: str, hold_id: str) -> HoldRow:
        """Lifts an active hold; audited.

        Raises:
            InvalidArgument: empty namespace or hold id.
            NotFound: no active hold of that id in ``namespace``.
        """
        check = ViolationCollector()
        check_namespace(check, namespace)
        if not hold_id.strip():
            check.add("hold_id", "required")
        check.raise_if_any()
        self.audit.prepare()

        def work(conn: Any) -> HoldRow:
            hold = self.store.lift_hold(conn, namespace, hold_id, caller_name(), datetime.now(UTC))
            if hold is None:
                raise NotFound(f"no active legal hold {hold_id!r} in namespace {namespace}")
            self._audit(conn, "legal_hold.lift", hold)
            return hold

        return self.database.run_transaction(work)

    def list_holds(self, namespace: str, *, include_lifted: bool = False) -> list[HoldRow]:
        """The holds of ``namespace``, oldest first.

        Raises:
            InvalidArgument: a bad namespace.
        """
        require_namespace(namespace)
        with self.database.connection() as conn:
            return self.store.holds(conn, namespace, include_lifted=include_lifted)

    def _audit(self, conn: Any, action: str, hold: HoldRow) -> None:
        self.audit.record_in(
            conn,
            AuditEventInput(
                namespace=hold.namespace,
                action=action,
                trace_id=default_trace_id(),
                target_key=hold.hold_id,
                details={"hold_id": hold.hold_id, "subject_key": hold.subject_key, "reason": hold.reason},
            ),
        )


__all__ = ["HOLD_REASON", "LegalHolds", "caller_name", "ensure_not_held", "holds_noted_for_a_preview"]
