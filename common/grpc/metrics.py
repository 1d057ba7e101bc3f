"""Prometheus metrics of a service and the HTTP endpoint that serves them.

RPC metrics have the standard gRPC server names that dashboards expect (the go-grpc-prometheus names),
recorded by ``py-grpc-prometheus``'s server interceptor (`grpc_metrics_interceptor`), labelled
``grpc_type`` (``UNARY``, ``CLIENT_STREAM``, ...), ``grpc_service``, ``grpc_method``:

* ``grpc_server_started_total``: RPCs started;
* ``grpc_server_handled_total{..., grpc_code}``: RPCs completed, by status code (``OK``,
  ``NOT_FOUND``, ...);
* ``grpc_server_handling_seconds``: latency histogram, seconds (unary and client-streaming calls);
* ``grpc_server_msg_received_total`` / ``grpc_server_msg_sent_total``: stream messages.

Ours, by ``service`` (the process's service name):

* the connection pools and read replicas: `common.storage.pool_metrics` (``memory_db_pool_*``,
  ``memory_read_replica_*``), registered by each service's ``main``;
* ``memory_embedding_batch_seconds{model, input}``: time to embed one batch
  (`common.text_models.embeddings.batch_metrics`).

The endpoint (``/metrics`` on ``metrics_port``) serves the default registry; `ServiceHost` starts it with
the server and shuts it down with it.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import grpc
from prometheus_client import REGISTRY
from prometheus_client import CollectorRegistry
from prometheus_client import start_http_server
from py_grpc_prometheus.prometheus_server_interceptor import PromServerInterceptor

__all__ = [
    "grpc_metrics_interceptor",
    "start_metrics_endpoint",
    "stop_metrics_endpoint",
]

log = logging.getLogger("memory.server")

_lock = threading.Lock()
_interceptors: dict[int, grpc.ServerInterceptor] = {}


def grpc_metrics_interceptor(registry: CollectorRegistry = REGISTRY) -> grpc.ServerInterceptor:
    """The process-wide py-grpc-prometheus server interceptor of ``registry`` (latency histogram on),
    created on first use: several servers of one process share its metrics."""
    with _lock:
        interceptor = _interceptors.get(id(registry))
        if interceptor is None:
            interceptor = PromServerInterceptor(enable_handling_time_histogram=True, registry=registry)
            _interceptors[id(registry)] = interceptor
        return interceptor


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
