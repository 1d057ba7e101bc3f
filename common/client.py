"""Client-side helpers: channels, rich error details, readiness waits (used by the CLI and tests).

Errors arrive as `grpc.RpcError` whose trailing metadata carries a `google.rpc.Status` (AIP-193):
`rpc_failure` decodes it into an `RpcFailure` (code, message, ErrorInfo reason, field violations),
`format_rpc_error` renders it for humans, and `raise_for_status` turns it back into the domain error
of `common.errors` so callers can ``except InvalidArgument``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NoReturn

import grpc
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_status import rpc_status

from common.errors import (
    AlreadyExists,
    DomainError,
    FailedPrecondition,
    FieldViolation,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    Unauthenticated,
    Unavailable,
)

__all__ = [
    "CHANNEL_OPTIONS",
    "RemoteError",
    "RpcFailure",
    "field_violations",
    "format_rpc_error",
    "health_status",
    "is_unavailable",
    "make_channel",
    "raise_for_status",
    "rpc_failure",
    "wait_for_serving",
]

MAX_MESSAGE_BYTES = 64 * 1024 * 1024
CHANNEL_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
)


def make_channel(address: str, *, options: tuple[tuple[str, int | str], ...] = ()) -> grpc.Channel:
    """Opens an insecure channel to ``host:port`` allowing messages up to 64 MiB both ways.

    Args:
        address: ``host:port`` (e.g. ``127.0.0.1:50051``).
        options: extra channel arguments, appended after the defaults.

    Returns:
        A `grpc.Channel`; close it (or use it as a context manager) when done.
    """
    return grpc.insecure_channel(address, options=(*CHANNEL_OPTIONS, *options))


@dataclass(frozen=True)
class RpcFailure:
    """A failed call, decoded. ``violations`` come from `google.rpc.BadRequest`, the reason from `ErrorInfo`."""

    code: grpc.StatusCode
    message: str
    reason: str = ""
    domain: str = ""
    metadata: dict[str, str] = field(default_factory=dict)
    violations: tuple[FieldViolation, ...] = ()

    @property
    def code_name(self) -> str:
        """The status code as an UPPER_SNAKE name, e.g. ``"INVALID_ARGUMENT"``."""
        return str(self.code.name)

    def lines(self) -> list[str]:
        """``"error: CODE: message"`` followed by one ``"  - field: description"`` line per violation."""
        out = [f"error: {self.code_name}: {self.message}"]
        out.extend(f"  - {v.field}: {v.description}" for v in self.violations)
        return out


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
    try:
        status = rpc_status.from_call(error)  # type: ignore[arg-type]
    except (ValueError, AttributeError, TypeError):
        status = None
    if status is None:
        return RpcFailure(code=code, message=message or "")
    reason = domain = ""
    metadata: dict[str, str] = {}
    violations: list[FieldViolation] = []
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            reason, domain, metadata = info.reason, info.domain, dict(info.metadata)
        elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad_request = error_details_pb2.BadRequest()
            detail.Unpack(bad_request)
            violations.extend(FieldViolation(v.field, v.description) for v in bad_request.field_violations)
    return RpcFailure(
        code=code,
        message=status.message or message or "",
        reason=reason,
        domain=domain,
        metadata=metadata,
        violations=tuple(violations),
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


class RemoteError(DomainError):
    """A failed call whose code has no domain class (INTERNAL, DEADLINE_EXCEEDED, ...)."""

    def __init__(self, code: grpc.StatusCode, message: str, *, reason: str | None = None) -> None:
        super().__init__(message, reason=reason or str(code.name))
        self.code = code


_DOMAIN_CLASSES: dict[grpc.StatusCode, Callable[[RpcFailure], DomainError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: lambda f: InvalidArgument(list(f.violations), f.message),
    grpc.StatusCode.NOT_FOUND: lambda f: NotFound(f.message, reason=f.reason or None),
    grpc.StatusCode.ALREADY_EXISTS: lambda f: AlreadyExists(f.message, reason=f.reason or None),
    grpc.StatusCode.FAILED_PRECONDITION: lambda f: FailedPrecondition(f.message, reason=f.reason or None),
    grpc.StatusCode.PERMISSION_DENIED: lambda f: PermissionDenied(f.message, reason=f.reason or None),
    grpc.StatusCode.UNAUTHENTICATED: lambda f: Unauthenticated(f.message, reason=f.reason or None),
    grpc.StatusCode.UNAVAILABLE: lambda f: Unavailable(f.message, reason=f.reason or None),
}


def raise_for_status(error: grpc.RpcError) -> NoReturn:
    """Re-raises a failed call as the matching `common.errors` class (chained to ``error``).

    INVALID_ARGUMENT -> `InvalidArgument` with its field violations, NOT_FOUND -> `NotFound`, ...,
    UNAVAILABLE -> `Unavailable`; any other code -> `RemoteError` carrying the code.

    Raises:
        DomainError: always.
    """
    failure = rpc_failure(error)
    make = _DOMAIN_CLASSES.get(failure.code)
    if make is None:
        raise RemoteError(failure.code, failure.message, reason=failure.reason or None) from error
    exc = make(failure)
    if failure.reason and isinstance(exc, InvalidArgument):
        exc.reason = failure.reason
    raise exc from error


def health_status(channel: grpc.Channel, service: str = "", *, timeout: float = 2.0) -> str:
    """One health check: ``"SERVING"``, ``"NOT_SERVING"``, ``"SERVICE_UNKNOWN"`` or ``"UNREACHABLE"``."""
    stub = health_pb2_grpc.HealthStub(channel)
    try:
        response = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
    except grpc.RpcError as exc:
        if getattr(exc, "code", lambda: None)() == grpc.StatusCode.NOT_FOUND:
            return "SERVICE_UNKNOWN"
        return "UNREACHABLE"
    return str(health_pb2.HealthCheckResponse.ServingStatus.Name(response.status))


def wait_for_serving(
    address: str,
    *,
    timeout: float = 120.0,
    service: str = "",
    interval: float = 0.5,
    on_poll: Callable[[str], None] | None = None,
) -> bool:
    """Polls grpc.health.v1 at ``address`` until ``service`` is SERVING or ``timeout`` seconds pass.

    Args:
        address: ``host:port``.
        timeout: overall seconds to wait.
        service: health service name; ``""`` is the server as a whole.
        interval: seconds between polls.
        on_poll: called with each observed status (progress display).

    Returns:
        True once SERVING, False on timeout.
    """
    deadline = time.monotonic() + timeout
    with make_channel(address) as channel:
        while True:
            status = health_status(channel, service, timeout=min(2.0, max(0.1, deadline - time.monotonic())))
            if on_poll is not None:
                on_poll(status)
            if status == "SERVING":
                return True
            if time.monotonic() + interval > deadline:
                return False
            time.sleep(interval)
