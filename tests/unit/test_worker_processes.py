"""`common.grpc.worker_processes` with real sockets and real processes: the port check of a worker
group, the restart of a dead worker, the give-up after the restart budget; `CB_QUERY_PROCESSES` bounds.

The serving side (two gRPC workers on one port) is tests/e2e/test_query_processes.py.
"""

from __future__ import annotations

import functools
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic import ValidationError

from common.grpc.worker_processes import RESTART_BUDGET
from common.grpc.worker_processes import claim_address
from common.grpc.worker_processes import run_worker_processes
from common.kernel.config import Settings


def test_claim_address_resolves_port_zero_to_a_free_port() -> None:
    address = claim_address("127.0.0.1:0", service_name="query_service")
    host, _, port = address.rpartition(":")
    assert host == "127.0.0.1" and int(port) > 0
    with socket.socket() as again:  # free: the probe is closed
        again.bind(("127.0.0.1", int(port)))


@pytest.mark.parametrize("reuse_port", [False, True])
def test_claim_address_refuses_a_port_held_by_another_server(reuse_port: bool) -> None:
    with socket.socket() as holder:
        # A listening socket with SO_REUSEPORT is what another worker group's server holds.
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, int(reuse_port))
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(RuntimeError, match=f"query_service: cannot bind 127.0.0.1:{port}"):
            claim_address(f"127.0.0.1:{port}", service_name="query_service")


def test_query_processes_must_be_at_least_one() -> None:
    assert Settings().query_processes == 1
    with pytest.raises(ValidationError, match="query_processes"):
        Settings(query_processes=0)


def _exit_at_first_start(folder: Path, index: int) -> None:
    """Worker of the restart test: worker 0 exits at its first start and then runs until SIGTERM."""
    starts = len(list(folder.glob(f"{index}-*")))
    (folder / f"{index}-{starts}-{os.getpid()}").touch()
    if index == 0 and starts == 0:
        sys.exit(3)
    while True:
        time.sleep(0.2)


def _always_exit(folder: Path, index: int) -> None:
    (folder / f"{index}-{time.monotonic_ns()}").touch()
    sys.exit(4)


def _send_sigterm_when(check: Callable[[], bool], returned: threading.Event) -> threading.Thread:
    """SIGTERM to this process (the supervisor's) once ``check()`` holds (or after 120 s), unless the
    supervisor has ``returned`` by then."""

    def watch() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not check() and not returned.is_set():
            time.sleep(0.1)
        if not returned.is_set():
            os.kill(os.getpid(), signal.SIGTERM)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_a_dead_worker_is_restarted_and_sigterm_stops_all(tmp_path: Path) -> None:
    def restarted() -> bool:
        return len(list(tmp_path.glob("0-*"))) == 2 and len(list(tmp_path.glob("1-*"))) == 1

    returned = threading.Event()
    watcher = _send_sigterm_when(restarted, returned)
    try:
        code = run_worker_processes(
            service_name="test",
            count=2,
            target=functools.partial(_exit_at_first_start, tmp_path),
            stop_seconds=30,
        )
    finally:
        returned.set()
    watcher.join()
    assert code == 0
    assert restarted()
    pids = [int(path.name.rsplit("-", 1)[1]) for path in tmp_path.iterdir()]
    assert [pid for pid in pids if Path(f"/proc/{pid}").exists()] == []


def test_workers_that_keep_dying_stop_the_group_with_exit_code_one(tmp_path: Path) -> None:
    code = run_worker_processes(
        service_name="test", count=1, target=functools.partial(_always_exit, tmp_path), stop_seconds=30
    )
    assert code == 1
    assert len(list(tmp_path.iterdir())) == RESTART_BUDGET + 1
