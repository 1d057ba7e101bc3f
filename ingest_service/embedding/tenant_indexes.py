"""The ingest service's worker that keeps the per-tenant vector indexes in step with the chunks table
(the mechanism and the rule: `common.storage.chunks.tenant_vector_indexes`).

Off unless ``CB_TENANT_VECTOR_INDEX_INTERVAL_SECONDS`` is positive (then `cb index-tenants` is the
only way): every that many seconds a daemon thread runs `TenantVectorIndexes.synchronise` with
``CB_TENANT_VECTOR_INDEX_MIN_ROWS``. A build runs ``CREATE INDEX CONCURRENTLY``, so writes go on meanwhile;
the advisory lock of `synchronise` lets one ingest process build at a time; a failed round is logged and
tried again at the next interval.
"""

from __future__ import annotations

import logging
import threading

from common.kernel.config import Settings
from common.storage.chunks.tenant_vector_indexes import TenantIndexChange
from common.storage.chunks.tenant_vector_indexes import TenantVectorIndexes

log = logging.getLogger(__name__)


class TenantIndexWorker:
    """A `common.grpc.server.BackgroundWorker`: `start` / `stop` around the service's life.

    Args:
        settings: the process settings (threshold, interval, database).
    """

    def __init__(self, settings: Settings) -> None:
        self.interval = settings.tenant_vector_index_interval_seconds
        self.indexes = TenantVectorIndexes(settings)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def run_once(self) -> list[TenantIndexChange]:
        """One synchronisation now; the changes it made (none when another process holds the lock)."""
        return self.indexes.synchronise()

    def start(self) -> None:
        """Starts the daemon thread (nothing when the interval is 0)."""
        if self.interval <= 0 or self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="tenant-index-worker", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stops the thread after its current round (a build in progress finishes first)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.run_once()
            except Exception:  # a daemon must survive a failed round: logged, tried again later
                log.exception("tenant vector index round failed; retrying in %.0f s", self.interval)
