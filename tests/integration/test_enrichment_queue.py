"""The enrichment queue on the real database: migration 0016 (procrastinate's schema,
idempotent) and the queue's plumbing with a real procrastinate worker in this process: retries with
back-off, one job at a time per memory, the periodic sweep that re-enqueues what is due."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from procrastinate.schema import SchemaManager

from common.kernel.config import Settings
from common.storage.database import Database
from common.storage.schema import migrations
from common.storage.schema.queue_migration import MIGRATION_NAME
from ingest_service.memories.enrichment.queue import ENRICH_TASK
from ingest_service.memories.enrichment.queue import EnrichmentQueue
from ingest_service.memories.enrichment.queue import memory_lock
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(300)


def _queue_settings(settings: Settings) -> Settings:
    return settings.model_copy(
        update={"enrichment_retry_wait_seconds": 1, "enrichment_attempts": 3, "shutdown_grace_seconds": 5}
    )


@pytest.fixture
def fresh_database(fresh_settings: Settings) -> Iterator[Database]:
    database = Database(fresh_settings, prepare=migrations.apply)
    migrations.apply(database)
    yield database
    database.close()


def _job_states(url: str) -> list[tuple[str, str, int]]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT status::text, args->>'version', attempts FROM procrastinate_jobs"
            " WHERE task_name = %s ORDER BY id",
            (ENRICH_TASK,),
        ).fetchall()
    return [(row[0], row[1], row[2]) for row in rows]


def test_migration_applies_the_queue_schema_once(fresh_database: Database) -> None:
    url = fresh_database.settings.database_url
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT to_regclass('procrastinate_jobs') IS NOT NULL").fetchone() == (True,)
        assert conn.execute(
            "SELECT count(*) FROM memory_schema_migrations WHERE name = %s", (MIGRATION_NAME,)
        ).fetchone() == (1,)
        # run again from scratch of the journal entry: the schema is found and left alone
        conn.execute("DELETE FROM memory_schema_migrations WHERE name = %s", (MIGRATION_NAME,))
    assert migrations.apply(fresh_database) == [MIGRATION_NAME]
    assert migrations.apply(fresh_database) == []


def test_a_schema_applied_by_procrastinate_itself_is_kept(fresh_settings: Settings) -> None:
    with psycopg.connect(fresh_settings.database_url, autocommit=True) as conn:
        conn.execute(SchemaManager.get_schema().encode())
        conn.execute("INSERT INTO procrastinate_jobs (queue_name, task_name) VALUES ('q', 'kept')")
    database = Database(fresh_settings, prepare=migrations.apply)
    try:
        assert MIGRATION_NAME in migrations.apply(database)  # recorded, and nothing recreated
    finally:
        database.close()
    with psycopg.connect(fresh_settings.database_url) as conn:
        assert conn.execute("SELECT task_name FROM procrastinate_jobs").fetchall() == [("kept",)]


def test_jobs_retry_with_back_off_and_never_run_twice_at_once(fresh_database: Database) -> None:
    settings = _queue_settings(fresh_database.settings)
    calls: list[tuple[str, int]] = []
    running: set[str] = set()
    overlaps: list[str] = []
    lock = threading.Lock()

    def job(namespace: str, memory_id: str, version: int) -> bool:
        with lock:
            if memory_id in running:
                overlaps.append(memory_id)
            running.add(memory_id)
            calls.append((memory_id, version))
            first = sum(1 for call in calls if call[0] == memory_id) == 1
        time.sleep(0.2)
        with lock:
            running.discard(memory_id)
        if memory_id == "flaky" and first:
            raise RuntimeError("fails once")
        if memory_id == "broken":
            raise RuntimeError("always fails")
        return True

    queue = EnrichmentQueue(settings, job=job)
    queue.open()
    try:
        assert queue.defer_due([("ns", "flaky", 1), ("ns", "broken", 1), ("ns", "steady", 1)]) == 3
        assert queue.defer_due([("ns", "steady", 2)]) == 0  # one job waits per memory (queueing lock)
        # a batch holding a memory whose job waits: that one is skipped, nothing deferred twice
        assert queue.defer_due([("ns", "broken", 2), ("ns", "steady", 3)]) == 0
    finally:
        queue.close()
    with queue.running(concurrency=3):
        wait_for(
            lambda: (
                sorted(s for s, _, _ in _job_states(settings.database_url))
                == ["failed", "succeeded", "succeeded"]
            ),
            "every job done",
        )
    attempts = sorted(attempt for _, _, attempt in _job_states(settings.database_url))
    assert attempts == [1, 2, 3]  # steady once, flaky twice, broken CB_ENRICHMENT_ATTEMPTS times
    assert [call for call in calls if call[0] == "flaky"] == [("flaky", 1), ("flaky", 1)]
    assert not overlaps
    assert memory_lock("ns", "flaky") == "memory:ns/flaky"


def test_the_sweep_enqueues_what_is_due(fresh_database: Database) -> None:
    """A memory made due whose job was never deferred (the process died after the commit) is enqueued by
    the periodic sweep, and enriched."""
    settings = _queue_settings(fresh_database.settings)
    due = {("ns", "lost", 4)}
    done: list[tuple[str, int]] = []

    def job(namespace: str, memory_id: str, version: int) -> bool:
        due.discard((namespace, memory_id, version))
        done.append((memory_id, version))
        return True

    queue = EnrichmentQueue(settings, job=job, due=lambda limit: sorted(due)[:limit])
    with queue.running(concurrency=1):
        wait_for(lambda: done == [("lost", 4)], "the swept memory enriched")
    assert _job_states(settings.database_url) == [("succeeded", "4", 1)]


def test_due_without_job_skips_memories_with_a_job_or_a_failed_current_version(
    fresh_database: Database, provider: Any
) -> None:
    """`EnrichmentJobStore.due_without_job`: a due memory with a job waiting or running is not due for
    the sweep, nor one whose current version's job failed for good; an older version's failure is no
    reason to skip it, and an enriched memory is never due."""
    from common.domain.memory_scope import MemoryScope
    from common.storage.enrichment_jobs_store import EnrichmentJobStore
    from ingest_service.memories.validation import NewMemoryInput
    from ingest_service.memories.writer import MemoryWriter

    settings = fresh_database.settings
    database = Database(settings, embedding_model=provider.model_id, prepare=migrations.apply)
    try:
        results = MemoryWriter(database, provider).add(
            MemoryScope("acme", "production", "", "u1"),
            [NewMemoryInput(text=f"memory {name}", idempotency_key=name) for name in "abcde"],
        )
    finally:
        database.close()
    ids = dict(zip("abcde", (r.memory_id for r in results), strict=True))
    namespace = "org:acme:env:production"

    def job(memory: str, status: str, version: int) -> None:
        with psycopg.connect(settings.database_url) as conn:
            conn.execute(
                "INSERT INTO procrastinate_jobs (queue_name, task_name, queueing_lock, status, args)"
                " VALUES ('enrichment', %s, %s, %s, %s)",
                (
                    ENRICH_TASK,
                    memory_lock(namespace, ids[memory]),
                    status,
                    json.dumps({"namespace": namespace, "memory_id": ids[memory], "version": version}),
                ),
            )

    job("a", "todo", 1)
    job("b", "doing", 1)
    job("c", "failed", 1)  # version 1 is the current one: given up
    job("d", "failed", 0)  # an older version failed: d's version 1 is still due
    store = EnrichmentJobStore(settings)
    with psycopg.connect(settings.database_url) as conn:
        due = {memory_id for _, memory_id, _ in store.due_without_job(conn, task=ENRICH_TASK, limit=100)}
        assert store.failed_jobs(conn, task=ENRICH_TASK, limit=10)[0][1] == ids["d"]
        conn.execute("UPDATE memories SET enriched_version = version WHERE memory_id = %s", (ids["e"],))
        after = {memory_id for _, memory_id, _ in store.due_without_job(conn, task=ENRICH_TASK, limit=100)}
    assert due == {ids["d"], ids["e"]}
    assert after == {ids["d"]}
