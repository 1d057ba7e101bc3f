"""Group commit of RecordObservations batches: one writer lane per namespace in a process.

Concurrent batches of one namespace nearly always write shared nodes (the debian stream: two batches of
200 uploads in flight share about 50 packages, whose entity rows each upserts), so their transactions
queue behind each other anyway, in PostgreSQL, on the ordered key locks (`common.storage.key_locks`):
measured, 33% of the request path waited there with 4 calls in flight. `WriteLanes` queues them in the
process instead and writes every batch waiting in a lane together, in ONE transaction (one set-based
projection of up to `GROUP_MAX_OBSERVATIONS` observations, one commit): the leader (the first caller to
find the lane idle) takes the waiting requests, writes them, hands each its result and, once its own
request is written, passes the lead to the oldest waiting request.

What a request sees is unchanged: its own results (`write` returns them by observation_id), all or
nothing for each request. A group only holds requests of one caller (equal `Principal`: the write
access checks of the projection read the caller, and the group runs in the contextvars of its first
request) whose observation_ids are disjoint (so "created" still goes to exactly one of two concurrent
senders of one id). When a group's write fails with anything but `Unavailable` (which says nothing
about one request's content), each request of the group is written again alone, so a failure stays
with the request that causes it. Processes (and other lanes) still order their writes with the key
locks inside each transaction.
"""

from __future__ import annotations

import contextvars
import threading
from collections import deque
from collections.abc import Callable
from collections.abc import Hashable
from dataclasses import dataclass
from dataclasses import field
from typing import Any
from typing import Generic
from typing import TypeVar

from common.auth.principals import current_principal
from common.kernel.errors import Unavailable

# The most observations one group transaction writes (a request larger than this is written alone).
GROUP_MAX_OBSERVATIONS = 1000

Item = TypeVar("Item")
Result = TypeVar("Result")


@dataclass
class _Request(Generic[Item, Result]):
    items: list[Item]
    ids: frozenset[str]
    principal: Any
    context: contextvars.Context
    done: threading.Event = field(default_factory=threading.Event)
    lead: bool = False  # woken to lead the lane, not with a result
    result: dict[str, Result] | None = None
    error: Exception | None = None


class WriteLanes(Generic[Item, Result]):
    """Writes requests through one lane per key, the waiting ones of a lane together (see the module doc).

    Args:
        write: writes a list of items in one transaction; returns the results by observation_id (every
            id of the items present).
        max_items: the most items of one group.
    """

    def __init__(
        self, write: Callable[[list[Item]], dict[str, Result]], *, max_items: int = GROUP_MAX_OBSERVATIONS
    ) -> None:
        self.write = write
        self.max_items = max_items
        self._lock = threading.Lock()
        self._waiting: dict[Hashable, deque[_Request[Item, Result]]] = {}
        self._leading: set[Hashable] = set()

    def submit(self, lane: Hashable, items: list[Item], ids: set[str]) -> dict[str, Result]:
        """Writes ``items`` (observation_ids ``ids``) through lane ``lane``, together with the requests
        waiting there meanwhile; returns this request's results by observation_id.

        Raises:
            Exception: what ``write`` raised for this request.
        """
        request: _Request[Item, Result] = _Request(
            items, frozenset(ids), current_principal(), contextvars.copy_context()
        )
        with self._lock:
            self._waiting.setdefault(lane, deque()).append(request)
            leading = lane not in self._leading
            if leading:
                self._leading.add(lane)
        if not leading:
            request.done.wait()  # written by a leader, or handed the lead
        if leading or request.lead:
            self._lead(lane, request)
        if request.error is not None:
            raise request.error
        assert request.result is not None
        return request.result

    def _lead(self, lane: Hashable, own: _Request[Item, Result]) -> None:
        """Writes groups of the lane until ``own`` is written, then hands the lead to the oldest waiting
        request (or leaves the lane idle)."""
        while True:
            with self._lock:
                waiting = self._waiting[lane]
                if own.result is not None or own.error is not None or not waiting:
                    if waiting:
                        successor = waiting[0]
                        successor.lead = True
                        successor.done.set()
                    else:
                        self._leading.discard(lane)
                        del self._waiting[lane]
                    return
                group = self._take(waiting)
            self._write_group(group)

    def _take(self, waiting: deque[_Request[Item, Result]]) -> list[_Request[Item, Result]]:
        """The next group: the oldest request, and the later ones of the same caller with observation_ids
        disjoint from the group's, up to ``max_items`` items; removed from ``waiting``."""
        first = waiting[0]
        group, ids, size = [], set(), 0
        for request in list(waiting):
            if group and (
                request.principal != first.principal
                or request.ids & ids
                or size + len(request.items) > self.max_items
            ):
                continue
            group.append(request)
            ids |= request.ids
            size += len(request.items)
            waiting.remove(request)
        return group

    def _write_group(self, group: list[_Request[Item, Result]]) -> None:
        """Writes ``group`` in one ``write`` (in its first request's contextvars) and settles each request;
        a failure other than `Unavailable` writes each request again alone."""
        failure: Exception | None = None
        try:
            combined = group[0].context.run(self.write, [item for r in group for item in r.items])
        except Unavailable as error:
            combined, failure = None, error
        except Exception as error:  # noqa: BLE001 - re-raised in the caller of the request that causes it
            if len(group) > 1:
                for request in group:
                    self._write_group([request])
                return
            combined, failure = None, error
        for request in group:
            if combined is None:
                request.error = failure
            else:
                request.result = {key: combined[key] for key in request.ids}
            if not request.lead:
                request.done.set()
