"""The server interceptors every RPC passes through.

`server_interceptors` returns them in the order gRPC runs them (the first one sees the call first):

0. tracing, only when tracing is on (`common.grpc.telemetry`): the OpenTelemetry server span, continuing
   the caller's W3C ``traceparent``, so everything below (logs, SQL spans) belongs to the call's trace;
1. request id + logging: the request id comes from metadata ``x-request-id`` (or is generated), is kept
   in `common.kernel.request_context.request_id_var` for the duration of the call, echoed in the
   trailing metadata and logged (logger ``memory.rpc``) with method, code and latency (the log filter
   of `common.grpc.telemetry` adds the request id and trace id to every record);
2. metrics: the standard ``grpc_server_*`` metrics of py-grpc-prometheus (`common.grpc.metrics`);
3. error mapping: a domain error raised by the handler becomes its `google.rpc.Status`
   (`common.grpc.status_mapping`); anything else becomes INTERNAL and its traceback is logged with the
   request id (logger ``memory.server``);
4. auth, the first one to look at a request, before any servicer code: bearer token -> `Principal`
   (UNAUTHENTICATED otherwise), the right `METHOD_RIGHTS` names on the request's namespace(s)
   (PERMISSION_DENIED otherwise; methods absent from the table are denied), then the principal is
   `current_principal()` for the handler. It sits inside the three above so that refusals are logged
   with their request id, counted, and mapped like every other domain error. Health and reflection
   stay open. A request protobuf could not parse (invalid UTF-8, nesting deeper than 100) is
   INVALID_ARGUMENT naming the problem right after authentication (`common.grpc.request_checks`);
5. request checks (`common.grpc.request_checks`), innermost, once the caller is authorised:
   out-of-range Timestamps and values the database cannot store (U+0000, non-finite numbers) are
   INVALID_ARGUMENT naming their field before any handler runs (batch items are left to their
   validators, so a bad item fails alone).

The interceptors wrap unary-unary and client-streaming (stream-unary, e.g.
SnapshotService.ReconcileStream) handlers; the auth interceptor authorises a client stream message by
message (`_authorized_stream`). Other streaming handlers (health Watch, reflection) pass through
untouched, except that the auth interceptor refuses protected ones (memory.v1 has none).
"""

from __future__ import annotations

import logging
import re
import time
import traceback
import uuid
from collections.abc import Callable
from collections.abc import Iterator
from typing import Any

import grpc

from common.auth.authentication import Authenticator
from common.auth.principals import Principal
from common.auth.principals import authorize
from common.auth.principals import is_open_method
from common.auth.principals import principal_context
from common.auth.principals import request_namespaces
from common.grpc.request_checks import checked_stream
from common.grpc.request_checks import raise_if_invalid
from common.grpc.request_checks import raise_if_unparsed
from common.grpc.request_checks import tolerant_deserializer
from common.grpc.status_mapping import grpc_code_for
from common.grpc.status_mapping import status_for_exception
from common.kernel.errors import PermissionDenied
from common.kernel.request_context import request_id_var

__all__ = ["REQUEST_ID_METADATA_KEY", "server_interceptors"]

log = logging.getLogger("memory.server")
rpc_log = logging.getLogger("memory.rpc")

REQUEST_ID_METADATA_KEY = "x-request-id"
_QUIET_METHOD_PREFIXES = ("/grpc.health.v1.Health/", "/grpc.reflection.")
_VALID_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:/+=-]{1,128}$")

_Behavior = Callable[[Any, grpc.ServicerContext], Any]


def server_interceptors(
    service_name: str,
    metrics: grpc.ServerInterceptor,
    authenticator: Authenticator,
    tracing: grpc.ServerInterceptor | None = None,
) -> tuple[grpc.ServerInterceptor, ...]:
    """The interceptors of a server, outermost first (the order of the module docstring).

    Args:
        service_name: ``"ingest_service"`` or ``"query_service"``; used in log lines.
        metrics: the metrics interceptor (`common.grpc.metrics.grpc_metrics_interceptor`).
        authenticator: tokens or development mode (`common.grpc.security.build_authenticator`).
        tracing: the OpenTelemetry server interceptor (`common.grpc.telemetry`), None when tracing is off.
    """
    chain = (
        _RequestIdLoggingInterceptor(service_name),
        metrics,
        _ErrorMappingInterceptor(service_name),
        _AuthInterceptor(authenticator),
        _RequestCheckInterceptor(),
    )
    return chain if tracing is None else (tracing, *chain)


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


def _observed_call(
    behavior: _Behavior, request: Any, context: grpc.ServicerContext, observe: Callable[[float, str], None]
) -> Any:
    """Runs ``behavior``, then calls ``observe(seconds, code name)`` whether it returned or raised."""
    started = time.perf_counter()
    failed = False
    try:
        return behavior(request, context)
    except BaseException:
        failed = True
        raise
    finally:
        observe(time.perf_counter() - started, _code_name(context, failed))


class _UnaryInterceptor(grpc.ServerInterceptor):
    """Base: wraps the behaviour of unary-unary and stream-unary handlers (a stream-unary behaviour takes
    the request iterator where a unary one takes the request) with `_wrap`, and of unary-stream handlers
    (WatchChanges) with `_wrap_server_stream` (default: unchanged); other handlers pass through."""

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(handler_call_details)
        if handler is not None and handler.unary_stream is not None and not handler.request_streaming:
            return grpc.unary_stream_rpc_method_handler(
                self._wrap_server_stream(handler.unary_stream, handler_call_details),
                request_deserializer=self._deserializer(handler),
                response_serializer=handler.response_serializer,
            )
        if handler is None or handler.response_streaming:
            return handler
        if handler.request_streaming and handler.stream_unary is not None:
            return grpc.stream_unary_rpc_method_handler(
                self._wrap(handler.stream_unary, handler_call_details),
                request_deserializer=self._deserializer(handler),
                response_serializer=handler.response_serializer,
            )
        if handler.request_streaming or handler.unary_unary is None:
            return handler
        behavior = self._wrap(handler.unary_unary, handler_call_details)
        return grpc.unary_unary_rpc_method_handler(
            behavior,
            request_deserializer=self._deserializer(handler),
            response_serializer=handler.response_serializer,
        )

    def _wrap(self, behavior: _Behavior, details: grpc.HandlerCallDetails) -> _Behavior:
        raise NotImplementedError

    def _wrap_server_stream(self, behavior: _Behavior, details: grpc.HandlerCallDetails) -> _Behavior:
        """The behaviour of a unary-stream handler (returns the response iterator); unchanged by default."""
        return behavior

    def _deserializer(self, handler: grpc.RpcMethodHandler) -> Any:
        return handler.request_deserializer


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

        service_name = self._service_name

        def wrapped(request: Any, context: grpc.ServicerContext) -> Any:
            request_id = incoming if _VALID_REQUEST_ID.match(incoming) else uuid.uuid4().hex
            token = request_id_var.set(request_id)

            def log_call(seconds: float, code: str) -> None:
                trailing = tuple(context.trailing_metadata() or ())
                context.set_trailing_metadata(trailing + ((REQUEST_ID_METADATA_KEY, request_id),))
                rpc_log.log(
                    level_ok if code == "OK" else logging.WARNING,
                    "%s %s code=%s latency_ms=%.1f request_id=%s",
                    service_name,
                    method,
                    code,
                    seconds * 1000.0,
                    request_id,
                )

            try:
                return _observed_call(behavior, request, context, log_call)
            finally:
                request_id_var.reset(token)

        return wrapped

    def _wrap_server_stream(self, behavior: _Behavior, details: grpc.HandlerCallDetails) -> _Behavior:
        """A response stream runs in the request id's context and is logged once, when it ends."""
        method = details.method
        incoming = next(
            (
                v
                for k, v in details.invocation_metadata or ()
                if k == REQUEST_ID_METADATA_KEY and isinstance(v, str)
            ),
            "",
        )
        service_name = self._service_name

        def wrapped(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            request_id = incoming if _VALID_REQUEST_ID.match(incoming) else uuid.uuid4().hex
            token = request_id_var.set(request_id)
            started = time.perf_counter()
            failed = False
            cancelled = False
            try:
                yield from behavior(request, context)
            except GeneratorExit:  # the client cancelled or went away
                cancelled = True
                raise
            except BaseException:
                failed = True
                raise
            finally:
                code = "CANCELLED" if cancelled else _code_name(context, failed)
                rpc_log.log(
                    logging.INFO if code in ("OK", "CANCELLED") else logging.WARNING,
                    "%s %s code=%s latency_ms=%.1f request_id=%s",
                    service_name,
                    method,
                    code,
                    (time.perf_counter() - started) * 1000.0,
                    request_id,
                )
                request_id_var.reset(token)

        return wrapped


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
                request_id = request_id_var.get()
                if grpc_code_for(exc) is None:
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

    def _wrap_server_stream(self, behavior: _Behavior, details: grpc.HandlerCallDetails) -> _Behavior:
        """A response stream's errors, raised while it runs, end it with their status (as `_wrap` maps
        a unary call's)."""

        def wrapped(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            try:
                yield from behavior(request, context)
            except Exception as exc:
                error = exc

                def fail(_request: Any, _context: grpc.ServicerContext) -> None:
                    raise error

                self._wrap(fail, details)(request, context)
                raise  # not reached: the unary wrapper aborts with the mapped status

        return wrapped


class _RequestCheckInterceptor(_UnaryInterceptor):
    """Refuses what no handler should see (`common.grpc.request_checks`), innermost, once the caller is
    authorised: out-of-range Timestamps and values the database cannot store (for a client stream
    message by message). Its deserializer turns bytes protobuf cannot parse into an `UnparsedRequest`,
    which the auth interceptor refuses right after authentication (it cannot be authorised)."""

    def _deserializer(self, handler: grpc.RpcMethodHandler) -> Any:
        return tolerant_deserializer(handler.request_deserializer)

    def _wrap(self, behavior: _Behavior, details: grpc.HandlerCallDetails) -> _Behavior:
        def wrapped(request: Any, context: grpc.ServicerContext) -> Any:
            if isinstance(request, Iterator):
                return behavior(checked_stream(request), context)
            raise_if_invalid(request)
            return behavior(request, context)

        return wrapped

    def _wrap_server_stream(self, behavior: _Behavior, details: grpc.HandlerCallDetails) -> _Behavior:
        def wrapped(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            raise_if_invalid(request)
            yield from behavior(request, context)

        return wrapped


class _AuthInterceptor(grpc.ServerInterceptor):
    """Authenticates and authorises every RPC except health and reflection (see `common.auth.principals`).

    Unary-unary, stream-unary and unary-stream behaviours raise `Unauthenticated` / `PermissionDenied` for
    the error-mapping interceptor; bidirectional streams (memory.v1 has none) are refused outright.
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
        if handler.unary_stream is not None and not handler.request_streaming:
            stream_response = handler.unary_stream

            def wrapped_server_stream(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
                principal = authenticator.authenticate(metadata)
                raise_if_unparsed(request)
                authorize(principal, method, request)
                with principal_context(principal):
                    yield from stream_response(request, context)

            return grpc.unary_stream_rpc_method_handler(
                wrapped_server_stream,
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_unary is None or handler.request_streaming or handler.response_streaming:
            return _refused_streaming_handler(handler, method)
        behavior = handler.unary_unary

        def wrapped(request: Any, context: grpc.ServicerContext) -> Any:
            principal = authenticator.authenticate(metadata)
            raise_if_unparsed(request)
            authorize(principal, method, request)
            with principal_context(principal):
                return behavior(request, context)

        return grpc.unary_unary_rpc_method_handler(
            wrapped,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )


def _authorized_stream(principal: Principal, method: str, requests: Any) -> Iterator[Any]:
    """The messages of a client stream, each authorised before the handler sees it: the first one always
    (it must name the namespace, e.g. ReconcileStreamRequest.header; a first message naming none needs a
    ``"*"`` grant), a later one when it names namespaces of its own; later messages naming none (the
    parts) are covered by the first one's namespace.

    Raises:
        PermissionDenied: from `authorize`, when the message is reached.
    """
    for index, request in enumerate(requests):
        raise_if_unparsed(request)
        if index == 0 or request_namespaces(request) is not None:
            authorize(principal, method, request)
        yield request


def _refused_streaming_handler(handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
    """Same kind of handler as ``handler``, answering PERMISSION_DENIED (streams are not authorised)."""

    def refuse(_request: Any, context: grpc.ServicerContext) -> Any:
        exc = PermissionDenied(f"method {method} is not open to any token", reason="METHOD_NOT_ALLOWED")
        context.abort_with_status(status_for_exception(exc, request_id_var.get()))

    kwargs = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(refuse, **kwargs)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(refuse, **kwargs)
    return grpc.unary_stream_rpc_method_handler(refuse, **kwargs)
