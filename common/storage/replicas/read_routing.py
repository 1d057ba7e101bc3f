"""Reads on streaming replicas, read-after-write with consistency tokens (docs/explanation/architecture.md; docs/how-to/read-replicas.md).

`RoutedDatabase` is the query service's `Database`: migrations, writes (`run_transaction`: audit events)
and `primary_connection` (the context-trace journal) use the primary, ``CB_DATABASE_URL``, as the base
class does; `connection` and `read_connection` (every read, the rankings of a search included) go to one of the replicas of ``CB_READ_DATABASE_URL`` (one DSN,
or a JSON list of DSNs: one pool each). The policy, per read:

* no replica configured: the primary (as without this module);
* no consistency token (`common.kernel.consistency.required_position` is None): the next usable replica
  in turn, as fresh as it is (its lag is measured every readiness check: `replica_states`); when no
  replica answers, the primary;
* a token: a replica known to have replayed its position, else the most advanced usable replica, whose
  replay position is polled for up to ``CB_CONSISTENCY_WAIT_MS``; when none gets there in time (or none
  answers), ``CB_CONSISTENCY_FALLBACK`` decides: ``primary`` reads the primary (always past the
  position), ``unavailable`` raises `Unavailable` (reason ``REPLICA_BEHIND`` or ``REPLICA_UNAVAILABLE``),
  retryable.

A replica that fails is skipped until a readiness check (every 2 s) reaches it again. Each outcome is counted (`memory_consistent_reads_total`, `memory_replica_reads_total`).

A dying replica costs a read at most the policy's wait (``CB_CONSISTENCY_WAIT_MS``, at least
`MIN_REPLICA_WAIT_SECONDS`; docs/how-to/read-replicas.md), token or not: a replica connection is waited for
that long (the pool's checkout; new connections with a libpq ``connect_timeout`` of about as long), a
token's replay is polled only for what is left of it, and TCP keepalives (`REPLICA_KEEPALIVES`) end a
read whose replica vanished without closing its sockets. After that the replica is marked unusable and
reads go elsewhere at once.
Readiness stays the primary's: without it nothing migrates and nothing can be written.
"""

from __future__ import annotations

import contextvars
import itertools
import json
import logging
import math
import threading
import time
from collections.abc import Callable
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from typing import TypeVar

import psycopg
from prometheus_client import Counter
from psycopg_pool import ConnectionPool

from common.kernel.config import Settings
from common.kernel.consistency import format_lsn
from common.kernel.consistency import parse_lsn
from common.kernel.consistency import required_position
from common.kernel.errors import Unavailable
from common.storage.database import Database
from common.storage.database import is_unavailable_error
from common.storage.named_queries import Queries
from common.storage.session import autocommitting

__all__ = [
    "MIN_REPLICA_WAIT_SECONDS",
    "REPLICA_KEEPALIVES",
    "ReplicaState",
    "RoutedDatabase",
    "read_database_urls",
    "replica_connect_options",
    "replica_wait_seconds",
]

log = logging.getLogger(__name__)
T = TypeVar("T")

MIN_REPLICA_WAIT_SECONDS = 0.25  # with CB_CONSISTENCY_WAIT_MS=0 a busy pool still gets this long
# libpq keepalives of replica connections: a peer gone without a FIN/RST is noticed in about 1 + 1 * 2 s.
REPLICA_KEEPALIVES = {"keepalives": 1, "keepalives_idle": 1, "keepalives_interval": 1, "keepalives_count": 2}
_POLL_FIRST_SECONDS = 0.001
_POLL_MAX_SECONDS = 0.02
_QUERIES = Queries("replication.sql", {})

_primary_only: contextvars.ContextVar[bool] = contextvars.ContextVar("memory_primary_only", default=False)

CONSISTENT_READS = Counter(
    "memory_consistent_reads_total",
    "Reads with a consistency token, by outcome: replica (already replayed), replica_waited, "
    "primary_fallback, unavailable.",
    ("outcome",),
)
REPLICA_READS = Counter(
    "memory_replica_reads_total",
    "Reads (connections) by target: replica or primary (no replica usable, or none configured).",
    ("target",),
)


def read_database_urls(settings: Settings) -> list[str]:
    """The read DSNs of ``settings.read_database_url``: empty, one DSN, or a JSON list of DSNs.

    Raises:
        ValueError: a JSON list that is not a list of non-empty strings.
    """
    text = settings.read_database_url.strip()
    if not text:
        return []
    if not text.startswith("["):
        return [text]
    urls = json.loads(text)
    if not isinstance(urls, list) or not all(isinstance(url, str) and url.strip() for url in urls):
        raise ValueError("CB_READ_DATABASE_URL: a JSON list must hold non-empty DSN strings")
    return [url.strip() for url in urls]


@dataclass
class ReplicaState:
    """What is known of one replica (updated by reads and by every readiness check).

    Attributes:
        name: ``replica-<n>`` (its place in ``CB_READ_DATABASE_URL``; the DSN holds credentials).
        replayed: highest WAL position seen replayed (integer ``pg_lsn``; 0 before the first look).
        lag_seconds: seconds the replay is behind the primary (0 when caught up; None: unknown).
        lag_bytes: bytes of WAL the replay is behind the primary's current position (None: unknown).
        usable: False after a failure, until a readiness check (every 2 s) reaches it again.
        in_recovery: True for a standby; False when the DSN reaches a primary (e.g. after a promotion).
    """

    name: str
    replayed: int = 0
    lag_seconds: float | None = None
    lag_bytes: int | None = None
    usable: bool = True
    in_recovery: bool = True


def replica_wait_seconds(settings: Settings) -> float:
    """The longest a read waits for a replica (its connection, then a token's replay): the policy's
    ``consistency_wait_ms``, at least `MIN_REPLICA_WAIT_SECONDS`."""
    return max(settings.consistency_wait_ms / 1000.0, MIN_REPLICA_WAIT_SECONDS)


def replica_connect_options(settings: Settings) -> dict[str, int]:
    """libpq options of every replica connection: a ``connect_timeout`` within the wait (whole seconds,
    libpq takes no less than 2) and `REPLICA_KEEPALIVES`."""
    return {"connect_timeout": max(2, math.ceil(replica_wait_seconds(settings))), **REPLICA_KEEPALIVES}


class _Replica:
    def __init__(self, name: str, dsn: str, settings: Settings, database: RoutedDatabase) -> None:
        self.state = ReplicaState(name)
        self.dsn = dsn
        self.lock = threading.Lock()
        self.connect_options = replica_connect_options(settings)
        self.pool = ConnectionPool(
            dsn,
            min_size=settings.pool_min_size,
            max_size=settings.pool_max_size,
            kwargs=dict(self.connect_options),
            configure=database.configure_connection,
            check=ConnectionPool.check_connection,
            open=False,
            timeout=replica_wait_seconds(settings),
            reconnect_timeout=0,
            reconnect_failed=self._reconnect_failed,
            name=f"memory-{name}",
        )
        self.opened = False

    def open(self) -> None:
        with self.lock:
            if not self.opened:
                self.pool.open(wait=False)
                self.opened = True

    def usable(self) -> bool:
        return self.state.usable

    def _reconnect_failed(self, pool: ConnectionPool) -> None:
        """The pool could not open a connection (refused, timed out): the reads that follow skip the
        replica at once instead of each waiting for the pool."""
        self.failed(ConnectionError(f"pool {pool.name} could not reconnect"))

    def failed(self, error: BaseException) -> None:
        if self.state.usable:
            log.warning(
                "read replica %s unusable until a readiness check reaches it: %s", self.state.name, error
            )
        self.state.usable = False

    def saw(self, position: int) -> None:
        with self.lock:
            self.state.replayed = max(self.state.replayed, position)


class RoutedDatabase(Database):
    """A `Database` whose reads go to read replicas (see the module docstring for the policy).

    Args:
        settings: ``database_url`` (primary), ``read_database_url``, ``consistency_wait_ms``,
            ``consistency_fallback`` and the pool settings (each replica gets a pool of that size).
        options: as for `Database` (``embedding_model``, ``prepare``).
    """

    def __init__(self, settings: Settings, **options: Any) -> None:
        super().__init__(settings, **options)
        self._replicas = [
            _Replica(f"replica-{index}", dsn, settings, self)
            for index, dsn in enumerate(read_database_urls(settings))
        ]
        self._turn = itertools.count()
        self._wait_seconds = settings.consistency_wait_ms / 1000.0
        self._replica_wait = replica_wait_seconds(settings)
        self._fallback = settings.consistency_fallback

    def configure_connection(self, conn: psycopg.Connection[Any]) -> None:
        """The session set-up of every pooled connection (AGE, search_path, timeouts, vector types)."""
        self._configure(conn)

    def replica_states(self) -> list[ReplicaState]:
        """A snapshot of what is known of each replica (health details, metrics)."""
        return [ReplicaState(**vars(replica.state)) for replica in self._replicas]

    # -- the primary ------------------------------------------------------------------------------

    @contextmanager
    def primary_connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection of the primary in one transaction: for the writes of the read side."""
        token = _primary_only.set(True)
        try:
            with super().connection() as conn:
                yield conn
        finally:
            _primary_only.reset(token)

    def run_transaction(self, work: Callable[[psycopg.Connection[Any]], T], *, attempts: int = 8) -> T:
        """`Database.run_transaction` on the primary (writes never go to a replica)."""
        token = _primary_only.set(True)
        try:
            return super().run_transaction(work, attempts=attempts)
        finally:
            _primary_only.reset(token)

    # -- reads ------------------------------------------------------------------------------------

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection for a read, in one transaction, on the database the policy picks.

        Raises:
            Unavailable: the chosen database cannot be reached, or (fallback ``unavailable``) no replica
                replayed the token's position in time (reason ``REPLICA_BEHIND``) or none answers
                (reason ``REPLICA_UNAVAILABLE``).
            FailedPrecondition: the schema does not fit this service's settings.
        """
        with self._routed(in_transaction=True) as conn:
            yield conn

    @contextmanager
    def read_connection(self) -> Iterator[psycopg.Connection[Any]]:
        """`Database.read_connection` (autocommit, no BEGIN/COMMIT) on the database the policy picks, so
        the rankings of a search read the replica and honour the consistency token like every read.

        Raises:
            Unavailable, FailedPrecondition: as `connection`.
        """
        with self._routed(in_transaction=False) as conn:
            yield conn

    @contextmanager
    def _routed(self, *, in_transaction: bool) -> Iterator[psycopg.Connection[Any]]:
        primary = super().connection if in_transaction else super().read_connection
        if _primary_only.get() or not self._replicas:
            with primary() as conn:
                yield conn
            return
        self._ensure_schema()
        required = required_position()
        for replica in self._candidates(required):
            checked_out = self._checkout(replica, required)
            if checked_out is None:
                continue
            REPLICA_READS.labels("replica").inc()
            try:
                if in_transaction:
                    with checked_out.transaction():
                        yield checked_out
                else:
                    with autocommitting(checked_out):
                        yield checked_out
            except BaseException as error:
                if is_unavailable_error(error):
                    replica.failed(error)
                    raise Unavailable("read replica unavailable; retry later") from error
                if isinstance(error, psycopg.errors.SerializationFailure):
                    # A standby cancels a query whose rows WAL replay must remove (conflict with recovery).
                    raise Unavailable(
                        "the read replica cancelled the read (conflict with recovery); retry the call",
                        reason="REPLICA_CONFLICT",
                    ) from error
                raise
            finally:
                replica.pool.putconn(checked_out)
            return
        REPLICA_READS.labels("primary").inc()
        if required is not None:
            self._fall_back(required)
        with primary() as conn:
            yield conn

    def _candidates(self, required: int | None) -> list[_Replica]:
        usable = [replica for replica in self._replicas if replica.usable()]
        if not usable:
            return []
        start = next(self._turn) % len(usable)
        ordered = usable[start:] + usable[:start]
        if required is None:
            return ordered
        # Already there first (in turn), then the most advanced: only one replica is waited for.
        ahead = [replica for replica in ordered if replica.state.replayed >= required]
        if ahead:
            return ahead
        return [max(ordered, key=lambda replica: replica.state.replayed)]

    def _checkout(self, replica: _Replica, required: int | None) -> psycopg.Connection[Any] | None:
        """A connection of ``replica`` that has replayed ``required`` (idle, no transaction), or None;
        within the replica wait, checkout and replay together (see the module doc)."""
        replica.open()
        deadline = time.monotonic() + self._replica_wait
        try:
            conn = replica.pool.getconn(timeout=self._replica_wait)
        except Exception as error:  # noqa: BLE001 - PoolTimeout or a refused connection: try elsewhere
            replica.failed(error)  # the reads that follow no longer wait for it
            return None
        if not replica.usable():  # marked dead while this read waited: do not use what it handed out
            replica.pool.putconn(conn)
            return None
        try:
            if required is None or replica.state.replayed >= required:
                if required is not None:
                    CONSISTENT_READS.labels("replica").inc()
                return conn
            if self._wait_for(conn, replica, required, min(deadline, time.monotonic() + self._wait_seconds)):
                CONSISTENT_READS.labels("replica_waited").inc()
                return conn
        except psycopg.Error as error:
            replica.failed(error)
        replica.pool.putconn(conn)
        return None

    def _wait_for(
        self, conn: psycopg.Connection[Any], replica: _Replica, required: int, deadline: float
    ) -> bool:
        pause = _POLL_FIRST_SECONDS
        while True:
            row = conn.execute(_QUERIES["replayed_wal_position"]).fetchone()
            conn.rollback()  # leaves the connection idle: the read opens its own transaction
            if row is not None and row[0] is not None:
                replica.saw(parse_lsn(str(row[0])))
            if replica.state.replayed >= required:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(pause)
            pause = min(pause * 2, _POLL_MAX_SECONDS)

    def _fall_back(self, required: int) -> None:
        if self._fallback == "primary":
            CONSISTENT_READS.labels("primary_fallback").inc()
            return
        CONSISTENT_READS.labels("unavailable").inc()
        any_usable = any(replica.usable() for replica in self._replicas)
        if any_usable:
            raise Unavailable(
                f"no read replica replayed the write of this consistency token ({format_lsn(required)}) "
                f"within {self._wait_seconds * 1000:.0f} ms; retry the call",
                reason="REPLICA_BEHIND",
            )
        raise Unavailable("no read replica answers; retry the call", reason="REPLICA_UNAVAILABLE")

    # -- readiness, lag, shutdown -----------------------------------------------------------------

    def ensure_ready(self) -> bool:
        """The primary's readiness (`Database.ensure_ready`); measures every replica's lag on the way."""
        ready = super().ensure_ready()
        if self._replicas:
            self.refresh_replicas(primary_ready=ready)
        return ready

    def refresh_replicas(self, *, primary_ready: bool = True) -> None:
        """Measures each replica's replay position and lag behind the primary. Never raises."""
        primary_position: int | None = None
        if primary_ready:
            try:
                with self.primary_connection() as conn:
                    row = conn.execute(_QUERIES["current_wal_position"]).fetchone()
                primary_position = parse_lsn(str(row[0])) if row else None
            except Exception as error:  # noqa: BLE001 - readiness must never raise
                log.warning("primary WAL position unknown: %s", error)
        for replica in self._replicas:
            self._refresh(replica, primary_position)

    def _refresh(self, replica: _Replica, primary_position: int | None) -> None:
        try:
            with psycopg.connect(replica.dsn, autocommit=True, **replica.connect_options) as conn:
                row = conn.execute(_QUERIES["replica_status"]).fetchone()
        except Exception as error:  # noqa: BLE001 - readiness must never raise
            replica.failed(error)
            replica.state.lag_seconds = replica.state.lag_bytes = None
            return
        assert row is not None
        in_recovery, replayed_text, replay_age = row
        state = replica.state
        if replayed_text is not None:
            replica.saw(parse_lsn(str(replayed_text)))
        state.in_recovery = bool(in_recovery)
        if not state.usable:
            log.info("read replica %s usable again", state.name)
        state.usable = True
        if primary_position is None:
            state.lag_bytes = state.lag_seconds = None
        elif state.replayed >= primary_position or not in_recovery:
            state.lag_bytes, state.lag_seconds = 0, 0.0
        else:
            state.lag_bytes = primary_position - state.replayed
            state.lag_seconds = float(replay_age) if replay_age is not None else None

    def close(self) -> None:
        """Closes the replicas' pools and the primary's (idempotent)."""
        for replica in self._replicas:
            with replica.lock:
                if replica.opened:
                    replica.pool.close()
                    replica.opened = False
        super().close()

    def replica_health(self) -> dict[str, bool]:
        """``{"read-replica-<n>": usable}`` for the health service (set after each readiness check)."""
        return {f"read-{replica.state.name}": replica.state.usable for replica in self._replicas}

    def replica_pool_stats(self) -> dict[str, dict[str, int]]:
        """``psycopg_pool`` statistics of each opened replica pool, by replica name."""
        return {r.state.name: dict(r.pool.get_stats()) for r in self._replicas if r.opened}
