"""The change feed's retention: a background thread of the ingest service that prunes the outbox every
``CB_CHANGE_FEED_PRUNE_INTERVAL_SECONDS`` by age (``CB_CHANGE_FEED_RETENTION_SECONDS``) and size
(``CB_CHANGE_FEED_MAX_EVENTS`` per namespace), in bounded transactions (`ChangeOutbox.prune`). Several
ingest processes may prune at once: each deletes what is still there.
"""

from __future__ import annotations

import logging
import threading
from datetime import UTC
from datetime import datetime
from datetime import timedelta

from common.kernel.errors import Unavailable
from common.storage.change_feed.outbox import ChangeOutbox
from common.storage.database import Database

__all__ = ["ChangeFeedPruner"]

log = logging.getLogger(__name__)


class ChangeFeedPruner:
    """A background worker of the ingest host (`start`, `stop`); `prune_once` is one round."""

    def __init__(self, database: Database) -> None:
        self.database = database
        self.settings = database.settings
        self.outbox = ChangeOutbox(database)
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def prune_once(self) -> int:
        """Prunes what is past the retention now; how many changes were deleted."""
        before = datetime.now(UTC) - timedelta(seconds=self.settings.change_feed_retention_seconds)
        return self.outbox.prune(before=before, max_events=self.settings.change_feed_max_events)

    def start(self) -> None:
        """Starts pruning (not when the interval setting is 0)."""
        if self.settings.change_feed_prune_interval_seconds > 0 and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="change-feed-pruner", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stops after the round in progress."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stopping.wait(self.settings.change_feed_prune_interval_seconds):
            try:
                deleted = self.prune_once()
            except Unavailable:
                continue  # the database is away: the next round prunes
            except Exception:
                log.exception("change feed pruning failed")
                continue
            if deleted:
                log.info("change feed: %d changes pruned", deleted)
