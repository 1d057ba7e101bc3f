"""One PostgreSQL connection pool per process, and readiness.

The pool's configure hook loads AGE, sets ``search_path`` (``"$user", public, ag_catalog``: our tables
live in the first writable schema, never in AGE's own; ag_catalog last so agtype operators resolve) and
registers pgvector types (STYLE.md convention 5). psycopg errors that mean "the database is not reachable" become
`common.kernel.errors.Unavailable` at this boundary, so no psycopg type leaks into servicers. The schema is
not this module's: the schema manager (`common.storage.schema.migrations.apply`) is handed in as ``prepare``.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import weakref
from collections.abc import Callable
from collections.abc import Iterator
from contextlib import AbstractContextManager
from contextlib import contextmanager
from typing import Any
from typing import TypeVar

import psycopg
from psycopg import sql
from psycopg_pool import ConnectionPool
from psycopg_pool import PoolTimeout

from common.kernel.config import Settings
from common.kernel.errors import FailedPrecondition
from common.kernel.errors import Unavailable
from common.storage.session import autocommitting
from common.storage.session import prepare_age_session

log = logging.getLogger(__name__)
T = TypeVar("T")

# A connection returned to the pool less than this many seconds ago is handed out without the check's
# round trip: it was working a moment ago (a broken one is discarded when it fails, and the error is
# retryable, `Unavailable`); one idle for longer is checked first, as before.
RECENTLY_USED_SECONDS = 2.0

# SQLSTATE classes that mean the server or connection went away (retryable as a whole).
_UNAVAILABLE_SQLSTATES = {"57P01", "57P02", "57P03", "08000", "08003", "08006", "08001", "08004", "53300"}


def is_unavailable_error(error: BaseException) -> bool:
    """True when ``error`` means the database cannot be reached (retry later), not a bad statement."""
    if isinstance(error, (psycopg.OperationalError, PoolTimeout)):
        sqlstate = getattr(error, "sqlstate", None)
        return sqlstate is None or sqlstate in _UNAVAILABLE_SQLSTATES or sqlstate.startswith("08")
    return False


class Database:
    """The process's database access: a lazily opened pool.

    The pool is opened without waiting, so a service starts while PostgreSQL is down; `ensure_ready`
    (called by the health monitor) runs ``prepare`` on first contact.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        embedding_model: str | None = None,
        prepare: Callable[[Database], object] | None = None,
    ) -> None:
        """``embedding_model``: the model id the chunks table must have been built for (None: don't check).
        ``prepare``: run once on first contact, before the pool serves (the services pass the schema
        manager, `common.storage.schema.migrations.apply`); None: the schema is left as it is."""
        self.settings = settings
        self.embedding_model = embedding_model
        self._prepare = prepare
        self._ready = False
        self._lock = threading.Lock()
        self._pool = ConnectionPool(
            settings.database_url,
            min_size=settings.pool_min_size,
            max_size=settings.pool_max_size,
            configure=self._configure,
            check=self._check_connection,
            open=False,
            timeout=10.0,
            reconnect_timeout=0,
            name="memory",
        )
        self._pool_opened = False
        self._returned_at: weakref.WeakKeyDictionary[psycopg.Connection[Any], float] = (
            weakref.WeakKeyDictionary()
        )
        self._returned_lock = threading.Lock()

    def pool_stats(self) -> dict[str, int]:
        """psycopg_pool's statistics of the pool (``pool_size``, ``pool_available``, ``requests_waiting``,
        ...), for the pool gauges of `common.storage.pool_metrics`."""
        return dict(self._pool.get_stats())

    # -- connections -------------------------------------------------------------------------------

    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        conn.autocommit = True
        prepare_age_session(conn)
        if self.settings.statement_timeout_ms:
            conn.execute(
                sql.SQL("SET statement_timeout = {}").format(sql.Literal(self.settings.statement_timeout_ms))
            )
        # No JIT compilation: every statement of the services is short, and JIT starts on the planner's
        # cost estimate alone (jit_above_cost), then costs 50-130 ms per statement (measured on
        # a forced HNSW plan: 127 ms of JIT for 13 ms of execution).
        conn.execute("SET jit = off")
        conn.execute(sql.SQL("SET hnsw.ef_search = {}").format(sql.Literal(self.settings.hnsw_ef_search)))
        try:
            conn.execute("SET hnsw.iterative_scan = relaxed_order")
            conn.execute(
                sql.SQL("SET hnsw.max_scan_tuples = {}").format(
                    sql.Literal(self.settings.hnsw_max_scan_tuples)
                )
            )
        except psycopg.Error:
            pass  # pgvector < 0.8 (or vector not created yet); retrieval then over-fetches instead
        try:
            from pgvector.psycopg import register_vector

            register_vector(conn)
        except psycopg.ProgrammingError:
            pass  # the extension does not exist before the first migration
        conn.autocommit = False

    @contextmanager
    def _pooled(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection of the pool; when the caller is done with it, the time is noted for
        `_check_connection` on the caller's thread, just before the pool takes it back.

        Not a pool ``reset`` hook: with one, psycopg_pool hands every returned connection to one of its
        worker threads, and a connection waits there until that thread gets the GIL. With 16 clients
        Searching, that handoff held 12-13% of the query service's GIL samples (py-spy), and
        the waiting connections were missing from the pool meanwhile."""
        with self._pool.connection() as conn:
            try:
                yield conn
            finally:
                with self._returned_lock:
                    self._returned_at[conn] = time.monotonic()

    def _check_connection(self, conn: psycopg.Connection[Any]) -> None:
        """Pool ``check`` hook, run on every checkout: a round trip (``ConnectionPool.check_connection``)
        unless ``conn`` came back less than `RECENTLY_USED_SECONDS` ago. Under load every connection is
        recently used, so a checkout costs no round trip (the check, BEGIN and COMMIT of each
        of the 4 checkouts of a Search were 21% of the query service's time)."""
        with self._returned_lock:
            returned = self._returned_at.get(conn)
        if returned is None or time.monotonic() - returned >= RECENTLY_USED_SECONDS:
            ConnectionPool.check_connection(conn)

    def _open_pool(self) -> None:
        if not self._pool_opened:
            with self._lock:
                if not self._pool_opened:
                    self._pool.open(wait=False)
                    self._pool_opened = True

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection inside one transaction (committed on success, rolled back on error).

        Runs ``prepare`` (the schema manager) on first contact.

        Raises:
            Unavailable: the database cannot be reached (reason ``DATABASE_UNAVAILABLE``), or a statement
                ran into ``statement_timeout``/``lock_timeout`` (reason ``DATABASE_TIMEOUT``); nothing was
                committed and the call may be retried (a timeout answers a retryable status).
            FailedPrecondition: the schema does not fit this service's settings.
        """
        self._ensure_schema()
        with self._mapped_errors(), self._pooled() as conn, conn.transaction():
            yield conn

    @contextmanager
    def read_connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection in autocommit, for reads that need no transaction: each statement runs on
        its own snapshot, and no BEGIN or COMMIT is sent (two round trips fewer than `connection`).

        Runs ``prepare`` (the schema manager) on first contact. Use it only for a single statement or for
        statements that need not see one snapshot together (the rankings of a search).

        Raises:
            Unavailable: as `connection`.
            FailedPrecondition: the schema does not fit this service's settings.
        """
        self._ensure_schema()
        with self._mapped_errors(), self._pooled() as pooled, autocommitting(pooled) as conn:
            yield conn

    @contextmanager
    def _mapped_errors(self) -> Iterator[None]:
        """Turns psycopg errors that mean "unreachable" or "timed out" into `Unavailable` (see
        `connection`); marks the database not ready when it is unreachable."""
        try:
            yield
        except BaseException as error:
            if is_unavailable_error(error):
                self._ready = False
                raise Unavailable("database unavailable; retry later") from error
            if isinstance(error, (psycopg.errors.QueryCanceled, psycopg.errors.LockNotAvailable)):
                # statement_timeout (57014) or lock_timeout (55P03), e.g. a wait for another batch's key
                # locks: the transaction was rolled back as a whole, so the call may be retried as is.
                # The database itself is fine: readiness is not touched.
                raise Unavailable(
                    f"the database gave up on a statement ({error.sqlstate}: timeout); nothing was written, "
                    "retry the call",
                    reason="DATABASE_TIMEOUT",
                ) from error
            raise

    def primary_connection(self) -> AbstractContextManager[psycopg.Connection[Any]]:
        """`connection` on the primary: what writes of the read side use (`read_routing.RoutedDatabase`
        sends its `connection` to replicas; here both are the one database)."""
        return self.connection()

    def run_transaction(self, work: Callable[[psycopg.Connection[Any]], T], *, attempts: int = 8) -> T:
        """Runs ``work(conn)`` in one transaction, retrying the whole transaction on deadlock (40P01) or
        serialization failure (40001), which concurrent writers of overlapping keys can cause.

        ``work`` must be safe to re-run from the start (it sees nothing of a rolled-back attempt).

        Raises:
            Unavailable: the database cannot be reached, a statement timed out (see `connection`), or the
                last attempt still deadlocked (reason ``TRANSACTION_CONFLICT``); nothing was committed.
        """
        for attempt in range(1, attempts + 1):
            try:
                with self.connection() as conn:
                    return work(conn)
            except (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure) as error:
                if attempt == attempts:
                    raise Unavailable(
                        f"the transaction kept conflicting with concurrent writers ({attempts} attempts); "
                        "nothing was written, retry the call",
                        reason="TRANSACTION_CONFLICT",
                    ) from error
                log.info("transaction retry %d after a deadlock/serialization failure", attempt)
                time.sleep(random.uniform(0.01, 0.05) * attempt)
        raise AssertionError("unreachable")

    def _ensure_schema(self) -> None:
        if self._ready:
            return
        try:
            if self._prepare is not None:
                self._prepare(self)
        except (psycopg.Error, OSError) as error:
            if isinstance(error, psycopg.Error) and not is_unavailable_error(error):
                raise
            raise Unavailable("database unavailable; retry later") from error
        self._open_pool()
        self._ready = True

    # -- readiness ------------------------------------------------------------------------------

    def ensure_ready(self) -> bool:
        """Connects (and runs ``prepare`` on first contact); False while unreachable or misconfigured.

        Never raises.
        """
        try:
            if not self._ready:
                self._ensure_schema()
                return True
            with psycopg.connect(self.settings.database_url, connect_timeout=3) as conn:
                conn.execute("SELECT 1")
            return True
        except FailedPrecondition:
            log.exception("database schema does not fit this service")
            return False
        except Exception as error:  # noqa: BLE001 - readiness must never raise
            log.warning("database not ready: %s", error)
            self._ready = False
            return False

    def close(self) -> None:
        """Closes the pool (idempotent)."""
        if self._pool_opened:
            self._pool.close()
            self._pool_opened = False
