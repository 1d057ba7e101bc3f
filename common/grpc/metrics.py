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

* ``memory_db_pool_connections`` / ``memory_db_pool_connections_in_use`` /
  ``memory_db_pool_requests_waiting``: the connection pool right now (`watch_pool`, read from
  psycopg_pool's statistics at each scrape);
* ``memory_embedding_batch_seconds{model, input}``: time to embed one batch
  (`common.text_models.embeddings.batch_metrics`).

The endpoint (``/metrics`` on ``metrics_port``) serves the default registry; `ServiceHost` starts it with
the server and shuts it down with it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any, Protocol

import grpc
from prometheus_client import REGISTRY, CollectorRegistry, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from py_grpc_prometheus.prometheus_server_interceptor import PromServerInterceptor

__all__ = [
    "PoolStatistics",
    "grpc_metrics_interceptor",
    "start_metrics_endpoint",
    "stop_metrics_endpoint",
    "watch_pool",
]

log = logging.getLogger("memory.server")

_lock = threading.Lock()
_interceptors: dict[int, grpc.ServerInterceptor] = {}
_pool_collectors: dict[int, _PoolCollector] = {}


def grpc_metrics_interceptor(registry: CollectorRegistry = REGISTRY) -> grpc.ServerInterceptor:
    """The process-wide py-grpc-prometheus server interceptor of ``registry`` (latency histogram on),
    created on first use: several servers of one process share its metrics."""
    with _lock:
        interceptor = _interceptors.get(id(registry))
        if interceptor is None:
            interceptor = PromServerInterceptor(enable_handling_time_histogram=True, registry=registry)
            _interceptors[id(registry)] = interceptor
        return interceptor


class PoolStatistics(Protocol):
    """What `watch_pool` reads: `common.storage.database.Database.pool_stats`."""

    def pool_stats(self) -> dict[str, int]: ...


class _PoolCollector(Collector):
    """The pool gauges of every watched database, read at scrape time."""

    def __init__(self) -> None:
        self._pools: dict[str, PoolStatistics] = {}
        self._lock = threading.Lock()

    def watch(self, service: str, database: PoolStatistics) -> None:
        with self._lock:
            self._pools[service] = database

    def collect(self) -> Iterator[GaugeMetricFamily]:
        size = GaugeMetricFamily(
            "memory_db_pool_connections", "Connections the database pool holds.", labels=["service"]
        )
        in_use = GaugeMetricFamily(
            "memory_db_pool_connections_in_use", "Pool connections lent out right now.", labels=["service"]
        )
        waiting = GaugeMetricFamily(
            "memory_db_pool_requests_waiting", "Callers waiting for a pool connection.", labels=["service"]
        )
        with self._lock:
            pools = list(self._pools.items())
        for service, database in pools:
            stats = database.pool_stats()  # counters only: no connection is taken
            pool_size = stats.get("pool_size", 0)
            size.add_metric([service], pool_size)
            in_use.add_metric([service], pool_size - stats.get("pool_available", 0))
            waiting.add_metric([service], stats.get("requests_waiting", 0))
        yield size
        yield in_use
        yield waiting


def watch_pool(service: str, database: PoolStatistics, registry: CollectorRegistry = REGISTRY) -> None:
    """Publishes the pool gauges of ``database`` under ``service`` (a later database of the same service
    replaces the earlier one)."""
    with _lock:
        collector = _pool_collectors.get(id(registry))
        if collector is None:
            collector = _PoolCollector()
            registry.register(collector)
            _pool_collectors[id(registry)] = collector
    collector.watch(service, database)


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
