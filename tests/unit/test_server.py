"""`build_server` over a real channel: error mapping (common.grpc.status_mapping), request ids and
metrics (common.grpc.interceptors, common.grpc.metrics), health (common.grpc.readiness), reflection.

The servicer is a tiny SourceService whose GetSource behaviour depends on the natural key; the
"database" is only the readiness signal, switched by the test.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2
from grpc_health.v1 import health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2
from grpc_reflection.v1alpha import reflection_pb2_grpc
from grpc_status import rpc_status

import memory_service_grpc_client as client
from common.grpc.readiness import LIVENESS_SERVICE
from common.grpc.server import ServiceHost
from common.grpc.server import build_server
from common.kernel.config import Settings
from common.kernel.errors import FieldViolation
from common.kernel.errors import InvalidArgument
from common.kernel.errors import NotFound
from common.kernel.errors import Unavailable
from common.kernel.request_context import current_request_id
from memory_service_grpc_client import error_from_rpc
from memory_service_grpc_client import field_violations
from memory_service_grpc_client import format_rpc_error
from memory_service_grpc_client import make_channel
from memory_service_grpc_client import rpc_failure
from memory_service_grpc_client import wait_for_serving
from memory_service_grpc_client.memory.v1 import source_service_pb2
from memory_service_grpc_client.memory.v1 import source_service_pb2_grpc

SERVICE = "memory.v1.SourceService"


class ReadinessSwitch:
    """The readiness signal the host polls; ``ready`` is set by the test."""

    def __init__(self, ready: bool) -> None:
        self.ready = ready
        self.calls = 0
        self.closed = False

    def ensure_ready(self) -> bool:
        self.calls += 1
        return self.ready

    def close(self) -> None:
        self.closed = True


class FakeSourceServicer(source_service_pb2_grpc.SourceServiceServicer):  # type: ignore[misc]
    def GetSource(
        self, request: source_service_pb2.GetSourceRequest, context: grpc.ServicerContext
    ) -> source_service_pb2.GetSourceResponse:
        key = request.natural_key
        if key == "bad":
            raise InvalidArgument(
                [
                    FieldViolation("namespace", "must not be empty"),
                    FieldViolation("natural_key", "must look like type:id"),
                ]
            )
        if key == "missing":
            raise NotFound("no node doc:missing in namespace ns", reason="NODE_NOT_FOUND")
        if key == "down":
            raise Unavailable("database unavailable")
        if key == "boom":
            raise RuntimeError("secret detail that must not reach the client")
        if key == "abort":
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "too much")
        return source_service_pb2.GetSourceResponse(
            source=source_service_pb2.Source(
                natural_key=key, title=current_request_id() or "", content="text"
            )
        )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _register(server: grpc.Server) -> list[str]:
    source_service_pb2_grpc.add_SourceServiceServicer_to_server(FakeSourceServicer(), server)
    return [SERVICE]


def _build(ready: bool, metrics_port: int = 0) -> tuple[ServiceHost, ReadinessSwitch]:
    database = ReadinessSwitch(ready)
    host = build_server(
        Settings(),
        service_name="test_service",
        address="127.0.0.1:0",
        metrics_port=metrics_port,
        database=database,
        register=_register,
        readiness_interval=0.1,
    )
    return host, database


def _start(ready: bool, metrics_port: int = 0) -> tuple[ServiceHost, ReadinessSwitch]:
    host, database = _build(ready, metrics_port)
    host.start()
    return host, database


@pytest.fixture
def host() -> Iterator[ServiceHost]:
    host, _ = _start(ready=True)
    yield host
    host.stop(0)


@pytest.fixture
def stub(host: ServiceHost) -> Iterator[source_service_pb2_grpc.SourceServiceStub]:
    with make_channel(f"127.0.0.1:{host.port}") as channel:
        yield source_service_pb2_grpc.SourceServiceStub(channel)


def _call(stub: source_service_pb2_grpc.SourceServiceStub, key: str) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        stub.GetSource(source_service_pb2.GetSourceRequest(namespace="ns", natural_key=key), timeout=5)
    return info.value


def _details(
    error: grpc.RpcError,
) -> tuple[error_details_pb2.ErrorInfo | None, error_details_pb2.BadRequest | None]:
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    assert status is not None, "no grpc-status-details-bin in the trailing metadata"
    info = bad = None
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
        elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
    return info, bad


def test_ok_call_has_request_id_in_context_and_trailers(
    stub: source_service_pb2_grpc.SourceServiceStub,
) -> None:
    response, call = stub.GetSource.with_call(
        source_service_pb2.GetSourceRequest(namespace="ns", natural_key="doc:a"),
        metadata=(("x-request-id", "req-123"),),
        timeout=5,
    )
    assert response.source.natural_key == "doc:a"
    assert response.source.title == "req-123"  # the contextvar held the caller's id during the call
    assert ("x-request-id", "req-123") in tuple(call.trailing_metadata())


def test_generated_request_id_when_none_is_sent(stub: source_service_pb2_grpc.SourceServiceStub) -> None:
    response, call = stub.GetSource.with_call(
        source_service_pb2.GetSourceRequest(natural_key="doc:a"), timeout=5
    )
    sent = dict(call.trailing_metadata())["x-request-id"]
    assert len(sent) == 32 and response.source.title == sent


def test_invalid_argument_carries_bad_request_and_error_info(
    stub: source_service_pb2_grpc.SourceServiceStub,
) -> None:
    error = _call(stub, "bad")
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "namespace: must not be empty" in error.details()
    info, bad = _details(error)
    assert info is not None and info.reason == "INVALID_ARGUMENT" and info.domain == "memory.v1"
    assert info.metadata["request_id"]
    assert bad is not None
    assert [(v.field, v.description) for v in bad.field_violations] == [
        ("namespace", "must not be empty"),
        ("natural_key", "must look like type:id"),
    ]
    # The request id reaches the client next to the status details.
    assert dict(error.trailing_metadata())["x-request-id"] == info.metadata["request_id"]
    # Client helpers decode the same thing.
    assert field_violations(error) == [
        client.FieldViolation("namespace", "must not be empty"),
        client.FieldViolation("natural_key", "must look like type:id"),
    ]
    assert format_rpc_error(error).splitlines() == [
        "error: INVALID_ARGUMENT: namespace: must not be empty; natural_key: must look like type:id",
        "  - namespace: must not be empty",
        "  - natural_key: must look like type:id",
    ]
    raised = error_from_rpc(error)
    assert isinstance(raised, client.InvalidArgument)
    assert raised.violations == field_violations(error)


def test_a_message_that_is_its_one_violation_is_printed_once() -> None:
    failure = client.RpcFailure(
        grpc.StatusCode.INVALID_ARGUMENT,
        "media_type: declared text/plain but the bytes are application/pdf",
        violations=(
            client.FieldViolation("media_type", "declared text/plain but the bytes are application/pdf"),
        ),
    )
    assert failure.lines() == [
        "error: INVALID_ARGUMENT: media_type: declared text/plain but the bytes are application/pdf"
    ]


def test_not_found_keeps_custom_reason(stub: source_service_pb2_grpc.SourceServiceStub) -> None:
    error = _call(stub, "missing")
    assert error.code() == grpc.StatusCode.NOT_FOUND
    assert error.details() == "no node doc:missing in namespace ns"
    info, bad = _details(error)
    assert info is not None and info.reason == "NODE_NOT_FOUND" and info.domain == "memory.v1"
    assert bad is None
    raised = error_from_rpc(error)
    assert isinstance(raised, client.NotFound) and raised.reason == "NODE_NOT_FOUND"


def test_unavailable(stub: source_service_pb2_grpc.SourceServiceStub) -> None:
    error = _call(stub, "down")
    assert error.code() == grpc.StatusCode.UNAVAILABLE
    assert rpc_failure(error).reason == "DATABASE_UNAVAILABLE"
    assert isinstance(error_from_rpc(error), client.Unavailable)


def test_unexpected_exception_is_internal_with_generic_message(
    stub: source_service_pb2_grpc.SourceServiceStub, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="memory.server"):
        error = _call(stub, "boom")
    assert error.code() == grpc.StatusCode.INTERNAL
    request_id = dict(error.trailing_metadata())["x-request-id"]
    assert error.details() == f"internal error (request id {request_id})"
    assert "secret" not in error.details()
    info, _ = _details(error)
    assert info is not None and info.reason == "INTERNAL"
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "Traceback" in logged and "secret detail" in logged and request_id in logged
    raised = error_from_rpc(error)
    assert isinstance(raised, client.Internal) and raised.code == grpc.StatusCode.INTERNAL


def test_handler_abort_passes_through(stub: source_service_pb2_grpc.SourceServiceStub) -> None:
    error = _call(stub, "abort")
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert error.details() == "too much"


def test_health_not_serving_until_database_ready_then_serving() -> None:
    host, database = _start(ready=False)
    try:
        with make_channel(f"127.0.0.1:{host.port}") as channel:
            health = health_pb2_grpc.HealthStub(channel)
            deadline = time.monotonic() + 5
            while database.calls < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            for name in ("", SERVICE):
                got = health.Check(health_pb2.HealthCheckRequest(service=name), timeout=5)
                assert got.status == health_pb2.HealthCheckResponse.NOT_SERVING
            # Liveness says the process answers, whatever the database does.
            alive = health.Check(health_pb2.HealthCheckRequest(service=LIVENESS_SERVICE), timeout=5)
            assert alive.status == health_pb2.HealthCheckResponse.SERVING
            # RPCs themselves are still served (they fail on their own when the DB is down).
            assert not wait_for_serving(f"127.0.0.1:{host.port}", timeout=0.3, interval=0.1)

            database.ready = True
            assert wait_for_serving(f"127.0.0.1:{host.port}", timeout=5, interval=0.05)
            assert wait_for_serving(f"127.0.0.1:{host.port}", service=SERVICE, timeout=5, interval=0.05)

            database.ready = False  # the database went away: back to NOT_SERVING
            assert _eventually(
                lambda: (
                    health.Check(health_pb2.HealthCheckRequest(), timeout=5).status
                    == health_pb2.HealthCheckResponse.NOT_SERVING
                )
            )
            assert wait_for_serving(
                f"127.0.0.1:{host.port}", service=LIVENESS_SERVICE, timeout=1, interval=0.05
            )
            database.ready = True
            assert wait_for_serving(f"127.0.0.1:{host.port}", timeout=5, interval=0.05)

            # Stop: NOT_SERVING before the server goes away; the database is closed afterwards.
            watch = health.Watch(health_pb2.HealthCheckRequest(), timeout=10)
            assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
            stopper = threading.Thread(target=host.stop, args=(1.0,))
            stopper.start()
            assert next(watch).status == health_pb2.HealthCheckResponse.NOT_SERVING
            stopper.join(10)
            watch.cancel()
        assert database.closed
        assert host.wait(timeout=1)
    finally:
        host.stop(0)


def _eventually(predicate: object, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return False


def test_reflection_lists_services(host: ServiceHost) -> None:
    with make_channel(f"127.0.0.1:{host.port}") as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        responses = stub.ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5
        )
        names = {s.name for r in responses for s in r.list_services_response.service}
    assert {SERVICE, "grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection"} <= names


def _samples(body: str) -> dict[str, float]:
    """``{"name{labels}": value}`` of a Prometheus text exposition."""
    samples = {}
    for line in body.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


def _scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return _samples(response.read().decode())


def test_metrics_endpoint_shows_counters() -> None:
    port = _free_port()
    host, _ = _start(ready=True, metrics_port=port)
    # Other servers of this process share the metrics: compare with a scrape before the calls.
    before = _scrape(port)
    try:
        with make_channel(f"127.0.0.1:{host.port}") as channel:
            stub = source_service_pb2_grpc.SourceServiceStub(channel)
            stub.GetSource(source_service_pb2.GetSourceRequest(natural_key="doc:m"), timeout=5)
            with pytest.raises(grpc.RpcError):
                stub.GetSource(source_service_pb2.GetSourceRequest(natural_key="missing"), timeout=5)
        after = _scrape(port)
    finally:
        host.stop(0)
    # The standard gRPC server metrics (py-grpc-prometheus), by code.
    labels = 'grpc_method="GetSource",grpc_service="memory.v1.SourceService",grpc_type="UNARY"'

    def added(name: str) -> float:
        return after.get(name, 0.0) - before.get(name, 0.0)

    assert added(f'grpc_server_handled_total{{grpc_code="OK",{labels}}}') == 1
    assert added(f'grpc_server_handled_total{{grpc_code="NOT_FOUND",{labels}}}') == 1
    assert added(f"grpc_server_started_total{{{labels}}}") == 2
    assert added(f"grpc_server_handling_seconds_count{{{labels}}}") == 2
    assert added(f'grpc_server_handling_seconds_bucket{{{labels},le="+Inf"}}') == 2
    # The endpoint was shut down with the host.
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2)


def test_metrics_port_in_use_is_tolerated(caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with caplog.at_level(logging.WARNING, logger="memory.server"):
            host, _ = _start(ready=True, metrics_port=port)
        try:
            assert wait_for_serving(f"127.0.0.1:{host.port}", timeout=5, interval=0.05)
        finally:
            host.stop(0)
    assert any("metrics endpoint" in r.getMessage() for r in caplog.records)


def test_two_servers_in_one_process_share_metrics() -> None:
    first, _ = _start(ready=True)
    second, _ = _start(ready=True)
    try:
        assert first.port != second.port
    finally:
        first.stop(0)
        second.stop(0)


def test_a_second_server_cannot_bind_a_port_already_served(host: ServiceHost) -> None:
    """No SO_REUSEPORT: a second server on a taken port (another checkout, a development-mode server
    without tokens) would otherwise share it silently and take some of its calls."""
    with pytest.raises(RuntimeError, match="cannot bind"):
        build_server(
            Settings(),
            service_name="second_service",
            address=f"127.0.0.1:{host.port}",
            metrics_port=0,
            database=ReadinessSwitch(True),
            register=_register,
        )


def test_run_moves_the_objects_alive_before_serving_to_the_permanent_generation() -> None:
    import gc

    gc.unfreeze()
    tracked_before = len(gc.get_objects())
    host, _ = _build(ready=True)
    runner = threading.Thread(target=host.run, kwargs={"grace_seconds": 0})
    try:
        runner.start()
        assert wait_for_serving(f"127.0.0.1:{host.port}", timeout=10)
        # the permanent generation holds what was alive when run() began: at least the test process's
        # objects of before the host was built (a collection first drops the garbage among them)
        assert gc.get_freeze_count() > tracked_before // 2
    finally:
        host.stop(0, drain_seconds=0)
        runner.join(10)
        gc.unfreeze()
    assert not runner.is_alive()
