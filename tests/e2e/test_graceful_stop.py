"""A stopping server drops no call: SIGTERM to a real `cb serve query` process (what Kubernetes sends in
a rolling update) turns health NOT_SERVING while the server still answers for the drain, and the process
then exits cleanly.

A client whose view of health lags (a balancer between two health checks) keeps sending after
NOT_SERVING; every such call must still be answered.
"""

from __future__ import annotations

import signal
import subprocess
import threading
from collections.abc import Iterator

import grpc
import pytest
from grpc_health.v1 import health_pb2
from grpc_health.v1 import health_pb2_grpc

from common.kernel.config import Settings
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2_grpc
from tests.e2e.mcp_http import free_port
from tests.e2e.service_processes import serving

pytestmark = pytest.mark.e2e

DRAIN_SECONDS = 5
CALLS_AFTER_NOT_SERVING = 20


@pytest.fixture
def query_process(settings: Settings) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    address = f"127.0.0.1:{free_port()}"
    with serving(
        "query",
        settings,
        address,
        CB_QUERY_ADDR=address,
        CB_QUERY_METRICS_PORT="0",
        CB_SHUTDOWN_DRAIN_SECONDS=str(DRAIN_SECONDS),
        CB_SHUTDOWN_GRACE_SECONDS="5",
    ) as process:
        yield process, address


def test_sigterm_turns_not_serving_and_keeps_answering_for_the_drain(
    query_process: tuple[subprocess.Popen[bytes], str], namespace: str
) -> None:
    process, address = query_process
    with grpc.insecure_channel(address) as channel:
        facts = fact_query_service_pb2_grpc.FactQueryServiceStub(channel)
        request = fact_query_service_pb2.ListFactsRequest(namespace=namespace, subject="person:nobody")
        assert list(facts.ListFacts(request, timeout=30).facts) == []

        statuses: list[int] = []
        watching = threading.Event()
        not_serving = threading.Event()

        def watch() -> None:
            stream = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest(service=""))
            try:
                for response in stream:
                    statuses.append(response.status)
                    watching.set()
                    if response.status == health_pb2.HealthCheckResponse.NOT_SERVING:
                        not_serving.set()
                        return
            except grpc.RpcError:
                return

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        assert watching.wait(timeout=30)
        process.send_signal(signal.SIGTERM)
        assert not_serving.wait(timeout=30), f"health never turned NOT_SERVING: {statuses}"
        assert statuses[0] == health_pb2.HealthCheckResponse.SERVING

        # A client that has not noticed yet: every call is still answered during the drain.
        codes = []
        for _ in range(CALLS_AFTER_NOT_SERVING):
            try:
                facts.ListFacts(request, timeout=10)
                codes.append(grpc.StatusCode.OK)
            except grpc.RpcError as error:
                codes.append(error.code())
        assert codes == [grpc.StatusCode.OK] * CALLS_AFTER_NOT_SERVING

    assert process.wait(timeout=60) == 0
    assert process.stderr is not None
    log = process.stderr.read().decode("utf-8", "replace")
    assert "draining" in log and "query_service: stopped" in log, log[-2000:]
    # `cb serve` checks the configuration before loading the model and then builds the server: the
    # development-mode warning is logged once, not by both.
    assert log.count("authentication is off (development mode") == 1, log[-2000:]
