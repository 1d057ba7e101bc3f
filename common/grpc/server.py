"""gRPC server bootstrap shared by ingest_service and query_service.

`build_server` returns a `ServiceHost`: a sync `grpc.Server` (ThreadPoolExecutor) with, in order,

1. a request-id + logging interceptor (request id from metadata ``x-request-id`` or generated, kept in
   a contextvar for the duration of the call, echoed in the trailing metadata, logged with method,
   code and latency);
2. a Prometheus metrics interceptor (``memory_rpc_requests_total``, ``memory_rpc_latency_seconds``,
   ``memory_rpc_errors_total``);
3. an error-mapping interceptor: domain errors (`common.errors`) become a `google.rpc.Status` with one
   `ErrorInfo` (domain ``memory.v1``) and, for `InvalidArgument`, a `BadRequest`; anything else becomes
   INTERNAL with a generic message naming the request id, the traceback is logged;
4. the auth interceptor (`common.auth`), the first one to look at a request, before any servicer
   code: bearer token -> `Principal` (UNAUTHENTICATED otherwise), the right `METHOD_RIGHTS` names on
   the request's namespace(s) (PERMISSION_DENIED otherwise; methods absent from the table are denied),
   then the principal is `current_principal()` for the handler. It sits inside the three above so that
   refusals are logged with their request id, counted, and mapped like every other domain error.
   Health and reflection stay open. Without a tokens file the server runs in development mode (every
   right, no check), which `build_server` allows on loopback addresses only.

TLS (``CB_TLS_CERT_FILE`` + ``CB_TLS_KEY_FILE``) and mutual TLS (plus ``CB_TLS_CLIENT_CA_FILE``: client
certificates signed by that CA are required) use `grpc.ssl_server_credentials`.

plus grpc.health.v1 (NOT_SERVING until ``database.ensure_ready()`` returns True; re-checked every
2 s by a daemon thread), server reflection, and the Prometheus HTTP endpoint.

Interceptors wrap unary-unary and client-streaming (stream-unary, e.g. SnapshotService.ReconcileStream)
handlers; the auth interceptor authorises a client stream message by message (`_authorized_stream`).
Other streaming handlers (health Watch, reflection) pass through untouched.
"""

from __future__ import annotations

import logging
import re
import signal
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Sequence
from concurrent import futures
from dataclasses import dataclass
from typing import Any, Protocol

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from grpc_status import rpc_status
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram, start_http_server

from common.auth.principals import (
    Authenticator,
    TokensFileError,
    TokenStore,
    authorize,
    is_loopback_address,
    is_open_method,
    principal_context,
    request_namespaces,
)
from common.kernel.config import Settings
from common.kernel.errors import (
    AlreadyExists,
    DomainError,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    Unauthenticated,
    Unavailable,
)
from common.kernel.request_context import current_request_id, request_id_var

__all__ = [
    "ERROR_DOMAIN",
    "MAX_MESSAGE_BYTES",
    "REQUEST_ID_METADATA_KEY",
    "ReadinessProbe",
    "RequestIdLogFilter",
    "ServerSetupError",
    "ServiceHost",
    "build_authenticator",
    "build_server",
    "current_request_id",
    "server_credentials",
    "status_for_exception",
]

log = logging.getLogger("memory.server")
rpc_log = logging.getLogger("memory.rpc")

ERROR_DOMAIN = "memory.v1"
REQUEST_ID_METADATA_KEY = "x-request-id"
# RetainRequest.content may hold 8 MiB and a RecordObservations batch up to 1000 items: the gRPC
# default of 4 MiB per message is too small for both directions.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
SERVER_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
)
READINESS_INTERVAL_SECONDS = 2.0

_request_id = request_id_var  # defined transport-free in common.kernel.request_context (read by domain code)
_QUIET_METHOD_PREFIXES = ("/grpc.health.v1.Health/", "/grpc.reflection.")
_VALID_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:/+=-]{1,128}$")

# Checked in order: the first matching class wins (subclasses of one another would need care).
_DOMAIN_CODES: tuple[tuple[type[DomainError], grpc.StatusCode], ...] = (
    (InvalidArgument, grpc.StatusCode.INVALID_ARGUMENT),
    (NotFound, grpc.StatusCode.NOT_FOUND),
    (AlreadyExists, grpc.StatusCode.ALREADY_EXISTS),
    (FailedPrecondition, grpc.StatusCode.FAILED_PRECONDITION),
    (PermissionDenied, grpc.StatusCode.PERMISSION_DENIED),
    (Unauthenticated, grpc.StatusCode.UNAUTHENTICATED),
    (Unavailable, grpc.StatusCode.UNAVAILABLE),
)


class RequestIdLogFilter(logging.Filter):
    """Adds ``record.request_id`` (``"-"`` outside an RPC) so formats may use ``%(request_id)s``."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = _request_id.get() or "-"
        return True


class ReadinessProbe(Protocol):
    """What the host needs from the database: a readiness signal and a way to release it.

    `common.db.Database` satisfies it.
    """

    def ensure_ready(self) -> bool:
        """Connects (and migrates on first contact) if needed; True when usable. Never raises."""
        ...

    def close(self) -> None:
        """Releases connections; called once after the server stopped."""
        ...


# --------------------------------------------------------------------------------------------------
# Metrics


@dataclass(frozen=True)
class _RpcMetrics:
    requests: Counter
    latency: Histogram
    errors: Counter


_metrics_lock = threading.Lock()
_metrics_by_registry: dict[int, _RpcMetrics] = {}


def _rpc_metrics(registry: CollectorRegistry = REGISTRY) -> _RpcMetrics:
    """The process-wide RPC metrics of ``registry``, created on first use (several servers may share them)."""
    with _metrics_lock:
        metrics = _metrics_by_registry.get(id(registry))
        if metrics is None:
            metrics = _RpcMetrics(
                requests=Counter(
                    "memory_rpc_requests_total",
                    "RPCs handled, by gRPC service, method and status code.",
                    ("service", "method", "code"),
                    registry=registry,
                ),
                latency=Histogram(
                    "memory_rpc_latency_seconds",
                    "Server-side RPC latency in seconds, by gRPC service and method.",
                    ("service", "method"),
                    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
                    registry=registry,
                ),
                errors=Counter(
                    "memory_rpc_errors_total",
                    "RPCs that ended with a status other than OK, by gRPC service, method and code.",
                    ("service", "method", "code"),
                    registry=registry,
                ),
            )
            _metrics_by_registry[id(registry)] = metrics
        return metrics


# --------------------------------------------------------------------------------------------------
# Interceptors

_Behavior = Callable[[Any, grpc.ServicerContext], Any]


def _split_method(full_method: str) -> tuple[str, str]:
    """``"/memory.v1.SourceService/GetSource"`` -> ``("memory.v1.SourceService", "GetSource")``."""
    service, _, method = full_method.lstrip("/").rpartition("/")
    return service or "unknown", method or full_method


def _code_name(context: grpc.ServicerContext, failed: bool) -> str:
    """Status code name the RPC ended with: set code, else OK on return / UNKNOWN on exception."""
    code = context.code()
    if isinstance(code, grpc.StatusCode):
        return str(code.name)
    return "UNKNOWN" if failed else "OK"


class _UnaryInterceptor(grpc.ServerInterceptor):
    """Base: wraps the behaviour of unary-unary and stream-unary handlers (a stream-unary behaviour takes
    the request iterator where a unary one takes the request); other handlers pass through."""

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(handler_call_details)
        if handler is None or handler.response_streaming:
            return handler
        if handler.request_streaming and handler.stream_unary is not None:
            return grpc.stream_unary_rpc_method_handler(
                self._wrap(handler.stream_unary, handler_call_details),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.request_streaming or handler.unary_unary is None:
            return handler
        behavior = self._wrap(handler.unary_unary, handler_call_details)
        return grpc.unary_unary_rpc_method_handler(
            behavior,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

    def _wrap(self, behavior: _Behavior, details: grpc.HandlerCallDetails) -> _Behavior:
        raise NotImplementedError


class _RequestIdLoggingInterceptor(_UnaryInterceptor):
    def __init__(self, service_name: str) -> None:
        self._service_name = service_name

    def _wrap(self, behavior: _Behavior, details: grpc.HandlerCallDetails) -> _Behavior:
        method = details.method
        # Probes (health checks every few seconds) and reflection would drown the log at INFO.
        level_ok = logging.DEBUG if method.startswith(_QUIET_METHOD_PREFIXES) else logging.INFO
        incoming = ""
        for key, value in details.invocation_metadata or ():
            if key == REQUEST_ID_METADATA_KEY and isinstance(value, str):
                incoming = value
                break

        def wrapped(request: Any, context: grpc.ServicerContext) -> Any:
            request_id = incoming if _VALID_REQUEST_ID.match(incoming) else uuid.uuid4().hex
            token = _request_id.set(request_id)
            started = time.perf_counter()
            failed = False
            try:
                return behavior(request, context)
            except BaseException:
                failed = True
                raise
            finally:
                latency_ms = (time.perf_counter() - started) * 1000.0
                trailing = tuple(context.trailing_metadata() or ())
                context.set_trailing_metadata(trailing + ((REQUEST_ID_METADATA_KEY, request_id),))
                code = _code_name(context, failed)
                rpc_log.log(
                    level_ok if code == "OK" else logging.WARNING,
                    "%s %s code=%s latency_ms=%.1f request_id=%s",
                    self._service_name,
                    method,
                    code,
                    latency_ms,
                    request_id,
                )
                _request_id.reset(token)

        return wrapped


class _MetricsInterceptor(_UnaryInterceptor):
    def __init__(self, metrics: _RpcMetrics) -> None:
        self._metrics = metrics

    def _wrap(self, behavior: _Behavior, details: grpc.HandlerCallDetails) -> _Behavior:
        service, method = _split_method(details.method)
        metrics = self._metrics

        def wrapped(request: Any, context: grpc.ServicerContext) -> Any:
            started = time.perf_counter()
            failed = False
            try:
                return behavior(request, context)
            except BaseException:
                failed = True
                raise
            finally:
                metrics.latency.labels(service, method).observe(time.perf_counter() - started)
                code = _code_name(context, failed)
                metrics.requests.labels(service, method, code).inc()
                if code != "OK":
                    metrics.errors.labels(service, method, code).inc()

        return wrapped


def _pack(message: Any) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


def status_for_exception(exc: BaseException, request_id: str | None) -> grpc.Status:
    """Maps an exception raised by a handler to the status sent to the client.

    Args:
        exc: a `common.errors.DomainError` subclass instance, or anything else.
        request_id: put in ErrorInfo metadata and, for INTERNAL, in the message.

    Returns:
        A `grpc.Status` whose trailing metadata holds ``grpc-status-details-bin``: a `google.rpc.Status`
        with one `ErrorInfo` (reason = ``exc.reason``, domain ``memory.v1``) and, for `InvalidArgument`,
        a `BadRequest` with one field violation per ``exc.violations`` item. Unmapped exceptions (and a
        bare `DomainError`) become INTERNAL with the message ``"internal error (request id X)"``.
    """
    metadata = {"request_id": request_id} if request_id else {}
    code: grpc.StatusCode | None = None
    if isinstance(exc, DomainError):
        for cls, mapped in _DOMAIN_CODES:
            if isinstance(exc, cls):
                code = mapped
                break
    if code is None or not isinstance(exc, DomainError):
        message = f"internal error (request id {request_id or '-'})"
        details = [
            _pack(error_details_pb2.ErrorInfo(reason="INTERNAL", domain=ERROR_DOMAIN, metadata=metadata))
        ]
        proto = status_pb2.Status(code=code_pb2.INTERNAL, message=message, details=details)
        return rpc_status.to_status(proto)
    details = [_pack(error_details_pb2.ErrorInfo(reason=exc.reason, domain=ERROR_DOMAIN, metadata=metadata))]
    if isinstance(exc, InvalidArgument):
        bad_request = error_details_pb2.BadRequest(
            field_violations=[
                error_details_pb2.BadRequest.FieldViolation(field=v.field, description=v.description)
                for v in exc.violations
            ]
        )
        details.append(_pack(bad_request))
    proto = status_pb2.Status(code=code.value[0], message=exc.message, details=details)
    return rpc_status.to_status(proto)


def _is_context_abort(exc: BaseException, context: grpc.ServicerContext) -> bool:
    """True for the bare ``Exception()`` that ``context.abort()`` raises after setting the status."""
    code = context.code()
    return type(exc) is Exception and not exc.args and code is not None and code != grpc.StatusCode.OK


class _ErrorMappingInterceptor(_UnaryInterceptor):
    def __init__(self, service_name: str) -> None:
        self._service_name = service_name

    def _wrap(self, behavior: _Behavior, details: grpc.HandlerCallDetails) -> _Behavior:
        method = details.method

        def wrapped(request: Any, context: grpc.ServicerContext) -> Any:
            try:
                return behavior(request, context)
            except Exception as exc:
                if _is_context_abort(exc, context):
                    raise  # the handler aborted with a status of its own
                request_id = _request_id.get()
                if not isinstance(exc, DomainError) or not any(isinstance(exc, c) for c, _ in _DOMAIN_CODES):
                    log.error(
                        "%s %s failed (request id %s):\n%s",
                        self._service_name,
                        method,
                        request_id,
                        "".join(traceback.format_exception(exc)),
                    )
                context.abort_with_status(status_for_exception(exc, request_id))
                raise  # not reached: abort_with_status raises

        return wrapped


class _AuthInterceptor(grpc.ServerInterceptor):
    """Authenticates and authorises every RPC except health and reflection (see `common.auth`).

    Unary-unary and stream-unary behaviours raise `Unauthenticated` / `PermissionDenied` for the
    error-mapping interceptor; other protected streaming methods (memory.v1 has none) are refused outright.
    """

    def __init__(self, authenticator: Authenticator) -> None:
        self._authenticator = authenticator

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        method = handler_call_details.method
        handler = continuation(handler_call_details)
        if handler is None or is_open_method(method):
            return handler
        metadata = tuple(handler_call_details.invocation_metadata or ())
        authenticator = self._authenticator
        if handler.request_streaming and not handler.response_streaming and handler.stream_unary is not None:
            stream_behavior = handler.stream_unary

            def wrapped_stream(request_iterator: Any, context: grpc.ServicerContext) -> Any:
                principal = authenticator.authenticate(metadata)
                with principal_context(principal):
                    return stream_behavior(_authorized_stream(principal, method, request_iterator), context)

            return grpc.stream_unary_rpc_method_handler(
                wrapped_stream,
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_unary is None or handler.request_streaming or handler.response_streaming:
            return _refused_streaming_handler(handler, method)
        behavior = handler.unary_unary

        def wrapped(request: Any, context: grpc.ServicerContext) -> Any:
            principal = authenticator.authenticate(metadata)
            authorize(principal, method, request)
            with principal_context(principal):
                return behavior(request, context)

        return grpc.unary_unary_rpc_method_handler(
            wrapped,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )


def _authorized_stream(principal: Any, method: str, requests: Any) -> Any:
    """The messages of a client stream, each authorised before the handler sees it: the first one always
    (it must name the namespace, e.g. ReconcileStreamRequest.header; a first message naming none needs a
    ``"*"`` grant), a later one when it names namespaces of its own; later messages naming none (the
    parts) are covered by the first one's namespace.

    Raises:
        PermissionDenied: from `authorize`, when the message is reached.
    """
    for index, request in enumerate(requests):
        if index == 0 or request_namespaces(request) is not None:
            authorize(principal, method, request)
        yield request


def _refused_streaming_handler(handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
    """Same kind of handler as ``handler``, answering PERMISSION_DENIED (streams are not authorised)."""

    def refuse(_request: Any, context: grpc.ServicerContext) -> Any:
        exc = PermissionDenied(f"method {method} is not open to any token", reason="METHOD_NOT_ALLOWED")
        context.abort_with_status(status_for_exception(exc, _request_id.get()))

    kwargs = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(refuse, **kwargs)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(refuse, **kwargs)
    return grpc.unary_stream_rpc_method_handler(refuse, **kwargs)


# --------------------------------------------------------------------------------------------------
# Security settings


class ServerSetupError(RuntimeError):
    """The server refuses to start: insecure bind, invalid tokens file, unreadable TLS files."""


def build_authenticator(settings: Settings, *, address: str, service_name: str) -> Authenticator:
    """The authenticator ``settings`` ask for, checked against the bind ``address``.

    ``CB_AUTH_MODE=auto`` (default) means tokens when ``CB_TOKENS_FILE`` is set, development mode
    otherwise; development mode (``none``) is allowed only on loopback addresses.

    Raises:
        ServerSetupError: development mode on a non-loopback address, tokens mode without a tokens
            file, or an invalid tokens file.
    """
    mode = settings.auth_mode
    if mode == "auto":
        mode = "tokens" if settings.tokens_file else "none"
    if mode == "none":
        if not is_loopback_address(address):
            raise ServerSetupError(
                f"{service_name}: refusing to listen on {address} without authentication: development "
                "mode (no tokens) binds loopback addresses only (127.0.0.0/8, ::1, localhost). Set "
                "CB_TOKENS_FILE to a tokens file (`cb token create`), or bind 127.0.0.1."
            )
        log.warning("%s: authentication is off (development mode, loopback %s only)", service_name, address)
        return Authenticator(None)
    if not settings.tokens_file:
        raise ServerSetupError(f"{service_name}: CB_AUTH_MODE=tokens needs CB_TOKENS_FILE")
    try:
        store = TokenStore(settings.tokens_file)
    except TokensFileError as exc:
        raise ServerSetupError(f"{service_name}: {exc}") from exc
    log.info("%s: bearer tokens from %s (%d tokens)", service_name, store.path, len(store))
    return Authenticator(store)


def _read_pem(path: str, setting: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError as exc:
        raise ServerSetupError(f"{setting}={path}: cannot be read: {exc.strerror or exc}") from exc


def server_credentials(settings: Settings) -> grpc.ServerCredentials | None:
    """TLS credentials from ``CB_TLS_CERT_FILE``/``CB_TLS_KEY_FILE`` (+ ``CB_TLS_CLIENT_CA_FILE`` = mTLS).

    Returns:
        None when TLS is not configured (plaintext).

    Raises:
        ServerSetupError: only one of certificate and key is set, a client CA without a certificate,
            or a file cannot be read.
    """
    cert, key, client_ca = settings.tls_cert_file, settings.tls_key_file, settings.tls_client_ca_file
    if not cert and not key:
        if client_ca:
            raise ServerSetupError("CB_TLS_CLIENT_CA_FILE needs CB_TLS_CERT_FILE and CB_TLS_KEY_FILE")
        return None
    if not cert or not key:
        raise ServerSetupError("TLS needs both CB_TLS_CERT_FILE and CB_TLS_KEY_FILE")
    pair = (_read_pem(key, "CB_TLS_KEY_FILE"), _read_pem(cert, "CB_TLS_CERT_FILE"))
    roots = _read_pem(client_ca, "CB_TLS_CLIENT_CA_FILE") if client_ca else None
    return grpc.ssl_server_credentials([pair], root_certificates=roots, require_client_auth=roots is not None)


# --------------------------------------------------------------------------------------------------
# Host


class ServiceHost:
    """A built, not yet started server: gRPC server, health, readiness thread, metrics endpoint.

    Use ``start()`` then ``wait()`` (or ``run()``, which also handles SIGTERM/SIGINT); ``stop()`` sets
    every health status to NOT_SERVING, stops the server gracefully and closes the database.
    """

    def __init__(
        self,
        *,
        service_name: str,
        server: grpc.Server,
        port: int,
        health_servicer: health.HealthServicer,
        health_services: Sequence[str],
        database: ReadinessProbe,
        metrics_port: int,
        readiness_interval: float,
        authenticator: Authenticator | None = None,
        tls: bool = False,
        metrics_host: str = "127.0.0.1",
    ) -> None:
        self.service_name = service_name
        self.metrics_host = metrics_host
        self.authenticator = authenticator if authenticator is not None else Authenticator(None)
        self.tls = tls
        self.server = server
        self._port = port
        self.health = health_servicer
        self.health_services = tuple(health_services)
        self.database = database
        self.metrics_port = metrics_port
        self._readiness_interval = readiness_interval
        self._stopping = threading.Event()
        self._stopped = threading.Event()
        self._stop_lock = threading.Lock()
        self._ready: bool | None = None
        self._readiness_thread: threading.Thread | None = None
        self._metrics_server: Any = None
        self._started = False

    @property
    def port(self) -> int:
        """The TCP port actually bound (useful when the address ended in ``:0``)."""
        return self._port

    @property
    def ready(self) -> bool:
        """Last readiness result (False before the first check)."""
        return bool(self._ready)

    def start(self) -> None:
        """Starts the metrics endpoint (unless port 0), the gRPC server and the readiness thread.

        Health stays NOT_SERVING until ``database.ensure_ready()`` first returns True.
        """
        if self._started:
            return
        self._started = True
        self._start_metrics_endpoint()
        self.server.start()
        self._readiness_thread = threading.Thread(
            target=self._readiness_loop, name=f"{self.service_name}-readiness", daemon=True
        )
        self._readiness_thread.start()
        log.info("%s listening on port %d", self.service_name, self._port)

    def _start_metrics_endpoint(self) -> None:
        if self.metrics_port <= 0:
            return
        try:
            self._metrics_server, _thread = start_http_server(self.metrics_port, addr=self.metrics_host)
        except OSError as exc:
            log.warning(
                "%s: metrics endpoint on port %d not started: %s", self.service_name, self.metrics_port, exc
            )
            return
        log.info(
            "%s: Prometheus metrics on http://%s:%d/metrics", self.service_name, self.metrics_host, self.metrics_port
        )

    def _set_serving(self, ready: bool) -> None:
        if self._stopping.is_set() or ready == self._ready:
            return
        status = (
            health_pb2.HealthCheckResponse.SERVING if ready else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for name in self.health_services:
            self.health.set(name, status)
        self._ready = ready
        log.log(
            logging.INFO if ready else logging.WARNING,
            "%s: database %s, health %s",
            self.service_name,
            "ready" if ready else "not ready",
            "SERVING" if ready else "NOT_SERVING",
        )

    def check_readiness(self) -> bool:
        """Runs one readiness check now and updates the health statuses; returns the result."""
        try:
            ready = bool(self.database.ensure_ready())
        except Exception:  # the protocol says it never raises; a bug there must not kill the thread
            log.exception("%s: database.ensure_ready() raised", self.service_name)
            ready = False
        self._set_serving(ready)
        return ready

    def _readiness_loop(self) -> None:
        while not self._stopping.is_set():
            self.check_readiness()
            self._stopping.wait(self._readiness_interval)

    def wait(self, timeout: float | None = None) -> bool:
        """Blocks until the server has stopped (or ``timeout`` seconds passed); True when stopped."""
        return self._stopped.wait(timeout) if timeout is not None else self._wait_forever()

    def _wait_forever(self) -> bool:
        # Wake up regularly so signal handlers run on the main thread.
        while not self._stopped.wait(0.5):
            pass
        return True

    def stop(self, grace_seconds: float = 10.0) -> None:
        """Graceful stop: NOT_SERVING first, then in-flight RPCs get ``grace_seconds`` to finish.

        Safe to call more than once and from any thread; returns when the server has stopped.
        """
        with self._stop_lock:
            if self._stopped.is_set():
                return
            self._stopping.set()
            self.health.enter_graceful_shutdown()
            log.info("%s: stopping (grace %.1f s)", self.service_name, grace_seconds)
            self.server.stop(grace_seconds).wait()
            if self._readiness_thread is not None:
                self._readiness_thread.join(timeout=max(self._readiness_interval, 1.0) + 5.0)
            if self._metrics_server is not None:
                self._metrics_server.shutdown()
                self._metrics_server.server_close()
                self._metrics_server = None
            try:
                self.database.close()
            except Exception:
                log.exception("%s: database.close() raised", self.service_name)
            self._stopped.set()
            log.info("%s: stopped", self.service_name)

    def run(self, grace_seconds: float = 10.0) -> None:
        """Starts, then blocks until SIGTERM/SIGINT (main thread only) or ``stop()``; stops gracefully."""
        self.start()
        if threading.current_thread() is threading.main_thread():

            def on_signal(signum: int, _frame: object) -> None:
                log.info("%s: received %s", self.service_name, signal.Signals(signum).name)
                threading.Thread(target=self.stop, args=(grace_seconds,), daemon=True).start()

            signal.signal(signal.SIGTERM, on_signal)
            signal.signal(signal.SIGINT, on_signal)
        try:
            self.wait()
        finally:
            self.stop(grace_seconds)


def build_server(
    settings: Settings,
    *,
    service_name: str,
    address: str,
    metrics_port: int,
    database: ReadinessProbe,
    register: Callable[[grpc.Server], list[str]],
    max_workers: int = 16,
    readiness_interval: float = READINESS_INTERVAL_SECONDS,
    metrics_registry: CollectorRegistry = REGISTRY,
) -> ServiceHost:
    """Builds (does not start) a sync gRPC server with interceptors, health, reflection and metrics.

    Args:
        settings: the process settings; auth (``auth_mode``, ``tokens_file``) and TLS
            (``tls_cert_file``, ``tls_key_file``, ``tls_client_ca_file``) come from here.
        service_name: ``"ingest_service"`` or ``"query_service"``; used in logs and thread names.
        address: ``host:port`` to bind (TLS when configured); port 0 picks a free port (see
            ``ServiceHost.port``). Without a tokens file only loopback addresses are accepted.
        metrics_port: Prometheus HTTP port; 0 disables it. A port already in use is logged and skipped.
        database: readiness signal; ``ensure_ready()`` is called every ``readiness_interval`` seconds.
        register: adds the servicers to the server and returns their full service names
            (e.g. ``["memory.v1.SourceService"]``) for health and reflection.
        max_workers: threads handling RPCs concurrently.
        readiness_interval: seconds between readiness checks.
        metrics_registry: registry of the RPC metrics (the endpoint always serves the default registry).

    Returns:
        A `ServiceHost`; health reports NOT_SERVING for ``""`` and every registered service until the
        database is ready.

    Raises:
        ServerSetupError: refused configuration (see `build_authenticator`, `server_credentials`).
        RuntimeError: the address could not be bound.
    """
    authenticator = build_authenticator(settings, address=address, service_name=service_name)
    credentials = server_credentials(settings)
    metrics = _rpc_metrics(metrics_registry)
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix=service_name),
        interceptors=(
            _RequestIdLoggingInterceptor(service_name),
            _MetricsInterceptor(metrics),
            _ErrorMappingInterceptor(service_name),
            _AuthInterceptor(authenticator),
        ),
        options=SERVER_OPTIONS,
    )
    service_names = list(register(server))

    health_servicer = health.HealthServicer(experimental_non_blocking=True)
    health_services = ["", *service_names]
    for name in health_services:
        health_servicer.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)

    reflection.enable_server_reflection(
        (*service_names, health.SERVICE_NAME, reflection.SERVICE_NAME),
        server,
    )

    try:
        if credentials is None:
            port = server.add_insecure_port(address)
        else:
            port = server.add_secure_port(address, credentials)
            log.info(
                "%s: TLS on %s%s",
                service_name,
                address,
                " (client certificates required)" if settings.tls_client_ca_file else "",
            )
    except RuntimeError as exc:
        raise RuntimeError(f"{service_name}: cannot bind {address}: {exc}") from exc
    if port == 0:
        raise RuntimeError(f"{service_name}: cannot bind {address}")

    return ServiceHost(
        service_name=service_name,
        server=server,
        port=port,
        health_servicer=health_servicer,
        health_services=health_services,
        database=database,
        metrics_port=metrics_port,
        readiness_interval=readiness_interval,
        authenticator=authenticator,
        tls=credentials is not None,
        # Metrics follow the gRPC bind: a loopback service exposes them on loopback only.
        metrics_host="127.0.0.1" if is_loopback_address(address) else "0.0.0.0",
    )
