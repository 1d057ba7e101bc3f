"""Jobs of the worker's procrastinate queue that one task shares with another: the retry of stalled jobs
(`ingest_service.memories.enrichment.queue`, `ingest_service.change_feed.webhook_queue`)."""

from __future__ import annotations

import procrastinate


async def retry_stalled_jobs(app: procrastinate.App, task_name: str, seconds_since_heartbeat: float) -> int:
    """Puts the jobs of ``task_name`` whose worker sent no heartbeat for ``seconds_since_heartbeat`` back
    in the queue; returns how many."""
    manager = app.job_manager
    stalled = list(
        await manager.get_stalled_jobs(task_name=task_name, seconds_since_heartbeat=seconds_since_heartbeat)
    )
    for job in stalled:
        await manager.retry_job(job)
    return len(stalled)
