"""Domain error hierarchy, free of any transport.

Servicers raise these (or let them propagate from domain and storage code); the error interceptor in
`common.grpc.interceptors` maps each class to a gRPC status with a `google.rpc.Status` carrying one `ErrorInfo`
(reason in UPPER_SNAKE, domain ``memory.v1``) and, for `InvalidArgument`, a `BadRequest` with field
violations (AIP-193). Unknown exceptions become INTERNAL with a generic message.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field


@dataclass(frozen=True)
class FieldViolation:
    """One offending field: ``field`` is a dotted path such as ``observations[3].assertions[0].fact.valid_from``."""

    field: str
    description: str

    def __str__(self) -> str:
        return f"{self.field}: {self.description}"


class DomainError(Exception):
    """Base class of every domain error. ``reason`` is the UPPER_SNAKE ErrorInfo reason; ``metadata``
    goes into the ErrorInfo's metadata (figures a client acts on, as strings)."""

    reason = "INTERNAL"

    def __init__(
        self, message: str, *, reason: str | None = None, metadata: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.metadata: dict[str, str] = dict(metadata or {})
        if reason is not None:
            self.reason = reason


class InvalidArgument(DomainError):
    """Bad input (HTTP 400/422 in REST terms): carries every field violation found."""

    reason = "INVALID_ARGUMENT"

    def __init__(self, violations: list[FieldViolation], message: str | None = None) -> None:
        self.violations = list(violations)
        text = message or "; ".join(str(v) for v in violations) or "invalid argument"
        super().__init__(text)

    @classmethod
    def single(cls, field_path: str, description: str) -> InvalidArgument:
        return cls([FieldViolation(field_path, description)])


class NotFound(DomainError):
    reason = "NOT_FOUND"


class AlreadyExists(DomainError):
    reason = "ALREADY_EXISTS"


class FailedPrecondition(DomainError):
    """A state forbids the call (a protected node, a legal hold). ``metadata`` goes into the ErrorInfo."""

    reason = "FAILED_PRECONDITION"

    def __init__(self, message: str, *, reason: str | None = None, metadata: dict[str, str] | None = None) -> None:
        super().__init__(message, reason=reason)
        self.metadata = dict(metadata or {})


class PermissionDenied(DomainError):
    reason = "PERMISSION_DENIED"


class Unauthenticated(DomainError):
    reason = "UNAUTHENTICATED"


class ResourceExhausted(DomainError):
    """A quota is used up (RESOURCE_EXHAUSTED with a google.rpc ``QuotaFailure``).

    Args:
        message: the status message.
        subject: what the quota applies to (QuotaFailure violation subject), e.g. ``memories/<ns>/<user>``.
        description: the limit and the count, e.g. ``limit 100 live memories per user, count 100``.
        reason: the ErrorInfo reason (default RESOURCE_EXHAUSTED).
    """

    reason = "RESOURCE_EXHAUSTED"

    def __init__(self, message: str, *, subject: str, description: str, reason: str | None = None) -> None:
        super().__init__(message, reason=reason)
        self.subject = subject
        self.description = description


class Unavailable(DomainError):
    """The database (or another dependency) cannot be reached; the call may be retried as is."""

    reason = "DATABASE_UNAVAILABLE"


@dataclass
class ViolationCollector:
    """Collects field violations while validating, then raises them together."""

    violations: list[FieldViolation] = field(default_factory=list)

    def add(self, field_path: str, description: str) -> None:
        self.violations.append(FieldViolation(field_path, description))

    def raise_if_any(self) -> None:
        if self.violations:
            raise InvalidArgument(self.violations)
