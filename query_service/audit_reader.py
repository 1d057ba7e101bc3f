"""AuditService.ListAuditEvents: the audit trail of a namespace as an auditor reads it. Transport free.

Answers the questions of an audit: who read personal data (action ``pii_access``), what was deleted and
by whom (``delete``, ``redact``), in a period. The events come from the relational index of audit events
(`common.storage.audit_store.AuditStore.list_events`), newest first (record time, then event id,
descending), filtered by action, principal, node key and a half-open time range ``[start, end)``.

Paging (AIP-158): a page token is opaque to the client: base64url of the last event's position and a
digest of the request's namespace and filters, followed by a check value over both. A token altered by
hand, or sent with another namespace or other filters, is refused (INVALID_ARGUMENT on ``page_token``).
The check is not a secret signature: a token grants nothing, since every page is read with the caller's
own rights; it keeps a wrong or stale token from silently skipping or repeating events.

Who may read (`common.storage.audit_store.AuditReadAccess`): ListAuditEvents needs the admin right on the
namespace (the method table, `common.auth.principals`), so its caller reads every event of it. Output
passes through the caller's personal data disclosure (`query_service.pii_output`): principals, target
keys and details are masked by patterns for a token without PII clearance.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from dataclasses import replace
from datetime import datetime

from common.domain.audit import ACTION_PATTERN
from common.domain.audit import MAX_PRINCIPAL_LENGTH
from common.domain.audit import AuditEvent
from common.domain.audit import event_from_props
from common.kernel.errors import InvalidArgument
from common.kernel.errors import ViolationCollector
from common.kernel.field_checks import check_namespace
from common.kernel.identifiers import MAX_KEY_LENGTH
from common.kernel.identifiers import canonical_instant
from common.kernel.page_tokens import MalformedPageToken
from common.kernel.page_tokens import decode_page_token as decode_token
from common.kernel.page_tokens import token_bytes
from common.kernel.page_tokens import token_instant
from common.storage.audit_store import ALL_AUDIT_EVENTS
from common.storage.audit_store import AuditEventQuery
from common.storage.audit_store import AuditReadAccess
from common.storage.audit_store import AuditStore
from common.storage.database import Database
from common.storage.graph.store import GraphStore
from query_service.pii_output import NO_PII_POLICY
from query_service.pii_output import PiiDisclosure
from query_service.pii_output import PiiGuard
from query_service.pii_output import PiiPolicy

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000
_TOKEN_CONTEXT = b"memory.v1.AuditService/ListAuditEvents"
_TOKEN_ERROR = "not a token of a previous response to this request: pass next_page_token unchanged, with the same namespace and filters"
_TOKEN_KEYS = frozenset({"t", "id", "f"})  # recorded_at, event_id, the filter digest


@dataclass(frozen=True)
class AuditListInput:
    """A ListAuditEventsRequest in domain form (see the proto for each field's semantics).

    Attributes:
        start: inclusive lower bound of the record time; None: none.
        end: exclusive upper bound of the record time; None: none.
    """

    namespace: str
    action: str = ""
    principal: str = ""
    node_key: str = ""
    start: datetime | None = None
    end: datetime | None = None
    page_size: int = 0
    page_token: str = ""


@dataclass(frozen=True)
class AuditPage:
    """One page of events, newest first, and the next page's token ("" on the last page)."""

    events: list[AuditEvent]
    next_page_token: str = ""


def _filter_digest(request: AuditListInput) -> str:
    """What a page token is bound to: the namespace and every filter."""
    fields = [
        request.namespace,
        request.action,
        request.principal,
        request.node_key,
        canonical_instant(request.start) if request.start else "",
        canonical_instant(request.end) if request.end else "",
    ]
    return hashlib.sha256(json.dumps(fields).encode()).hexdigest()[:16]


def _check_value(payload: bytes) -> str:
    return hashlib.sha256(_TOKEN_CONTEXT + b"|" + payload).hexdigest()[:16]


def encode_page_token(request: AuditListInput, last: AuditEvent) -> str:
    """The token of the page after ``last`` for ``request``'s namespace and filters."""
    payload = json.dumps(
        {"t": canonical_instant(last.recorded_at), "id": last.event_id, "f": _filter_digest(request)},
        separators=(",", ":"),
    ).encode()
    return base64.urlsafe_b64encode(payload).decode().rstrip("=") + "." + _check_value(payload)


def decode_page_token(request: AuditListInput) -> tuple[datetime, str] | None:
    """The (recorded_at, event_id) position of ``request.page_token``; None for "".

    Raises:
        InvalidArgument: on ``page_token``: malformed, altered, or issued for other filters.
    """
    token = request.page_token
    if not token:
        return None
    try:
        encoded, _, check = token.partition(".")
        payload = token_bytes(encoded)
        if not check or check != _check_value(payload):
            raise MalformedPageToken("check value")
        value = decode_token(payload, keys=_TOKEN_KEYS)
        if value["f"] != _filter_digest(request):
            raise MalformedPageToken("other filters")
        return token_instant(value["t"]), value["id"]
    except MalformedPageToken:
        raise InvalidArgument.single("page_token", _TOKEN_ERROR) from None


def validate_list_request(request: AuditListInput) -> None:
    """Raises `InvalidArgument` with one field violation per bad field (names of ListAuditEventsRequest)."""
    check = ViolationCollector()
    check_namespace(check, request.namespace)
    if request.action and not ACTION_PATTERN.match(request.action):
        check.add("action", f"must match {ACTION_PATTERN.pattern}")
    for name, value, limit in (
        ("principal", request.principal, MAX_PRINCIPAL_LENGTH),
        ("node_key", request.node_key, MAX_KEY_LENGTH),
    ):
        if len(value) > limit:
            check.add(name, f"at most {limit} characters, got {len(value)}")
        elif any(ch in value for ch in "\x00\r\n\t"):
            check.add(name, "must not contain NUL, tab or line break characters")
    if request.start is not None and request.end is not None and request.start >= request.end:
        check.add("end_time", "must be after start_time")
    if not 0 <= request.page_size <= MAX_PAGE_SIZE:
        check.add("page_size", f"0..{MAX_PAGE_SIZE} (0: {DEFAULT_PAGE_SIZE}), got {request.page_size}")
    check.raise_if_any()


def disclose_audit_event(disclosure: PiiDisclosure, event: AuditEvent) -> AuditEvent:
    """An event as ``disclosure``'s caller may see it: its target key, principal, scopes and details
    masked by patterns for a caller without clearance (`query_service.pii_output`); a scope such as
    ``principal:<e-mail>`` names a person as much as the principal does."""
    if not disclosure.policy.protection:
        return event
    key = event.target_key
    return replace(
        event,
        target_key=disclosure.text(event.target_key, key=key),
        principal=disclosure.text(event.principal, key=key),
        scopes=tuple(disclosure.text(scope, key=key) for scope in event.scopes),
        details=disclosure.value(dict(event.details), key=key),
    )


class AuditReader:
    """Lists audit events (see the module doc). Thread-safe.

    Args:
        database: the read side's database.
    """

    def __init__(self, database: Database) -> None:
        self.database = database
        self.store = AuditStore(GraphStore(database))
        self.pii = PiiGuard(database)

    def list_events(
        self,
        request: AuditListInput,
        *,
        access: AuditReadAccess = ALL_AUDIT_EVENTS,
        pii: PiiPolicy = NO_PII_POLICY,
    ) -> AuditPage:
        """One page of ``request.namespace``'s events that ``access`` may read, newest first.

        Raises:
            InvalidArgument: field violations (names of ListAuditEventsRequest), a foreign page token.
            Unavailable: the database cannot be reached.
        """
        validate_list_request(request)
        pii.refuse_personal_data_lookups({"principal": request.principal, "node_key": request.node_key})
        after = decode_page_token(request)
        size = request.page_size or DEFAULT_PAGE_SIZE
        query = AuditEventQuery(
            namespace=request.namespace,
            action=request.action,
            principal=request.principal,
            node_key=request.node_key,
            start=request.start,
            end=request.end,
            after=after,
            limit=size + 1,
        )
        with self.database.connection() as conn:
            rows = self.store.list_events(conn, query, access=access)
        events = [event_from_props(request.namespace, props) for props in rows[:size]]
        token = encode_page_token(request, events[-1]) if len(rows) > size else ""
        shown = self.pii.disclose(
            request.namespace,
            pii,
            lambda disclosure: [disclose_audit_event(disclosure, event) for event in events],
        )
        return AuditPage(events=shown, next_page_token=token)


__all__ = [
    "DEFAULT_PAGE_SIZE",
    "MAX_PAGE_SIZE",
    "AuditListInput",
    "AuditPage",
    "AuditReader",
    "decode_page_token",
    "disclose_audit_event",
    "encode_page_token",
    "validate_list_request",
]
