"""Client-side helpers: channels, rich error details, readiness waits (used by the CLI and tests).

`make_channel` is the one place where calls get their security: TLS / mTLS channel credentials and
the ``authorization: Bearer <token>`` metadata, both from a `ClientSecurity` (built from settings:
``CB_TOKEN``, ``CB_TLS_CA_FILE``, ``CB_TLS_CLIENT_CERT_FILE``, ``CB_TLS_CLIENT_KEY_FILE``,
``CB_TLS_SERVER_NAME``), and, when tracing is on in the process (`common.grpc.telemetry`), the W3C
``traceparent`` of each call.

Errors arrive as `grpc.RpcError` whose trailing metadata carries a `google.rpc.Status` (AIP-193):
`rpc_failure` decodes it into an `RpcFailure` (code, message, ErrorInfo reason, field violations),
`format_rpc_error` renders it for humans, and `raise_for_status` turns it back into the domain error
of `common.kernel.errors` so callers can ``except InvalidArgument``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn

import grpc
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_status import rpc_status

from common.auth.authentication import is_loopback_address
from common.kernel.errors import (
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

if TYPE_CHECKING:
    from common.kernel.config import Settings

__all__ = [
    "CHANNEL_OPTIONS",
    "CallDetails",
    "ClientSecurity",
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


log = logging.getLogger("memory.client")


@dataclass(frozen=True)
class ClientSecurity:
    """How a client reaches the services: bearer token and TLS / mTLS files (all optional).

    TLS is on when ``ca_file`` or ``cert_file`` is set (without ``ca_file`` the system's roots are
    trusted); ``cert_file`` + ``key_file`` present a client certificate (mTLS). ``server_name``
    overrides the name checked in the server certificate (e.g. connecting by IP to a cert for a name).
    """

    token: str = field(default="", repr=False)
    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""
    server_name: str = ""

    @classmethod
    def from_settings(cls, settings: Settings, *, token: str | None = None) -> ClientSecurity:
        """From ``CB_TOKEN``, ``CB_TLS_CA_FILE``, ``CB_TLS_CLIENT_CERT_FILE``/``KEY_FILE``,
        ``CB_TLS_SERVER_NAME``; ``token`` (e.g. ``cb --token``) wins over ``CB_TOKEN``."""
        return cls(
            token=(token if token else settings.token.get_secret_value()).strip(),
            ca_file=settings.tls_ca_file,
            cert_file=settings.tls_client_cert_file,
            key_file=settings.tls_client_key_file,
            server_name=settings.tls_server_name,
        )

    @property
    def tls(self) -> bool:
        """True when channels use TLS."""
        return bool(self.ca_file or self.cert_file)

    def channel_credentials(self) -> grpc.ChannelCredentials | None:
        """`grpc.ssl_channel_credentials` from the files, or None for plaintext.

        Raises:
            ValueError: only one of certificate and key, or a file cannot be read.
        """
        if not self.tls:
            return None
        if bool(self.cert_file) != bool(self.key_file):
            raise ValueError(
                "a client certificate needs both CB_TLS_CLIENT_CERT_FILE and CB_TLS_CLIENT_KEY_FILE"
            )
        return grpc.ssl_channel_credentials(
            root_certificates=_read_file(self.ca_file, "CB_TLS_CA_FILE") if self.ca_file else None,
            private_key=_read_file(self.key_file, "CB_TLS_CLIENT_KEY_FILE") if self.key_file else None,
            certificate_chain=_read_file(self.cert_file, "CB_TLS_CLIENT_CERT_FILE")
            if self.cert_file
            else None,
        )


def _read_file(path: str, setting: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError as exc:
        raise ValueError(f"{setting}={path}: cannot be read: {exc.strerror or exc}") from exc


class CallDetails(grpc.ClientCallDetails):  # type: ignore[misc]
    """``base`` with its metadata replaced by ``metadata``: what a client interceptor passes on (the bearer
    token here, the consistency token in `common.tooling.consistency_tokens`)."""

    def __init__(self, base: grpc.ClientCallDetails, metadata: tuple[tuple[str, str], ...]) -> None:
        self.method = base.method
        self.timeout = base.timeout
        self.metadata = metadata
        self.credentials = base.credentials
        self.wait_for_ready = getattr(base, "wait_for_ready", None)
        self.compression = getattr(base, "compression", None)


class _BearerTokenInterceptor(
    grpc.UnaryUnaryClientInterceptor,  # type: ignore[misc]
    grpc.UnaryStreamClientInterceptor,  # type: ignore[misc]
    grpc.StreamUnaryClientInterceptor,  # type: ignore[misc]
    grpc.StreamStreamClientInterceptor,  # type: ignore[misc]
):
    """Adds ``authorization: Bearer <token>`` to every call (unless the call sets its own)."""

    def __init__(self, token: str) -> None:
        self._header = ("authorization", f"Bearer {token}")

    def _details(self, details: grpc.ClientCallDetails) -> CallDetails:
        metadata = tuple(details.metadata or ())
        if not any(key.lower() == "authorization" for key, _ in metadata):
            metadata = (*metadata, self._header)
        return CallDetails(details, metadata)

    def intercept_unary_unary(self, continuation: Any, details: grpc.ClientCallDetails, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation: Any, details: grpc.ClientCallDetails, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_stream_unary(
        self, continuation: Any, details: grpc.ClientCallDetails, requests: Iterator[Any]
    ) -> Any:
        return continuation(self._details(details), requests)

    def intercept_stream_stream(
        self, continuation: Any, details: grpc.ClientCallDetails, requests: Iterator[Any]
    ) -> Any:
        return continuation(self._details(details), requests)


def make_channel(
    address: str,
    *,
    options: tuple[tuple[str, int | str], ...] = (),
    security: ClientSecurity | None = None,
) -> grpc.Channel:
    """Opens a channel to ``host:port`` allowing messages up to 64 MiB both ways.

    Args:
        address: ``host:port`` (e.g. ``127.0.0.1:50051``).
        options: extra channel arguments, appended after the defaults.
        security: token and TLS files; None (or an empty one) is a plaintext channel without token.

    Returns:
        A `grpc.Channel` (TLS when ``security.tls``; every call carries the bearer token when
        ``security.token``); close it (or use it as a context manager) when done.

    Raises:
        ValueError: a TLS file cannot be read, or a client certificate without its key.
    """
    security = security or ClientSecurity()
    channel_options: tuple[tuple[str, int | str], ...] = (*CHANNEL_OPTIONS, *options)
    credentials = security.channel_credentials()
    if credentials is None:
        channel = grpc.insecure_channel(address, options=channel_options)
        if security.token and not is_loopback_address(address):
            log.warning("sending a bearer token to %s without TLS (set CB_TLS_CA_FILE)", address)
    else:
        if security.server_name:
            channel_options = (*channel_options, ("grpc.ssl_target_name_override", security.server_name))
        channel = grpc.secure_channel(address, credentials, options=channel_options)
    if security.token:
        channel = grpc.intercept_channel(channel, _BearerTokenInterceptor(security.token))
    from common.grpc.telemetry import configured_tracer_provider, traced_channel

    # Tracing on in this process: each call sends its trace as `traceparent`.
    return traced_channel(channel, configured_tracer_provider())


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
    """Re-raises a failed call as the matching `common.kernel.errors` class (chained to ``error``).

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
    security: ClientSecurity | None = None,
) -> bool:
    """Polls grpc.health.v1 at ``address`` until ``service`` is SERVING or ``timeout`` seconds pass.

    Args:
        address: ``host:port``.
        timeout: overall seconds to wait.
        service: health service name; ``""`` is the server as a whole.
        interval: seconds between polls.
        on_poll: called with each observed status (progress display).
        security: TLS files (health needs no token) for `make_channel`.

    Returns:
        True once SERVING, False on timeout.
    """
    deadline = time.monotonic() + timeout
    with make_channel(address, security=security) as channel:
        while True:
            status = health_status(channel, service, timeout=min(2.0, max(0.1, deadline - time.monotonic())))
            if on_poll is not None:
                on_poll(status)
            if status == "SERVING":
                return True
            if time.monotonic() + interval > deadline:
                return False
            time.sleep(interval)
