"""Prometheus metrics of the database connections: pools and read replicas (deploy/kubernetes alerts).

`register_database_metrics` adds a database to one process-wide collector; each scrape reads the pools'
``psycopg_pool`` statistics (no query runs) and what the last readiness check measured of the replicas:

* ``memory_db_pool_size{service, pool}``: connections open; ``memory_db_pool_available``: idle ones;
  ``memory_db_pool_max_size``; ``memory_db_pool_requests_waiting``: calls queued for a connection;
  ``memory_db_pool_timeouts_total``: calls that got no connection in time (psycopg_pool's
  ``requests_errors``). ``pool`` is ``primary`` or a replica's name (``replica-<n>``).
* ``memory_read_replica_lag_seconds{service, replica}`` and ``memory_read_replica_lag_bytes``: how far
  each read replica's replay is behind the primary (absent while unknown); ``memory_read_replica_up``:
  1 while reads may use it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Protocol

from prometheus_client import REGISTRY
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.core import Metric

from common.storage.database import Database

__all__ = ["register_database_metrics"]

_GAUGES = {
    "pool_size": ("memory_db_pool_size", "Database connections open, by pool."),
    "pool_available": ("memory_db_pool_available", "Idle database connections, by pool."),
    "pool_max": ("memory_db_pool_max_size", "Most database connections the pool opens."),
    "requests_waiting": ("memory_db_pool_requests_waiting", "Calls waiting for a database connection."),
}


class _ReplicaAware(Protocol):
    def replica_states(self) -> list[object]: ...

    def replica_pool_stats(self) -> dict[str, dict[str, int]]: ...


class _DatabaseCollector:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._databases: dict[str, Database] = {}

    def add(self, service: str, database: Database) -> None:
        with self._lock:
            self._databases[service] = database

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            databases = dict(self._databases)
        gauges = {
            key: GaugeMetricFamily(name, text, labels=["service", "pool"])
            for key, (name, text) in _GAUGES.items()
        }
        timeouts = CounterMetricFamily(
            "memory_db_pool_timeouts",
            "Calls that got no database connection in time.",
            labels=["service", "pool"],
        )
        lag_seconds = GaugeMetricFamily(
            "memory_read_replica_lag_seconds",
            "Replay lag of a read replica, seconds.",
            labels=["service", "replica"],
        )
        lag_bytes = GaugeMetricFamily(
            "memory_read_replica_lag_bytes",
            "Replay lag of a read replica, bytes of WAL.",
            labels=["service", "replica"],
        )
        up = GaugeMetricFamily(
            "memory_read_replica_up", "1 while reads may use the replica.", labels=["service", "replica"]
        )
        for service, database in databases.items():
            pools = {"primary": database.pool_stats()}
            if hasattr(database, "replica_states"):
                routed: _ReplicaAware = database  # type: ignore[assignment]
                pools.update(routed.replica_pool_stats())
                for state in routed.replica_states():
                    name = str(getattr(state, "name", ""))
                    up.add_metric([service, name], 1.0 if getattr(state, "usable", False) else 0.0)
                    seconds, size = getattr(state, "lag_seconds", None), getattr(state, "lag_bytes", None)
                    if seconds is not None:
                        lag_seconds.add_metric([service, name], float(seconds))
                    if size is not None:
                        lag_bytes.add_metric([service, name], float(size))
            for pool, stats in pools.items():
                for key, family in gauges.items():
                    family.add_metric([service, pool], float(stats.get(key, 0)))
                timeouts.add_metric([service, pool], float(stats.get("requests_errors", 0)))
        yield from gauges.values()
        yield from (timeouts, lag_seconds, lag_bytes, up)


_collectors: dict[int, _DatabaseCollector] = {}
_collectors_lock = threading.Lock()


def register_database_metrics(
    service: str, database: Database, registry: CollectorRegistry = REGISTRY
) -> None:
    """Exports the pool (and, for a `RoutedDatabase`, replica) metrics of ``database`` labelled ``service``.

    A later call for the same ``service`` replaces the database (tests build several servers).
    """
    with _collectors_lock:
        collector = _collectors.get(id(registry))
        if collector is None:
            collector = _DatabaseCollector()
            registry.register(collector)
            _collectors[id(registry)] = collector
    collector.add(service, database)
