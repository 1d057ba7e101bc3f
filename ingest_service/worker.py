"""The enrichment worker process (``cb worker``; issue 12 §4): wiring of the queue's tasks, as
`ingest_service.main` wires the ingest service.

`build_worker` migrates the database (idempotent: the queue's schema is migration 0016), then builds the
`ingest_service.enrichment.queue.EnrichmentQueue` with:

* the job: `ingest_service.enrichment.jobs.EnrichmentJob` with the configured enricher;
* the sweep's look-up: `common.storage.enrichment_jobs_store.EnrichmentJobStore.due_without_job`;
* the maintenance: `ingest_service.memory_maintenance.MemoryMaintenance.run` (tier policy, expiry sweep).

`run_worker` runs it until SIGTERM/SIGINT.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import numpy as np

from common.kernel.config import Settings
from common.kernel.errors import FailedPrecondition
from common.storage.database import Database
from common.storage.enrichment_jobs_store import EnrichmentJobStore
from ingest_service.enrichment.factory import build_enricher
from ingest_service.enrichment.jobs import EnrichmentJob
from ingest_service.enrichment.language_models import load_models
from ingest_service.enrichment.model import Enricher
from ingest_service.enrichment.queue import ENRICH_TASK, EnrichmentQueue
from ingest_service.memory_maintenance import MemoryMaintenance
from ingest_service.memory_writer import MemoryWriter


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
    database = Database(settings)
    database.migrate()
    job = EnrichmentJob(database, chosen)
    jobs = EnrichmentJobStore(settings)

    def due(limit: int) -> list[tuple[str, str, int]]:
        with database.connection() as conn:
            return jobs.due_without_job(conn, task=ENRICH_TASK, limit=limit)

    maintenance = MemoryMaintenance(database, MemoryWriter(database, _NoPassages()), settings)

    def maintain() -> Any:
        return maintenance.run()

    queue = EnrichmentQueue(
        settings, job=job.run, due=due, maintenance=maintain, max_connections=concurrency + 3
    )
    return queue, database


def run_worker(settings: Settings, concurrency: int) -> None:
    """Runs the enrichment worker in the foreground until SIGTERM/SIGINT (running jobs finish first)."""
    queue, database = build_worker(settings, concurrency=concurrency)
    load_models()  # the first job does not wait for the language models
    try:
        asyncio.run(queue.run_worker(concurrency))
    finally:
        database.close()
