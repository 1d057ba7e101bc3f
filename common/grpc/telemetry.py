"""Traces (OpenTelemetry) and structured logs of a service process.

**Traces** are off by default. `configure_tracing` turns them on when ``CB_OTLP_ENDPOINT`` is set
(``http://collector:4317``): an SDK `TracerProvider` named after the service, exporting by OTLP/gRPC in
batches, installed as the process's global provider; psycopg is instrumented
(``opentelemetry-instrumentation-psycopg``: a span per statement, child of the RPC's span). A server
built afterwards (`common.grpc.server.build_server`) gets the OpenTelemetry gRPC server interceptor
(``opentelemetry-instrumentation-grpc``) outermost: it continues the caller's W3C ``traceparent``
(metadata) or starts a trace, so the spans of the call, of its SQL and the log lines share one trace
id. Clients add the client interceptor with `traced_channel` (the tooling passes it to
`memory_service_grpc_client` as the channel wrapper, `memory_service_tools.cli.cli_state.traced`), which sends the
current trace as ``traceparent``.

**Logs** (`configure_logging`): one JSON object per line (``python-json-logger``) with ``time`` (ISO 8601, UTC),
``level``, ``logger``, ``message``, ``request_id`` (the RPC's ``x-request-id``, ``-`` outside one),
``trace_id`` and ``span_id`` (``-`` when tracing is off); ``CB_LOG_FORMAT=text`` prints the same
fields as plain text, and ``auto`` (the default) picks text when stderr is a terminal, JSON otherwise. The
level is ``CB_LOG_LEVEL`` (``cb serve --log-level`` overrides it).
"""

from __future__ import annotations

import logging
import sys
import threading

import grpc
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter
from pythonjsonlogger.json import JsonFormatter

from common.kernel.config import Settings
from common.kernel.request_context import request_id_var

__all__ = [
    "TraceContextLogFilter",
    "configure_logging",
    "configure_tracing",
    "configured_tracer_provider",
    "traced_channel",
    "tracing_server_interceptor",
]

log = logging.getLogger("memory.server")

_state_lock = threading.Lock()
_configured: TracerProvider | None = None


def configure_tracing(
    settings: Settings, service_name: str, *, exporter: SpanExporter | None = None
) -> TracerProvider | None:
    """Turns tracing on for this process when ``settings.otlp_endpoint`` is set (or ``exporter`` given).

    Idempotent: the first provider configured stays (OpenTelemetry allows one global provider).

    Args:
        settings: reads ``otlp_endpoint`` (``http://host:4317``: plaintext; ``https://``: TLS).
        service_name: the ``service.name`` resource attribute (``ingest_service``, ``query_service``).
        exporter: where spans go instead of OTLP (tests: an in-memory exporter).

    Returns:
        The provider now installed, or None when tracing stays off.
    """
    global _configured
    if not settings.otlp_endpoint and exporter is None:
        return _configured
    with _state_lock:
        if _configured is not None:
            return _configured
        if exporter is None:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

            endpoint = settings.otlp_endpoint
            exporter = OTLPSpanExporter(endpoint=endpoint, insecure=endpoint.startswith("http://"))
        provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
        provider.add_span_processor(BatchSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor

        PsycopgInstrumentor().instrument(tracer_provider=provider, skip_dep_check=True)
        _configured = provider
        log.info("%s: tracing on, spans exported to %s", service_name, settings.otlp_endpoint or exporter)
        return provider


def configured_tracer_provider() -> TracerProvider | None:
    """The provider of `configure_tracing`, or None while tracing is off."""
    return _configured


def tracing_server_interceptor(provider: TracerProvider | None) -> grpc.ServerInterceptor | None:
    """The OpenTelemetry gRPC server interceptor on ``provider`` (None: tracing off, no interceptor)."""
    if provider is None:
        return None
    from opentelemetry.instrumentation.grpc import server_interceptor

    interceptor: grpc.ServerInterceptor = server_interceptor(tracer_provider=provider)
    return interceptor


def traced_channel(channel: grpc.Channel, provider: TracerProvider | None) -> grpc.Channel:
    """``channel`` with the OpenTelemetry gRPC client interceptor on ``provider``: a client span per call,
    sent as W3C ``traceparent`` metadata; ``channel`` itself when ``provider`` is None (tracing off)."""
    if provider is None:
        return channel
    from opentelemetry.instrumentation.grpc import client_interceptor
    from opentelemetry.instrumentation.grpc.grpcext import intercept_channel

    traced: grpc.Channel = intercept_channel(channel, client_interceptor(tracer_provider=provider))
    return traced


class TraceContextLogFilter(logging.Filter):
    """Adds ``request_id`` (``-`` outside an RPC), ``trace_id`` and ``span_id`` (hex, ``-`` without a
    recording span) to every record."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id_var.get() or "-"
        context = trace.get_current_span().get_span_context()
        if context.is_valid:
            record.trace_id = trace.format_trace_id(context.trace_id)
            record.span_id = trace.format_span_id(context.span_id)
        else:
            record.trace_id = record.span_id = "-"
        return True


_FIELDS = ("levelname", "name", "message", "request_id", "trace_id", "span_id")


def configure_logging(level: str, log_format: str = "json") -> None:
    """Replaces the root logger's handlers with one stderr handler in ``log_format``.

    Args:
        level: ``DEBUG``, ``INFO``, ``WARNING``, ``ERROR`` (any case).
        log_format: ``json`` (one object per line), ``text``, or ``auto``: text when stderr is a
            terminal (a person reads it), JSON otherwise (a collector parses it).

    Raises:
        ValueError: an unknown level or format.
    """
    if log_format not in ("json", "text", "auto"):
        raise ValueError(f"log format {log_format!r}: expected json, text or auto")
    if log_format == "auto":
        log_format = "text" if sys.stderr.isatty() else "json"
    handler = logging.StreamHandler()
    handler.addFilter(TraceContextLogFilter())
    formatter: logging.Formatter
    if log_format == "json":
        formatter = JsonFormatter(
            " ".join(f"%({name})s" for name in _FIELDS),
            rename_fields={"levelname": "level", "name": "logger"},
            timestamp="time",  # ISO 8601, UTC
            json_ensure_ascii=False,
        )
    else:
        formatter = logging.Formatter(
            "%(asctime)s %(levelname)s %(name)s [%(request_id)s %(trace_id)s] %(message)s"
        )
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
