"""`cb serve query` with CB_OTLP_ENDPOINT exports its traces by OTLP/gRPC to a collector (a real gRPC
server implementing the OTLP TraceService, in this process), continuing the caller's W3C traceparent,
with the SQL of the call as child spans; its JSON log line of the call carries the same trace id."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

from memory_service_grpc_client import wait_for_serving
from memory_service_grpc_client.memory.v1 import source_service_pb2
from memory_service_grpc_client.memory.v1 import source_service_pb2_grpc

pytestmark = pytest.mark.e2e

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"


class Collector(trace_service_pb2_grpc.TraceServiceServicer):  # type: ignore[misc]
    """Keeps every span it receives: (trace id hex, parent span id hex, name, attributes)."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, str, str, dict[str, Any]]] = []
        self.service_names: set[str] = set()
        self.lock = threading.Lock()

    def Export(
        self, request: trace_service_pb2.ExportTraceServiceRequest, context: grpc.ServicerContext
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        with self.lock:
            for resource_spans in request.resource_spans:
                for attribute in resource_spans.resource.attributes:
                    if attribute.key == "service.name":
                        self.service_names.add(attribute.value.string_value)
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        attributes = {a.key: a.value.string_value for a in span.attributes}
                        self.spans.append(
                            (span.trace_id.hex(), span.parent_span_id.hex(), span.name, attributes)
                        )
        return trace_service_pb2.ExportTraceServiceResponse()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_served_calls_are_exported_with_the_callers_trace_and_their_sql(tmp_path: Path) -> None:
    collector = Collector()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(collector, server)
    collector_port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    query_addr = f"127.0.0.1:{_free_port()}"
    environment = {
        **os.environ,
        "CB_OTLP_ENDPOINT": f"http://127.0.0.1:{collector_port}",
        "CB_QUERY_METRICS_PORT": "0",
        "CB_LOG_FORMAT": "json",
    }
    environment.pop("CB_TOKENS_FILE", None)
    cb = str(Path(sys.executable).with_name("cb"))
    log_path = tmp_path / "query.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [cb, "--query-addr", query_addr, "serve", "query"], env=environment, stderr=log, stdout=log
        )
    try:
        assert wait_for_serving(query_addr, timeout=120), log_path.read_text()
        with grpc.insecure_channel(query_addr) as channel, pytest.raises(grpc.RpcError) as missing:
            source_service_pb2_grpc.SourceServiceStub(channel).GetSource(
                source_service_pb2.GetSourceRequest(namespace="tracing-test", natural_key="doc:none"),
                metadata=(("traceparent", f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"),),
                timeout=60,
            )
        assert missing.value.code() == grpc.StatusCode.NOT_FOUND
    finally:
        process.send_signal(signal.SIGTERM)  # graceful stop; the provider flushes its spans at exit
        process.wait(timeout=60)
        server.stop(0)
    ours = [span for span in collector.spans if span[0] == CALLER_TRACE]
    rpc = [span for span in ours if span[2] == "/memory.v1.SourceService/GetSource"]
    assert len(rpc) == 1 and rpc[0][1] == CALLER_SPAN, collector.spans
    sql = [span for span in ours if span[3].get("db.system") == "postgresql" or "db.statement" in span[3]]
    assert sql, ours  # the call's statements are spans of the caller's trace
    assert collector.service_names == {"query_service"}
    lines = [json.loads(line) for line in log_path.read_text().splitlines() if line.startswith("{")]
    (logged,) = [line for line in lines if "GetSource code=NOT_FOUND" in line["message"]]
    assert logged["trace_id"] == CALLER_TRACE and logged["level"] == "WARNING"
