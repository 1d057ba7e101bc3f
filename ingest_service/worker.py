"""The enrichment worker process (``cb worker``): wiring of the queue's tasks, as
`ingest_service.main` wires the ingest service.

`build_worker` migrates the database (idempotent: the queue's schema is migration 0016), then builds the
`ingest_service.memories.enrichment.queue.EnrichmentQueue` with:

* the job: `ingest_service.memories.enrichment.jobs.EnrichmentJob` with the configured enricher; the rule
  enricher behind `ingest_service.memories.enrichment.batching.BatchingEnricher`, so the jobs running at
  once share one call of the language models;
* the sweep's look-up: `common.storage.enrichment_jobs_store.EnrichmentJobStore.due_without_job`;
* the maintenance: `ingest_service.memories.maintenance.MemoryMaintenance.run` (tier policy, expiry sweep),
  then the namespaces' retention rules (`ingest_service.data_protection.retention.RetentionEnforcer`).

`run_worker` runs it until SIGTERM/SIGINT, and runs it again when it stops by itself: procrastinate stops a
worker whose side task (the LISTEN connection, the heartbeat) fails, which a database restart causes, and
the process must outlive a restart of its database as the services do.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Sequence
from typing import Any

import numpy as np

from common.kernel.config import Settings
from common.kernel.errors import FailedPrecondition
from common.storage.database import Database
from common.storage.enrichment_jobs_store import EnrichmentJobStore
from common.storage.schema import migrations
from ingest_service.change_feed.delivery import WebhookDeliverer
from ingest_service.change_feed.delivery import WebhookDispatcher
from ingest_service.change_feed.webhook_queue import QUEUE as WEBHOOK_QUEUE
from ingest_service.change_feed.webhook_queue import register_webhook_tasks
from ingest_service.data_protection.retention import RetentionEnforcer
from ingest_service.memories.enrichment.batching import BatchingEnricher
from ingest_service.memories.enrichment.factory import build_enricher
from ingest_service.memories.enrichment.jobs import EnrichmentJob
from ingest_service.memories.enrichment.language_models import load_models
from ingest_service.memories.enrichment.model import Enricher
from ingest_service.memories.enrichment.queue import ENRICH_TASK
from ingest_service.memories.enrichment.queue import EnrichmentQueue
from ingest_service.memories.enrichment.queue import quiet_routine_jobs
from ingest_service.memories.enrichment.rule_enricher import RuleEnricher
from ingest_service.memories.maintenance import MemoryMaintenance
from ingest_service.memories.writer import MemoryWriter
from ingest_service.observations.removal import ObservationRemover

log = logging.getLogger("memory.worker")
# Seconds between restarts of a worker that stopped by itself (the database unreachable), doubling to the cap.
RESTART_DELAY_SECONDS = 1.0
RESTART_DELAY_CAP_SECONDS = 30.0


class _NoPassages:
    """The worker writes no memory text (maintenance only deletes), so it loads no embedding model."""

    def encode_passages(self, texts: Sequence[str]) -> np.ndarray:
        raise FailedPrecondition("the enrichment worker embeds no passages")


def build_worker(
    settings: Settings, *, concurrency: int, enricher: Enricher | None = None
) -> tuple[EnrichmentQueue, Database]:
    """The worker's queue and database (see the module doc); ``enricher`` replaces the configured one.

    Raises:
        ValueError: the enricher's settings are invalid (``CB_ENRICHMENT_LLM_*``).
        psycopg.Error: the database is unreachable.
    """
    chosen = enricher or build_enricher(settings)
    if isinstance(chosen, RuleEnricher):
        chosen = BatchingEnricher(chosen)
    database = Database(settings, prepare=migrations.apply)
    migrations.apply(database)
    job = EnrichmentJob(database, chosen)
    jobs = EnrichmentJobStore(settings)

    def due(limit: int) -> list[tuple[str, str, int]]:
        with database.connection() as conn:
            return jobs.due_without_job(conn, task=ENRICH_TASK, limit=limit)

    writer = MemoryWriter(database, _NoPassages())
    maintenance = MemoryMaintenance(database, writer, settings)
    retention = RetentionEnforcer(database, ObservationRemover(database), writer)

    def maintain() -> Any:
        report = maintenance.run()
        retention.enforce()  # the namespaces' retention rules, in the same round
        return report

    queue = EnrichmentQueue(
        settings, job=job.run, due=due, maintenance=maintain, max_connections=concurrency + 3
    )
    register_webhook_tasks(
        queue.app,
        WebhookDispatcher(database),
        WebhookDeliverer(database, settings),
        dispatch_cron=settings.webhook_dispatch_cron,
    )
    queue.queues.append(WEBHOOK_QUEUE)
    return queue, database


def run_worker(settings: Settings, concurrency: int) -> None:
    """Runs the enrichment worker in the foreground until SIGTERM/SIGINT (running jobs finish first).

    A worker that stops by itself (procrastinate stops it when a side task fails, e.g. its LISTEN
    connection dies in a database restart) is started again after a delay that doubles from
    `RESTART_DELAY_SECONDS` to `RESTART_DELAY_CAP_SECONDS`; jobs it held are retried (stalled-job retry
    of the queue), so nothing is lost.
    """
    queue, database = build_worker(settings, concurrency=concurrency)
    quiet_routine_jobs()  # an idle worker runs the sweep every second: nothing to say about it
    load_models()  # the first job does not wait for the language models
    try:
        asyncio.run(_supervise(queue, concurrency))
    finally:
        database.close()


async def _supervise(queue: EnrichmentQueue, concurrency: int) -> None:
    """Runs ``queue``'s worker, restarting it whenever it stops without a stop signal."""
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    current: dict[str, asyncio.Task[None]] = {}

    def request_stop() -> None:
        stopping.set()
        if "task" in current:
            current["task"].cancel()  # procrastinate then stops fetching and lets running jobs finish

    for stop_signal in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(stop_signal, request_stop)
    delay = RESTART_DELAY_SECONDS
    while not stopping.is_set():
        started = loop.time()
        current["task"] = asyncio.create_task(queue.run_worker(concurrency, install_signal_handlers=False))
        try:
            await current["task"]
        except asyncio.CancelledError:
            if not stopping.is_set():
                raise
        except Exception:  # the database unreachable at start-up or mid-run: retried below
            log.exception("enrichment worker failed")
        if stopping.is_set():
            break
        if loop.time() - started > RESTART_DELAY_CAP_SECONDS:
            # it ran healthy for a while: a new failure starts the back-off again
            delay = RESTART_DELAY_SECONDS
        log.warning(
            "enrichment worker stopped by itself (database unreachable?); restarting in %.0f s", delay
        )
        try:
            await asyncio.wait_for(stopping.wait(), timeout=delay)
        except TimeoutError:
            pass
        delay = min(delay * 2, RESTART_DELAY_CAP_SECONDS)
