"""SQL of snapshot reconciliation: the journal (source_snapshots, source_snapshots_items) and the snapshot
columns of facts (migrations 0005, 0006). Every call runs on the caller's connection and transaction.

A run's items are journaled batch by batch as they arrive (`add_items`); duplicates, the cardinality
check and the facts a run drops (`dropped_open_facts`: the previous run's journal minus this run's) are
computed in SQL, so no caller holds a whole snapshot in memory.

Every query is static: the named queries of ``sql/queries/snapshots.sql``."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from dataclasses import field
from datetime import datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from common.kernel.config import Settings
from common.storage.named_queries import Queries
from common.storage.row_count import fetch_count

ITEM_SEPARATOR = "\x1f"  # between subject, predicate and object in a fact's item_key
_SCOPE_LOCK_BASE = 0x736E_0000_0000  # advisory lock namespace of (namespace, source, scope)


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
    scopes: list[str] = field(default_factory=list)  # the fact's visibility scopes


class SnapshotStore:
    """Named, parameterised queries of the snapshot journal."""

    def __init__(self, settings: Settings) -> None:
        self.queries = Queries.for_settings("snapshots.sql", settings)

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
            self.queries["create_snapshot_run"],
            (namespace, source, scope, snapshot_id, snapshot_time),
        ).fetchone()
        return int(row[0]) if row else None

    def get(
        self, conn: psycopg.Connection[Any], namespace: str, source: str, scope: str, snapshot_id: str
    ) -> SnapshotRow | None:
        params = (namespace, source, scope, snapshot_id)
        return _snapshot_row(conn.execute(self.queries["snapshot_run"], params))

    def previous(
        self, conn: psycopg.Connection[Any], namespace: str, source: str, scope: str, before_row: int
    ) -> SnapshotRow | None:
        """The last snapshot of (namespace, source, scope) journaled before the run ``before_row``."""
        params = (namespace, source, scope, before_row)
        return _snapshot_row(conn.execute(self.queries["previous_snapshot_run"], params))

    def set_counts(self, conn: psycopg.Connection[Any], row_id: int, counts: dict[str, int]) -> None:
        conn.execute(
            self.queries["set_snapshot_counts"],
            (Jsonb(counts), row_id),
        )

    def forget_node(self, conn: psycopg.Connection[Any], namespace: str, natural_key: str) -> int:
        """Removes a deleted node from every snapshot journal of ``namespace``: its entity item and the
        fact items with the node as subject or object. Returns how many items went.

        DeleteNode calls it in its transaction, so the next Reconcile of a source that still states the
        node finds it new and creates it again, instead of taking it (and its facts) as unchanged.
        """
        return conn.execute(
            self.queries["forget_node_in_journals"],
            {"namespace": namespace, "key": natural_key, "separator": ITEM_SEPARATOR},
        ).rowcount

    def lock_scope(self, conn: psycopg.Connection[Any], namespace: str, source: str, scope: str) -> None:
        """Serialises runs of one (namespace, source, scope) until the transaction ends, so two runs never
        compare themselves with the same previous snapshot concurrently."""
        digest = hashlib.sha256(ITEM_SEPARATOR.join((namespace, source, scope)).encode("utf-8")).hexdigest()
        conn.execute(self.queries["lock_snapshot_scope"], (_SCOPE_LOCK_BASE + int(digest[:10], 16),))
        # The run repeats each statement per batch, so psycopg prepares them; a generic plan cannot see
        # that a namespace filled in this very transaction is large (its statistics say empty) and picks
        # scans that grow with the snapshot. Plans are made per execution for this transaction only.
        conn.execute(self.queries["plan_per_execution"])

    def add_items(
        self,
        conn: psycopg.Connection[Any],
        row_id: int,
        kind: str,
        items: list[tuple[str, str, int, str | None]],
    ) -> dict[int, int | None]:
        """Journals ``(item_key, item_hash, item_position, cardinality_key)`` items of one kind for the run.

        Returns the duplicates: position of each item whose key the run had already journaled -> the
        position of that earlier item (None if it cannot be told). Empty when every key is new.
        """
        if not items:
            return {}
        rows = conn.execute(
            self.queries["journal_items"],
            {
                "row": row_id,
                "kind": kind,
                "keys": [item[0] for item in items],
                "hashes": [item[1] for item in items],
                "positions": [item[2] for item in items],
                "cardinality": [item[3] for item in items],
            },
        ).fetchall()
        if len(rows) == len(items):
            return {}
        journaled = {int(row[0]) for row in rows}
        repeated = [item for item in items if item[2] not in journaled]
        first = dict(
            conn.execute(
                self.queries["journaled_item_positions"],
                (row_id, kind, sorted({item[0] for item in repeated})),
            ).fetchall()
        )
        return {item[2]: first.get(item[0]) for item in repeated}

    def cardinality_repeats(
        self, conn: psycopg.Connection[Any], row_id: int, limit: int
    ) -> list[tuple[str, list[int]]]:
        """Cardinality keys (``subject<US>predicate``) journaled more than once in the run, each with the
        positions of its facts in stream order; at most ``limit`` keys."""
        rows = conn.execute(
            self.queries["cardinality_repeats"],
            (row_id, limit),
        ).fetchall()
        return [(str(key), [int(p) for p in positions]) for key, positions in rows]

    def dropped_open_facts(
        self,
        conn: psycopg.Connection[Any],
        namespace: str,
        source: str,
        scope: str,
        previous_row: int,
        current_row: int,
        snapshot_time: datetime,
        after: str,
        limit: int,
    ) -> tuple[list[str], str | None]:
        """One page of the facts a run drops: the fact items of the previous run's journal that the current
        run's journal lacks (a set difference in SQL, in item_key order after ``after``), mapped to the
        open facts of (source, scope) valid from no later than ``snapshot_time``.

        Returns (fact_ids to close, item_key to continue after, or None when this was the last page).
        """
        rows = conn.execute(
            self.queries["dropped_open_facts"],
            {
                "previous": previous_row,
                "current": current_row,
                "after": after,
                "limit": limit,
                "namespace": namespace,
                "separator": ITEM_SEPARATOR,
                "source": source,
                "scope": scope,
                "snapshot_time": snapshot_time,
            },
        ).fetchall()
        keys = {str(row[0]) for row in rows}
        fact_ids = [str(row[1]) for row in rows if row[1] is not None]
        return fact_ids, (max(keys) if len(keys) == limit else None)

    def open_scope_fact_count(
        self, conn: psycopg.Connection[Any], namespace: str, source: str, scope: str, snapshot_time: datetime
    ) -> int:
        """How many facts of (source, scope) are open and valid from no later than ``snapshot_time``."""
        return fetch_count(
            conn,
            self.queries["open_scope_fact_count"],
            {"namespace": namespace, "source": source, "scope": scope, "snapshot_time": snapshot_time},
        )

    def item_hashes(
        self, conn: psycopg.Connection[Any], row_id: int, kind: str, keys: list[str]
    ) -> dict[str, str]:
        rows = conn.execute(
            self.queries["journaled_item_hashes"],
            (row_id, kind, keys),
        ).fetchall()
        return {str(key): str(digest) for key, digest in rows}

    def open_facts(
        self,
        conn: psycopg.Connection[Any],
        namespace: str,
        source: str,
        scope: str,
        triples: list[tuple[str, str, str]],
    ) -> list[OpenSnapshotFact]:
        """Open facts owned by (source, scope) with one of the (subject, predicate, object) ``triples``,
        ordered by fact_id (the run holds the scope's lock, `lock_scope`; other writers of these facts
        are serialised by their row locks when the run updates them).

        One look-up per triple (facts_subject_idx) in a fenced lateral subquery: as a join, the planner,
        whose statistics do not know the facts this transaction wrote, scans every open fact of the scope
        for each batch instead (30 ms per batch at 50,000 facts, growing with the snapshot).
        """
        if not triples:
            return []
        rows = conn.execute(
            self.queries["open_snapshot_facts"],
            {
                "namespace": namespace,
                "subjects": [s for s, _, _ in triples],
                "predicates": [p for _, p, _ in triples],
                "objects": [o for _, _, o in triples],
                "source": source,
                "scope": scope,
            },
        ).fetchall()
        return [OpenSnapshotFact(r[0], r[1], r[2], r[3], dict(r[4]), r[5], list(r[6] or [])) for r in rows]

    def adopt_facts(
        self,
        conn: psycopg.Connection[Any],
        source: str,
        scope: str,
        snapshot_id: str,
        adoptions: list[tuple[str, dict[str, Any] | None]],
    ) -> None:
        """Marks facts ``(fact_id, attributes)`` as owned by (source, scope) and written by ``snapshot_id``;
        sets the attributes when given (None keeps them). One statement, rows locked in fact_id order."""
        if not adoptions:
            return
        ordered = sorted(adoptions, key=lambda adoption: adoption[0])
        conn.execute(
            self.queries["adopt_snapshot_facts"],
            {
                "source": source,
                "scope": scope,
                "snapshot_id": snapshot_id,
                "fact_ids": [fact_id for fact_id, _ in ordered],
                "attributes": [
                    None if attributes is None else json.dumps(attributes, ensure_ascii=False)
                    for _, attributes in ordered
                ],
            },
        )


def _snapshot_row(cursor: psycopg.Cursor[Any]) -> SnapshotRow | None:
    """The first ``(id, snapshot_id, snapshot_time, counts)`` row of ``cursor`` as a `SnapshotRow`; None
    for no row."""
    row = cursor.fetchone()
    return SnapshotRow(int(row[0]), row[1], row[2], dict(row[3])) if row else None
