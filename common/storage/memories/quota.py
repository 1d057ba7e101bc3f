"""The per-user memory quota's statements ("quotas see only memories that match all four").

What counts is a user's *live* rows of the memories table within one full scope: organisation,
environment, project and user (exactly the four keys of docs/how-to/memory-records.md nothing else), not
expired at the instant given, and not summaries (a summary is derived by SummarizeMemories, not added; the
originals it covers stay stored and keep counting, also when a lossy summary hides them). An expired row that
the sweep has not removed yet no longer counts: it is gone for its owner (hidden from recall and lists).

`lock_quota` serialises the adds of one user in one scope: it takes the transaction-scoped advisory
lock of the pseudo key ``(namespace, "memory-quota:<user>")`` together with the node keys the
transaction writes, in the one global order of `common.storage.key_locks` (no deadlock), so two
concurrent batches of one user count one after the other and cannot overshoot the quota.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql

from common.storage.key_locks import lock_node_keys
from common.storage.row_count import fetch_count
from common.storage.tables import ComposingStore


def quota_lock_key(namespace: str, user_id: str) -> tuple[str, str]:
    """The pseudo node key whose advisory lock orders the quota checks of one user in one namespace."""
    return namespace, f"memory-quota:{user_id}"


class MemoryQuotaStore(ComposingStore):
    """Counts and locks for the per-user memory quota (see the module doc)."""

    def lock_quota(
        self,
        conn: psycopg.Connection[Any],
        namespace: str,
        user_id: str,
        node_keys: Iterable[tuple[str, str]],
    ) -> None:
        """Takes the quota lock of ``(namespace, user_id)`` and the locks of ``node_keys`` in one ordered
        call (`common.storage.key_locks.lock_node_keys`); must run before the transaction's first write."""
        lock_node_keys(conn, [quota_lock_key(namespace, user_id), *node_keys])

    def count_live(
        self,
        conn: psycopg.Connection[Any],
        scope_keys: dict[str, str],
        namespace: str,
        now: datetime,
    ) -> int:
        """How many live memories (module doc) the user of ``scope_keys`` has in that full scope.

        Args:
            conn: the caller's transaction (after `lock_quota`).
            scope_keys: ``organization_id``, ``environment``, ``project_id``, ``user_id``.
            namespace: the namespace of those keys (selects the owner index's range).
            now: the instant expiry is judged at.
        """
        return fetch_count(
            conn,
            sql.SQL(
                "SELECT count(*) FROM {} WHERE namespace = %(namespace)s AND user_id = %(user_id)s"
                " AND organization_id = %(organization_id)s AND environment = %(environment)s"
                " AND project_id = %(project_id)s AND NOT is_summary"
                " AND (expires_at IS NULL OR expires_at > %(now)s)"
            ).format(self.t["memories"]),
            {**scope_keys, "namespace": namespace, "now": now},
        )


__all__ = ["MemoryQuotaStore", "quota_lock_key"]
