"""One snapshot reconciliation inside its transaction (`ingest_service.snapshots.reconciler` opens it and
tells the whole story): the journal, the batched writes of entities and facts, the checks that need the
whole snapshot, and the closing of dropped facts."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import asdict
from datetime import UTC
from datetime import datetime
from typing import TYPE_CHECKING
from typing import Any

import psycopg

from common.domain.scope_inheritance import reaches_beyond
from common.domain.write_access import WriteAccess
from common.kernel.errors import FieldViolation
from common.kernel.errors import InvalidArgument
from common.packs.kind_validation import NamespaceKinds
from common.storage.graph.store import NodeWrite
from common.storage.snapshot_store import ITEM_SEPARATOR
from common.storage.snapshot_store import SnapshotRow
from ingest_service.facts.engine import AGENT_ORIGIN
from ingest_service.facts.engine import FactInput
from ingest_service.facts.engine import accepted
from ingest_service.snapshots.model import ReconcileCounts
from ingest_service.snapshots.model import ReconcileResult
from ingest_service.snapshots.model import SnapshotEntity
from ingest_service.snapshots.model import SnapshotHeader
from ingest_service.snapshots.model import SnapshotPart
from ingest_service.snapshots.model import fact_digest
from ingest_service.snapshots.model import fact_item_key
from ingest_service.snapshots.model import validate_entities
from ingest_service.snapshots.model import validate_facts
from ingest_service.validation.limits import MAX_SNAPSHOT_VIOLATIONS
from ingest_service.validation.limits import MAX_STREAM_ITEMS
from ingest_service.validation.limits import SNAPSHOT_BATCH

if TYPE_CHECKING:
    from ingest_service.snapshots.reconciler import SnapshotReconciler

__all__ = ["SNAPSHOT_ORIGIN", "SnapshotRun"]

SNAPSHOT_ORIGIN = AGENT_ORIGIN  # source_path names the snapshot


class SnapshotRun:
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
        dropping = sum(len(set(fact_ids)) for fact_ids in self._dropped_pages(previous))
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

    def _dropped_pages(self, previous: SnapshotRow) -> Iterator[list[str]]:
        """The open facts of the scope that ``previous`` listed and this snapshot does not, page by page
        (`SnapshotStore.dropped_open_facts`, `SNAPSHOT_BATCH` a page); the next page is read only when
        the caller asks for it, so the caller may close the facts of a page first."""
        header = self.header
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
            yield fact_ids

    def _close_dropped(self, previous: SnapshotRow) -> None:
        header = self.header
        if not header.allow_mass_sweep:
            self._guard_closing(previous)
        for fact_ids in self._dropped_pages(previous):
            closed = self.owner.engine.close_many(self.conn, header.namespace, fact_ids, self.snapshot_time)
            self.counts.facts_closed += len(closed)
