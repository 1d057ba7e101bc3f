"""The change feed's outbox: what every write records in its own transaction, read back in cursor order.

Most events are written by the statement-level triggers of migrations ``0034_change_feed.sql`` and
``0037_change_feed_write_cost.sql`` (one INSERT per statement, so a batch write records its events
set-based, whatever the write path); a write path whose change no table row states records its events
with `ChangeOutbox.append` in its transaction (a document retained). Both stage them in a temporary table
of the session; at commit they are inserted into ``change_events`` numbered, per namespace, in commit order
(docs/decisions/0041-change-feed-cursor.md): a reader that has seen cursor N never later finds a
smaller one.

`ChangeOutbox.read_page` reads the next changes after a cursor with the caller's visibility predicate
(`common.storage.visibility.Visibility`: the item's scopes and its subject and object nodes, as for a
fact) and the subscriber's filters inside the statement; hidden or filtered changes still advance the
page's cursor, so a subscriber never reads them again. The page also reports what was pruned in the same
snapshot, so a resume older than the retention is detected without a race against pruning.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from common.kernel.consistency import parse_lsn
from common.storage.database import Database
from common.storage.named_queries import Queries
from common.storage.row_count import fetch_count
from common.storage.visibility import Visibility

__all__ = [
    "NOTIFY_CHANNEL",
    "ChangeFilter",
    "ChangeInput",
    "ChangeOutbox",
    "ChangePage",
    "ChangeRow",
]

NOTIFY_CHANNEL = "memory_change_feed"
"""The channel the numbering at commit notifies, with the namespace as payload."""


@dataclass(frozen=True)
class ChangeInput:
    """One change a write path records itself (`ChangeOutbox.append`).

    Attributes:
        namespace: the item's namespace.
        event_type: ``family.what``, e.g. ``document.retained``.
        item_key: the item's key or id.
        scopes: the item's scopes (its visibility).
        payload: what changed (JSON object).
        subject_key: the subject's natural key, if any (filters and the node visibility check use it).
        predicate: a fact's predicate, if any.
        object_key: a fact's object, if any.
    """

    namespace: str
    event_type: str
    item_key: str
    scopes: Sequence[str] = ()
    payload: Mapping[str, Any] = field(default_factory=dict)
    subject_key: str | None = None
    predicate: str | None = None
    object_key: str | None = None


@dataclass(frozen=True)
class ChangeFilter:
    """What a subscriber wants: event types (exact, or a family ``fact.*``), prefixes of the item or
    subject key, fact predicates. Empty: everything."""

    event_types: tuple[str, ...] = ()
    key_prefixes: tuple[str, ...] = ()
    predicates: tuple[str, ...] = ()


# The condition each non-empty field of a `ChangeFilter` adds to what a page shows (its values bound as
# ``exact_types`` and ``families`` (the ``family.*`` entries), ``key_prefixes``, ``predicates``).
FILTER_CONDITIONS = (
    (
        "event_types",
        "(e.event_type = ANY(%(exact_types)s::text[])"
        " OR split_part(e.event_type, '.', 1) = ANY(%(families)s::text[]))",
    ),
    (
        "key_prefixes",
        "EXISTS (SELECT 1 FROM unnest(%(key_prefixes)s::text[]) AS p(prefix)"
        " WHERE starts_with(e.item_key, p.prefix) OR starts_with(coalesce(e.subject_key, ''), p.prefix))",
    ),
    ("predicates", "e.predicate = ANY(%(predicates)s::text[])"),
)


@dataclass(frozen=True)
class ChangeRow:
    """One committed change as stored."""

    event_id: int
    cursor: int
    namespace: str
    event_type: str
    item_key: str
    subject_key: str
    predicate: str
    object_key: str
    scopes: tuple[str, ...]
    payload: dict[str, Any]
    committed_at: datetime


@dataclass(frozen=True)
class ChangePage:
    """The result of `ChangeOutbox.read_page`.

    Attributes:
        changes: the changes the caller may see and asked for, in cursor order.
        cursor: the last cursor the page covered (hidden and filtered changes included); the ``after`` of
            the next page. Equal to ``after`` when nothing new committed.
        full: the page hit its limit (more may be waiting).
        pruned_through: the namespace's highest pruned cursor (0: nothing pruned).
        position: the WAL position the database had replayed right after the read (the consistency
            token of every change of the page).
    """

    changes: list[ChangeRow]
    cursor: int
    full: bool
    pruned_through: int
    position: int


class ChangeOutbox:
    """Reads and writes of ``change_events`` (see the module doc).

    Args:
        database: reads go through its ``read_connection`` (a replica for `RoutedDatabase`); writes
            take the caller's connection, pruning takes ``primary_connection``.
    """

    def __init__(self, database: Database) -> None:
        self.database = database
        self.queries = Queries.for_settings("change_feed.sql", database.settings)
        self._replication = Queries.for_settings("replication.sql", database.settings)

    # -- writes ------------------------------------------------------------------------------------

    def append(self, conn: psycopg.Connection[Any], changes: Sequence[ChangeInput]) -> None:
        """Records ``changes`` in ``conn``'s transaction, in one statement; they become visible, numbered,
        when it commits, and vanish if it rolls back. Nothing when the feed is switched off."""
        if not changes:
            return
        conn.execute(self.queries["stage_transaction"])
        conn.execute(
            self.queries["append_events"],
            {
                "namespaces": [c.namespace for c in changes],
                "event_types": [c.event_type for c in changes],
                "item_keys": [c.item_key for c in changes],
                "subject_keys": [c.subject_key for c in changes],
                "predicates": [c.predicate for c in changes],
                "object_keys": [c.object_key for c in changes],
                "scopes": [Jsonb(list(c.scopes)) for c in changes],
                "payloads": [Jsonb(dict(c.payload)) for c in changes],
            },
        )
        conn.execute(self.queries["mark_transaction"])

    # -- reads -------------------------------------------------------------------------------------

    def read_page(
        self,
        namespace: str,
        after: int,
        *,
        visibility: Visibility,
        filters: ChangeFilter = ChangeFilter(),
        limit: int = 500,
    ) -> ChangePage:
        """The next changes of ``namespace`` after cursor ``after`` (at most ``limit`` scanned).

        Raises:
            Unavailable: the database cannot be reached.
        """
        shown: list[sql.Composable] = [
            visibility.array_predicate(sql.SQL("e.scopes")),
            visibility.node_predicate(sql.SQL("e.namespace"), sql.SQL("e.subject_key")),
            visibility.node_predicate(sql.SQL("e.namespace"), sql.SQL("e.object_key")),
        ]
        params: dict[str, Any] = {"namespace": namespace, "after": after, "limit": limit, **visibility.params}
        params["exact_types"] = [t for t in filters.event_types if not t.endswith(".*")]
        params["families"] = [t[:-2] for t in filters.event_types if t.endswith(".*")]
        params["key_prefixes"] = list(filters.key_prefixes)
        params["predicates"] = list(filters.predicates)
        shown.extend(sql.SQL(condition) for name, condition in FILTER_CONDITIONS if getattr(filters, name))
        statement = sql.SQL(
            "SELECT e.id, e.cursor, e.event_type, e.item_key, e.subject_key, e.predicate, e.object_key,"
            " e.scopes, e.payload, e.committed_at, ({shown}) AS shown,"
            " (SELECT h.pruned_through FROM change_feed_heads h WHERE h.namespace = %(namespace)s)"
            " FROM change_events e WHERE e.namespace = %(namespace)s AND e.cursor > %(after)s"
            " ORDER BY e.cursor LIMIT %(limit)s"
        ).format(shown=sql.SQL(" AND ").join(shown))
        with self.database.read_connection() as conn:
            rows = conn.execute(statement, params).fetchall()
            if rows:
                pruned = rows[0][11]
            else:
                head = conn.execute(self.queries["pruned_through"], params).fetchone()
                pruned = head[0] if head else 0
            position_row = conn.execute(self._replication["replayed_wal_position"]).fetchone()
        assert position_row is not None
        changes = [
            ChangeRow(
                event_id=row[0],
                cursor=row[1],
                namespace=namespace,
                event_type=row[2],
                item_key=row[3],
                subject_key=row[4] or "",
                predicate=row[5] or "",
                object_key=row[6] or "",
                scopes=tuple(row[7] or ()),
                payload=row[8] if isinstance(row[8], dict) else json.loads(row[8] or "{}"),
                committed_at=row[9],
            )
            for row in rows
            if row[10]
        ]
        return ChangePage(
            changes=changes,
            cursor=rows[-1][1] if rows else after,
            full=len(rows) >= limit,
            pruned_through=int(pruned or 0),
            position=parse_lsn(str(position_row[0])),
        )

    def head(self, namespace: str) -> tuple[int, int]:
        """``(last cursor, pruned through)`` of ``namespace`` on the primary; ``(0, 0)`` before any change."""
        with self.database.primary_connection() as conn:
            row = conn.execute(self.queries["head"], {"namespace": namespace}).fetchone()
        return (int(row[0]), int(row[1])) if row else (0, 0)

    # -- retention ---------------------------------------------------------------------------------

    def prune(
        self, *, before: datetime, max_events: int, batch: int = 5000, namespace: str | None = None
    ) -> int:
        """Deletes the changes committed before ``before`` and, per namespace (only ``namespace`` when
        given), all but the newest ``max_events``, in transactions of at most ``batch`` rows; returns how
        many were deleted. A namespace's ``pruned_through`` rises to the highest cursor deleted, so a
        later resume before it fails (see `read_page`)."""
        deleted = 0
        while True:
            with self.database.primary_connection() as conn:
                count = fetch_count(conn, self.queries["prune_older"], {"before": before, "batch": batch})
            deleted += count
            if count < batch:
                break
        with self.database.primary_connection() as conn:
            heads = conn.execute(self.queries["heads"]).fetchall()
        for name, last_cursor in heads:
            through = int(last_cursor) - max_events
            while through > 0 and namespace in (None, name):
                with self.database.primary_connection() as conn:
                    count = fetch_count(
                        conn,
                        self.queries["prune_through"],
                        {"namespace": name, "through": through, "batch": batch},
                    )
                deleted += count
                if count < batch:
                    break
        return deleted
