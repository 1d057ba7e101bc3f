"""Wakes the change feed's subscribers of a namespace when a change of it commits.

The numbering at commit (migration ``0034_change_feed.sql``) sends ``NOTIFY memory_change_feed,
'<namespace>'``. One `ChangeNotifier` per query process listens on its own connection to the primary and
bumps the namespace's generation; a subscriber waits on it (`wait`) with a timeout, then reads the outbox
again. NOTIFY reaches sessions of the primary only: on a replica a change may be notified before it is
replayed, and with the connection lost notifications are missed, so every wait also ends after the poll
interval (``CB_CHANGE_FEED_POLL_SECONDS``) and the read decides; the notification only makes it sooner.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import psycopg
from psycopg import sql

from common.storage.change_feed.outbox import NOTIFY_CHANNEL

log = logging.getLogger(__name__)

RECONNECT_SECONDS = 1.0


class ChangeNotifier:
    """The process's listener (a background worker of the query host: `start`, `stop`).

    Args:
        database_url: the primary's DSN (the one that commits and notifies).
    """

    def __init__(self, database_url: str) -> None:
        self.database_url = database_url
        self._generations: dict[str, int] = {}
        self._condition = threading.Condition()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._conn: psycopg.Connection[Any] | None = None

    def start(self) -> None:
        """Starts the listening thread (idempotent)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="change-feed-listener", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stops listening and wakes every waiting subscriber."""
        self._stopping.set()
        with self._condition:
            self._condition.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=3)

    @property
    def stopping(self) -> bool:
        """True once `stop` was called: streams end."""
        return self._stopping.is_set()

    def generation(self, namespace: str) -> int:
        """How many notifications of ``namespace`` arrived so far (pass it to `wait`)."""
        with self._condition:
            return self._generations.get(namespace, 0)

    def wait(self, namespace: str, seen: int, timeout: float) -> None:
        """Blocks until a notification of ``namespace`` newer than generation ``seen`` arrived, the
        notifier stops, or ``timeout`` seconds passed."""
        with self._condition:
            self._condition.wait_for(
                lambda: self._generations.get(namespace, 0) != seen or self._stopping.is_set(), timeout
            )

    def _bump(self, namespace: str) -> None:
        with self._condition:
            self._generations[namespace] = self._generations.get(namespace, 0) + 1
            self._condition.notify_all()

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                with psycopg.connect(self.database_url, autocommit=True, connect_timeout=5) as conn:
                    conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(NOTIFY_CHANNEL)))
                    while not self._stopping.is_set():
                        for notify in conn.notifies(timeout=0.5):
                            self._bump(notify.payload)
            except psycopg.Error as error:
                log.info("change feed listener reconnects after %s", type(error).__name__)
                self._stopping.wait(RECONNECT_SECONDS)
