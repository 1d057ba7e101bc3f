"""A statement that times out, or a transaction that keeps deadlocking, answers a retryable status and
writes nothing (under load one lock wait reached the 30 s statement timeout and answered
INTERNAL, which clients do not retry). Real database, real lock waits."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from common.kernel.config import Settings
from common.kernel.errors import Unavailable
from common.storage.database import Database
from common.storage.schema import migrations

pytestmark = pytest.mark.integration


@pytest.fixture
def impatient(settings: Settings) -> Iterator[Database]:
    """A second pool whose statements give up after 300 ms (CB_STATEMENT_TIMEOUT_MS)."""
    database = Database(settings.model_copy(update={"statement_timeout_ms": 300}), prepare=migrations.apply)
    migrations.apply(database)
    yield database
    database.close()


def test_a_lock_wait_past_the_statement_timeout_is_unavailable_and_writes_nothing(
    impatient: Database, settings: Settings
) -> None:
    key = int(uuid.uuid4().int % (2**62))
    marker = "timeout-" + uuid.uuid4().hex
    with psycopg.connect(settings.database_url, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (key,))
        try:
            with pytest.raises(Unavailable) as raised, impatient.connection() as conn:
                # A real write first, then a wait for the holder's lock past the timeout.
                conn.execute("INSERT INTO memory_schema_migrations (name) VALUES (%s)", (marker,))
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (key,))
        finally:
            holder.execute("SELECT pg_advisory_unlock(%s)", (key,))
    assert raised.value.reason == "DATABASE_TIMEOUT"
    assert "retry" in raised.value.message
    assert impatient.ensure_ready()  # a timeout is not an outage: health stays SERVING
    with impatient.connection() as conn:  # the pool still works, the lock is free, the write is gone
        assert conn.execute("SELECT pg_try_advisory_xact_lock(%s)", (key,)).fetchone() == (True,)
        found = conn.execute("SELECT count(*) FROM memory_schema_migrations WHERE name = %s", (marker,))
        assert found.fetchone() == (0,)


def test_a_transaction_that_keeps_deadlocking_is_unavailable_after_its_attempts(database: Database) -> None:
    attempts: list[int] = []

    def work(conn: Any) -> None:
        attempts.append(1)
        # A real deadlock needs two sessions; the error PostgreSQL raises for it is what the retry loop
        # sees, so the work raises that error class after doing real work in the transaction.
        conn.execute("SELECT 1")
        raise psycopg.errors.DeadlockDetected("deadlock detected")

    with pytest.raises(Unavailable) as raised:
        database.run_transaction(work, attempts=3)
    assert raised.value.reason == "TRANSACTION_CONFLICT" and len(attempts) == 3
