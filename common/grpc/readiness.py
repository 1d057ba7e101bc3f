"""Readiness and liveness: grpc.health.v1 statuses.

`add_health_service` registers the standard health service on a server with every readiness status
NOT_SERVING (``""`` and each registered service), and the liveness status `LIVENESS_SERVICE`
(``"liveness"``) SERVING: it says the process is up and answering, whatever the database does, so a
Kubernetes liveness or startup probe on it never restarts pods because of a database outage, while the
readiness probe (``""``) takes them out of the Service. `ReadinessMonitor` then asks the database
(`ReadinessProbe`) every ``interval`` seconds from a daemon thread and sets every status to SERVING once
``ensure_ready()`` returns True, back to NOT_SERVING when it returns False again. On shutdown
(`begin_shutdown`) every status becomes NOT_SERVING for good, before the server stops taking calls.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Protocol

import grpc
from grpc_health.v1 import health
from grpc_health.v1 import health_pb2
from grpc_health.v1 import health_pb2_grpc

__all__ = [
    "LIVENESS_SERVICE",
    "READINESS_INTERVAL_SECONDS",
    "ReadinessMonitor",
    "ReadinessProbe",
    "add_health_service",
]

log = logging.getLogger("memory.server")

READINESS_INTERVAL_SECONDS = 2.0
# The health service name of liveness: SERVING from start until graceful shutdown, never following the
# database (the probes of deploy/kubernetes use it for livenessProbe and startupProbe).
LIVENESS_SERVICE = "liveness"


class ReadinessProbe(Protocol):
    """What the host needs from the database: a readiness signal and a way to release it.

    `common.storage.database.Database` satisfies it.
    """

    def ensure_ready(self) -> bool:
        """Connects (and migrates on first contact) if needed; True when usable. Never raises."""
        ...

    def close(self) -> None:
        """Releases connections; called once after the server stopped."""
        ...


def add_health_service(
    server: grpc.Server, service_names: Sequence[str]
) -> tuple[health.HealthServicer, tuple[str, ...]]:
    """Adds grpc.health.v1 to ``server``, NOT_SERVING for ``""`` and every name of ``service_names``,
    SERVING for `LIVENESS_SERVICE`.

    Returns:
        The health servicer and the readiness names it reports on (``""`` first; liveness is not one).
    """
    servicer = health.HealthServicer(experimental_non_blocking=True)
    names = ("", *service_names)
    for name in names:
        servicer.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
    servicer.set(LIVENESS_SERVICE, health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    return servicer, names


class ReadinessMonitor:
    """Keeps the health statuses in line with ``database.ensure_ready()`` (see the module docstring).

    Args:
        service_name: used in the thread name and log lines.
        health_servicer: the servicer `add_health_service` returned.
        health_services: the names it reports on.
        database: the readiness signal.
        interval: seconds between two checks.
    """

    def __init__(
        self,
        *,
        service_name: str,
        health_servicer: health.HealthServicer,
        health_services: Sequence[str],
        database: ReadinessProbe,
        interval: float,
    ) -> None:
        self.service_name = service_name
        self.health = health_servicer
        self.health_services = tuple(health_services)
        self.database = database
        self.interval = interval
        self._stopping = threading.Event()
        self._ready: bool | None = None
        self._thread: threading.Thread | None = None

    @property
    def ready(self) -> bool:
        """Last readiness result (False before the first check)."""
        return bool(self._ready)

    def start(self) -> None:
        """Starts the daemon thread that checks readiness every ``interval`` seconds (first check now)."""
        self._thread = threading.Thread(target=self._loop, name=f"{self.service_name}-readiness", daemon=True)
        self._thread.start()

    def check(self) -> bool:
        """Runs one readiness check now and updates the health statuses; returns the result."""
        try:
            ready = bool(self.database.ensure_ready())
        except Exception:  # the protocol says it never raises; a bug there must not kill the thread
            log.exception("%s: database.ensure_ready() raised", self.service_name)
            ready = False
        self._set_serving(ready)
        self._set_details()
        return ready

    def _set_details(self) -> None:
        """Health of the parts a database reports on its own (`RoutedDatabase.replica_health`: one
        ``read-replica-<n>`` status per read replica), unless shutting down."""
        details = getattr(self.database, "replica_health", None)
        if details is None or self._stopping.is_set():
            return
        try:
            statuses = dict(details())
        except Exception:  # a bug there must not kill the thread
            log.exception("%s: database.replica_health() raised", self.service_name)
            return
        for name, serving in statuses.items():
            self.health.set(
                name,
                health_pb2.HealthCheckResponse.SERVING
                if serving
                else health_pb2.HealthCheckResponse.NOT_SERVING,
            )

    def begin_shutdown(self) -> None:
        """Every status NOT_SERVING from now on; the thread stops after its current check."""
        self._stopping.set()
        self.health.enter_graceful_shutdown()

    def join(self) -> None:
        """Waits (bounded) for the thread to end after `begin_shutdown`."""
        if self._thread is not None:
            self._thread.join(timeout=max(self.interval, 1.0) + 5.0)

    def _set_serving(self, ready: bool) -> None:
        if self._stopping.is_set() or ready == self._ready:
            return
        status = (
            health_pb2.HealthCheckResponse.SERVING if ready else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for name in self.health_services:
            self.health.set(name, status)
        self._ready = ready
        log.log(
            logging.INFO if ready else logging.WARNING,
            "%s: database %s, health %s",
            self.service_name,
            "ready" if ready else "not ready",
            "SERVING" if ready else "NOT_SERVING",
        )

    def _loop(self) -> None:
        while not self._stopping.is_set():
            self.check()
            self._stopping.wait(self.interval)
