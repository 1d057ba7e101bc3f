"""The lifecycle statements of the memories table (migration 0015).

`MemoryLifecycleStore` holds what runs across owners: the tier policy (`age_tiers`), the expiry sweep's
selection (`expired_before`) and its size per namespace for the mass-deletion guard (`expiry_counts`), and the enrichment hook used by the enrichment worker: `due_enrichments`
lists rows whose current ``version`` is not enriched yet (index ``memories_enrichment_due_idx``),
`version_state` reads one row's versions, `mark_enriched` records ``enriched_version`` for one version
only if it is still current (idempotent per version).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql

from common.storage.tables import ComposingStore


def _in_namespaces(namespaces: Sequence[str]) -> sql.Composable:
    """``namespace = ANY(%(namespaces)s)``, or TRUE for no namespaces (every namespace)."""
    return sql.SQL("namespace = ANY(%(namespaces)s)") if namespaces else sql.SQL("TRUE")


class MemoryLifecycleStore(ComposingStore):
    """Tier, expiry and enrichment statements of the memories table; stateless, safe to share."""

    # -- tier policy, expiry sweep -----------------------------------------------------------------

    def age_tiers(
        self,
        conn: psycopg.Connection[Any],
        *,
        warm_before: datetime,
        cold_before: datetime,
        limit: int,
        namespaces: Sequence[str] = (),
    ) -> tuple[int, int]:
        """Moves up to ``limit`` memories each: hot ones last used before ``warm_before`` to warm, warm ones
        last used before ``cold_before`` to cold; ``namespaces``: only in these (empty: every namespace).
        Returns (moved to warm, moved to cold)."""
        moved = []
        for source, target, before in (("warm", "cold", cold_before), ("hot", "warm", warm_before)):
            cursor = conn.execute(
                sql.SQL(
                    "UPDATE {t} SET tier = %(target)s WHERE (namespace, memory_id) IN ("
                    " SELECT namespace, memory_id FROM {t} WHERE tier = %(source)s AND last_used_at < %(before)s"
                    " AND {in_namespaces} ORDER BY last_used_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED)"
                ).format(t=self.t["memories"], in_namespaces=_in_namespaces(namespaces)),
                {
                    "target": target,
                    "source": source,
                    "before": before,
                    "limit": limit,
                    "namespaces": list(namespaces),
                },
            )
            moved.append(max(cursor.rowcount, 0))
        to_cold, to_warm = moved
        return to_warm, to_cold

    def expired_before(
        self, conn: psycopg.Connection[Any], before: datetime, limit: int, namespaces: Sequence[str] = ()
    ) -> list[tuple[str, str, str]]:
        """Up to ``limit`` memories whose ``expires_at`` is before ``before`` (``namespaces``: only in
        these; empty: every namespace), as (namespace, memory_id, user_id), oldest expiry first."""
        rows = conn.execute(
            sql.SQL(
                "SELECT namespace, memory_id, user_id FROM {} WHERE expires_at < %(before)s AND {}"
                " ORDER BY expires_at LIMIT %(limit)s"
            ).format(self.t["memories"], _in_namespaces(namespaces)),
            {"before": before, "limit": limit, "namespaces": list(namespaces)},
        ).fetchall()
        return [(str(a), str(b), str(c)) for a, b, c in rows]

    def expiry_counts(
        self, conn: psycopg.Connection[Any], before: datetime, namespaces: Sequence[str] = ()
    ) -> dict[str, tuple[int, int]]:
        """For each namespace (``namespaces``: only these; empty: every one) holding memories whose
        ``expires_at`` is before ``before``: (how many, how many memories it holds in all)."""
        rows = conn.execute(
            sql.SQL(
                "WITH due AS (SELECT namespace, count(*) AS due FROM {table} WHERE expires_at < %(before)s"
                " AND {filter} GROUP BY namespace)"
                " SELECT d.namespace, d.due, (SELECT count(*) FROM {table} m WHERE m.namespace = d.namespace)"
                " FROM due d"
            ).format(table=self.t["memories"], filter=_in_namespaces(namespaces)),
            {"before": before, "namespaces": list(namespaces)},
        ).fetchall()
        return {str(namespace): (int(due), int(total)) for namespace, due, total in rows}

    # -- the enrichment hook -----------------------------------------------------------------------

    def version_state(
        self, conn: psycopg.Connection[Any], namespace: str, memory_id: str, *, lock: bool = False
    ) -> tuple[int, int, str] | None:
        """(version, enriched_version, memory_type) of one row (``lock``: ``FOR UPDATE``), None when absent."""
        row = conn.execute(
            sql.SQL(
                "SELECT version, enriched_version, memory_type FROM {} WHERE namespace = %s AND memory_id = %s{}"
            ).format(self.t["memories"], sql.SQL(" FOR UPDATE" if lock else "")),
            (namespace, memory_id),
        ).fetchone()
        return None if row is None else (int(row[0]), int(row[1]), str(row[2]))

    def due_enrichments(
        self, conn: psycopg.Connection[Any], *, limit: int, updated_before: datetime | None = None
    ) -> list[tuple[str, str, int]]:
        """Memories whose current version is not enriched yet, as (namespace, memory_id, version), oldest
        change first (index ``memories_enrichment_due_idx``); ``updated_before`` leaves out recent changes
        (whose jobs are presumably still queued). Locks nothing: an enrichment job is idempotent per version.
        """
        conditions = sql.SQL("enriched_version < version")
        params: list[Any] = []
        if updated_before is not None:
            conditions = sql.SQL("{} AND updated_at < %s").format(conditions)
            params.append(updated_before)
        params.append(limit)
        rows = conn.execute(
            sql.SQL(
                "SELECT namespace, memory_id, version FROM {} WHERE {} ORDER BY updated_at LIMIT %s"
            ).format(self.t["memories"], conditions),
            params,
        ).fetchall()
        return [(str(a), str(b), int(c)) for a, b, c in rows]

    def mark_enriched(
        self,
        conn: psycopg.Connection[Any],
        namespace: str,
        memory_id: str,
        version: int,
        *,
        memory_type: str | None,
        quality_score: float | None,
        now: datetime,
    ) -> bool:
        """Records that ``version`` is enriched, with the enriched columns, only if ``version`` is still the
        row's current version and not enriched yet. Returns False otherwise (a stale or repeated job:
        nothing changed)."""
        cursor = conn.execute(
            sql.SQL(
                "UPDATE {} SET enriched_version = %(version)s, updated_at = %(now)s,"
                " memory_type = coalesce(%(memory_type)s, memory_type),"
                " quality_score = coalesce(%(quality_score)s, quality_score)"
                " WHERE namespace = %(namespace)s AND memory_id = %(memory_id)s AND version = %(version)s"
                " AND enriched_version < %(version)s"
            ).format(self.t["memories"]),
            {
                "version": version,
                "now": now,
                "memory_type": memory_type,
                "quality_score": quality_score,
                "namespace": namespace,
                "memory_id": memory_id,
            },
        )
        return cursor.rowcount > 0


__all__ = ["MemoryLifecycleStore"]
