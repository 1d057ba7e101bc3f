"""The server host shared by ingest_service and query_service: `build_server` and `ServiceHost`.

`build_server` assembles, from the settings, a sync `grpc.Server` (ThreadPoolExecutor) with

* the interceptors, outermost first: tracing (when on, `common.grpc.telemetry`), request id + logging,
  metrics, error mapping, auth, request checks (`common.grpc.interceptors`; the error mapping itself is
  `common.grpc.status_mapping`);
* the authentication mode and TLS credentials (`common.grpc.security`; development mode without a
  tokens file is allowed on loopback addresses only);
* grpc.health.v1, NOT_SERVING until the database is ready (`common.grpc.readiness`, re-checked every 2 s);
* server reflection;
* the Prometheus HTTP endpoint (`common.grpc.metrics`; the services' `main` adds the database pool and
  replica gauges of `common.storage.pool_metrics`).

`ServiceHost` starts and stops all of it: ``start()``/``wait()``/``stop()``, or ``run()`` with SIGTERM and
SIGINT handled. A stop drops no call (rolling updates, deploy/kubernetes): every health status turns
NOT_SERVING, the server keeps serving for ``shutdown_drain_seconds`` (clients and balancers that watch
health move away meanwhile), then it refuses new calls and in-flight ones get ``shutdown_grace_seconds``.
"""

from __future__ import annotations

import gc
import logging
import signal
import threading
import time
from collections.abc import Callable
from collections.abc import Sequence
from concurrent import futures
from typing import TYPE_CHECKING
from typing import Any
from typing import Protocol

import grpc
from grpc_health.v1 import health
from grpc_reflection.v1alpha import reflection
from prometheus_client import REGISTRY
from prometheus_client import CollectorRegistry

from common.auth.authentication import Authenticator
from common.auth.authentication import is_loopback_address
from common.grpc.interceptors import server_interceptors
from common.grpc.metrics import grpc_metrics_interceptor
from common.grpc.metrics import start_metrics_endpoint
from common.grpc.metrics import stop_metrics_endpoint
from common.grpc.readiness import READINESS_INTERVAL_SECONDS
from common.grpc.readiness import ReadinessMonitor
from common.grpc.readiness import ReadinessProbe
from common.grpc.readiness import add_health_service
from common.grpc.security import build_authenticator
from common.grpc.security import server_credentials
from common.grpc.telemetry import configured_tracer_provider
from common.grpc.telemetry import tracing_server_interceptor
from common.kernel.config import Settings

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

__all__ = ["MAX_MESSAGE_BYTES", "ServiceHost", "build_server"]

log = logging.getLogger("memory.server")

# RetainRequest.content may hold 8 MiB and a RecordObservations batch up to 1000 items: the gRPC
# default of 4 MiB per message is too small for both directions.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
SERVER_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    # gRPC sets SO_REUSEPORT by default on Linux: a second server (another checkout, a development-mode
    # server without tokens) could then bind the same port and silently take half of its calls. A port
    # in use is an error instead (`build_server` raises "cannot bind").
    ("grpc.so_reuseport", 0),
)


class BackgroundWorker(Protocol):
    """A daemon a service runs beside its RPCs (`ServiceHost` starts it after the server, stops it after)."""

    def start(self) -> None: ...

    def stop(self) -> None: ...


class ServiceHost:
    """A built, not yet started server: gRPC server, readiness monitor, metrics endpoint.

    Use ``start()`` then ``wait()`` (or ``run()``, which also handles SIGTERM/SIGINT); ``stop()`` sets
    every health status to NOT_SERVING, stops the server gracefully and closes the database.

    Attributes:
        service_name: used in logs and thread names.
        server: the gRPC server.
        readiness: keeps the health statuses in line with the database.
        authenticator: tokens or development mode.
        tls: True when the port serves TLS.
        metrics_port: Prometheus HTTP port (0: none).
        metrics_host: address the metrics endpoint binds.
        drain_seconds: default of `stop`: seconds of NOT_SERVING while still serving.
        grace_seconds: default of `stop`: seconds in-flight calls get once new ones are refused.
    """

    def __init__(
        self,
        *,
        service_name: str,
        server: grpc.Server,
        port: int,
        readiness: ReadinessMonitor,
        metrics_port: int,
        authenticator: Authenticator | None = None,
        tls: bool = False,
        metrics_host: str = "127.0.0.1",
        drain_seconds: float = 0.0,
        grace_seconds: float = 10.0,
        background: Sequence[BackgroundWorker] = (),
    ) -> None:
        self.service_name = service_name
        self.background = tuple(background)
        self.server = server
        self._port = port
        self.readiness = readiness
        self.authenticator = authenticator if authenticator is not None else Authenticator(None)
        self.tls = tls
        self.metrics_port = metrics_port
        self.metrics_host = metrics_host
        self.drain_seconds = drain_seconds
        self.grace_seconds = grace_seconds
        self._stopped = threading.Event()
        self._stop_lock = threading.Lock()
        self._metrics_server: Any = None
        self._started = False

    @property
    def port(self) -> int:
        """The TCP port actually bound (useful when the address ended in ``:0``)."""
        return self._port

    def start(self) -> None:
        """Starts the metrics endpoint (unless port 0), the gRPC server and the readiness thread.

        Health stays NOT_SERVING until ``database.ensure_ready()`` first returns True.
        """
        if self._started:
            return
        self._started = True
        self._metrics_server = start_metrics_endpoint(self.metrics_port, self.metrics_host, self.service_name)
        self.server.start()
        self.readiness.start()
        for worker in self.background:
            worker.start()
        log.info("%s listening on port %d", self.service_name, self._port)

    def wait(self, timeout: float | None = None) -> bool:
        """Blocks until the server has stopped (or ``timeout`` seconds passed); True when stopped."""
        return self._stopped.wait(timeout) if timeout is not None else self._wait_forever()

    def _wait_forever(self) -> bool:
        # Wake up regularly so signal handlers run on the main thread.
        while not self._stopped.wait(0.5):
            pass
        return True

    def stop(self, grace_seconds: float | None = None, *, drain_seconds: float | None = None) -> None:
        """Graceful stop: NOT_SERVING, still serving for the drain, then in-flight RPCs get the grace.

        Args:
            grace_seconds: how long in-flight RPCs may run once new ones are refused (None: the
                host's ``grace_seconds``).
            drain_seconds: how long the server keeps taking calls after turning NOT_SERVING (None:
                the host's ``drain_seconds``).

        Safe to call more than once and from any thread; returns when the server has stopped.
        """
        grace = self.grace_seconds if grace_seconds is None else grace_seconds
        drain = self.drain_seconds if drain_seconds is None else drain_seconds
        with self._stop_lock:
            if self._stopped.is_set():
                return
            self.readiness.begin_shutdown()
            if drain > 0:
                log.info("%s: NOT_SERVING, draining for %.1f s", self.service_name, drain)
                time.sleep(drain)
            log.info("%s: stopping (grace %.1f s)", self.service_name, grace)
            self.server.stop(grace).wait()
            for worker in self.background:
                worker.stop()
            self.readiness.join()
            if self._metrics_server is not None:
                stop_metrics_endpoint(self._metrics_server)
                self._metrics_server = None
            try:
                self.readiness.database.close()
            except Exception:
                log.exception("%s: database.close() raised", self.service_name)
            self._stopped.set()
            log.info("%s: stopped", self.service_name)

    def run(self, grace_seconds: float | None = None) -> None:
        """Starts, then blocks until SIGTERM/SIGINT (main thread only) or ``stop()``; stops gracefully
        (drain, then grace: see `stop`).

        Before it starts, every object alive then (the imported modules, the embedding model's vocabulary:
        about 95,000 objects in the query service) moves to the collector's permanent generation
        (``gc.freeze``, after one collection): a full collection, which holds the interpreter lock, then
        traverses only what requests made. Measured at 10k chunks, Search at 1 and 16 clients
        (bench/RESULTS.md (git history)): a full collection of the query service took up to 69.8 ms
        without it, 7.5 ms with it."""
        gc.collect()
        gc.freeze()
        self.start()
        if threading.current_thread() is threading.main_thread():

            def on_signal(signum: int, _frame: object) -> None:
                log.info("%s: received %s", self.service_name, signal.Signals(signum).name)
                threading.Thread(target=self.stop, args=(grace_seconds,), daemon=True).start()

            signal.signal(signal.SIGTERM, on_signal)
            signal.signal(signal.SIGINT, on_signal)
        try:
            self.wait()
        finally:
            self.stop(grace_seconds)


def build_server(
    settings: Settings,
    *,
    service_name: str,
    address: str,
    metrics_port: int,
    database: ReadinessProbe,
    register: Callable[[grpc.Server], list[str]],
    max_workers: int = 16,
    readiness_interval: float = READINESS_INTERVAL_SECONDS,
    metrics_registry: CollectorRegistry = REGISTRY,
    tracer_provider: TracerProvider | None = None,
    interceptors: Sequence[grpc.ServerInterceptor] = (),
    background: Sequence[BackgroundWorker] = (),
    reuse_port: bool = False,
) -> ServiceHost:
    """Builds (does not start) a sync gRPC server with interceptors, health, reflection and metrics.

    Args:
        settings: the process settings; auth (``auth_mode``, ``tokens_file``) and TLS
            (``tls_cert_file``, ``tls_key_file``, ``tls_client_ca_file``) come from here.
        service_name: ``"ingest_service"`` or ``"query_service"``; used in logs and thread names.
        address: ``host:port`` to bind (TLS when configured); port 0 picks a free port (see
            ``ServiceHost.port``). Without a tokens file only loopback addresses are accepted.
        metrics_port: Prometheus HTTP port; 0 disables it. A port already in use is logged and skipped.
        database: readiness signal; ``ensure_ready()`` is called every ``readiness_interval`` seconds.
        register: adds the servicers to the server and returns their full service names
            (e.g. ``["memory.v1.SourceService"]``) for health and reflection.
        max_workers: threads handling RPCs concurrently.
        readiness_interval: seconds between readiness checks.
        metrics_registry: registry of the RPC and pool metrics (the endpoint always serves the default
            registry).
        tracer_provider: traces the calls with this provider; None: the one of
            `common.grpc.telemetry.configure_tracing`, if tracing is on.
        interceptors: the service's own, innermost (after the request checks), e.g. the consistency
            token interceptors of `common.grpc.consistency`.
        background: workers started with the server and stopped after it (the episode embedder).
        reuse_port: bind with ``grpc.so_reuseport`` 1, for the processes of one group sharing the port
            (`common.grpc.worker_processes`, which checks beforehand that nobody else holds it).

    Returns:
        A `ServiceHost`; health reports NOT_SERVING for ``""`` and every registered service until the
        database is ready.

    Raises:
        ServerSetupError: refused configuration (see `build_authenticator`, `server_credentials`).
        RuntimeError: the address could not be bound.
    """
    authenticator = build_authenticator(settings, address=address, service_name=service_name)
    credentials = server_credentials(settings)
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix=service_name),
        interceptors=(
            *server_interceptors(
                service_name,
                grpc_metrics_interceptor(metrics_registry),
                authenticator,
                tracing_server_interceptor(tracer_provider or configured_tracer_provider()),
            ),
            *interceptors,
        ),
        options=(*SERVER_OPTIONS[:-1], ("grpc.so_reuseport", 1)) if reuse_port else SERVER_OPTIONS,
    )
    service_names = list(register(server))
    health_servicer, health_services = add_health_service(server, service_names)
    reflection.enable_server_reflection(
        (*service_names, health.SERVICE_NAME, reflection.SERVICE_NAME),
        server,
    )

    try:
        if credentials is None:
            port = server.add_insecure_port(address)
        else:
            port = server.add_secure_port(address, credentials)
            log.info(
                "%s: TLS on %s%s",
                service_name,
                address,
                " (client certificates required)" if settings.tls_client_ca_file else "",
            )
    except RuntimeError as exc:
        raise RuntimeError(f"{service_name}: cannot bind {address}: {exc}") from exc
    if port == 0:
        raise RuntimeError(f"{service_name}: cannot bind {address}")

    readiness = ReadinessMonitor(
        service_name=service_name,
        health_servicer=health_servicer,
        health_services=health_services,
        database=database,
        interval=readiness_interval,
    )
    return ServiceHost(
        service_name=service_name,
        server=server,
        port=port,
        readiness=readiness,
        metrics_port=metrics_port,
        authenticator=authenticator,
        tls=credentials is not None,
        # Metrics follow the gRPC bind: a loopback service exposes them on loopback only.
        metrics_host="127.0.0.1" if is_loopback_address(address) else "0.0.0.0",
        drain_seconds=settings.shutdown_drain_seconds,
        grace_seconds=settings.shutdown_grace_seconds,
        background=background,
    )
