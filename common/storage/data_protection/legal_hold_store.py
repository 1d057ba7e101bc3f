"""Storage of legal holds: placing, lifting and listing them, and the share-locked check of a deletion."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

__all__ = ["HoldRow", "LegalHoldStore"]


@dataclass(frozen=True)
class HoldRow:
    """One legal hold as stored."""

    hold_id: str
    namespace: str
    subject_key: str
    reason: str
    created_by: str
    create_time: datetime
    lifted_by: str
    lift_time: datetime | None


class LegalHoldStore:
    """SQL of the ``legal_holds`` table."""

    def insert_hold(self, conn: psycopg.Connection[Any], hold: HoldRow) -> None:
        """Stores a new hold."""
        conn.execute(
            "INSERT INTO legal_holds (hold_id, namespace, subject_key, reason, created_by, create_time)"
            " VALUES (%s, %s, %s, %s, %s, %s)",
            (hold.hold_id, hold.namespace, hold.subject_key, hold.reason, hold.created_by, hold.create_time),
        )

    def lift_hold(
        self, conn: psycopg.Connection[Any], namespace: str, hold_id: str, principal: str, now: datetime
    ) -> HoldRow | None:
        """Lifts an active hold; returns it as lifted, or None when there is no active hold of that id."""
        row = (
            conn.cursor(row_factory=dict_row)
            .execute(
                "UPDATE legal_holds SET lifted_by = %s, lift_time = %s"
                " WHERE namespace = %s AND hold_id = %s AND lift_time IS NULL RETURNING *",
                (principal, now, namespace, hold_id),
            )
            .fetchone()
        )
        return HoldRow(**row) if row else None

    def holds(
        self, conn: psycopg.Connection[Any], namespace: str, *, include_lifted: bool = False
    ) -> list[HoldRow]:
        """The holds of ``namespace``, oldest first (active ones only unless ``include_lifted``)."""
        rows = conn.cursor(row_factory=dict_row).execute(
            "SELECT * FROM legal_holds WHERE namespace = %s AND (%s OR lift_time IS NULL)"
            " ORDER BY create_time, hold_id",
            (namespace, include_lifted),
        )
        return [HoldRow(**row) for row in rows]

    def active_holds_touching(
        self, conn: psycopg.Connection[Any], namespace: str, subject_keys: Sequence[str]
    ) -> list[HoldRow]:
        """Active holds on the whole namespace or on one of ``subject_keys``; the rows are share-locked so
        a hold set concurrently waits for the deletion that checked it (or the deletion for the hold)."""
        rows = conn.cursor(row_factory=dict_row).execute(
            "SELECT * FROM legal_holds WHERE namespace = %s AND lift_time IS NULL"
            " AND (subject_key = '' OR subject_key = ANY(%s)) ORDER BY create_time, hold_id FOR SHARE",
            (namespace, list(subject_keys)),
        )
        return [HoldRow(**row) for row in rows]
