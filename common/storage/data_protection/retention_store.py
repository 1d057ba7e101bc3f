"""Storage of retention: the rules (how long data of one class lives in a namespace) and the reads and
deletes that enforce them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from datetime import timedelta
from typing import Any

import psycopg
from psycopg import sql

from common.kernel.config import Settings
from common.storage.row_count import fetch_count
from common.storage.tables import table_identifiers

__all__ = ["RetentionRule", "RetentionStore"]


@dataclass(frozen=True)
class RetentionRule:
    """How long data of one class (and selector: kind or tier, '' for all) lives in a namespace."""

    namespace: str
    data_class: str
    selector: str
    max_age: timedelta


class RetentionStore:
    """SQL of ``retention_rules`` and of the rows a rule makes due."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.t = table_identifiers(settings)
        self.graph = settings.graph_name

    def put_rule(self, conn: psycopg.Connection[Any], rule: RetentionRule, now: datetime) -> None:
        """Creates or replaces one retention rule."""
        conn.execute(
            "INSERT INTO retention_rules (namespace, data_class, selector, max_age, update_time)"
            " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (namespace, data_class, selector)"
            " DO UPDATE SET max_age = EXCLUDED.max_age, update_time = EXCLUDED.update_time",
            (rule.namespace, rule.data_class, rule.selector, rule.max_age, now),
        )

    def delete_rule(
        self, conn: psycopg.Connection[Any], namespace: str, data_class: str, selector: str
    ) -> bool:
        """Removes one retention rule; True when it existed."""
        cursor = conn.execute(
            "DELETE FROM retention_rules WHERE namespace = %s AND data_class = %s AND selector = %s",
            (namespace, data_class, selector),
        )
        return cursor.rowcount > 0

    def rules(self, conn: psycopg.Connection[Any], namespace: str = "") -> list[RetentionRule]:
        """The rules of ``namespace`` (every namespace when empty)."""
        rows = conn.execute(
            "SELECT namespace, data_class, selector, max_age FROM retention_rules"
            " WHERE %s = '' OR namespace = %s ORDER BY namespace, data_class, selector",
            (namespace, namespace),
        ).fetchall()
        return [RetentionRule(str(a), str(b), str(c), d) for a, b, c, d in rows]

    def observations_older_than(
        self, conn: psycopg.Connection[Any], namespace: str, kind: str, before: datetime, limit: int
    ) -> list[str]:
        """Observation ids of ``namespace`` (of ``kind``; any kind when empty) that occurred before
        ``before``, oldest first, at most ``limit``."""
        rows = conn.execute(
            sql.SQL(
                "SELECT observation_id FROM {obs} WHERE namespace = %s AND (%s = '' OR kind = %s)"
                " AND occurred_at < %s ORDER BY occurred_at, observation_id LIMIT %s"
            ).format(obs=self.t["observations"]),
            (namespace, kind, kind, before, limit),
        ).fetchall()
        return [str(r[0]) for r in rows]

    def _documents_due(self) -> sql.Composed:
        """The documents of ``%(ns)s`` (of the consumer tag ``%(collection)s``: a chunk's meta
        ``{"collection": ...}``; any when empty) last retained before ``%(before)s``, with that time."""
        return sql.SQL(
            "SELECT g.natural_key, g.last_seen FROM {nodes} g WHERE g.namespace = %(ns)s"
            " AND g.node_type = 'document' AND g.last_seen < %(before)s AND (%(collection)s = ''"
            " OR EXISTS (SELECT 1 FROM {chunks} c WHERE c.namespace = g.namespace AND c.node_key = g.natural_key"
            " AND c.meta @> jsonb_build_object('collection', %(collection)s::text)))"
        ).format(nodes=self.t["graph_nodes"], chunks=self.t["chunks"])

    def documents_older_than(
        self, conn: psycopg.Connection[Any], namespace: str, collection: str, before: datetime, limit: int
    ) -> list[str]:
        """Keys of the documents of ``namespace`` (of the consumer tag ``collection``; any when empty) last
        retained before ``before``, oldest first, at most ``limit``."""
        rows = conn.execute(
            sql.SQL(
                "SELECT natural_key FROM ({due}) d ORDER BY last_seen, natural_key LIMIT %(limit)s"
            ).format(due=self._documents_due()),
            {"ns": namespace, "collection": collection, "before": before, "limit": limit},
        ).fetchall()
        return [str(r[0]) for r in rows]

    def count_documents_older_than(
        self, conn: psycopg.Connection[Any], namespace: str, collection: str, before: datetime
    ) -> int:
        """How many documents `documents_older_than` would find without a limit."""
        return fetch_count(
            conn,
            sql.SQL("SELECT count(*) FROM ({due}) d").format(due=self._documents_due()),
            {"ns": namespace, "collection": collection, "before": before},
        )

    def _personal_data_due(self) -> sql.Composed:
        """(node key, observation id or "", last written) of the nodes of ``%(ns)s`` whose chunks are
        marked as personal data (of ``%(category)s``; any when empty), last written before ``%(before)s``."""
        return sql.SQL(
            "SELECT g.natural_key, coalesce(min(c.meta ->> 'observation_id'), '') AS observation_id, g.last_seen"
            " FROM {chunks} c JOIN {nodes} g ON g.namespace = c.namespace AND g.natural_key = c.node_key"
            " WHERE c.namespace = %(ns)s AND g.last_seen < %(before)s AND CASE WHEN %(category)s = ''"
            " THEN c.meta @> '{{\"pii\": true}}' ELSE c.meta -> 'pii_categories' ? %(category)s END"
            " GROUP BY g.natural_key, g.last_seen"
        ).format(nodes=self.t["graph_nodes"], chunks=self.t["chunks"])

    def personal_data_older_than(
        self, conn: psycopg.Connection[Any], namespace: str, category: str, before: datetime, limit: int
    ) -> list[tuple[str, str]]:
        """[(node key, observation id or "")] of the nodes of ``namespace`` whose chunks are marked as
        personal data (of ``category``, e.g. ``email``; any when empty) and that were last written before
        ``before``, oldest first, at most ``limit``. The observation id is that of an episode (its chunks
        carry it), so the caller purges the observation rather than the node alone."""
        rows = conn.execute(
            sql.SQL(
                "SELECT natural_key, observation_id FROM ({due}) p ORDER BY last_seen, natural_key LIMIT %(limit)s"
            ).format(due=self._personal_data_due()),
            {"ns": namespace, "category": category, "before": before, "limit": limit},
        ).fetchall()
        return [(str(key), str(observation_id)) for key, observation_id in rows]

    def count_personal_data_older_than(
        self, conn: psycopg.Connection[Any], namespace: str, category: str, before: datetime
    ) -> int:
        """How many nodes `personal_data_older_than` would find without a limit."""
        return fetch_count(
            conn,
            sql.SQL("SELECT count(*) FROM ({due}) p").format(due=self._personal_data_due()),
            {"ns": namespace, "category": category, "before": before},
        )

    def count_observations_older_than(
        self, conn: psycopg.Connection[Any], namespace: str, kind: str, before: datetime
    ) -> int:
        """How many observations `observations_older_than` would find without a limit."""
        return fetch_count(
            conn,
            sql.SQL(
                "SELECT count(*) FROM {obs} WHERE namespace = %s AND (%s = '' OR kind = %s) AND occurred_at < %s"
            ).format(obs=self.t["observations"]),
            (namespace, kind, kind, before),
        )

    def memories_older_than(
        self, conn: psycopg.Connection[Any], namespace: str, tier: str, before: datetime, limit: int
    ) -> list[tuple[str, str]]:
        """(memory_id, user_id) of ``namespace`` (of ``tier``; any when empty) last used before ``before``."""
        rows = conn.execute(
            sql.SQL(
                "SELECT memory_id, user_id FROM {m} WHERE namespace = %s AND (%s = '' OR tier = %s)"
                " AND last_used_at < %s ORDER BY last_used_at, memory_id LIMIT %s"
            ).format(m=self.t["memories"]),
            (namespace, tier, tier, before, limit),
        ).fetchall()
        return [(str(a), str(b)) for a, b in rows]

    def count_memories_older_than(
        self, conn: psycopg.Connection[Any], namespace: str, tier: str, before: datetime
    ) -> int:
        """How many memories `memories_older_than` would find without a limit."""
        return fetch_count(
            conn,
            sql.SQL(
                "SELECT count(*) FROM {m} WHERE namespace = %s AND (%s = '' OR tier = %s) AND last_used_at < %s"
            ).format(m=self.t["memories"]),
            (namespace, tier, tier, before),
        )

    def delete_traces_older_than(
        self, conn: psycopg.Connection[Any], namespace: str, before: datetime, limit: int
    ) -> int:
        """Deletes at most ``limit`` context traces of ``namespace`` created before ``before``."""
        cursor = conn.execute(
            sql.SQL(
                "DELETE FROM {t} WHERE id IN (SELECT id FROM {t} WHERE namespace = %s AND created_at < %s"
                " ORDER BY id LIMIT %s)"
            ).format(t=self.t["context_traces"]),
            (namespace, before, limit),
        )
        return cursor.rowcount

    def count_traces_older_than(self, conn: psycopg.Connection[Any], namespace: str, before: datetime) -> int:
        """How many context traces of ``namespace`` were created before ``before``."""
        return fetch_count(
            conn,
            sql.SQL("SELECT count(*) FROM {t} WHERE namespace = %s AND created_at < %s").format(
                t=self.t["context_traces"]
            ),
            (namespace, before),
        )
