"""`cb serve query` with ``CB_QUERY_PROCESSES=2``: two worker processes on one port (docs/decisions/0005-query-worker-processes.md), real processes, real channels.

Which worker answered is read from outside the API: the parent's child processes (``/proc``) and each
worker's own Prometheus endpoint (worker i on ``CB_QUERY_METRICS_PORT + i``), whose request counters
show that fresh connections reach both.
"""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from common.kernel.config import Settings
from memory_service_grpc_client import wait_for_serving
from memory_service_grpc_client.memory.v1 import context_service_pb2
from memory_service_grpc_client.memory.v1 import context_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import document_service_pb2
from memory_service_grpc_client.memory.v1 import document_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2_grpc
from tests.e2e.mcp_http import free_port
from tests.e2e.service_processes import cb_serve
from tests.e2e.service_processes import serving

pytestmark = pytest.mark.e2e

FRESH_CHANNELS = 40
CONTENT = "# Kestrel relay\n\nThe kestrel relay forwards telemetry frames to the archive every night."


def _free_port_pair() -> int:
    """A port p such that p and p + 1 are both free (the two workers' metrics endpoints)."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port: int = probe.getsockname()[1]
        if port >= 65535:
            continue
        try:
            with socket.socket() as first, socket.socket() as second:
                first.bind(("127.0.0.1", port))
                second.bind(("127.0.0.1", port + 1))
        except OSError:
            continue
        return port
    raise RuntimeError("no pair of free ports")


def _children(pid: int) -> list[int]:
    """The live child processes of ``pid`` (Linux ``/proc``)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(entry.name))
    return sorted(found)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _is_resource_tracker(pid: int) -> bool:
    """Whether ``pid`` is multiprocessing's resource tracker (a helper process of the spawn start method)."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"multiprocessing.resource_tracker" in command


def _handled_searches(metrics_port: int) -> float:
    """Searches answered OK by the worker whose metrics endpoint is ``metrics_port``."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
    pattern = re.compile(
        r'^grpc_server_handled_total\{(?=[^}]*grpc_method="Search")(?=[^}]*grpc_code="OK")[^}]*\} (\S+)$',
        re.MULTILINE,
    )
    return sum(float(value) for value in pattern.findall(text))


def _query_environment(address: str, processes: int, metrics_port: int) -> dict[str, str]:
    return {
        "CB_QUERY_ADDR": address,
        "CB_QUERY_PROCESSES": str(processes),
        "CB_QUERY_METRICS_PORT": str(metrics_port),
        "CB_SHUTDOWN_DRAIN_SECONDS": "0",
        "CB_SHUTDOWN_GRACE_SECONDS": "5",
        "CB_LOG_FORMAT": "text",
    }


@pytest.fixture
def two_workers(settings: Settings) -> Iterator[tuple[subprocess.Popen[bytes], str, int]]:
    address = f"127.0.0.1:{free_port()}"
    metrics_port = _free_port_pair()
    with serving("query", settings, address, **_query_environment(address, 2, metrics_port)) as process:
        yield process, address, metrics_port


def test_two_workers_answer_search_and_compile_context_from_two_processes(
    two_workers: tuple[subprocess.Popen[bytes], str, int], ingest_channel: grpc.Channel, namespace: str
) -> None:
    process, address, metrics_port = two_workers
    workers = _children(process.pid)
    # multiprocessing's spawn start method adds one resource tracker process beside the workers.
    assert len(workers) >= 2
    document_service_pb2_grpc.DocumentServiceStub(ingest_channel).Retain(
        document_service_pb2.RetainRequest(namespace=namespace, natural_key="doc:kestrel", content=CONTENT),
        timeout=120,
    )

    for _ in range(FRESH_CHANNELS):
        # A local subchannel pool: each channel opens its own TCP connection (no sharing between channels).
        with grpc.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)]) as channel:
            hits = (
                retrieval_service_pb2_grpc.RetrievalServiceStub(channel)
                .Search(
                    retrieval_service_pb2.SearchRequest(namespace=namespace, query="kestrel relay"),
                    timeout=60,
                )
                .hits
            )
            assert hits and "kestrel relay forwards" in hits[0].text

    per_worker = [_handled_searches(metrics_port + index) for index in range(2)]
    assert sum(per_worker) == FRESH_CHANNELS
    assert all(count > 0 for count in per_worker), per_worker

    with grpc.insecure_channel(address) as channel:
        pack = (
            context_service_pb2_grpc.ContextServiceStub(channel)
            .CompileContext(
                context_service_pb2.CompileContextRequest(
                    namespace=namespace,
                    query="Where does the kestrel relay forward frames?",
                    token_budget=500,
                ),
                timeout=60,
            )
            .pack
        )
    assert "kestrel relay forwards telemetry frames" in pack.text


def test_sigterm_stops_every_worker(two_workers: tuple[subprocess.Popen[bytes], str, int]) -> None:
    process, _, _ = two_workers
    children = _children(process.pid)
    workers = [pid for pid in children if not _is_resource_tracker(pid)]
    trackers = [pid for pid in children if _is_resource_tracker(pid)]
    assert len(workers) == 2 and len(trackers) <= 1
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) == 0
    # The parent joins every worker before it exits, so none may outlive it.
    assert [pid for pid in workers if _alive(pid)] == []
    # multiprocessing's resource tracker stops by itself when it reads end-of-file on its pipe from the
    # parent, which happens only once the parent has exited: it is given a moment, not an instant.
    deadline = time.monotonic() + 30
    while any(_alive(pid) for pid in trackers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [pid for pid in trackers if _alive(pid)] == []


@pytest.mark.parametrize("processes", [1, 2])
def test_a_second_server_on_the_port_of_a_worker_group_fails(
    two_workers: tuple[subprocess.Popen[bytes], str, int], settings: Settings, processes: int
) -> None:
    _, address, _ = two_workers
    second = cb_serve("query", settings, **_query_environment(address, processes, 0))
    try:
        _, errors = second.communicate(timeout=180)
    finally:
        if second.poll() is None:
            second.kill()
            second.wait()
    assert second.returncode != 0
    assert b"cannot bind" in errors
    assert wait_for_serving(address, timeout=30)
