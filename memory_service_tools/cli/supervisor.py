"""The process supervisor of ``cb up``: the embedded database (a database of this checkout's own on it,
`memory_service_tools.cli.checkout_database`), both services as child processes
(``python -m memory_service_tools.cli serve ingest|query``), a wait until both are SERVING, then the enrichment
worker (``python -m memory_service_tools.cli worker``, unless ``worker=False``), and an orderly stop of
everything on Ctrl-C, SIGTERM or when a child exits.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

from rich.markup import escape

from common.kernel.config import EMBEDDED_DATABASE_URL
from memory_service_grpc_client import ClientSecurity
from memory_service_grpc_client import health_status
from memory_service_grpc_client import make_channel
from memory_service_tools.cli.checkout_database import checkout_database_name
from memory_service_tools.cli.checkout_database import checkout_root
from memory_service_tools.cli.checkout_database import ensure_checkout_database
from memory_service_tools.cli.cli_state import CliState
from memory_service_tools.cli.terminal import err
from memory_service_tools.cli.terminal import out
from memory_service_tools.embedded_db import database_down
from memory_service_tools.embedded_db import database_status
from memory_service_tools.embedded_db import database_up


class _Shutdown(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: the child gets SIGTERM when `cb up` dies without cleaning up (e.g. SIGKILL)."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _stop_children(children: dict[str, subprocess.Popen[bytes]], timeout: float = 30.0) -> None:
    for name, child in children.items():
        if child.poll() is None:
            err.print(f"stopping {name} (pid {child.pid})")
            child.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for name, child in children.items():
        try:
            child.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            err.print(f"{name} did not stop in {timeout:.0f} s; killing it")
            child.kill()
            child.wait()


def run_until_stopped(state: CliState, timeout: float, *, worker: bool = True) -> int:
    """Starts the database (when embedded) and both services, waits for SERVING, starts the enrichment
    worker (``worker``), runs until stopped.

    The embedded database is started only when ``CB_DATABASE_URL`` is the embedded one, and stopped on
    exit only when this call started it (a database already up for other shells or tests stays up).
    On it, the services and the worker use the checkout's own database (created on first use), named on
    start.

    Args:
        state: the run's global options (service addresses, token and TLS files for health checks).
        timeout: seconds to wait for both services to be SERVING.
        worker: also run ``cb worker`` (the enrichment queue) once the services are SERVING.

    Returns:
        The exit code: 0 after Ctrl-C or SIGTERM, 1 when a service exited or did not become SERVING in
        time, or the database could not be started or stopped.
    """
    settings = state.settings()
    ingest_addr, query_addr = state.ingest(), state.query()
    embedded = settings.database_url == EMBEDDED_DATABASE_URL
    children: dict[str, subprocess.Popen[bytes]] = {}
    environment = dict(os.environ)
    database_started = False
    exit_code = 0

    def on_signal(signum: int, _frame: object) -> None:
        raise _Shutdown(signum)

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        if embedded:
            already_running = database_status().running
            err.print(
                "starting the embedded database ..."
                if not already_running
                else "the embedded database is running"
            )
            dsn = database_up()
            # Stop on exit only what this command started: a database that was already up (other
            # shells, tests) stays up.
            database_started = not already_running
            root = checkout_root()
            url, created = ensure_checkout_database(dsn, checkout_database_name(root))
            environment["CB_DATABASE_URL"] = url
            err.print(
                f"development data of this checkout ({root}): {'new ' if created else ''}database {url}"
                " (each checkout has its own on the shared embedded server)"
            )
        else:
            err.print("using CB_DATABASE_URL (the embedded database is not managed)")
        base = [
            sys.executable,
            "-m",
            "memory_service_tools.cli",
            "--ingest-addr",
            ingest_addr,
            "--query-addr",
            query_addr,
        ]

        def start(name: str, arguments: list[str]) -> None:
            children[name] = subprocess.Popen(
                [*base, *arguments],
                env=environment,
                start_new_session=True,  # Ctrl-C reaches `cb up` only; it stops the children in order
                # No other thread of ours runs yet, so preexec_fn is safe here.
                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,  # noqa: PLW1509
            )
            err.print(f"started {name} (pid {children[name].pid})")

        for name, kind in (("ingest_service", "ingest"), ("query_service", "query")):
            start(name, ["serve", kind])
        _wait_serving(
            children,
            {"ingest_service": ingest_addr, "query_service": query_addr},
            timeout,
            security=state.security(),
        )
        if worker:  # after the ingest service migrated the database
            start("enrichment_worker", ["worker"])
        out.print(f"ingest_service: {ingest_addr}")
        out.print(f"query_service:  {query_addr}")
        out.print("ready; Ctrl-C stops the services" + (" and the database" if database_started else ""))
        while True:
            for name, child in children.items():
                if child.poll() is not None:
                    raise RuntimeError(f"{name} exited with code {child.returncode}")
            time.sleep(0.5)
    except _Shutdown as exc:
        err.print(f"received {exc}; shutting down")
    except Exception as exc:  # noqa: BLE001 - a child died, timeout, embedded database errors: all stop
        err.print(f"error: {escape(str(exc))}")
        exit_code = 1
    finally:
        for sig in previous:
            signal.signal(sig, signal.SIG_IGN)  # no second interruption of the clean-up
        try:
            _stop_children(children)
            if database_started:
                err.print("stopping the embedded database ...")
                try:
                    database_down()
                except Exception as exc:  # noqa: BLE001 - reported, exit code 1
                    err.print(f"error: stopping the database: {escape(str(exc))}")
                    exit_code = 1
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    return exit_code


def _wait_serving(
    children: dict[str, subprocess.Popen[bytes]],
    addresses: dict[str, str],
    timeout: float,
    *,
    security: ClientSecurity | None = None,
) -> None:
    """Polls grpc health of each address until SERVING; raises when a child dies or on timeout."""
    started = time.monotonic()
    pending = dict(addresses)
    last: dict[str, str] = {}
    channels = {name: make_channel(address, security=security) for name, address in addresses.items()}
    try:
        while pending:
            for name, child in children.items():
                if child.poll() is not None:
                    raise RuntimeError(f"{name} exited with code {child.returncode} before it was SERVING")
            for name in list(pending):
                status = health_status(channels[name], timeout=1.0)
                if status != last.get(name):
                    elapsed = time.monotonic() - started
                    err.print(f"[{elapsed:5.1f} s] {name} at {pending[name]}: {status}")
                    last[name] = status
                if status == "SERVING":
                    del pending[name]
            if not pending:
                return
            if time.monotonic() - started > timeout:
                waiting = ", ".join(f"{n} ({last.get(n, '?')})" for n in pending)
                raise TimeoutError(f"not SERVING after {timeout:.0f} s: {waiting}")
            time.sleep(0.5)
    finally:
        for channel in channels.values():
            channel.close()
