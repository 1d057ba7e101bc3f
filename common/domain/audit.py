"""The audit trail (docs/explanation/knowledge-model.md; docs/how-to/tokens-and-scopes.md). Transport free (no
grpc).

Audit events are graph nodes of type ``audit_event`` linked by an ``IN_TRACE`` edge to the anchor node of
their trace (type ``pc_trace``, one per (namespace, trace_id)), in the namespace where the event happened
(`common.storage.audit_store`). They are written by

* an explicit call, ``AuditService.RecordAuditEvent`` (`AuditTrail.record`);
* every delete — DeleteNode, PurgeObservation, RedactObservation — with action ``"delete"`` (``"redact"``
  for a redaction) and a snapshot of what was removed, inside the delete's own transaction
  (`AuditTrail.record_in`), so the removal and its audit commit or roll back together;
* unmasked personal data handed to a cleared token (action ``"pii_access"``), from the query service.

Nodes of both types are protected: no write path creates or overwrites them and DeleteNode refuses them
(FAILED_PRECONDITION), so the trail of a deletion cannot be erased by the same mechanism. Events are
immutable. ``TraceService.GetTrace`` reads them back with the context compilations of the trace.

Rules filled in when the input leaves a field empty:

* ``trace_id`` empty: the request id of the RPC in progress (the ``x-request-id`` metadata the caller
  sent, or the one the server generated and echoed in the trailing metadata,
  `common.kernel.request_context`), so the event of a call is found by that call's id; outside an RPC a fresh
  ``audit-<uuid>``.
* ``principal`` empty: the authenticated caller (`common.auth.principals.current_principal`; ``"development"`` in
  development mode); outside an RPC ``"in-process"``.
* ``client_event_id`` given: the event id is ``aud-`` + sha256(``namespace|client_event_id``)[:24], so a
  retried call finds the stored event (``created`` False) instead of writing a second one; otherwise a
  random ``aud-<24 hex>``.

Visibility: an event carries ``scopes``; restricting ones (``workspace:``, ``principal:``) hide it from
readers whose allowed scopes do not meet them, like any item (`common.storage.visibility`). A delete's
event carries the scopes of what it deleted, so a reader who could not see a node cannot read its
title in the deletion snapshot either.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Iterable
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from dataclasses import replace
from datetime import UTC
from datetime import datetime
from typing import Any

import psycopg

from common.auth.principals import current_principal
from common.domain.write_access import WriteAccess
from common.kernel.errors import ViolationCollector
from common.kernel.field_checks import check_namespace
from common.kernel.field_checks import check_scopes
from common.kernel.identifiers import MAX_KEY_LENGTH
from common.kernel.identifiers import canonical_instant
from common.kernel.identifiers import parse_instant
from common.kernel.request_context import current_request_id
from common.kernel.storable_values import unstorable_paths
from common.storage.audit_store import AuditStore
from common.storage.audit_store import event_key
from common.storage.database import Database
from common.storage.graph.store import GraphStore
from common.storage.visibility import is_restricting

# The limits every write path shares (pure validation module; no transport, no storage).

ACTION_PATTERN = re.compile(r"^[a-z][a-z0-9_.-]{0,63}$")
MAX_TRACE_ID_LENGTH = 256
MAX_PRINCIPAL_LENGTH = 256
MAX_CLIENT_EVENT_ID_LENGTH = 128
MAX_DETAILS_BYTES = 64 * 1024
DELETE_ACTION = "delete"
REDACT_ACTION = "redact"
PII_ACCESS_ACTION = "pii_access"
IN_PROCESS_PRINCIPAL = "in-process"


@dataclass(frozen=True)
class AuditEventInput:
    """One event to record.

    Attributes:
        namespace: the namespace where the event happened (the event is stored there).
        action: lower-case verb such as ``delete``, ``redact``, ``pii_access``, ``export``
            (``[a-z][a-z0-9_.-]{0,63}``).
        trace_id: the trace the event belongs to (<= 256 characters); empty: see the module doc.
        principal: who acted; empty: the authenticated caller (see the module doc).
        target_key: natural key (or observation id, fact id) of what the event is about; may be empty.
        details: free-form JSON object (<= 64 KiB as JSON), e.g. the snapshot of a deletion.
        scopes: visibility scopes of the event (``type:id``, at most 20).
        client_event_id: idempotency key chosen by the client (<= 128 characters); empty: none.
    """

    namespace: str
    action: str
    trace_id: str = ""
    principal: str = ""
    target_key: str = ""
    details: Mapping[str, Any] = field(default_factory=dict)
    scopes: tuple[str, ...] = ()
    client_event_id: str = ""


@dataclass(frozen=True)
class AuditEvent:
    """A stored audit event.

    Attributes:
        event_id: ``aud-<24 hex>``; the node's natural key is ``audit_event:<event_id>``.
        recorded_at: when it was stored (UTC).
        request_id: the request id of the RPC that recorded it ("" outside an RPC).
        created: False when a retry with the same ``client_event_id`` found the stored event.
    """

    event_id: str
    natural_key: str
    namespace: str
    action: str
    trace_id: str
    principal: str
    target_key: str
    details: Mapping[str, Any]
    scopes: tuple[str, ...]
    recorded_at: datetime
    request_id: str = ""
    client_event_id: str = ""
    created: bool = True


def validate_event(event: AuditEventInput) -> None:
    """Raises `InvalidArgument` with a field violation per bad field (names of RecordAuditEventRequest)."""
    check = ViolationCollector()
    check_namespace(check, event.namespace)
    if not event.action:
        check.add("action", "required: a lower-case verb such as delete, export, pii_access")
    elif not ACTION_PATTERN.match(event.action):
        check.add("action", f"must match {ACTION_PATTERN.pattern}")
    for name, value, limit in (
        ("trace_id", event.trace_id, MAX_TRACE_ID_LENGTH),
        ("target_key", event.target_key, MAX_KEY_LENGTH),
        ("principal", event.principal, MAX_PRINCIPAL_LENGTH),
        ("client_event_id", event.client_event_id, MAX_CLIENT_EVENT_ID_LENGTH),
    ):
        if len(value) > limit:
            check.add(name, f"at most {limit} characters, got {len(value)}")
        elif "\x00" in value or any(ch in value for ch in "\r\n\t"):
            check.add(name, "must not contain NUL, tab or line break characters")
        elif value != value.strip():
            check.add(name, "must not start or end with whitespace")
    check_scopes(check, event.scopes, "workspace:alpha")
    try:
        size = len(json.dumps(dict(event.details), ensure_ascii=False).encode("utf-8"))
    except (TypeError, ValueError):
        check.add("details", "must be a JSON object")
    else:
        if size > MAX_DETAILS_BYTES:
            check.add("details", f"at most {MAX_DETAILS_BYTES} bytes as JSON, got {size}")
        else:
            for where, description in unstorable_paths(dict(event.details), "details"):
                check.add(where, description)
    check.raise_if_any()


def event_id_for(namespace: str, client_event_id: str) -> str:
    """``aud-`` + sha256(``namespace|client_event_id``)[:24], or a random ``aud-<24 hex>`` without one."""
    if client_event_id:
        digest = hashlib.sha256(f"{namespace}|{client_event_id}".encode()).hexdigest()
        return "aud-" + digest[:24]
    return "aud-" + uuid.uuid4().hex[:24]


def event_from_props(namespace: str, props: Mapping[str, Any], *, created: bool = True) -> AuditEvent:
    """An `AuditEvent` from the ``props`` of its vertex (as written by `AuditTrail`)."""
    details = props.get("details")
    scopes = props.get("scopes")
    recorded = props.get("recorded_at")
    return AuditEvent(
        event_id=str(props.get("event_id", "")),
        natural_key=event_key(str(props.get("event_id", ""))),
        namespace=namespace,
        action=str(props.get("action", "")),
        trace_id=str(props.get("trace_id", "")),
        principal=str(props.get("principal", "")),
        target_key=str(props.get("target_key", "")),
        details=dict(details) if isinstance(details, Mapping) else {},
        scopes=tuple(str(s) for s in scopes) if isinstance(scopes, list) else (),
        recorded_at=parse_instant(str(recorded)) if recorded else datetime.fromtimestamp(0, UTC),
        request_id=str(props.get("request_id", "")),
        client_event_id=str(props.get("client_event_id", "")),
        created=created,
    )


def default_trace_id() -> str:
    """The trace id of an event recorded without one: the RPC's request id, else ``audit-<uuid>``."""
    return current_request_id() or "audit-" + uuid.uuid4().hex


class AuditTrail:
    """Records audit events (see the module doc). Thread-safe.

    Args:
        database: the process's database.
    """

    def __init__(self, database: Database) -> None:
        self.database = database
        self.store = AuditStore(GraphStore(database))

    def record(self, event: AuditEventInput) -> AuditEvent:
        """Records ``event`` in a transaction of its own.

        Raises:
            InvalidArgument: field violations (names of RecordAuditEventRequest).
            FailedPrecondition: ``pc_trace:<trace_id>`` is the key of a node that is not a trace anchor.
            Unavailable: the database cannot be reached (nothing was written).
        """
        validate_event(event)
        self.store.ensure_labels()
        return self.database.run_transaction(lambda conn: self._write(conn, event))

    def prepare(self) -> None:
        """Creates the audit graph labels (audit_event, pc_trace, IN_TRACE) if needed; idempotent, cached
        per process. Call it BEFORE opening a transaction that will use `record_in`: graph DDL runs in
        its own autocommit connection (docs/explanation/architecture.md) and must not wait behind the caller's open writes."""
        self.store.ensure_labels()

    def record_in(self, connection: psycopg.Connection[Any], event: AuditEventInput) -> AuditEvent:
        """Records ``event`` inside the caller's transaction (``connection``), so that a delete and its
        audit event commit or roll back together. Call `prepare` before the transaction begins.

        Raises:
            InvalidArgument, FailedPrecondition: as `record` (the caller's transaction then rolls back).
        """
        validate_event(event)
        self.store.ensure_labels()
        return self._write(connection, event)

    def record_deletion_in(
        self,
        connection: psycopg.Connection[Any],
        namespace: str,
        target_key: str,
        details: Mapping[str, Any],
        *,
        trace_id: str,
        scopes: Iterable[str] = (),
    ) -> AuditEvent:
        """`record_in` of the ``delete`` event of ``target_key`` with ``details`` (the snapshot of what
        went); the event is as visible as what it deleted: it keeps the restricting ones of ``scopes``.

        Raises:
            InvalidArgument, FailedPrecondition: as `record_in`.
        """
        event = AuditEventInput(
            namespace=namespace,
            action=DELETE_ACTION,
            trace_id=trace_id,
            target_key=target_key,
            details=details,
            scopes=tuple(s for s in scopes if is_restricting(s)),
        )
        return self.record_in(connection, event)

    def record_requested(self, event: AuditEventInput, *, access: WriteAccess | None = None) -> AuditEvent:
        """Records an event a client asked for (``AuditService.RecordAuditEvent``), in its own transaction.

        Beyond `record`: the principal is always the caller (a client cannot name someone else), the
        event's restricting scopes must be the caller's, and a ``target_key`` naming a node hidden from
        the caller is refused as not found (`common.domain.write_access`).

        Args:
            access: the caller's write access (default: the RPC's caller).

        Raises:
            InvalidArgument: field violations (names of RecordAuditEventRequest).
            PermissionDenied: a scope the caller may not write (reason SCOPE_NOT_ALLOWED).
            NotFound: ``target_key`` is a node hidden from the caller.
            Unavailable: the database cannot be reached (nothing was written).
        """
        validate_event(event)
        access = access or WriteAccess.of_caller()
        access.require_scopes(event.scopes)
        caller = current_principal()
        event = replace(event, principal=caller.name if caller is not None else IN_PROCESS_PRINCIPAL)
        self.store.ensure_labels()

        def work(conn: psycopg.Connection[Any]) -> AuditEvent:
            if event.target_key:
                access.require_visible_nodes(conn, self.store.graph, event.namespace, [event.target_key])
            return self._write(conn, event)

        return self.database.run_transaction(work)

    def _write(self, conn: psycopg.Connection[Any], event: AuditEventInput) -> AuditEvent:
        now = datetime.now(UTC)
        trace_id = event.trace_id or default_trace_id()
        principal = event.principal
        if not principal:
            caller = current_principal()
            principal = caller.name if caller is not None else IN_PROCESS_PRINCIPAL
        event_id = event_id_for(event.namespace, event.client_event_id)
        props: dict[str, Any] = {
            "event_id": event_id,
            "action": event.action,
            "trace_id": trace_id,
            "principal": principal,
            "target_key": event.target_key,
            "details": dict(event.details),
            "scopes": list(event.scopes),
            "recorded_at": canonical_instant(now),
            "request_id": current_request_id() or "",
            "client_event_id": event.client_event_id,
        }
        title = f"{event.action} {event.target_key}".strip()
        created, stored = self.store.insert_event(
            conn,
            namespace=event.namespace,
            event_id=event_id,
            trace_id=trace_id,
            title=title,
            properties=props,
            now=now,
        )
        return event_from_props(event.namespace, stored, created=created)


__all__ = [
    "DELETE_ACTION",
    "PII_ACCESS_ACTION",
    "REDACT_ACTION",
    "AuditEvent",
    "AuditEventInput",
    "AuditTrail",
    "default_trace_id",
    "event_from_props",
    "event_id_for",
    "validate_event",
]
