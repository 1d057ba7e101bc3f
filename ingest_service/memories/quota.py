"""The per-user memory quota on the write path (docs/how-to/memory-records.md Quota).

Setting ``memory_quota_per_user`` (0 = unlimited). What counts is in `common.storage.memories.quota`:
a user's live memories (unexpired, not summaries) within the full scope (organisation, environment,
project, user). Every check runs inside the writing transaction after `MemoryQuota.lock`, which takes
the user's quota lock together with the transaction's node-key locks, so the adds of one user are counted
one after the other and cannot overshoot.

* AddMemories (`MemoryQuota.refused`): new items are admitted in request order while the count is below
  the limit; the others are refused one by one (per-item RESOURCE_EXHAUSTED with the limit and the count).
  An item already stored (a retry) is admitted without counting: its insert is a no-op.
* UpdateMemory (`MemoryQuota.check_revival`): a new expiry that makes an expired memory live again is a
  new live memory; beyond the quota the whole call fails with `ResourceExhausted` (QuotaFailure).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from common.domain.memory_scope import MemoryScope
from common.kernel.config import Settings
from common.kernel.errors import ResourceExhausted
from common.storage.key_locks import lock_node_keys
from common.storage.memories.quota import MemoryQuotaStore
from common.storage.memories.store import MemoryStore

QUOTA_REASON = "MEMORY_QUOTA_EXCEEDED"
"""ErrorInfo reason of a call refused by the quota."""


class MemoryQuota:
    """The quota checks of `ingest_service.memories.writer.MemoryWriter` (see the module doc).

    Args:
        settings: ``memory_quota_per_user`` and the table names.
    """

    def __init__(self, settings: Settings) -> None:
        self.limit = settings.memory_quota_per_user
        self.counts = MemoryQuotaStore(settings)
        self.rows = MemoryStore(settings)

    def lock(self, conn: Any, scope: MemoryScope, keys: Sequence[tuple[str, str]]) -> None:
        """The transaction's node-key locks, with the user's quota lock when a quota is set."""
        if self.limit > 0:
            self.counts.lock_quota(conn, scope.namespace, scope.user_id, keys)
        else:
            lock_node_keys(conn, keys)

    def refused(
        self, conn: Any, scope: MemoryScope, memory_ids: Sequence[str], now: datetime
    ) -> dict[str, int]:
        """Which new memories of one batch the quota admits.

        Args:
            conn: the writing transaction, after `lock`.
            scope: the caller's scope.
            memory_ids: the batch's new ids, in request order.
            now: the instant expiry is judged at.

        Returns:
            The refused ids, each with the user's live count when it was refused (the others are admitted).
        """
        if self.limit <= 0:
            return {}
        stored = self.rows.existing_ids(conn, scope.namespace, memory_ids)
        count = self.counts.count_live(conn, scope.as_dict(), scope.namespace, now)
        refused: dict[str, int] = {}
        for memory in memory_ids:
            if memory in stored:  # a concurrent retry stored it: a duplicate, never counted
                continue
            if count < self.limit:
                count += 1
            else:
                refused[memory] = count
        return refused

    def check_revival(
        self, conn: Any, scope: MemoryScope, row: dict[str, Any], expires_at: datetime | None, now: datetime
    ) -> None:
        """Refuses a new expiry that makes the expired memory ``row`` live again beyond the quota.

        Raises:
            ResourceExhausted: the user already has the limit of live memories in the scope (reason
                `QUOTA_REASON`; QuotaFailure subject ``memories/<namespace>/<user>``).
        """
        was_expired = row["expires_at"] is not None and row["expires_at"] <= now
        live_after = expires_at is None or expires_at > now
        if self.limit <= 0 or row["is_summary"] or not (was_expired and live_after):
            return
        count = self.counts.count_live(conn, scope.as_dict(), scope.namespace, now)
        if count >= self.limit:
            raise ResourceExhausted(
                f"memory quota reached: user {scope.user_id!r} has {count} of {self.limit} live memories"
                f" in {scope.namespace!r}",
                subject=f"memories/{scope.namespace}/{scope.user_id}",
                description=f"limit {self.limit} live memories per user, count {count}",
                reason=QUOTA_REASON,
            )


__all__ = ["QUOTA_REASON", "MemoryQuota"]
