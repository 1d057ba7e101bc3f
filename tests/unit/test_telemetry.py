"""Tracing and structured logs (`common.grpc.telemetry`) on a real server over real channels.

The tracer provider here is the test's own (an in-memory exporter), handed to `build_server` and to the
client interceptor, so nothing global of OpenTelemetry is changed for the other tests.
"""

from __future__ import annotations

import io
import json
import logging
import sys
from collections.abc import Iterator

import grpc
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from common.grpc.server import ServiceHost
from common.grpc.server import build_server
from common.grpc.telemetry import TraceContextLogFilter
from common.grpc.telemetry import configure_logging
from common.grpc.telemetry import configure_tracing
from common.grpc.telemetry import traced_channel
from common.kernel.config import Settings
from common.kernel.request_context import request_id_var
from memory_service_grpc_client.memory.v1 import source_service_pb2
from memory_service_grpc_client.memory.v1 import source_service_pb2_grpc

CALLER_TRACE = "0af7651916cd43dd8448eb211c80319c"
CALLER_SPAN = "b7ad6b7169203331"


class Sources(source_service_pb2_grpc.SourceServiceServicer):  # type: ignore[misc]
    """Records the trace id the handler runs in and the traceparent it received; logs one line."""

    def __init__(self) -> None:
        self.trace_ids: list[str] = []
        self.traceparents: list[str] = []

    def GetSource(
        self, request: source_service_pb2.GetSourceRequest, context: grpc.ServicerContext
    ) -> source_service_pb2.GetSourceResponse:
        self.traceparents.append(dict(context.invocation_metadata()).get("traceparent", ""))
        self.trace_ids.append(trace.format_trace_id(trace.get_current_span().get_span_context().trace_id))
        logging.getLogger("memory.test").info("reading %s", request.natural_key)
        return source_service_pb2.GetSourceResponse()


class AlwaysReady:
    def ensure_ready(self) -> bool:
        return True

    def close(self) -> None:
        pass


@pytest.fixture
def traced() -> Iterator[tuple[str, Sources, TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    sources = Sources()

    def register(server: grpc.Server) -> list[str]:
        source_service_pb2_grpc.add_SourceServiceServicer_to_server(sources, server)
        return ["memory.v1.SourceService"]

    host: ServiceHost = build_server(
        Settings(),
        service_name="traced_service",
        address="127.0.0.1:0",
        metrics_port=0,
        database=AlwaysReady(),
        register=register,
        tracer_provider=provider,
    )
    host.start()
    try:
        yield f"127.0.0.1:{host.port}", sources, provider, exporter
    finally:
        host.stop(0)


def test_the_server_continues_the_callers_w3c_trace(
    traced: tuple[str, Sources, TracerProvider, InMemorySpanExporter],
) -> None:
    address, sources, _provider, exporter = traced
    with grpc.insecure_channel(address) as channel:
        source_service_pb2_grpc.SourceServiceStub(channel).GetSource(
            source_service_pb2.GetSourceRequest(natural_key="doc:x"),
            metadata=(("traceparent", f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"),),
            timeout=5,
        )
    assert sources.trace_ids == [CALLER_TRACE]
    (span,) = [s for s in exporter.get_finished_spans() if s.name == "/memory.v1.SourceService/GetSource"]
    assert trace.format_trace_id(span.context.trace_id) == CALLER_TRACE
    assert span.parent is not None and trace.format_span_id(span.parent.span_id) == CALLER_SPAN
    assert span.kind == trace.SpanKind.SERVER


def test_the_client_interceptor_sends_the_current_trace_as_traceparent(
    traced: tuple[str, Sources, TracerProvider, InMemorySpanExporter],
) -> None:
    address, sources, provider, _exporter = traced
    with (
        grpc.insecure_channel(address) as plain,
        provider.get_tracer("test").start_as_current_span("agent task") as parent,
    ):
        channel = traced_channel(plain, provider)
        source_service_pb2_grpc.SourceServiceStub(channel).GetSource(
            source_service_pb2.GetSourceRequest(natural_key="doc:x"), timeout=5
        )
    parent_trace = trace.format_trace_id(parent.get_span_context().trace_id)
    assert sources.traceparents[0].startswith(f"00-{parent_trace}-")
    assert sources.trace_ids == [parent_trace]


def test_tracing_is_off_without_an_endpoint() -> None:
    assert configure_tracing(Settings(otlp_endpoint=""), "query_service") is None
    with grpc.insecure_channel("127.0.0.1:1") as channel:
        assert traced_channel(channel, None) is channel


def test_json_log_lines_carry_the_request_id_and_the_trace_id() -> None:
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    stream = io.StringIO()
    try:
        configure_logging("info", "json")
        (handler,) = root.handlers
        assert isinstance(handler, logging.StreamHandler)
        handler.setStream(stream)
        provider = TracerProvider()
        token = request_id_var.set("req-42")
        try:
            with provider.get_tracer("test").start_as_current_span("call") as span:
                logging.getLogger("memory.rpc").info("served %s", "GetSource")
                logging.getLogger("memory.rpc").debug("not at INFO")
        finally:
            request_id_var.reset(token)
        logging.getLogger("memory.rpc").warning("outside")
    finally:
        root.handlers[:] = saved_handlers
        root.setLevel(saved_level)
    first, second = (json.loads(line) for line in stream.getvalue().splitlines())
    assert first["message"] == "served GetSource" and first["level"] == "INFO"
    assert first["logger"] == "memory.rpc" and first["request_id"] == "req-42"
    assert first["trace_id"] == trace.format_trace_id(span.get_span_context().trace_id)
    assert first["span_id"] == trace.format_span_id(span.get_span_context().span_id)
    assert first["time"].endswith("+00:00") and first["time"][:4].isdigit()  # ISO 8601, UTC
    assert second["message"] == "outside" and second["request_id"] == "-" and second["trace_id"] == "-"


def test_the_log_filter_without_a_span_marks_ids_absent() -> None:
    record = logging.LogRecord("memory.rpc", logging.INFO, __file__, 1, "x", None, None)
    assert TraceContextLogFilter().filter(record)
    assert (record.request_id, record.trace_id, record.span_id) == ("-", "-", "-")  # type: ignore[attr-defined]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(("stderr", "expect_json"), [(_Terminal(), False), (io.StringIO(), True)])
def test_auto_log_format_is_text_on_a_terminal_and_json_otherwise(
    monkeypatch: pytest.MonkeyPatch, stderr: io.StringIO, expect_json: bool
) -> None:
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    monkeypatch.setattr(sys, "stderr", stderr)
    monkeypatch.delenv("CB_LOG_FORMAT", raising=False)
    try:
        configure_logging("info", Settings().log_format)
        logging.getLogger("memory.rpc").info("served")
    finally:
        root.handlers[:] = saved_handlers
        root.setLevel(saved_level)
    line = stderr.getvalue().strip()
    if expect_json:
        assert json.loads(line)["message"] == "served"
    else:
        assert " INFO memory.rpc " in line and line.endswith("served"), line
