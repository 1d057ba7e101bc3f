"""Migration 0016: the schema of the enrichment queue, procrastinate's own.

The worker queue is procrastinate (`ingest_service.memories.enrichment.queue`) on the service's database. Its
tables, types and functions (``procrastinate_jobs``, ``procrastinate_events``, ``procrastinate_periodic_
defers``, ``procrastinate_workers``, ``procrastinate_defer_jobs_v1`` ...) are the ``schema.sql`` that the
installed procrastinate ships (`procrastinate.schema.SchemaManager.get_schema`), run as one script in
the migration's transaction (`common.storage.schema.migrations.apply`, under the migration advisory lock),
then one index of ours, ``procrastinate_jobs_enrichment_lock_idx`` (the enrichment sweep looks a memory's
jobs up by queueing lock whatever their status, `common.storage.enrichment_jobs_store`).

Idempotent: when ``procrastinate_jobs`` already exists (the schema was applied by procrastinate's own
``schema --apply``, or by this step) procrastinate's script does not run; the index is ``IF NOT EXISTS``. procrastinate is pinned to one minor version in
pyproject.toml: a newer minor's schema changes are its ``sql/migrations/*.sql``, which a later migration
of ours must apply.
"""

from __future__ import annotations

from typing import Any

import psycopg
from procrastinate.schema import SchemaManager

from common.storage.named_queries import Queries

MIGRATION_NAME = "0016_enrichment_queue"


def apply_queue_schema(conn: psycopg.Connection[Any], queries: Queries) -> bool:
    """Creates procrastinate's schema in ``conn``'s transaction unless it exists.

    Returns:
        True when the schema was created now, False when it was there.
    """
    row = conn.execute(queries["queue_schema_exists"]).fetchone()
    created = not (row is not None and row[0])
    if created:
        # procrastinate's own script: static text shipped with the package, no parameters.
        conn.execute(SchemaManager.get_schema().encode("utf-8"))
    conn.execute(queries["create_enrichment_job_index"])
    return created
