"""The enrichment queue: procrastinate on the service's PostgreSQL (schema: migration 0016,
`common.storage.schema.queue_migration`), run by `cb worker`.

**Jobs.** One task, `ENRICH_TASK` (queue `QUEUE`), with arguments ``(namespace, memory_id, version)``:
the job enriches that version of the memory (`ingest_service.memories.enrichment.jobs.EnrichmentJob`). Every job
of one memory carries the procrastinate ``lock`` and ``queueing_lock`` `memory_lock` (namespace and
memory id): jobs of one memory never run at once, and at most one waits in the queue (a second defer
while one waits is refused by procrastinate, `AlreadyEnqueued`, and ignored here).

**At least once, idempotent per version.** A memory's add or update makes it due in its own transaction
(``enriched_version < version``, migration 0015); the job records ``enriched_version`` with the fields in
one transaction, only when its version is still the current one and not enriched yet. So:

* a job for an older version than the memory's current one does nothing; a repeated delivery of a job
  already done does nothing;
* a failing job is retried by procrastinate with exponential back-off (``CB_ENRICHMENT_ATTEMPTS`` tries
  in all, waits ``CB_ENRICHMENT_RETRY_WAIT_SECONDS ** (attempt + 1)`` seconds);
* nothing is lost between the memory's commit and the enqueue: the ingest service defers the jobs right
  after the commit (`EnrichmentQueue.defer_due`, its ``on_due`` hook), and the worker's periodic task
  `SWEEP_TASK` (``CB_ENRICHMENT_SWEEP_CRON``, every second by default) defers a job for every due memory
  that has no job waiting or running, and no failed job for its current version
  (`common.storage.enrichment_jobs_store.EnrichmentJobStore.due_without_job`). A process that dies after
  the commit and before the defer leaves a due memory, which the next sweep enqueues. A job whose tries
  are exhausted stays ``failed`` in ``procrastinate_jobs`` and its memory stays due (recall works
  without enrichment); a new version of the memory is enqueued again;
* a worker killed in the middle of a job leaves it ``doing``: procrastinate's heartbeats mark the worker
  stalled, and the periodic `STALLED_TASK` puts such jobs back in the queue.

**Periodic maintenance.** `MAINTENANCE_TASK` (``CB_MEMORY_MAINTENANCE_CRON``) runs the memories' tier
policy and expiry sweep (`ingest_service.memories.enrichment.jobs.MemoryMaintenance`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Iterator
from collections.abc import Sequence
from typing import Any

import procrastinate
from procrastinate import RetryStrategy
from procrastinate.exceptions import AlreadyEnqueued

from common.kernel.config import Settings
from common.storage.queue_jobs import retry_stalled_jobs

log = logging.getLogger(__name__)

QUEUE = "enrichment"
ENRICH_TASK = "memory.enrich"
SWEEP_TASK = "memory.enqueue_due_enrichments"
STALLED_TASK = "memory.retry_stalled_enrichments"
MAINTENANCE_TASK = "memory.maintenance"
STALLED_AFTER_SECONDS = 60.0
"""A job is stalled when its worker sent no heartbeat for this long (procrastinate's heartbeat: 10 s)."""


# "webhook.dispatch": the change feed's periodic dispatch (ingest_service.change_feed.webhook_queue), every second.
ROUTINE_TASKS = frozenset({SWEEP_TASK, STALLED_TASK, "webhook.dispatch"})
"""Periodic tasks that run every second or minute and usually find nothing: their procrastinate INFO lines
(deferred, started, succeeded) are left out of the logs; their failures and what they do are logged."""

PROCRASTINATE_LOGGERS = ("procrastinate.periodic", "procrastinate.worker", "procrastinate.worker.worker")


class RoutineJobFilter(logging.Filter):
    """Drops procrastinate's INFO records about `ROUTINE_TASKS` jobs, so an idle worker logs nothing."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING:
            return True
        job = getattr(record, "job", None)
        task = job.get("task_name") if isinstance(job, dict) else None
        if task is None:  # the periodic deferrer and the shutdown wait name the job only in the message
            message = record.getMessage()
            return not any(f"{name}[" in message for name in ROUTINE_TASKS)
        return task not in ROUTINE_TASKS


def quiet_routine_jobs() -> None:
    """Installs `RoutineJobFilter` on procrastinate's loggers (idempotent)."""
    for name in PROCRASTINATE_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, RoutineJobFilter) for f in logger.filters):
            logger.addFilter(RoutineJobFilter())


def memory_lock(namespace: str, memory_id: str) -> str:
    """The procrastinate lock and queueing lock of one memory's jobs."""
    return f"memory:{namespace}/{memory_id}"


def _retry_strategy(settings: Settings) -> RetryStrategy | bool:
    """``CB_ENRICHMENT_ATTEMPTS`` tries in all: procrastinate's ``max_attempts`` counts the retries after
    the first try (and 0 would mean "retry forever", so one try is ``retry=False``)."""
    if settings.enrichment_attempts == 1:
        return False
    return RetryStrategy(
        max_attempts=settings.enrichment_attempts - 1, exponential_wait=settings.enrichment_retry_wait_seconds
    )


def connector(settings: Settings, *, max_size: int) -> procrastinate.PsycopgConnector:
    """procrastinate's psycopg 3 connector on ``CB_DATABASE_URL`` (a pool of its own, at most ``max_size``)."""
    return procrastinate.PsycopgConnector(
        conninfo=settings.database_url, min_size=1, max_size=max(2, max_size), kwargs={"connect_timeout": 5}
    )


class EnrichmentQueue:
    """The procrastinate app of enrichment and its tasks (see the module doc).

    Args:
        settings: the service's settings (database, attempts, back-off, crons).
        job: runs one enrichment job: ``job(namespace, memory_id, version) -> bool`` (True when it
            wrote the version); None for an app that only defers (the ingest service).
        due: ``due(limit) -> [(namespace, memory_id, version)]``: due memories without a job.
        maintenance: runs the periodic memory maintenance; None: not scheduled.
        max_connections: size of procrastinate's pool.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        job: Any = None,
        due: Any = None,
        maintenance: Any = None,
        max_connections: int = 4,
    ) -> None:
        self.settings = settings
        self.app = procrastinate.App(connector=connector(settings, max_size=max_connections))
        self._job = job
        self._due = due
        self._maintenance = maintenance
        self._open_lock = threading.Lock()
        self._opened = False
        # The queues the worker runs: enrichment, and those of tasks registered on `app` by others (the
        # webhooks of `ingest_service.change_feed.webhook_queue`).
        self.queues = [QUEUE]
        self.enrich_task = self.app.task(
            name=ENRICH_TASK,
            queue=QUEUE,
            retry=_retry_strategy(settings),
        )(self._enrich)
        sweep = self.app.task(name=SWEEP_TASK, queue=QUEUE, queueing_lock=SWEEP_TASK)(self._sweep)
        self.app.periodic(cron=settings.enrichment_sweep_cron, periodic_id="due")(sweep)
        stalled = self.app.task(name=STALLED_TASK, queue=QUEUE, queueing_lock=STALLED_TASK)(self._stalled)
        self.app.periodic(cron="* * * * *", periodic_id="stalled")(stalled)
        if maintenance is not None:
            task = self.app.task(name=MAINTENANCE_TASK, queue=QUEUE, queueing_lock=MAINTENANCE_TASK)
            self.app.periodic(cron=settings.memory_maintenance_cron, periodic_id="maintenance")(
                task(self._maintain)
            )

    # -- tasks -------------------------------------------------------------------------------------

    def _enrich(self, namespace: str, memory_id: str, version: int) -> bool:
        if self._job is None:
            raise RuntimeError("this EnrichmentQueue only defers jobs")
        return bool(self._job(namespace, memory_id, version))

    async def _sweep(self, timestamp: int) -> int:
        if self._due is None:
            return 0
        due = await asyncio.to_thread(self._due, self.settings.enrichment_sweep_batch)
        deferred = 0
        for namespace, memory_id, version in due:
            deferred += await self._defer_async(namespace, memory_id, version)
        if deferred:
            log.info("enrichment sweep: %d due memories enqueued", deferred)
        return deferred

    async def _stalled(self, timestamp: int) -> int:
        return await retry_stalled_jobs(self.app, ENRICH_TASK, STALLED_AFTER_SECONDS)

    def _maintain(self, timestamp: int) -> None:
        if self._maintenance is not None:
            self._maintenance()

    # -- deferring ---------------------------------------------------------------------------------

    def _deferrer(self, namespace: str, memory_id: str) -> Any:
        lock = memory_lock(namespace, memory_id)
        return self.enrich_task.configure(lock=lock, queueing_lock=lock)

    async def _defer_async(self, namespace: str, memory_id: str, version: int) -> int:
        try:
            await self._deferrer(namespace, memory_id).defer_async(
                namespace=namespace, memory_id=memory_id, version=version
            )
        except AlreadyEnqueued:
            return 0
        return 1

    def defer_due(self, due: Sequence[tuple[str, str, int]]) -> int:
        """Defers a job for each ``(namespace, memory_id, version)``: the ingest service's ``on_due`` hook
        after a memory's commit (`ingest_service.memories.writer.MemoryWriter`). Opens the app on first use.
        A memory with a job already waiting is skipped (that job runs first; the sweep enqueues the
        newer version after it).

        Returns:
            The number of jobs deferred.

        Raises:
            procrastinate.exceptions.ConnectorException: the database refused (the memories stay due:
                the worker's sweep enqueues them).
        """
        self.open()
        jobs = [
            self._deferrer(namespace, memory_id).make_new_job(
                namespace=namespace, memory_id=memory_id, version=int(version)
            )
            for namespace, memory_id, version in due
        ]
        if not jobs:
            return 0
        try:  # one statement for the batch (a commit per job cost AddMemories a round trip per memory)
            self.app.job_manager.batch_defer_jobs(jobs)
            return len(jobs)
        except AlreadyEnqueued:
            pass  # one of them has a job waiting; the statement wrote nothing: one by one, skipping those
        deferred = 0
        for namespace, memory_id, version in due:
            try:
                self._deferrer(namespace, memory_id).defer(
                    namespace=namespace, memory_id=memory_id, version=int(version)
                )
                deferred += 1
            except AlreadyEnqueued:
                pass
        return deferred

    # -- running -----------------------------------------------------------------------------------

    def open(self) -> None:
        """Opens the app for synchronous deferring (`defer_due`); idempotent."""
        with self._open_lock:
            if not self._opened:
                self.app.open()
                self._opened = True

    def close(self) -> None:
        """Closes what `open` opened."""
        with self._open_lock:
            if self._opened:
                self.app.close()
                self._opened = False

    async def run_worker(self, concurrency: int, *, install_signal_handlers: bool = True) -> None:
        """Runs the worker on `QUEUE` until SIGTERM/SIGINT (when ``install_signal_handlers``) or until
        cancelled: procrastinate then stops fetching and waits for the running jobs (graceful stop,
        ``CB_SHUTDOWN_GRACE_SECONDS``; jobs still running then are aborted and retried later)."""
        async with self.app.open_async():
            await self.app.run_worker_async(
                queues=list(self.queues),
                concurrency=concurrency,
                install_signal_handlers=install_signal_handlers,
                shutdown_graceful_timeout=self.settings.shutdown_grace_seconds,
            )

    @contextlib.contextmanager
    def running(self, concurrency: int) -> Iterator[None]:
        """Runs the worker in a thread of this process (tests, benchmarks) while the block runs, then
        stops it as SIGTERM would (running jobs finish first).

        Raises:
            RuntimeError: the worker did not stop within the grace period plus 30 s.
        """
        loop = asyncio.new_event_loop()
        started = threading.Event()
        holder: dict[str, asyncio.Task[None]] = {}

        def run() -> None:
            asyncio.set_event_loop(loop)
            holder["task"] = loop.create_task(self.run_worker(concurrency, install_signal_handlers=False))
            started.set()
            with contextlib.suppress(asyncio.CancelledError):
                loop.run_until_complete(holder["task"])
            loop.close()

        thread = threading.Thread(target=run, name="enrichment-worker", daemon=True)
        thread.start()
        started.wait()
        try:
            yield
        finally:
            loop.call_soon_threadsafe(holder["task"].cancel)
            thread.join(self.settings.shutdown_grace_seconds + 30)
            if thread.is_alive():
                raise RuntimeError("the enrichment worker did not stop")
