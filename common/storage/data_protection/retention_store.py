"""Storage of retention: the rules (how long data of one class lives in a namespace) and the reads and
deletes that enforce them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from datetime import timedelta
from typing import Any

import psycopg
from psycopg import sql

from common.storage.row_count import fetch_count
from common.storage.tables import ComposingStore

__all__ = ["DUE_ITEMS", "RetentionRule", "RetentionStore"]


@dataclass(frozen=True)
class RetentionRule:
    """How long data of one class (and selector: kind or tier, '' for all) lives in a namespace."""

    namespace: str
    data_class: str
    selector: str
    max_age: timedelta


# Per data class with items of their own: (item key, other key or "", age) of the items of ``%(ns)s`` (of
# the selector ``%(selector)s``; any when empty) aged before ``%(before)s``. Observations (selector: kind):
# observation id, "", occurred_at. Memories (tier): memory id, user id, last use. Documents (the consumer
# tag ``{"collection": ...}`` of a chunk's meta): node key, "", when last retained. Personal data
# (category): a node whose chunks are marked as personal data, the observation id its chunks carry (an
# episode's) or "", when last written.
DUE_ITEMS = {
    "observations": (
        "SELECT observation_id AS item_key, '' AS other_key, occurred_at AS aged FROM {obs}"
        " WHERE namespace = %(ns)s AND (%(selector)s = '' OR kind = %(selector)s)"
        " AND occurred_at < %(before)s"
    ),
    "memories": (
        "SELECT memory_id AS item_key, user_id AS other_key, last_used_at AS aged FROM {m}"
        " WHERE namespace = %(ns)s AND (%(selector)s = '' OR tier = %(selector)s)"
        " AND last_used_at < %(before)s"
    ),
    "documents": (
        "SELECT g.natural_key AS item_key, '' AS other_key, g.last_seen AS aged FROM {nodes} g"
        " WHERE g.namespace = %(ns)s AND g.node_type = 'document' AND g.last_seen < %(before)s"
        " AND (%(selector)s = '' OR EXISTS (SELECT 1 FROM {chunks} c WHERE c.namespace = g.namespace"
        " AND c.node_key = g.natural_key AND c.meta @> jsonb_build_object('collection', %(selector)s::text)))"
    ),
    "personal_data": (
        "SELECT g.natural_key AS item_key, coalesce(min(c.meta ->> 'observation_id'), '') AS other_key,"
        " g.last_seen AS aged FROM {chunks} c"
        " JOIN {nodes} g ON g.namespace = c.namespace AND g.natural_key = c.node_key"
        " WHERE c.namespace = %(ns)s AND g.last_seen < %(before)s AND CASE WHEN %(selector)s = ''"
        " THEN c.meta @> '{{\"pii\": true}}' ELSE c.meta -> 'pii_categories' ? %(selector)s END"
        " GROUP BY g.natural_key, g.last_seen"
    ),
}


class RetentionStore(ComposingStore):
    """SQL of ``retention_rules`` and of the rows a rule makes due."""

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

    def _due(self, data_class: str) -> sql.Composed:
        """The `DUE_ITEMS` statement of ``data_class`` with this store's table names."""
        names = {"obs": "observations", "m": "memories", "nodes": "graph_nodes", "chunks": "chunks"}
        return sql.SQL(DUE_ITEMS[data_class]).format(**{key: self.t[table] for key, table in names.items()})

    def due_items(
        self, conn: psycopg.Connection[Any], rule: RetentionRule, before: datetime, limit: int
    ) -> list[tuple[str, str]]:
        """[(item key, other key or "")] of the items ``rule`` makes due before ``before`` (`DUE_ITEMS`:
        its data class is one of those), oldest first, at most ``limit``."""
        statement = sql.SQL("SELECT item_key, other_key FROM ({due}) d ORDER BY aged, item_key LIMIT %(limit)s")
        rows = conn.execute(
            statement.format(due=self._due(rule.data_class)),
            {"ns": rule.namespace, "selector": rule.selector, "before": before, "limit": limit},
        ).fetchall()
        return [(str(key), str(other)) for key, other in rows]

    def count_due(self, conn: psycopg.Connection[Any], rule: RetentionRule, before: datetime) -> int:
        """How many items `due_items` would find without a limit."""
        return fetch_count(
            conn,
            sql.SQL("SELECT count(*) FROM ({due}) d").format(due=self._due(rule.data_class)),
            {"ns": rule.namespace, "selector": rule.selector, "before": before},
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
