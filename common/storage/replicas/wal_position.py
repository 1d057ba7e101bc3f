"""The primary's WAL position after a write: the consistency token of a write RPC (docs/explanation/architecture.md).

`common.kernel.consistency` encodes it for clients; `common.storage.replicas.read_routing` makes reads wait for it.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from common.kernel.consistency import parse_lsn
from common.storage.database import Database
from common.storage.named_queries import Queries

__all__ = ["ReplicaLag", "current_wal_position", "replica_lag"]

_QUERIES = Queries("replication.sql", {})


def current_wal_position(database: Database) -> int:
    """The primary's current WAL position (integer form of ``pg_lsn``), taken on a pooled connection.

    Called after a write transaction committed, the result is at or past that commit, so a database
    that replayed it sees the write. It runs after every write RPC, so it takes an autocommit connection
    (`Database.read_connection`: one round trip, no BEGIN/COMMIT). ``database`` is the write side's
    primary `Database` (a `RoutedDatabase` would send it to a replica).

    Raises:
        Unavailable: the database cannot be reached.
    """
    with database.read_connection() as conn:
        row = conn.execute(_QUERIES["current_wal_position"]).fetchone()
    assert row is not None
    return parse_lsn(str(row[0]))


@dataclass(frozen=True)
class ReplicaLag:
    """How far a read replica is behind its primary, measured once (`replica_lag`).

    Attributes:
        standby: the database is in recovery (False: ``replica_url`` names a primary, not a replica).
        lag_bytes: WAL bytes the primary wrote that the replica has not replayed (0 or more).
        lag_seconds: seconds since the last transaction the replica replayed committed on the primary;
            None before any replay. On an idle primary this grows although nothing is missing: read it
            together with ``lag_bytes``.
    """

    standby: bool
    lag_bytes: int
    lag_seconds: float | None


def replica_lag(primary_url: str, replica_url: str, *, timeout_seconds: float) -> ReplicaLag:
    """Measures ``replica_url``'s replay against ``primary_url``'s current WAL position (one short
    connection to each; `cb health`, and the query service's readiness measures the same every 2 s).

    Raises:
        psycopg.Error: either database cannot be reached within ``timeout_seconds``.
    """
    timeout = max(1, int(timeout_seconds))
    with psycopg.connect(primary_url, connect_timeout=timeout, autocommit=True) as primary:
        row = primary.execute(_QUERIES["current_wal_position"]).fetchone()
    assert row is not None
    primary_position = parse_lsn(str(row[0]))
    with psycopg.connect(replica_url, connect_timeout=timeout, autocommit=True) as replica:
        status = replica.execute(_QUERIES["replica_status"]).fetchone()
    assert status is not None
    in_recovery, replayed, seconds = status
    return ReplicaLag(
        standby=bool(in_recovery),
        lag_bytes=max(0, primary_position - parse_lsn(str(replayed))),
        lag_seconds=None if seconds is None else max(0.0, float(seconds)),
    )
