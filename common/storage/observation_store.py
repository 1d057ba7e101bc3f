"""The observations table: immutable evidence records; only status (and content on redaction) change.

Static SQL is in ``sql/queries/observations.sql``; `ObservationStore.get` (the caller's visibility
predicate, an optional ``FOR UPDATE``) is composed here with `psycopg.sql`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC
from datetime import datetime
from typing import Any
from typing import NewType

import psycopg
from psycopg import sql
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from common.kernel.config import Settings
from common.storage.named_queries import Queries
from common.storage.visibility import EVERYTHING
from common.storage.visibility import Visibility

# The columns `insert_many` writes (the keys every record of `encode_observation` must have).
_INSERTED_COLUMNS = frozenset(
    [
        "observation_id",
        "namespace",
        "source_system",
        "source_stream",
        "source_external_id",
        "kind",
        "occurred_at",
        "actor",
        "subject",
        "scopes",
        "content",
        "data",
        "assertions",
        "provenance",
        "status",
    ]
)


EncodedObservation = NewType("EncodedObservation", str)
"""One observation row as the JSON object `ObservationStore.insert_many` stores (`encode_observation`)."""


def encode_observation(record: dict[str, Any]) -> EncodedObservation:
    """The JSON object of one row for `ObservationStore.insert_many`. It needs no connection, so the
    ingest service encodes each observation in its request thread, before the batch waits for the write
    lane whose single writer then only joins the objects (bench/RESULTS.md (git history)).

    ``record`` keys: observation_id, namespace, source_system, source_stream, source_external_id, kind,
    occurred_at (aware datetime), actor, subject, scopes, content, data, assertions, provenance, status.

    Raises:
        KeyError: ``record`` lacks one of those keys (a JSON row without a key would be stored with NULL
            there, silently).
    """
    missing = _INSERTED_COLUMNS - record.keys()
    if missing:
        raise KeyError(f"encode_observation: a record lacks {sorted(missing)}")
    # ISO 8601 with its 4-digit year (the canonical instant writes year 5 as "5-...", which PostgreSQL's
    # date parser reads by DateStyle instead)
    row = {**record, "occurred_at": record["occurred_at"].astimezone(UTC).isoformat()}
    return EncodedObservation(json.dumps(row, ensure_ascii=False, separators=(",", ":")))


class ObservationStore:
    """SQL of the observations table; every call runs on the caller's connection."""

    def __init__(self, settings: Settings) -> None:
        self.table = sql.Identifier(settings.observations_table)
        self.queries = Queries.for_settings("observations.sql", settings)

    def insert_many(self, conn: psycopg.Connection[Any], rows: Sequence[EncodedObservation]) -> set[str]:
        """Inserts new observations in ONE statement (query ``insert_observations``: the rows as one jsonb
        array, encoded beforehand by `encode_observation`), in order; returns the observation_ids inserted
        now (a duplicate, an existing id or one earlier in ``rows``, writes nothing)."""
        if not rows:
            return set()
        document = "[" + ",".join(rows) + "]"
        inserted = conn.execute(self.queries["insert_observations"], (document,)).fetchall()
        return {str(row[0]) for row in inserted}

    def set_status(
        self, conn: psycopg.Connection[Any], observation_id: str, status: str, detail: dict[str, Any]
    ) -> None:
        """Records the processing status and its detail (e.g. rejected assertions with reasons)."""
        conn.execute(self.queries["set_observation_status"], (status, Jsonb(detail), observation_id))

    def statuses(self, conn: psycopg.Connection[Any], observation_ids: list[str]) -> dict[str, str]:
        """Stored status of each existing observation among ``observation_ids``."""
        rows = conn.execute(self.queries["observation_statuses"], (observation_ids,)).fetchall()
        return {str(a): str(b) for a, b in rows}

    def get(
        self,
        conn: psycopg.Connection[Any],
        namespace: str,
        observation_id: str,
        *,
        lock: bool = False,
        visibility: Visibility = EVERYTHING,
    ) -> dict[str, Any] | None:
        """The stored row as a dict, or None (also when ``visibility`` may not see it); ``lock`` takes it
        FOR UPDATE until the transaction ends."""
        statement = sql.SQL(
            "SELECT * FROM {table} WHERE namespace = %(namespace)s AND observation_id = %(observation_id)s"
            " AND {visible}" + (" FOR UPDATE" if lock else "")
        ).format(table=self.table, visible=visibility.array_predicate(sql.SQL("scopes")))
        with conn.cursor(row_factory=dict_row) as cursor:
            return cursor.execute(
                statement, {"namespace": namespace, "observation_id": observation_id, **visibility.params}
            ).fetchone()

    def redact(
        self,
        conn: psycopg.Connection[Any],
        namespace: str,
        observation_id: str,
        *,
        content: str,
        detail: dict[str, Any],
    ) -> dict[str, Any] | None:
        """Replaces content with ``content``, data with ``{}`` and assertions with ``[]``; status becomes
        ``redacted`` with ``detail`` as its detail. Identity, source, times, participants, scopes and
        provenance are kept. Returns the row after the update, or None when it does not exist."""
        with conn.cursor(row_factory=dict_row) as cursor:
            return cursor.execute(
                self.queries["redact_observation"], (content, Jsonb(detail), namespace, observation_id)
            ).fetchone()

    def delete(self, conn: psycopg.Connection[Any], namespace: str, observation_id: str) -> bool:
        """Deletes the row; False when it did not exist."""
        return conn.execute(self.queries["delete_observation"], (namespace, observation_id)).rowcount > 0

    def received_at(self, conn: psycopg.Connection[Any], observation_id: str) -> datetime | None:
        """When the observation was received (None when it does not exist)."""
        row = conn.execute(self.queries["observation_received_at"], (observation_id,)).fetchone()
        return row[0] if row else None
