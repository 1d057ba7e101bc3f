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

import dataclasses
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

import psycopg

from common.domain.scope_inheritance import reaches_beyond
from common.domain.write_access import WriteAccess
from common.kernel.errors import FieldViolation, InvalidArgument, Unavailable
from common.kernel.identifiers import canonical_instant
from common.packs.kind_validation import KindValidator, NamespaceKinds
from common.storage.database import Database
from common.storage.fact_store import FactStore
from common.storage.graph.store import GraphStore, NodeWrite
from common.storage.snapshot_store import ITEM_SEPARATOR, SnapshotRow, SnapshotStore
from ingest_service.facts.engine import AGENT_ORIGIN, FactEngine, FactInput, accepted
from ingest_service.snapshots.model import (
    ReconcileCounts,
    ReconcileResult,
    SnapshotEntity,
    SnapshotHeader,
    SnapshotPart,
    fact_digest,
    fact_item_key,
    header_violations,
    validate_entities,
    validate_facts,
)
from ingest_service.validation.limits import (
    MAX_SNAPSHOT_ITEMS,
    MAX_SNAPSHOT_VIOLATIONS,
    MAX_STREAM_ITEMS,
    SNAPSHOT_BATCH,
)
from ingest_service.validation.mass_deletion import MassDeletionGuard

log = logging.getLogger(__name__)

SNAPSHOT_ORIGIN = AGENT_ORIGIN  # source_path names the snapshot


class SnapshotReconciler:
    """Reconciles snapshots (see the module doc)."""

    def __init__(self, database: Database, *, kinds: KindValidator | None = None) -> None:
        self.database = database
        self.kinds = kinds or KindValidator(database)
        self.graph = GraphStore(database)
        self.facts = FactStore(self.graph)  # reads only: facts are written by the engine
        self.engine = FactEngine(self.graph, self.facts)
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
            return _Run(self, conn, header, kinds).execute(parts())

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


class _Run:
    """One reconciliation inside its transaction: buffers at most `SNAPSHOT_BATCH` entities and as many
    facts."""

    def __init__(
        self,
        owner: SnapshotReconciler,
        conn: psycopg.Connection[Any],
        header: SnapshotHeader,
        kinds: NamespaceKinds,
    ) -> None:
        assert header.snapshot_time is not None
        self.owner = owner
        self.store = owner.store
        self.conn = conn
        self.header = header
        self.snapshot_time: datetime = header.snapshot_time
        self.kinds = kinds
        self.counts = ReconcileCounts()
        self.now = datetime.now(UTC)
        self.access = WriteAccess.of_caller()  # the caller's write-side scopes (`common.domain.write_access`)
        self.row_id = 0
        self.previous: SnapshotRow | None = None
        self.entities: list[tuple[int, Any]] = []
        self.facts: list[tuple[int, Any]] = []
        self.entity_position = 0
        self.fact_position = 0
        self.violations: list[FieldViolation] = []
        self.cardinality_checked = kinds.strict and any(
            relation.cardinality == "one" for relation in kinds.relations.values()
        )

    def execute(self, parts: Iterator[SnapshotPart]) -> ReconcileResult:
        header = self.header
        self.store.lock_scope(self.conn, header.namespace, header.source, header.scope)
        row_id = self.store.create(
            self.conn, header.namespace, header.source, header.scope, header.snapshot_id, self.snapshot_time
        )
        if row_id is None:
            done = self.store.get(
                self.conn, header.namespace, header.source, header.scope, header.snapshot_id
            )
            assert done is not None
            before = self.store.previous(
                self.conn, header.namespace, header.source, header.scope, done.row_id
            )
            known = {k: v for k, v in done.counts.items() if k in ReconcileCounts.__dataclass_fields__}
            return ReconcileResult(
                header.snapshot_id, ReconcileCounts(**known), True, before.snapshot_id if before else ""
            )
        self.row_id = row_id
        self.previous = self.store.previous(self.conn, header.namespace, header.source, header.scope, row_id)
        for part in parts:
            for raw in part.entities:
                self.entities.append((self.entity_position, raw))
                self.entity_position += 1
                if len(self.entities) >= SNAPSHOT_BATCH:
                    self._flush_entities()
            for raw in part.facts:
                self.facts.append((self.fact_position, raw))
                self.fact_position += 1
                if len(self.facts) >= SNAPSHOT_BATCH:
                    self._flush_facts()
            if self.entity_position + self.fact_position > MAX_STREAM_ITEMS:
                self._violation("entities", f"at most {MAX_STREAM_ITEMS} entities and facts per snapshot")
                break
            if len(self.violations) >= MAX_SNAPSHOT_VIOLATIONS:
                break
        self._flush_facts()  # flushes the entities first
        if self.cardinality_checked and len(self.violations) < MAX_SNAPSHOT_VIOLATIONS:
            self._check_cardinality()
        if self.violations:
            raise InvalidArgument(self.violations[:MAX_SNAPSHOT_VIOLATIONS])
        if self.previous is not None:
            self._close_dropped(self.previous)
        self.store.set_counts(self.conn, row_id, asdict(self.counts))
        return ReconcileResult(
            header.snapshot_id, self.counts, False, self.previous.snapshot_id if self.previous else ""
        )

    def _guard_closing(self, previous: SnapshotRow) -> None:
        """Counts what the closing step would close (a first pass over the same pages) and refuses a mass
        closing (`MassDeletionGuard`): every open fact of the scope, or more than the share."""
        header = self.header
        dropping = 0
        after: str | None = ""
        while after is not None:
            fact_ids, after = self.store.dropped_open_facts(
                self.conn,
                header.namespace,
                header.source,
                header.scope,
                previous.row_id,
                self.row_id,
                self.snapshot_time,
                after,
                SNAPSHOT_BATCH,
            )
            dropping += len(set(fact_ids))
        if not dropping:
            return
        total = self.store.open_scope_fact_count(
            self.conn, header.namespace, header.source, header.scope, self.snapshot_time
        )
        self.owner.guard.check(
            dropping,
            total,
            allowed=False,
            what=f"the snapshot {header.snapshot_id} of {header.source}/{header.scope} in {header.namespace}",
            flag="allow_mass_sweep (cb reconcile --allow-mass-sweep)",
            items="open facts",
        )

    def _violation(self, field: str, description: str) -> None:
        self.violations.append(FieldViolation(field, description))

    @property
    def writing(self) -> bool:
        """False once an item was invalid: the run fails, so later batches are only validated."""
        return not self.violations

    # -- entities ----------------------------------------------------------------------------------

    def _flush_entities(self) -> None:
        batch, self.entities = self.entities, []
        if not batch:
            return
        entities, violations = validate_entities(batch, self.kinds)
        self.violations.extend(violations)
        duplicates = self.store.add_items(
            self.conn, self.row_id, "entity", [(e.key, e.digest, e.position, None) for e in entities]
        )
        for position, first in sorted(duplicates.items()):
            key = next(e.key for e in entities if e.position == position)
            also = f" (also entities[{first}])" if first is not None else ""
            self._violation(f"entities[{position}].key", f"{key!r} is listed twice{also}")
        if self.writing:
            self._write_entities(entities)

    def _write_entities(self, entities: list[SnapshotEntity]) -> None:
        # Write-side visibility scopes: a hidden node is NOT_FOUND.
        self.access.require_writable(
            self.conn, self.owner.facts, self.header.namespace, [e.key for e in entities], []
        )
        previous = (
            self.store.item_hashes(self.conn, self.previous.row_id, "entity", [e.key for e in entities])
            if self.previous
            else {}
        )
        changed = []
        for entity in entities:
            if previous.get(entity.key) == entity.digest:
                self.counts.entities_unchanged += 1
            else:
                changed.append(entity)
        results = self.owner.graph.upsert_nodes(
            self.conn,
            [
                NodeWrite(
                    namespace=self.header.namespace,
                    natural_key=entity.key,
                    node_type=entity.node_type,
                    title=entity.title,
                    origin=SNAPSHOT_ORIGIN,
                    props={"attributes": entity.attributes},
                    asserted_at=self.snapshot_time,
                )
                for entity in changed
            ],
            now=self.now,
            overwrite=True,
            merge_props=True,
        )
        for result in results:
            # A placeholder (a fact end streamed before its entity) completed here counts as created.
            if result.created or result.completed_placeholder:
                self.counts.entities_created += 1
            elif result.updated:
                self.counts.entities_updated += 1
            else:
                self.counts.entities_unchanged += 1

    # -- facts -------------------------------------------------------------------------------------

    def _flush_facts(self) -> None:
        self._flush_entities()  # entities that arrived before these facts are written first
        batch, self.facts = self.facts, []
        if not batch:
            return
        facts, cardinality, violations = validate_facts(batch, self.kinds, self.snapshot_time)
        self.violations.extend(violations)
        duplicates = self.store.add_items(
            self.conn,
            self.row_id,
            "fact",
            [
                (
                    fact_item_key(f.subject, f.predicate, f.object),
                    fact_digest(f),
                    f.index,
                    cardinality.get(f.index),
                )
                for f in facts
            ],
        )
        for position, first in sorted(duplicates.items()):
            fact = next(f for f in facts if f.index == position)
            also = f" (also facts[{first}])" if first is not None else ""
            self._violation(
                f"facts[{position}]",
                f"({fact.subject}, {fact.predicate}, {fact.object}) is listed twice{also}",
            )
        if self.writing:
            self._write_facts(facts)

    def _check_cardinality(self) -> None:
        for key, positions in self.store.cardinality_repeats(self.conn, self.row_id, MAX_SNAPSHOT_VIOLATIONS):
            subject, _, predicate = key.partition(ITEM_SEPARATOR)
            relation = self.kinds.relations[predicate]
            for position in positions[1:]:
                self._violation(
                    f"facts[{position}]",
                    f"pack {relation.pack}, relation {predicate}: cardinality one, but {subject} already has "
                    f"an open {predicate} fact (facts[{positions[0]}])",
                )

    def _write_facts(self, facts: list[FactInput]) -> None:
        header = self.header
        self.access.require_writable(  # write-side visibility scopes
            self.conn,
            self.owner.facts,
            header.namespace,
            [],
            [(f"facts[{f.index}]", f.subject, f.predicate, f.object, f.valid_from, f.scopes) for f in facts],
        )
        existing = {
            fact_item_key(row.subject_key, row.predicate, row.object_key): row
            for row in self.store.open_facts(
                self.conn,
                header.namespace,
                header.source,
                header.scope,
                [(f.subject, f.predicate, f.object) for f in facts],
            )
        }
        changed: list[tuple[str, dict[str, Any] | None]] = []
        new: list[FactInput] = []
        for fact in facts:
            row = existing.get(fact_item_key(fact.subject, fact.predicate, fact.object))
            if row is None:
                new.append(fact)
            elif row.attributes == fact.attributes or reaches_beyond(row.scopes, fact.scopes):
                # unchanged, or seen by more readers than this fact's scopes allow
                self.counts.facts_unchanged += 1
            else:
                changed.append((row.fact_id, fact.attributes))
        # Write access was checked for the whole snapshot above (`require_writable`).
        outcomes = accepted(
            self.owner.engine.record(
                self.conn,
                [
                    dataclasses.replace(
                        fact,
                        namespace=header.namespace,
                        origin=SNAPSHOT_ORIGIN,
                        source_path=f"snapshot:{header.source}/{header.scope}/{header.snapshot_id}",
                        agent_asserted=True,
                    )
                    for fact in new
                ],
                now=self.now,
                check_access=False,
            )
        )
        self.counts.facts_updated += len(changed)
        adoptions: list[tuple[str, dict[str, Any] | None]] = list(changed)
        for fact, outcome in zip(new, outcomes, strict=True):
            if outcome.withheld:  # a fact more readers see than this one's scopes: left alone
                self.counts.facts_unchanged += 1
            elif outcome.created:
                self.counts.facts_created += 1
                adoptions.append((outcome.fact_id, None))
            else:  # a fact of the same fact_id from another path (or closed before): adopted
                self.counts.facts_updated += 1
                adoptions.append((outcome.fact_id, fact.attributes))
        self.owner.engine.adopt_for_snapshot(
            self.conn,
            header.namespace,
            source=header.source,
            scope=header.scope,
            snapshot_id=header.snapshot_id,
            adoptions=adoptions,
        )

    # -- closing -----------------------------------------------------------------------------------

    def _close_dropped(self, previous: SnapshotRow) -> None:
        header = self.header
        if not header.allow_mass_sweep:
            self._guard_closing(previous)
        after: str | None = ""
        while after is not None:
            fact_ids, after = self.store.dropped_open_facts(
                self.conn,
                header.namespace,
                header.source,
                header.scope,
                previous.row_id,
                self.row_id,
                self.snapshot_time,
                after,
                SNAPSHOT_BATCH,
            )
            closed = self.owner.engine.close_many(self.conn, header.namespace, fact_ids, self.snapshot_time)
            self.counts.facts_closed += len(closed)
