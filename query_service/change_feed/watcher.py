"""One WatchChanges subscriber: replay from the outbox, then follow new commits, with heartbeats.

The loop reads pages of the outbox after the subscriber's cursor (`ChangeOutbox.read_page`: the caller's
visibility and filters inside SQL, hidden and filtered changes advance the cursor without being sent)
until a page comes back short, then waits for the namespace's next notification or the poll interval
(`query_service.change_feed.notifier`), and reads again. The stream therefore holds every visible change
once, in cursor order, whatever the wake-ups: a notification only shortens a wait. While nothing is sent
for ``heartbeat_seconds`` a `Heartbeat` with the cursor reached goes out, so a subscriber that resumes
from it skips what it could not see instead of scanning it again.

Values pass through the caller's personal data policy (`query_service.pii_output`): keys and payload
masked unless the token is cleared; a cleared caller's disclosures are audited per page.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from collections.abc import Iterator
from dataclasses import dataclass
from dataclasses import field
from dataclasses import replace
from datetime import UTC
from datetime import datetime

from common.domain.change_filters import change_filter_violations
from common.kernel.errors import FailedPrecondition
from common.kernel.errors import FieldViolation
from common.kernel.errors import InvalidArgument
from common.kernel.identifiers import NAMESPACE_PATTERN
from common.storage.change_feed.outbox import ChangeFilter
from common.storage.change_feed.outbox import ChangeOutbox
from common.storage.change_feed.outbox import ChangeRow
from common.storage.database import Database
from common.storage.visibility import Visibility
from query_service.change_feed.notifier import ChangeNotifier
from query_service.pii_output import PiiDisclosure
from query_service.pii_output import PiiGuard
from query_service.pii_output import PiiPolicy

__all__ = ["CURSOR_EXPIRED", "ChangeBatch", "ChangeWatcher", "Heartbeat", "WatchRequest"]

CURSOR_EXPIRED = "CURSOR_EXPIRED"
DEFAULT_HEARTBEAT_SECONDS = 15
MAX_HEARTBEAT_SECONDS = 300
PAGE_SIZE = 500


@dataclass(frozen=True)
class WatchRequest:
    """What a subscriber asked for (WatchChangesRequest, validated by `ChangeWatcher.validate`)."""

    namespace: str
    resume_after: int = 0
    filters: ChangeFilter = field(default_factory=ChangeFilter)
    heartbeat_seconds: int = 0


@dataclass(frozen=True)
class ChangeBatch:
    """Changes to send, in cursor order, each with the consistency token's WAL position of its page."""

    changes: list[ChangeRow]
    position: int


@dataclass(frozen=True)
class Heartbeat:
    """Nothing more for now: every change up to ``cursor`` was sent or is not for this subscriber."""

    cursor: int
    time: datetime


class ChangeWatcher:
    """Serves WatchChanges streams of one query process.

    Args:
        database: the read side's database (replicas through `RoutedDatabase`).
        notifier: the process's listener of commits.
        poll_seconds: longest wait between two reads without a notification.
    """

    def __init__(self, database: Database, notifier: ChangeNotifier, *, poll_seconds: float) -> None:
        self.database = database
        self.outbox = ChangeOutbox(database)
        self.notifier = notifier
        self.poll_seconds = poll_seconds
        self.guard = PiiGuard(database)

    @staticmethod
    def validate(request: WatchRequest) -> WatchRequest:
        """``request`` with defaults filled in.

        Raises:
            InvalidArgument: every bad field, with its path.
        """
        violations: list[FieldViolation] = []
        if not NAMESPACE_PATTERN.match(request.namespace):
            violations.append(
                FieldViolation("namespace", "required, pattern [A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
            )
        if request.resume_after < 0:
            violations.append(FieldViolation("resume_after", "must be 0 or a cursor received"))
        if not 0 <= request.heartbeat_seconds <= MAX_HEARTBEAT_SECONDS:
            violations.append(FieldViolation("heartbeat_seconds", f"0..{MAX_HEARTBEAT_SECONDS}"))
        violations += change_filter_violations(request.filters)
        if violations:
            raise InvalidArgument(violations)
        return replace(request, heartbeat_seconds=request.heartbeat_seconds or DEFAULT_HEARTBEAT_SECONDS)

    def watch(
        self,
        request: WatchRequest,
        *,
        visibility: Visibility,
        pii: PiiPolicy,
        active: Callable[[], bool],
    ) -> Iterator[ChangeBatch | Heartbeat]:
        """The stream of ``request`` until ``active()`` turns false or the notifier stops.

        Raises:
            InvalidArgument: see `validate`.
            PermissionDenied: a key prefix filter holds personal data and ``pii`` masks the caller's output
                (reason PII_CLEARANCE_REQUIRED).
            FailedPrecondition: reason ``CURSOR_EXPIRED``: changes after ``resume_after`` were pruned;
                ErrorInfo metadata ``oldest_cursor`` is the oldest cursor kept.
            Unavailable: the database cannot be reached (resume from the last cursor received).
        """
        request = self.validate(request)
        pii.refuse_personal_data_lookups(
            {f"key_prefixes[{i}]": prefix for i, prefix in enumerate(request.filters.key_prefixes)}
        )
        cursor = request.resume_after
        last_sent = time.monotonic()
        while active():
            seen = self.notifier.generation(request.namespace)
            page = self.outbox.read_page(
                request.namespace, cursor, visibility=visibility, filters=request.filters, limit=PAGE_SIZE
            )
            if cursor and page.pruned_through > cursor:
                oldest = page.pruned_through + 1
                raise FailedPrecondition(
                    f"resume_after {cursor} is older than the change feed's retention; the oldest cursor"
                    f" kept is {oldest}: resume after {oldest - 1}, or from 0 to start over",
                    reason=CURSOR_EXPIRED,
                    metadata={"oldest_cursor": str(oldest)},
                )
            cursor = page.cursor
            if page.changes:
                shown = self.guard.disclose(
                    request.namespace, pii, functools.partial(_disclose_all, page.changes)
                )
                yield ChangeBatch(changes=shown, position=page.position)
                last_sent = time.monotonic()
            if page.full:
                continue
            if time.monotonic() - last_sent >= request.heartbeat_seconds:
                yield Heartbeat(cursor=cursor, time=datetime.now(UTC))
                last_sent = time.monotonic()
            remaining = request.heartbeat_seconds - (time.monotonic() - last_sent)
            self.notifier.wait(request.namespace, seen, max(0.0, min(self.poll_seconds, remaining)))
            if self.notifier.stopping:
                return


def _disclose_all(changes: list[ChangeRow], disclosure: PiiDisclosure) -> list[ChangeRow]:
    return [_disclose(disclosure, change) for change in changes]


def _disclose(disclosure: PiiDisclosure, change: ChangeRow) -> ChangeRow:
    """``change`` as the caller may see it: keys and payload masked for an uncleared caller."""
    text = disclosure.text
    return replace(
        change,
        item_key=text(change.item_key, key=change.item_key),
        subject_key=text(change.subject_key, key=change.subject_key),
        object_key=text(change.object_key, key=change.object_key),
        payload=disclosure.value(change.payload, key=change.item_key),
    )
