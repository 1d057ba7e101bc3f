"""Who a caller is and what each RPC needs: rights, the method table, principals, authorisation
(docs/how-to/tokens-and-scopes.md).

Rights imply one another: admin implies write, write implies read. `METHOD_RIGHTS` says which right each
RPC needs on the namespace(s) its request names (`request_namespaces`); a method missing from it is
denied (fail closed), `GLOBAL_METHODS` need the right on ``"*"``, and health and reflection are open
(`is_open_method`). `authorize` checks a `Principal` against the table. The auth interceptor
(`common.grpc.interceptors`) authenticates the caller (`common.auth.authentication`), authorises the
request, and exposes the caller to handlers as `current_principal()` (`principal_context`). In
development mode (no tokens file, loopback only) the caller is `development_principal()`.

Transport-free: requests are read as protobuf messages through their descriptors, never through grpc.
"""

from __future__ import annotations

import contextlib
import contextvars
import difflib
import enum
import types
from collections.abc import Iterator
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from typing import Any

from google.protobuf.descriptor import Descriptor
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from common.kernel.errors import InvalidArgument
from common.kernel.errors import PermissionDenied
from common.kernel.memory_names import memory_base_namespace

__all__ = [
    "ALL_NAMESPACES",
    "DEVELOPMENT_MEMORY_SCOPE",
    "CALLER_FILTERED_METHODS",
    "closest_namespace",
    "GLOBAL_METHODS",
    "MEMORY_METHODS",
    "METHOD_RIGHTS",
    "OPEN_METHOD_PREFIXES",
    "Principal",
    "Right",
    "authorize",
    "current_principal",
    "development_principal",
    "is_open_method",
    "names_namespaces",
    "principal_context",
    "request_namespaces",
]

ALL_NAMESPACES = "*"


class Right(enum.IntEnum):
    """A right on a namespace; a higher right implies every lower one (admin > write > read)."""

    READ = 1
    WRITE = 2
    ADMIN = 3

    @property
    def label(self) -> str:
        """``"read"``, ``"write"`` or ``"admin"``."""
        return self.name.lower()

    @classmethod
    def parse(cls, text: str) -> Right:
        """``"read"`` / ``"write"`` / ``"admin"`` (any case) -> `Right`.

        Raises:
            ValueError: any other text.
        """
        try:
            return cls[text.strip().upper()]
        except KeyError:
            raise ValueError(f"unknown right {text!r}: expected read, write or admin") from None


# --------------------------------------------------------------------------------------------------
# Which right each RPC needs

_READ, _WRITE, _ADMIN = Right.READ, Right.WRITE, Right.ADMIN

METHOD_RIGHTS: Mapping[str, Right] = types.MappingProxyType(
    {
        # ingest_service (write side): writes need write, pack administration needs admin.
        "/memory.v1.ObservationService/RecordObservations": _WRITE,
        "/memory.v1.ObservationService/RedactObservation": _WRITE,
        "/memory.v1.ObservationService/PurgeObservation": _WRITE,
        "/memory.v1.ObservationService/GetEmbeddingBacklog": _READ,
        "/memory.v1.FactService/AssertFacts": _WRITE,
        "/memory.v1.FactService/CloseFact": _WRITE,
        "/memory.v1.DocumentService/Retain": _WRITE,
        "/memory.v1.DocumentService/PutChunks": _WRITE,
        "/memory.v1.DocumentService/DeleteNode": _WRITE,
        "/memory.v1.SnapshotService/Reconcile": _WRITE,
        # Client stream: authorised on its header (the first message), see
        # common.grpc.interceptors._authorized_stream.
        "/memory.v1.SnapshotService/ReconcileStream": _WRITE,
        # Client stream too, authorised on its header (vault ingest).
        "/memory.v1.VaultService/IngestVault": _WRITE,
        "/memory.v1.DomainPackService/RegisterPackage": _ADMIN,
        "/memory.v1.DomainPackService/SetNamespaceKinds": _ADMIN,
        # Reads the namespace's configuration only: a reader may know which kinds it has.
        "/memory.v1.DomainPackService/GetNamespaceKinds": _READ,
        "/memory.v1.DomainPackService/GetPackage": _READ,
        "/memory.v1.DomainPackService/ListPackages": _READ,
        "/memory.v1.AuditService/RecordAuditEvent": _WRITE,
        # Data protection: erasure, holds and retention are the namespace administrator's.
        "/memory.v1.DataProtectionService/EraseSubject": _ADMIN,
        "/memory.v1.DataProtectionService/GetErasureReceipt": _ADMIN,
        "/memory.v1.DataProtectionService/CreateLegalHold": _ADMIN,
        "/memory.v1.DataProtectionService/LiftLegalHold": _ADMIN,
        "/memory.v1.DataProtectionService/ListLegalHolds": _ADMIN,
        "/memory.v1.DataProtectionService/SetRetentionRule": _ADMIN,
        "/memory.v1.DataProtectionService/DeleteRetentionRule": _ADMIN,
        "/memory.v1.DataProtectionService/PreviewRetention": _ADMIN,
        # Server stream; and a client stream authorised on its first message (which names the namespace).
        "/memory.v1.DataProtectionService/ExportNamespace": _ADMIN,
        "/memory.v1.DataProtectionService/ImportNamespace": _ADMIN,
        # query_service (read side).
        "/memory.v1.RetrievalService/Search": _READ,
        "/memory.v1.ContextService/CompileContext": _READ,
        "/memory.v1.ContextService/CompileTypedContext": _READ,
        "/memory.v1.SourceService/GetSource": _READ,
        "/memory.v1.FactQueryService/ListFacts": _READ,
        "/memory.v1.ChangeFeedService/WatchChanges": _READ,
        # Webhooks: subscribing makes the service call out (write); dead letters are an admin's.
        "/memory.v1.WebhookService/CreateWebhookSubscription": _WRITE,
        "/memory.v1.WebhookService/ListWebhookSubscriptions": _READ,
        "/memory.v1.WebhookService/DeleteWebhookSubscription": _WRITE,
        "/memory.v1.WebhookService/ListDeadLetters": _ADMIN,
        "/memory.v1.WebhookService/ReplayDeadLetters": _ADMIN,
        "/memory.v1.ObservationQueryService/GetObservation": _READ,
        "/memory.v1.TraceService/GetTrace": _READ,
        # The audit trail of the whole namespace, every principal's events (served by query_service).
        "/memory.v1.AuditService/ListAuditEvents": _ADMIN,
        "/memory.v1.NamespaceService/ListNamespaces": _READ,
        "/memory.v1.NamespaceService/GetNamespaceStats": _READ,
        # Memory records: the namespace comes from the caller's scope, not from the request
        # (MEMORY_METHODS); `authorize` checks that the caller has a memory scope, the handler checks the
        # right on the scope's namespace (common.domain.memory_scope.resolve_memory_scope).
        "/memory.v1.MemoryService/AddMemories": _WRITE,
        "/memory.v1.MemoryService/UpdateMemory": _WRITE,
        "/memory.v1.MemoryService/DeleteMemory": _WRITE,
        "/memory.v1.MemoryService/SummarizeMemories": _WRITE,
        "/memory.v1.MemoryQueryService/RecallMemories": _READ,
        "/memory.v1.MemoryQueryService/GetMemory": _READ,
        "/memory.v1.MemoryQueryService/ListMemories": _READ,
    }
)
"""Full gRPC method name -> the right it needs on the request's namespace(s). Absent = denied."""

GLOBAL_METHODS: frozenset[str] = frozenset(
    {
        "/memory.v1.DomainPackService/RegisterPackage",
        "/memory.v1.DomainPackService/GetPackage",
        "/memory.v1.DomainPackService/ListPackages",
    }
)
"""Methods whose requests name no namespace (packages are global): the right is needed on ``"*"``."""

CALLER_FILTERED_METHODS: frozenset[str] = frozenset({"/memory.v1.NamespaceService/ListNamespaces"})
"""Methods whose requests name no namespace and whose answers hold only the namespaces the caller has the
right on: any token may call them, the handler filters."""

MEMORY_METHODS: frozenset[str] = frozenset(m for m in METHOD_RIGHTS if m.startswith("/memory.v1.Memory"))
"""Methods of MemoryService / MemoryQueryService: they act in the caller's memory scope (token attributes
``organization``, ``environment``, ``user`` plus the ``x-project-id`` metadata), whose namespace their
handlers authorise."""

OPEN_METHOD_PREFIXES: tuple[str, ...] = ("/grpc.health.v1.Health/", "/grpc.reflection.")
"""Methods that need no token: health checks (probes) and server reflection."""


def is_open_method(full_method: str) -> bool:
    """True for grpc.health.v1 and server reflection, which stay open without a token."""
    return full_method.startswith(OPEN_METHOD_PREFIXES)


# --------------------------------------------------------------------------------------------------
# Principal


@dataclass(frozen=True)
class Principal:
    """Who is calling and what they may do.

    Attributes:
        name: the principal of the token (e.g. ``"ci-loader"``).
        rights: namespace (or ``"*"``) -> highest right granted; use `right_in` / `allows`.
        allowed_scopes: visibility scopes (``workspace:x``, ``principal:y``) the caller may see.
        pii_clearance: may receive personal data unmasked.
        authenticated: False only for the development principal (auth off, loopback only).
        organization_id: memory scope (docs/how-to/memory-records.md): the tenant of the token; empty
        when it has none. environment: memory scope: development | staging | production; empty when none.
        user_id: memory scope: the user the token acts for; empty when none.
    """

    name: str
    rights: Mapping[str, Right] = field(default_factory=dict)
    allowed_scopes: frozenset[str] = frozenset()
    pii_clearance: bool = False
    authenticated: bool = True
    organization_id: str = ""
    environment: str = ""
    user_id: str = ""

    @property
    def has_memory_scope(self) -> bool:
        """True when the principal may use memory records: the development principal, or a token with an
        organisation, an environment and a user."""
        return not self.authenticated or bool(self.organization_id and self.environment and self.user_id)

    def right_in(self, namespace: str) -> Right | None:
        """Highest right on ``namespace``: its own entry, ``"*"``, or for a memory project namespace
        (``org:<o>:env:<e>:proj:<p>``) the entry of its organisation-environment namespace
        (``org:<o>:env:<e>``, `common.kernel.memory_names`). None when nothing is granted."""
        base = memory_base_namespace(namespace)
        candidates = [self.rights.get(namespace), self.rights.get(ALL_NAMESPACES)]
        if base is not None and base != namespace:
            candidates.append(self.rights.get(base))
        granted = [r for r in candidates if r is not None]
        return max(granted) if granted else None

    def allows(self, namespace: str, right: Right) -> bool:
        """True when ``right`` (or a higher one) is granted on ``namespace``."""
        held = self.right_in(namespace)
        return held is not None and held >= right

    def allows_everywhere(self, right: Right) -> bool:
        """True when ``right`` is granted on ``"*"`` (needed by requests that name no namespace)."""
        held = self.rights.get(ALL_NAMESPACES)
        return held is not None and held >= right

    def rights_in(self, namespace: str) -> frozenset[Right]:
        """Every right held on ``namespace``, implied ones included (admin -> {read, write, admin})."""
        held = self.right_in(namespace)
        return frozenset(r for r in Right if held is not None and r <= held)


DEVELOPMENT_MEMORY_SCOPE = ("local", "development", "local")
"""(organization_id, environment, user_id) of the development principal's memories (docs/how-to/memory-records.md)."""


def development_principal() -> Principal:
    """The caller in development mode (auth off, loopback only): every right, no scopes, no PII clearance,
    the memory scope `DEVELOPMENT_MEMORY_SCOPE` (a request's user_id may select another user)."""
    organization_id, environment, user_id = DEVELOPMENT_MEMORY_SCOPE
    return Principal(
        name="development",
        rights=types.MappingProxyType({ALL_NAMESPACES: Right.ADMIN}),
        authenticated=False,
        organization_id=organization_id,
        environment=environment,
        user_id=user_id,
    )


_principal: contextvars.ContextVar[Principal | None] = contextvars.ContextVar(
    "memory_principal", default=None
)


def current_principal() -> Principal | None:
    """The caller of the RPC being handled on this thread (None outside an RPC)."""
    return _principal.get()


@contextlib.contextmanager
def principal_context(principal: Principal) -> Iterator[Principal]:
    """Makes ``principal`` the `current_principal()` for the duration of the block."""
    token = _principal.set(principal)
    try:
        yield principal
    finally:
        _principal.reset(token)


# --------------------------------------------------------------------------------------------------
# Authorisation (called by the auth interceptor in common.grpc.interceptors)


def _namespace_holder(descriptor: Descriptor | Any) -> bool:
    field_ = descriptor.fields_by_name.get("namespace")
    return field_ is not None and field_.type == FieldDescriptor.TYPE_STRING and not field_.is_repeated


def names_namespaces(descriptor: Descriptor | Any) -> bool:
    """True when requests of this type name their namespace(s) (see `request_namespaces`)."""
    if _namespace_holder(descriptor):
        return True
    return any(f.message_type is not None and _namespace_holder(f.message_type) for f in descriptor.fields)


def request_namespaces(request: Message) -> frozenset[str] | None:
    """The namespaces a request touches.

    A request with a ``namespace`` field touches that namespace (an empty name included: `authorize`
    rejects it as invalid before any right is checked). A request without one
    touches the namespaces of its message fields that have one (e.g. every
    ``RecordObservationsRequest.observations[].namespace``).

    Returns:
        The namespaces, or None when the request names none (then only a ``"*"`` grant covers it).
    """
    message: Any = request  # generated types are not known statically here
    descriptor = message.DESCRIPTOR
    if _namespace_holder(descriptor):
        return frozenset({message.namespace})
    found: set[str] = set()
    for field_ in descriptor.fields:
        if field_.message_type is None or not _namespace_holder(field_.message_type):
            continue
        value = getattr(message, field_.name)
        if field_.is_repeated:
            found.update(item.namespace for item in value)
        elif message.HasField(field_.name):
            found.add(value.namespace)
    return frozenset(found) if found else None


def _granted_hint(principal: Principal, namespace: str, needed: Right) -> str:
    """What a refusal tells the caller about its own token: the namespaces where it has ``needed`` (at
    most `_HINT_NAMESPACES`), and the closest of them when ``namespace`` looks like a typo of one
    (difflib ratio at least 0.8), so a misspelt or unknown namespace is recognisable as such."""
    granted = sorted(name for name, right in principal.rights.items() if right >= needed)
    if not granted:
        return f"; this token has the {needed.label} right on no namespace"
    close = closest_namespace(namespace, granted)
    listed = ", ".join(repr(name) for name in granted[:_HINT_NAMESPACES])
    more = f" and {len(granted) - _HINT_NAMESPACES} more" if len(granted) > _HINT_NAMESPACES else ""
    hint = f"; this token has it on {listed}{more}"
    return hint + (f" (did you mean {close!r}?)" if close else "")


def closest_namespace(namespace: str, candidates: list[str]) -> str | None:
    """The one of ``candidates`` that ``namespace`` looks like a typo of (difflib ratio at least 0.8), or
    None: what a refusal or an empty answer suggests instead of a misspelt namespace."""
    close = difflib.get_close_matches(namespace, candidates, n=1, cutoff=0.8)
    return close[0] if close else None


_HINT_NAMESPACES = 10

EMPTY_NAMESPACE_MEANS_EVERY = frozenset({"/memory.v1.ObservationService/GetEmbeddingBacklog"})
"""Methods whose empty ``namespace`` means every namespace (observation_service.proto), so that only a
``"*"`` grant covers it; elsewhere an empty namespace is a missing field (`authorize`)."""


def authorize(principal: Principal, full_method: str, request: Message) -> None:
    """Checks that ``principal`` holds the right ``full_method`` needs on every namespace of ``request``.

    Raises:
        InvalidArgument: the request leaves its own (top-level) ``namespace`` empty, the token has no
            ``"*"`` grant to cover it, and the method is not one where empty means every namespace.
        PermissionDenied: the method is not in `METHOD_RIGHTS` (fail closed), or a namespace (or
            ``"*"`` for a request naming none) lacks the right.
    """
    needed = METHOD_RIGHTS.get(full_method)
    if needed is None:
        raise PermissionDenied(f"method {full_method} is not open to any token", reason="METHOD_NOT_ALLOWED")
    if full_method in MEMORY_METHODS:
        # The namespace is the caller's scope (with the x-project-id metadata): checked by the handler.
        if not principal.has_memory_scope:
            raise PermissionDenied(
                f"principal {principal.name!r} has no memory scope (token attributes organization,"
                " environment and user)",
                reason="MEMORY_SCOPE_MISSING",
            )
        return
    if full_method in CALLER_FILTERED_METHODS:
        return  # the handler answers with the caller's own namespaces only
    namespaces = None if full_method in GLOBAL_METHODS else request_namespaces(request)
    if namespaces is None:
        if not principal.allows_everywhere(needed):
            raise PermissionDenied(
                f"principal {principal.name!r} lacks the {needed.label} right on every namespace ('*') "
                f"that {full_method} needs",
                reason="NAMESPACE_NOT_GRANTED",
            )
        return
    for namespace in sorted(namespaces):
        if not principal.allows(namespace, needed):
            if (
                namespace == ""
                and full_method not in EMPTY_NAMESPACE_MEANS_EVERY
                and _namespace_holder(request.DESCRIPTOR)
            ):
                # The request names no namespace where it must: malformed, not forbidden (with a "*"
                # grant the handler reports it among the request's other field violations).
                raise InvalidArgument.single(
                    "namespace", "required: the namespace the request reads or writes"
                )
            raise PermissionDenied(
                f"principal {principal.name!r} lacks the {needed.label} right on namespace {namespace!r}"
                + _granted_hint(principal, namespace, needed),
                reason="NAMESPACE_NOT_GRANTED",
            )
