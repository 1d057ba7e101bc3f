"""Failed calls as exceptions: one class per gRPC status code, each carrying the decoded `google.rpc.Status`.

The services answer a failed call with a `google.rpc.Status` in the trailing metadata
``grpc-status-details-bin`` (AIP-193): an ``ErrorInfo`` (reason in UPPER_SNAKE, domain ``memory.v1``) and,
for INVALID_ARGUMENT, a ``BadRequest`` with one field violation per offending field, for RESOURCE_EXHAUSTED a
``QuotaFailure`` (subject and description of the quota exceeded). `rpc_failure` decodes
it into an `RpcFailure`; `error_from_rpc` turns it into the `ServiceError` subclass of its code, so callers
write ``except InvalidArgument as exc: exc.violations``. Every `ServiceError` is chained to the
`grpc.RpcError` it came from (``__cause__``).

This hierarchy is the client's own; the servers keep theirs (``common.kernel.errors``): the wire format
(status code, ErrorInfo, BadRequest) is the contract between them.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field
from typing import NoReturn

import grpc
from google.rpc import error_details_pb2
from google.rpc import status_pb2

__all__ = [
    "STATUS_DETAILS_METADATA",
    "AlreadyExists",
    "DeadlineExceeded",
    "FailedPrecondition",
    "FieldViolation",
    "Internal",
    "InvalidArgument",
    "NotFound",
    "PermissionDenied",
    "QuotaViolation",
    "ResourceExhausted",
    "RpcFailure",
    "ServiceError",
    "Unauthenticated",
    "Unavailable",
    "error_from_rpc",
    "field_violations",
    "format_rpc_error",
    "is_unavailable",
    "raise_for_status",
    "rpc_failure",
]

STATUS_DETAILS_METADATA = "grpc-status-details-bin"


@dataclass(frozen=True)
class FieldViolation:
    """One offending field of a request: ``field`` is a dotted path such as ``observations[3].content``."""

    field: str
    description: str

    def __str__(self) -> str:
        return f"{self.field}: {self.description}"


@dataclass(frozen=True)
class QuotaViolation:
    """One quota a call exceeded (`google.rpc.QuotaFailure.Violation`): ``subject`` names whose quota
    (e.g. ``memory-user/acme/production/8821``), ``description`` the limit and the count."""

    subject: str
    description: str

    def __str__(self) -> str:
        return f"{self.subject}: {self.description}"


@dataclass(frozen=True)
class RpcFailure:
    """A failed call, decoded. ``violations`` come from `google.rpc.BadRequest`, the reason from `ErrorInfo`."""

    code: grpc.StatusCode
    message: str
    reason: str = ""
    domain: str = ""
    metadata: dict[str, str] = field(default_factory=dict)
    violations: tuple[FieldViolation, ...] = ()
    quota_violations: tuple[QuotaViolation, ...] = ()

    @property
    def code_name(self) -> str:
        """The status code as an UPPER_SNAKE name, e.g. ``"INVALID_ARGUMENT"``."""
        return str(self.code.name)

    def lines(self) -> list[str]:
        """``"error: CODE: message"`` followed by one ``"  - field: description"`` line per violation (but
        the one the message already is)."""
        out = [f"error: {self.code_name}: {self.message}"]
        # a message that is its one violation ("field: description") is not said twice
        out.extend(
            f"  - {v.field}: {v.description}"
            for v in self.violations
            if self.message != f"{v.field}: {v.description}"
        )
        out.extend(f"  - quota {v.subject}: {v.description}" for v in self.quota_violations)
        return out


def _status_details(error: grpc.RpcError) -> status_pb2.Status | None:
    """The `google.rpc.Status` of the trailing metadata, when its code matches the call's."""
    trailing = getattr(error, "trailing_metadata", None)
    if trailing is None:
        return None
    try:
        pairs = trailing() or ()
    except Exception:  # noqa: BLE001 - a call without trailing metadata has no rich status
        return None
    for key, value in pairs:
        if key == STATUS_DETAILS_METADATA and isinstance(value, bytes):
            status = status_pb2.Status.FromString(value)
            code = error.code() if hasattr(error, "code") else None
            if isinstance(code, grpc.StatusCode) and status.code != code.value[0]:
                return None  # grpc_status.rpc_status.from_call refuses a mismatch too
            return status
    return None


def rpc_failure(error: grpc.RpcError) -> RpcFailure:
    """Decodes a failed call's status, ErrorInfo and BadRequest field violations.

    Args:
        error: what a stub call raised (a `grpc.RpcError` that is also a `grpc.Call`).

    Returns:
        An `RpcFailure`; without rich details it still has the code and message of the call.
    """
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    message = error.details() if hasattr(error, "details") else str(error)
    if not isinstance(code, grpc.StatusCode):
        code = grpc.StatusCode.UNKNOWN
    status = _status_details(error)
    if status is None:
        return RpcFailure(code=code, message=message or "")
    reason = domain = ""
    metadata: dict[str, str] = {}
    violations: list[FieldViolation] = []
    quota_violations: list[QuotaViolation] = []
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            reason, domain, metadata = info.reason, info.domain, dict(info.metadata)
        elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad_request = error_details_pb2.BadRequest()
            detail.Unpack(bad_request)
            violations.extend(FieldViolation(v.field, v.description) for v in bad_request.field_violations)
        elif detail.Is(error_details_pb2.QuotaFailure.DESCRIPTOR):
            quota_failure = error_details_pb2.QuotaFailure()
            detail.Unpack(quota_failure)
            quota_violations.extend(
                QuotaViolation(v.subject, v.description) for v in quota_failure.violations
            )
    return RpcFailure(
        code=code,
        message=status.message or message or "",
        reason=reason,
        domain=domain,
        metadata=metadata,
        violations=tuple(violations),
        quota_violations=tuple(quota_violations),
    )


def field_violations(error: grpc.RpcError) -> list[FieldViolation]:
    """The `BadRequest` field violations of a failed call (empty when there are none)."""
    return list(rpc_failure(error).violations)


def format_rpc_error(error: grpc.RpcError) -> str:
    """Human form: ``"error: CODE: message"`` plus one indented line per field violation."""
    return "\n".join(rpc_failure(error).lines())


def is_unavailable(error: BaseException) -> bool:
    """True for a `grpc.RpcError` with status UNAVAILABLE (the whole call may be retried as is)."""
    return (
        isinstance(error, grpc.RpcError)
        and getattr(error, "code", lambda: None)() == grpc.StatusCode.UNAVAILABLE
    )


class ServiceError(Exception):
    """A call the services refused or failed; the base of every class below, and the class of any status
    code without one of its own (``code`` tells which).

    Attributes:
        failure: the decoded status (`RpcFailure`).
        code: the gRPC status code.
        message: the status message.
        reason: the ErrorInfo reason (UPPER_SNAKE, e.g. ``NAMESPACE_NOT_PERMITTED``), else the code's name.
        violations: the BadRequest field violations (empty for most codes).
        quota_violations: the QuotaFailure violations (RESOURCE_EXHAUSTED of a quota, else empty).
    """

    def __init__(self, failure: RpcFailure) -> None:
        super().__init__(failure.message)
        self.failure = failure
        self.code = failure.code
        self.message = failure.message
        self.reason = failure.reason or failure.code_name
        self.violations = list(failure.violations)
        self.quota_violations = list(failure.quota_violations)

    def lines(self) -> list[str]:
        """``"error: CODE: message"`` and one ``"  - field: description"`` line per field violation."""
        return self.failure.lines()


class InvalidArgument(ServiceError):
    """INVALID_ARGUMENT: the request is wrong; ``violations`` says where (nothing was changed)."""


class NotFound(ServiceError):
    """NOT_FOUND: no such node, fact, observation, package or trace (or not visible to the caller)."""


class AlreadyExists(ServiceError):
    """ALREADY_EXISTS: e.g. a domain package version registered before with other content."""


class FailedPrecondition(ServiceError):
    """FAILED_PRECONDITION: the state does not allow the call (e.g. a replica that cannot serve a token)."""


class PermissionDenied(ServiceError):
    """PERMISSION_DENIED: the token lacks the right, namespace or scope."""


class Unauthenticated(ServiceError):
    """UNAUTHENTICATED: no token, or one the services do not know."""


class Unavailable(ServiceError):
    """UNAVAILABLE: a service or its database cannot be reached; the call may be retried as is."""


class DeadlineExceeded(ServiceError):
    """DEADLINE_EXCEEDED: the call's deadline passed before the answer."""


class ResourceExhausted(ServiceError):
    """RESOURCE_EXHAUSTED: a limit (message size, budget, a memory quota: ``quota_violations``) was exceeded."""


class Internal(ServiceError):
    """INTERNAL: the service failed; the message is generic, the request id is in the service's log."""


_CLASSES: dict[grpc.StatusCode, type[ServiceError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExists,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
    grpc.StatusCode.INTERNAL: Internal,
}


def error_from_rpc(error: grpc.RpcError) -> ServiceError:
    """The `ServiceError` subclass of a failed call's status code (`ServiceError` itself for codes
    without one), carrying its decoded status; raise it ``from error``."""
    failure = rpc_failure(error)
    return _CLASSES.get(failure.code, ServiceError)(failure)


def raise_for_status(error: grpc.RpcError) -> NoReturn:
    """Raises `error_from_rpc` of a failed call, chained to ``error`` (``__cause__``).

    Raises:
        ServiceError: always (the subclass of the call's status code).
    """
    raise error_from_rpc(error) from error
