"""The enrichment queue's reads of procrastinate's ``procrastinate_jobs``, joined with the
memories table (migration 0015): which due memories need a job. Named queries of
``sql/queries/enrichment_jobs.sql``.
"""

from __future__ import annotations

from typing import Any

import psycopg

from common.kernel.config import Settings
from common.storage.named_queries import Queries


class EnrichmentJobStore:
    """Reads for the enrichment sweep (`ingest_service.memories.enrichment.queue`).

    Args:
        settings: table names.
    """

    def __init__(self, settings: Settings) -> None:
        self.queries = Queries.for_settings("enrichment_jobs.sql", settings)

    def due_without_job(
        self, conn: psycopg.Connection[Any], *, task: str, limit: int
    ) -> list[tuple[str, str, int]]:
        """Due memories (current version not enriched) with no job waiting or running and no failed job
        for their current version, as (namespace, memory_id, version), oldest change first."""
        rows = conn.execute(self.queries["due_without_job"], {"task": task, "limit": limit}).fetchall()
        return [(str(a), str(b), int(c)) for a, b, c in rows]

    def failed_jobs(
        self, conn: psycopg.Connection[Any], *, task: str, limit: int
    ) -> list[tuple[str, str, int, int]]:
        """Jobs that exhausted their tries: (namespace, memory_id, version, attempts), newest first."""
        rows = conn.execute(self.queries["failed_jobs"], {"task": task, "limit": limit}).fetchall()
        return [(str(a), str(b), int(c), int(d)) for a, b, c, d in rows]
