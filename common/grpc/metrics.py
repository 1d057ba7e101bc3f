"""RPC metrics (Prometheus) and the HTTP endpoint that serves them.

Three metrics, labelled by gRPC service and method, recorded by the metrics interceptor
(`common.grpc.interceptors`):

* ``memory_rpc_requests_total{service, method, code}``: RPCs handled, by status code;
* ``memory_rpc_latency_seconds{service, method}``: server-side latency histogram, seconds;
* ``memory_rpc_errors_total{service, method, code}``: RPCs that ended with a code other than OK.

The endpoint (``/metrics`` on ``metrics_port``) serves the default registry; `ServiceHost` starts it with
the server and shuts it down with it.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram, start_http_server

__all__ = ["RpcMetrics", "rpc_metrics", "start_metrics_endpoint", "stop_metrics_endpoint"]

log = logging.getLogger("memory.server")

_LATENCY_BUCKETS_SECONDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


@dataclass(frozen=True)
class RpcMetrics:
    """The RPC metrics of one registry (see the module docstring for names and labels)."""

    requests: Counter
    latency: Histogram
    errors: Counter


_metrics_lock = threading.Lock()
_metrics_by_registry: dict[int, RpcMetrics] = {}


def rpc_metrics(registry: CollectorRegistry = REGISTRY) -> RpcMetrics:
    """The process-wide RPC metrics of ``registry``, created on first use (several servers may share them)."""
    with _metrics_lock:
        metrics = _metrics_by_registry.get(id(registry))
        if metrics is None:
            metrics = RpcMetrics(
                requests=Counter(
                    "memory_rpc_requests_total",
                    "RPCs handled, by gRPC service, method and status code.",
                    ("service", "method", "code"),
                    registry=registry,
                ),
                latency=Histogram(
                    "memory_rpc_latency_seconds",
                    "Server-side RPC latency in seconds, by gRPC service and method.",
                    ("service", "method"),
                    buckets=_LATENCY_BUCKETS_SECONDS,
                    registry=registry,
                ),
                errors=Counter(
                    "memory_rpc_errors_total",
                    "RPCs that ended with a status other than OK, by gRPC service, method and code.",
                    ("service", "method", "code"),
                    registry=registry,
                ),
            )
            _metrics_by_registry[id(registry)] = metrics
        return metrics


def start_metrics_endpoint(port: int, host: str, service_name: str) -> Any | None:
    """Serves the default registry on ``http://host:port/metrics`` from a daemon thread.

    Args:
        port: TCP port; 0 or less disables the endpoint.
        host: address to bind (loopback when the gRPC server binds loopback).
        service_name: used in the log lines.

    Returns:
        The HTTP server (pass it to `stop_metrics_endpoint`), or None when disabled or when the port
        could not be bound (logged as a warning, the service runs without metrics).
    """
    if port <= 0:
        return None
    try:
        server, _thread = start_http_server(port, addr=host)
    except OSError as exc:
        log.warning("%s: metrics endpoint on port %d not started: %s", service_name, port, exc)
        return None
    log.info("%s: Prometheus metrics on http://%s:%d/metrics", service_name, host, port)
    return server


def stop_metrics_endpoint(server: Any) -> None:
    """Shuts down an endpoint returned by `start_metrics_endpoint` and releases its port."""
    server.shutdown()
    server.server_close()
