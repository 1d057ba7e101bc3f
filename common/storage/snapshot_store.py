"""SQL of snapshot reconciliation: the journal (source_snapshots, source_snapshots_items) and the snapshot
columns of facts (migration 0005). Every call runs on the caller's connection and transaction."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from common.config import Settings
from common.db import table_identifiers

ITEM_SEPARATOR = "\x1f"  # between subject, predicate and object in a fact's item_key


@dataclass(frozen=True)
class SnapshotRow:
    row_id: int
    snapshot_id: str
    snapshot_time: datetime
    counts: dict[str, int]


@dataclass(frozen=True)
class OpenSnapshotFact:
    fact_id: str
    subject_key: str
    predicate: str
    object_key: str
    attributes: dict[str, Any]
    snapshot_id: str | None


class SnapshotStore:
    """Named, parameterised queries of the snapshot journal."""

    def __init__(self, settings: Settings) -> None:
        self.t = table_identifiers(settings)

    def create(
        self,
        conn: psycopg.Connection[Any],
        namespace: str,
        source: str,
        scope: str,
        snapshot_id: str,
        snapshot_time: datetime,
    ) -> int | None:
        """Journals a new run; None when (namespace, source, scope, snapshot_id) was reconciled before."""
        row = conn.execute(
            sql.SQL(
                "INSERT INTO {snapshots} (namespace, source, scope, snapshot_id, snapshot_time)"
                " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (namespace, source, scope, snapshot_id) DO NOTHING"
                " RETURNING id"
            ).format(**self.t),
            (namespace, source, scope, snapshot_id, snapshot_time),
        ).fetchone()
        return int(row[0]) if row else None

    def get(
        self, conn: psycopg.Connection[Any], namespace: str, source: str, scope: str, snapshot_id: str
    ) -> SnapshotRow | None:
        row = conn.execute(
            sql.SQL(
                "SELECT id, snapshot_id, snapshot_time, counts FROM {snapshots}"
                " WHERE namespace = %s AND source = %s AND scope = %s AND snapshot_id = %s"
            ).format(**self.t),
            (namespace, source, scope, snapshot_id),
        ).fetchone()
        return SnapshotRow(int(row[0]), row[1], row[2], dict(row[3])) if row else None

    def previous(
        self, conn: psycopg.Connection[Any], namespace: str, source: str, scope: str, before_row: int
    ) -> SnapshotRow | None:
        """The last snapshot of (namespace, source, scope) journaled before the run ``before_row``."""
        row = conn.execute(
            sql.SQL(
                "SELECT id, snapshot_id, snapshot_time, counts FROM {snapshots}"
                " WHERE namespace = %s AND source = %s AND scope = %s AND id <> %s"
                " ORDER BY snapshot_time DESC, id DESC LIMIT 1"
            ).format(**self.t),
            (namespace, source, scope, before_row),
        ).fetchone()
        return SnapshotRow(int(row[0]), row[1], row[2], dict(row[3])) if row else None

    def set_counts(self, conn: psycopg.Connection[Any], row_id: int, counts: dict[str, int]) -> None:
        conn.execute(
            sql.SQL("UPDATE {snapshots} SET counts = %s WHERE id = %s").format(**self.t),
            (Jsonb(counts), row_id),
        )

    def add_items(
        self, conn: psycopg.Connection[Any], row_id: int, items: list[tuple[str, str, str]]
    ) -> None:
        """Journals (item_kind, item_key, item_hash) of the run with COPY."""
        with conn.cursor() as cursor:
            copy_sql = sql.SQL(
                "COPY {snapshot_items} (snapshot_row, item_kind, item_key, item_hash) FROM STDIN"
            ).format(**self.t)
            with cursor.copy(copy_sql) as copy:
                for kind, key, digest in items:
                    copy.write_row((row_id, kind, key, digest))

    def item_hashes(
        self, conn: psycopg.Connection[Any], row_id: int, kind: str, keys: list[str]
    ) -> dict[str, str]:
        rows = conn.execute(
            sql.SQL(
                "SELECT item_key, item_hash FROM {snapshot_items}"
                " WHERE snapshot_row = %s AND item_kind = %s AND item_key = ANY(%s)"
            ).format(**self.t),
            (row_id, kind, keys),
        ).fetchall()
        return {str(key): str(digest) for key, digest in rows}

    def open_facts(
        self, conn: psycopg.Connection[Any], namespace: str, source: str, scope: str, subjects: list[str]
    ) -> list[OpenSnapshotFact]:
        """Open facts owned by (source, scope) whose subject is in ``subjects``, locked for update."""
        rows = conn.execute(
            sql.SQL(
                "SELECT fact_id, subject_key, predicate, object_key, attributes, snapshot_id FROM {facts}"
                " WHERE namespace = %s AND snapshot_source = %s AND snapshot_scope = %s AND valid_to IS NULL"
                " AND subject_key = ANY(%s) ORDER BY fact_id FOR UPDATE"
            ).format(**self.t),
            (namespace, source, scope, subjects),
        ).fetchall()
        return [OpenSnapshotFact(r[0], r[1], r[2], r[3], dict(r[4]), r[5]) for r in rows]

    def adopt_fact(
        self,
        conn: psycopg.Connection[Any],
        fact_id: str,
        source: str,
        scope: str,
        snapshot_id: str,
        attributes: dict[str, Any] | None,
    ) -> None:
        """Marks a fact as owned by (source, scope) and confirmed by ``snapshot_id``; sets attributes when given."""
        if attributes is None:
            conn.execute(
                sql.SQL(
                    "UPDATE {facts} SET snapshot_source = %s, snapshot_scope = %s, snapshot_id = %s WHERE fact_id = %s"
                ).format(**self.t),
                (source, scope, snapshot_id, fact_id),
            )
        else:
            conn.execute(
                sql.SQL(
                    "UPDATE {facts} SET snapshot_source = %s, snapshot_scope = %s, snapshot_id = %s, attributes = %s"
                    " WHERE fact_id = %s"
                ).format(**self.t),
                (source, scope, snapshot_id, Jsonb(attributes), fact_id),
            )

    def confirm_facts(self, conn: psycopg.Connection[Any], fact_ids: list[str], snapshot_id: str) -> None:
        if fact_ids:
            conn.execute(
                sql.SQL("UPDATE {facts} SET snapshot_id = %s WHERE fact_id = ANY(%s)").format(**self.t),
                (snapshot_id, fact_ids),
            )

    def unconfirmed_open_facts(
        self,
        conn: psycopg.Connection[Any],
        namespace: str,
        source: str,
        scope: str,
        snapshot_id: str,
        snapshot_time: datetime,
        limit: int,
    ) -> list[str]:
        """Open facts of (source, scope), valid from no later than ``snapshot_time``, that the run of
        ``snapshot_id`` did not confirm (every fact it lists carries its snapshot_id); at most ``limit``.

        Served by the partial index on open snapshot facts; no join with the journal, whose fresh rows
        have no planner statistics inside the reconciling transaction.
        """
        rows = conn.execute(
            sql.SQL(
                "SELECT fact_id FROM {facts} WHERE namespace = %s AND snapshot_source = %s AND snapshot_scope = %s"
                " AND valid_to IS NULL AND valid_from <= %s AND snapshot_id IS DISTINCT FROM %s"
                " ORDER BY fact_id LIMIT %s"
            ).format(**self.t),
            (namespace, source, scope, snapshot_time, snapshot_id, limit),
        ).fetchall()
        return [str(row[0]) for row in rows]
