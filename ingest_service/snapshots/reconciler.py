"""Snapshot reconciliation: SnapshotService.Reconcile and ReconcileStream in domain form
(docs/explanation/knowledge-model.md; docs/how-to/domain-packs.md).

A snapshot is the complete current state of one ``(source, scope)``: entities and facts with attributes.
Compared with what earlier snapshots of that ``(source, scope)`` left:

- entities: new ones are created, changed ones (title, type, attributes) updated; an entity whose item
  hash equals the previous snapshot's is not touched;
- facts are identified by (subject, predicate, object): one that has no open fact of this
  ``(source, scope)`` is written through the fact engine (``valid_from`` given or ``snapshot_time``;
  a fact of the same fact_id written by another path is strengthened and adopted), an open one whose
  attributes changed is updated, an open one with the same attributes is not touched, and facts the
  previous snapshot listed but this one does not are closed (``valid_to = snapshot_time``) when they
  are still open facts of this ``(source, scope)``. Facts of other origins or other scopes are never
  touched. A fact's ``snapshot_id`` names the snapshot that last created or changed it. A closing step
  that would close every open fact of the ``(source, scope)``, or more than ``CB_MASS_SWEEP_SHARE`` of
  them (counted after the snapshot's own writes, so a snapshot that replaces its facts is not one), is
  refused unless the header allows it (`ingest_service.validation.mass_deletion`); the run rolls back.

Streaming (bounded memory): one implementation, `SnapshotReconciler.reconcile_stream`, consumes the
items part by part (the unary `reconcile` is a stream of one part). Items are validated
(`ingest_service.snapshots.model`), journaled in source_snapshots_items (key, hash, position) and written
in batches of `SNAPSHOT_BATCH`, so the process holds at most a batch and one part, whatever the
snapshot's size; facts are written, adopted and closed through `ingest_service.facts.engine.FactEngine`.
Everything that needs the whole snapshot runs in SQL at the end: duplicate keys are found by the
journal's primary key as they arrive, the cardinality-one check groups the journal, and the facts to
close are the set difference of the previous and the current journal (`SnapshotStore.dropped_open_facts`).
The run itself, inside its transaction, is `ingest_service.snapshots.run.SnapshotRun`.

Atomicity and the crash story: a run is one database transaction, opened when the header arrives and
committed only after the last part, the checks and the closing step. A stream that breaks midway
(cancelled, deadline, connection lost, closed without its end message: the transport's iterator raises,
see `ingest_service.servicers.snapshot_servicer`) or carries an invalid item rolls back: nothing is written,
nothing is journaled, nothing is closed, and the same snapshot_id can be sent again from the start
(there is nothing to resume; a resumable protocol would have to keep a half-applied snapshot visible). Runs of one (namespace, source, scope)
are serialised by an advisory lock; a snapshot_id already reconciled returns the counts of its run with
``unchanged`` without reading the items (reconciling the same snapshot twice changes nothing). While a
run is open, writers of the same graph keys wait for it (row locks), as for any transaction.

Validation errors carry field paths with the item's position in the whole snapshot: entities and facts
are counted separately across every part, so ``facts[120034].subject`` is the subject of the 120,035th
fact streamed, and a unary request gets exactly the paths it always had. After the first invalid item
nothing more is written; the rest of the stream is still validated and journaled (duplicates and
cardinality are found across it), and the run fails with up to `MAX_SNAPSHOT_VIOLATIONS` violations.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Sequence
from dataclasses import asdict
from datetime import datetime
from typing import Any

import psycopg

from common.kernel.errors import Unavailable
from common.kernel.identifiers import canonical_instant
from common.packs.kind_validation import KindValidator
from common.storage.database import Database
from common.storage.graph.store import GraphStore
from common.storage.snapshot_store import SnapshotStore
from ingest_service.facts.engine import FactEngine
from ingest_service.snapshots.model import ReconcileResult
from ingest_service.snapshots.model import SnapshotHeader
from ingest_service.snapshots.model import SnapshotPart
from ingest_service.snapshots.model import header_violations
from ingest_service.snapshots.run import SnapshotRun
from ingest_service.validation.limits import MAX_SNAPSHOT_ITEMS
from ingest_service.validation.mass_deletion import MassDeletionGuard

log = logging.getLogger(__name__)


class SnapshotReconciler:
    """Reconciles snapshots (see the module doc)."""

    def __init__(self, database: Database, *, kinds: KindValidator | None = None) -> None:
        self.database = database
        self.kinds = kinds or KindValidator(database)
        self.graph = GraphStore(database)
        self.engine = FactEngine(self.graph)
        self.facts = self.engine.facts  # reads only: facts are written by the engine
        self.store = SnapshotStore(database.settings)
        self.guard = MassDeletionGuard(database.settings.mass_sweep_share)

    def reconcile(
        self,
        namespace: str,
        source: str,
        scope: str,
        snapshot_id: str,
        snapshot_time: datetime | None,
        raw_entities: Sequence[Any],
        raw_facts: Sequence[Any],
        *,
        allow_mass_sweep: bool = False,
    ) -> ReconcileResult:
        """Reconciles one snapshot given whole (SnapshotService.Reconcile): `reconcile_stream` of one
        part. Retried as a whole on a deadlock with a concurrent writer.

        Raises:
            InvalidArgument: bad request fields, more than `MAX_SNAPSHOT_ITEMS` items, invalid items (paths
                ``entities[i].key``, ``facts[j].valid_from``), duplicate items, or strict-mode violations.
            Unavailable: the database cannot be reached; nothing was written, retrying is safe.
            FailedPrecondition: a mass closing the caller did not allow (``MASS_SWEEP_REFUSED``); nothing
                was written.
        """
        header = SnapshotHeader(namespace, source, scope, snapshot_id, snapshot_time, allow_mass_sweep)
        check = header_violations(header)
        if len(raw_entities) + len(raw_facts) > MAX_SNAPSHOT_ITEMS:
            check.add(
                "entities",
                f"at most {MAX_SNAPSHOT_ITEMS} entities and facts per request (stream larger snapshots)",
            )
        check.raise_if_any()
        part = SnapshotPart(raw_entities, raw_facts)
        return self._run(header, lambda: iter((part,)), replayable=True)

    def reconcile_stream(self, header: SnapshotHeader, parts: Iterable[SnapshotPart]) -> ReconcileResult:
        """Reconciles one snapshot whose items arrive in ``parts`` (SnapshotService.ReconcileStream),
        consuming them incrementally in bounded memory; atomic (see the module doc).

        ``parts`` is iterated once, inside the run's transaction; an exception it raises (a broken
        stream) rolls the run back and propagates.

        Raises:
            InvalidArgument: bad header fields, more than `MAX_STREAM_ITEMS` items, invalid items
                (positions counted across the stream), duplicates, or strict-mode violations.
            Unavailable: the database cannot be reached, or a deadlock with a concurrent writer
                (a stream cannot be replayed: send it again); nothing was written.
        """
        header_violations(header).raise_if_any()
        consumed = iter(parts)
        return self._run(header, lambda: consumed, replayable=False)

    # -- the run -----------------------------------------------------------------------------------

    def _run(
        self, header: SnapshotHeader, parts: Callable[[], Iterator[SnapshotPart]], *, replayable: bool
    ) -> ReconcileResult:
        kinds = self.kinds.for_namespace(header.namespace)

        def work(conn: psycopg.Connection[Any]) -> ReconcileResult:
            return SnapshotRun(self, conn, header, kinds).execute(parts())

        if replayable:
            result = self.database.run_transaction(work)
        else:
            try:
                with self.database.connection() as conn:
                    result = work(conn)
            except (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure) as error:
                raise Unavailable(
                    "the snapshot collided with a concurrent writer and was rolled back; send it again",
                    reason="CONCURRENT_WRITE",
                ) from error
        assert header.snapshot_time is not None
        log.info(
            "reconciled %s %s/%s snapshot %s at %s: %s%s",
            header.namespace,
            header.source,
            header.scope,
            header.snapshot_id,
            canonical_instant(header.snapshot_time),
            asdict(result.counts),
            " (already reconciled)" if result.unchanged else "",
        )
        return result
