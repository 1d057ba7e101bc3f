"""N worker processes serving one port: gRPC's multiprocessing pattern (SO_REUSEPORT), supervised.

A Python process runs its request handlers under one interpreter lock, so a service whose requests
spend milliseconds in Python (the query service: 7-8 ms per Search, bench/RESULTS.md (git history) "s5-search") tops
out at one core however many threads it has. gRPC's documented remedy (grpc/grpc
``examples/python/multiprocessing``) is one process per core, each with its own server bound to the same
address with the ``grpc.so_reuseport`` option, the processes started before any gRPC object exists in
the parent; the kernel then spreads new connections over the processes.

`claim_address` checks, in the parent, that nobody else holds the port (a probe socket bound without
SO_REUSEPORT fails when any socket holds it: another server, reuse-port or not) and resolves port 0.
`run_worker_processes` starts the children (``spawn``: a fresh interpreter, nothing of the parent's gRPC
or thread state), restarts a child that dies (at most `RESTART_BUDGET` restarts per `RESTART_WINDOW_SECONDS`,
then the group stops and the parent exits 1), and on SIGTERM/SIGINT sends SIGTERM to every child (each
stops gracefully: health NOT_SERVING, drain, grace, see `common.grpc.server.ServiceHost.stop`), killing
the ones still alive after ``stop_seconds``. A child whose parent disappears (SIGKILL) stops itself.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from multiprocessing.process import BaseProcess

__all__ = ["RESTART_BUDGET", "RESTART_WINDOW_SECONDS", "claim_address", "run_worker_processes"]

log = logging.getLogger("memory.worker_processes")

RESTART_BUDGET = 5
RESTART_WINDOW_SECONDS = 60.0
_PARENT_POLL_SECONDS = 1.0


def claim_address(address: str, *, service_name: str) -> str:
    """Checks that ``address`` is free for this service and returns it with a concrete port.

    Binds (without SO_REUSEPORT, with SO_REUSEADDR as gRPC does) and closes a probe socket: the bind
    fails while any other socket holds the port, so a second server on a port in use is an error for
    a group of processes just as for one (`common.grpc.server.SERVER_OPTIONS`).

    Args:
        address: ``host:port`` (``[v6]:port`` for IPv6); port 0 picks a free port.
        service_name: used in the error message.

    Returns:
        ``host:port`` with the port the probe bound (the given one unless it was 0).

    Raises:
        RuntimeError: the address cannot be bound (in use, unknown host, no permission).
    """
    host, _, port_text = address.rpartition(":")
    bare_host = host.strip("[]")
    try:
        family, kind, protocol, _, socket_address = socket.getaddrinfo(
            bare_host or None, int(port_text), type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        with socket.socket(family, kind, protocol) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(socket_address)
            port: int = probe.getsockname()[1]
    except (OSError, ValueError) as exc:
        raise RuntimeError(f"{service_name}: cannot bind {address}: {exc}") from exc
    return f"{host}:{port}"


def _child_main(target: Callable[[int], None], index: int, parent_pid: int) -> None:
    """Entry of a child: a watchdog that stops the child when its parent is gone, then ``target(index)``."""

    def watch_parent() -> None:
        while os.getppid() == parent_pid:
            time.sleep(_PARENT_POLL_SECONDS)
        log.warning("worker %d: parent %d is gone, stopping", index, parent_pid)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch_parent, name=f"parent-watch-{index}", daemon=True).start()
    target(index)


def run_worker_processes(
    *,
    service_name: str,
    count: int,
    target: Callable[[int], None],
    stop_seconds: float,
) -> int:
    """Runs ``target(i)`` for i in 0..count-1, each in its own process, until SIGTERM/SIGINT.

    Call from the main thread, before any gRPC object exists in this process. ``target`` must be
    picklable (a module-level function or a `functools.partial` of one) and should run a server bound
    with ``grpc.so_reuseport`` 1 until SIGTERM (`common.grpc.server.ServiceHost.run`).

    Args:
        service_name: used in logs and process names.
        count: number of processes (>= 1).
        target: the child's work, given its index.
        stop_seconds: how long the children get after SIGTERM before they are killed.

    Returns:
        The exit code for the parent: 0 after a stop by signal, 1 when children died more than
        `RESTART_BUDGET` times in `RESTART_WINDOW_SECONDS`.
    """
    context = multiprocessing.get_context("spawn")
    stopping = threading.Event()
    parent_pid = os.getpid()

    def start(index: int) -> BaseProcess:
        child = context.Process(
            target=_child_main, args=(target, index, parent_pid), name=f"{service_name}-{index}"
        )
        child.start()
        log.info("%s: worker %d started (pid %s)", service_name, index, child.pid)
        return child

    def on_signal(signum: int, _frame: object) -> None:
        log.info("%s: received %s, stopping %d workers", service_name, signal.Signals(signum).name, count)
        stopping.set()

    previous = {number: signal.signal(number, on_signal) for number in (signal.SIGTERM, signal.SIGINT)}
    children = {index: start(index) for index in range(count)}
    restarts: list[float] = []
    exit_code = 0
    try:
        while not stopping.wait(0.5):
            for index, child in list(children.items()):
                if child.is_alive():
                    continue
                now = time.monotonic()
                restarts = [moment for moment in restarts if now - moment < RESTART_WINDOW_SECONDS]
                if len(restarts) >= RESTART_BUDGET:
                    log.error(
                        "%s: worker %d exited (%s); %d restarts in %.0f s, giving up",
                        service_name,
                        index,
                        child.exitcode,
                        len(restarts),
                        RESTART_WINDOW_SECONDS,
                    )
                    exit_code = 1
                    stopping.set()
                    break
                log.warning("%s: worker %d exited (%s), restarting", service_name, index, child.exitcode)
                restarts.append(now)
                children[index] = start(index)
    finally:
        _stop_children(service_name, list(children.values()), stop_seconds)
        for number, handler in previous.items():
            signal.signal(number, handler)
    return exit_code


def _stop_children(service_name: str, children: list[BaseProcess], stop_seconds: float) -> None:
    """SIGTERM to every live child, then SIGKILL to those still alive after ``stop_seconds``."""
    for child in children:
        if child.is_alive() and child.pid is not None:
            os.kill(child.pid, signal.SIGTERM)
    deadline = time.monotonic() + stop_seconds
    for child in children:
        child.join(max(0.0, deadline - time.monotonic()))
        if child.is_alive():
            log.error(
                "%s: worker %s still running after %.0f s, killing it", service_name, child.pid, stop_seconds
            )
            child.kill()
            child.join()
    log.info("%s: all workers stopped", service_name)
