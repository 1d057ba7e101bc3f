"""Snapshot reconciliation: SnapshotService.Reconcile in domain form (seed 000 "Загрузка знаний";
DESIGN §6; issue 4 §3).

A snapshot is the complete current state of one ``(source, scope)``: entities and facts with attributes.
Compared with what earlier snapshots of that ``(source, scope)`` left:

- entities: new ones are created, changed ones (title, type, attributes) updated; an entity whose item
  hash equals the previous snapshot's is not touched;
- facts are identified by (subject, predicate, object): one that has no open fact of this
  ``(source, scope)`` is written through the fact engine (``valid_from`` given or ``snapshot_time``;
  a fact of the same fact_id written by another path is strengthened and adopted), an open one whose
  attributes changed is updated, and open facts of this ``(source, scope)`` the snapshot does not list
  are closed (``valid_to = snapshot_time``). Facts of other origins or other scopes are never touched.

Every run is journaled in source_snapshots with its counts and in source_snapshots_items with one
(kind, key, sha256) per item; reconciling a ``snapshot_id`` again changes nothing and returns the counts
of the first run. Entities and facts are checked by `ingest_service.kind_validation` (strict mode
rejects the whole request, including a second open fact of a relation with cardinality ``one`` for one
subject). The reconciliation runs in one transaction (nothing half-written), processing items in
batches of `BATCH` so database round trips and locks stay bounded.
"""

from __future__ import annotations

import hashlib
import logging
from collections import defaultdict
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from common.db import Database
from common.errors import FieldViolation, InvalidArgument, ViolationCollector
from common.identifiers import canonical_instant, canonical_json
from common.storage.fact_store import FactStore
from common.storage.graph_store import GraphStore, NodeWrite
from common.storage.snapshot_store import ITEM_SEPARATOR, SnapshotStore
from common.write_access import WriteAccess
from ingest_service.fact_engine import FactEngine, FactWrite
from ingest_service.kind_validation import KindValidator, NamespaceKinds
from ingest_service.observation_validation import (
    NAMESPACE_PATTERN,
    TYPE_PATTERN,
    FactInput,
    FieldChecker,
    validate_fact_assertion,
)

log = logging.getLogger(__name__)

BATCH = 1000
MAX_ITEMS = 200_000
SNAPSHOT_ORIGIN = "agent"  # the documented origins are "agent" and "vault"; source_path names the snapshot


@dataclass
class ReconcileCounts:
    entities_created: int = 0
    entities_updated: int = 0
    entities_unchanged: int = 0
    facts_created: int = 0
    facts_updated: int = 0
    facts_unchanged: int = 0
    facts_closed: int = 0


@dataclass(frozen=True)
class ReconcileResult:
    snapshot_id: str
    counts: ReconcileCounts
    unchanged: bool
    previous_snapshot_id: str


@dataclass(frozen=True)
class _Entity:
    key: str
    node_type: str
    title: str
    attributes: dict[str, Any]
    digest: str


def _digest(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


def fact_item_key(subject: str, predicate: str, object_: str) -> str:
    """The journal key of a fact: its (subject, predicate, object)."""
    return ITEM_SEPARATOR.join((subject, predicate, object_))


class SnapshotReconciler:
    """Reconciles snapshots (see the module doc)."""

    def __init__(self, database: Database, *, kinds: KindValidator | None = None) -> None:
        self.database = database
        self.kinds = kinds or KindValidator(database)
        self.graph = GraphStore(database)
        self.facts = FactStore(self.graph)
        self.engine = FactEngine(self.graph, self.facts)
        self.store = SnapshotStore(database.settings)

    def reconcile(
        self,
        namespace: str,
        source: str,
        scope: str,
        snapshot_id: str,
        snapshot_time: datetime | None,
        raw_entities: list[dict[str, Any]],
        raw_facts: list[dict[str, Any]],
    ) -> ReconcileResult:
        """Reconciles one snapshot (entities and facts in proto3-JSON form with proto field names).

        Raises:
            InvalidArgument: bad request fields, invalid items (paths ``entities[i].key``,
                ``facts[j].valid_from``), duplicate items, or strict-mode violations of the packs.
            Unavailable: the database cannot be reached; nothing was written, retrying is safe.
        """
        check = ViolationCollector()
        if not NAMESPACE_PATTERN.match(namespace):
            check.add("namespace", "required, pattern [A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
        for name, value in (("source", source), ("scope", scope), ("snapshot_id", snapshot_id)):
            if not value or len(value) > 256 or "\x00" in value:
                check.add(name, "required, 1..256 characters, no NUL")
        if snapshot_time is None:
            check.add("snapshot_time", "required")
        if len(raw_entities) + len(raw_facts) > MAX_ITEMS:
            check.add("entities", f"at most {MAX_ITEMS} entities and facts per snapshot")
        check.raise_if_any()
        assert snapshot_time is not None
        kinds = self.kinds.for_namespace(namespace)
        entities, entity_violations = self._entities(raw_entities, kinds)
        facts, fact_violations = self._facts(raw_facts, kinds, snapshot_time)
        if entity_violations or fact_violations:
            raise InvalidArgument(entity_violations + fact_violations)

        def work(conn: Any) -> ReconcileResult:
            WriteAccess.of_caller().require_writable(  # write-side visibility scopes (issue 5 §3)
                conn,
                self.facts,
                namespace,
                [entity.key for entity in entities],
                [(f"facts[{f.index}]", f.subject, f.predicate, f.object, f.valid_from, f.scopes) for f in facts],
            )
            row_id = self.store.create(conn, namespace, source, scope, snapshot_id, snapshot_time)
            if row_id is None:
                done = self.store.get(conn, namespace, source, scope, snapshot_id)
                assert done is not None
                before = self.store.previous(conn, namespace, source, scope, done.row_id)
                known = {k: v for k, v in done.counts.items() if k in ReconcileCounts.__dataclass_fields__}
                return ReconcileResult(
                    snapshot_id, ReconcileCounts(**known), True, before.snapshot_id if before else ""
                )
            previous = self.store.previous(conn, namespace, source, scope, row_id)
            counts = ReconcileCounts()
            now = datetime.now(UTC)
            self.store.add_items(conn, row_id, [("entity", e.key, e.digest) for e in entities])
            self.store.add_items(
                conn,
                row_id,
                [("fact", fact_item_key(f.subject, f.predicate, f.object), _fact_digest(f)) for f in facts],
            )
            known_labels: dict[str, str] = {}
            for start in range(0, len(entities), BATCH):
                self._reconcile_entities(
                    conn,
                    namespace,
                    entities[start : start + BATCH],
                    previous,
                    snapshot_time,
                    now,
                    counts,
                    known_labels,
                )
            for start in range(0, len(facts), BATCH):
                self._reconcile_facts(
                    conn,
                    namespace,
                    source,
                    scope,
                    snapshot_id,
                    facts[start : start + BATCH],
                    now,
                    counts,
                    known_labels,
                )
            while True:
                absent = self.store.unconfirmed_open_facts(
                    conn, namespace, source, scope, snapshot_id, snapshot_time, BATCH
                )
                for fact_id in absent:
                    self.facts.close(conn, namespace, fact_id, snapshot_time, None)
                counts.facts_closed += len(absent)
                if len(absent) < BATCH:
                    break
            self.store.set_counts(conn, row_id, asdict(counts))
            return ReconcileResult(snapshot_id, counts, False, previous.snapshot_id if previous else "")

        result = self.database.run_transaction(work)
        log.info(
            "reconciled %s %s/%s snapshot %s at %s: %s",
            namespace,
            source,
            scope,
            snapshot_id,
            canonical_instant(snapshot_time),
            asdict(result.counts),
        )
        return result

    # -- validation --------------------------------------------------------------------------------

    def _entities(
        self, raw_entities: list[dict[str, Any]], kinds: NamespaceKinds
    ) -> tuple[list[_Entity], list[FieldViolation]]:
        checker = FieldChecker()
        entities: list[_Entity] = []
        seen: dict[str, int] = {}
        for index, raw in enumerate(raw_entities):
            path = f"entities[{index}]"
            if not isinstance(raw, dict):
                checker.add(path, "must be an entity assertion object")
                continue
            key = checker.entity_key(raw.get("key"), f"{path}.key")
            node_type = raw.get("type") or ""
            if node_type and not TYPE_PATTERN.match(str(node_type)):
                checker.add(f"{path}.type", "pattern [A-Za-z_][A-Za-z0-9_.-]{0,63}")
                continue
            attributes = raw.get("attributes") or {}
            if not isinstance(attributes, dict):
                checker.add(f"{path}.attributes", "must be an object")
                continue
            if key is None:
                continue
            implied = str(node_type) or (key.partition(":")[0] if ":" in key else "entity")
            key, implied, violations = kinds.check_entity(key, implied, attributes, path)
            checker.violations.extend(violations)
            if key in seen:
                checker.add(f"{path}.key", f"{key!r} is listed twice (also entities[{seen[key]}])")
                continue
            seen[key] = index
            title = str(raw.get("title") or key)
            digest = _digest({"type": implied, "title": title, "attributes": attributes})
            entities.append(_Entity(key, implied, title, dict(attributes), digest))
        return entities, checker.violations

    def _facts(
        self, raw_facts: list[dict[str, Any]], kinds: NamespaceKinds, snapshot_time: datetime
    ) -> tuple[list[FactInput], list[FieldViolation]]:
        checker = FieldChecker()
        facts: list[FactInput] = []
        seen: dict[str, int] = {}
        open_per_subject: dict[tuple[str, str], list[int]] = defaultdict(list)
        for index, raw in enumerate(raw_facts):
            path = f"facts[{index}]"
            fact = validate_fact_assertion(checker, raw, path, index=index, default_valid_from=snapshot_time)
            if fact is None:
                continue
            if fact.supersedes:
                checker.add(f"{path}.supersedes", "not used in snapshots: absent facts are closed instead")
                continue
            fact.subject, fact.object, violations = kinds.check_fact(
                fact.subject, fact.predicate, fact.object, path
            )
            checker.violations.extend(violations)
            item = fact_item_key(fact.subject, fact.predicate, fact.object)
            if item in seen:
                checker.add(
                    path,
                    f"({fact.subject}, {fact.predicate}, {fact.object}) is listed twice (also facts[{seen[item]}])",
                )
                continue
            seen[item] = index
            relation = kinds.relations.get(fact.predicate)
            if (
                kinds.strict
                and relation is not None
                and relation.cardinality == "one"
                and fact.valid_to is None
            ):
                open_per_subject[(fact.subject, fact.predicate)].append(index)
            facts.append(fact)
        for (subject, predicate), indexes in open_per_subject.items():
            if len(indexes) > 1:
                relation = kinds.relations[predicate]
                for index in indexes[1:]:
                    checker.violations.append(
                        FieldViolation(
                            f"facts[{index}]",
                            f"pack {relation.pack}, relation {predicate}: cardinality one, but {subject} already has "
                            f"an open {predicate} fact (facts[{indexes[0]}])",
                        )
                    )
        return facts, checker.violations

    # -- writing -----------------------------------------------------------------------------------

    def _reconcile_entities(
        self,
        conn: Any,
        namespace: str,
        batch: list[_Entity],
        previous: Any,
        snapshot_time: datetime,
        now: datetime,
        counts: ReconcileCounts,
        known_labels: dict[str, str],
    ) -> None:
        hashes = (
            self.store.item_hashes(conn, previous.row_id, "entity", [e.key for e in batch])
            if previous
            else {}
        )
        for entity in batch:
            if hashes.get(entity.key) == entity.digest:
                counts.entities_unchanged += 1
                continue
            result = self.graph.upsert_node(
                conn,
                NodeWrite(
                    namespace=namespace,
                    natural_key=entity.key,
                    node_type=entity.node_type,
                    title=entity.title,
                    origin=SNAPSHOT_ORIGIN,
                    props={"attributes": entity.attributes},
                    asserted_at=snapshot_time,
                ),
                now=now,
                overwrite=True,
            )
            known_labels[entity.key] = result.label
            if result.created:
                counts.entities_created += 1
            elif result.updated:
                counts.entities_updated += 1
            else:
                counts.entities_unchanged += 1

    def _reconcile_facts(
        self,
        conn: Any,
        namespace: str,
        source: str,
        scope: str,
        snapshot_id: str,
        batch: list[FactInput],
        now: datetime,
        counts: ReconcileCounts,
        known_labels: dict[str, str],
    ) -> None:
        existing = {
            fact_item_key(row.subject_key, row.predicate, row.object_key): row
            for row in self.store.open_facts(
                conn, namespace, source, scope, sorted({f.subject for f in batch})
            )
        }
        confirmed: list[str] = []
        for fact in batch:
            row = existing.get(fact_item_key(fact.subject, fact.predicate, fact.object))
            if row is not None:
                if row.attributes == fact.attributes:
                    counts.facts_unchanged += 1
                    confirmed.append(row.fact_id)
                    continue
                self.store.adopt_fact(conn, row.fact_id, source, scope, snapshot_id, fact.attributes)
                updated = self.facts.get(conn, namespace, row.fact_id)
                assert updated is not None
                self.facts.sync_edge(conn, updated)
                counts.facts_updated += 1
                continue
            outcome = self.engine.record(
                conn,
                FactWrite(
                    field=f"facts[{fact.index}]",
                    namespace=namespace,
                    subject=fact.subject,
                    predicate=fact.predicate,
                    object=fact.object,
                    valid_from=fact.valid_from,
                    valid_to=fact.valid_to,
                    evidence=fact.evidence,
                    confidence=fact.confidence,
                    supersedes=None,
                    scopes=fact.scopes,
                    attributes=fact.attributes,
                    observation_id=None,
                    observed_at=now,
                    origin=SNAPSHOT_ORIGIN,
                    source_path=f"snapshot:{source}/{scope}/{snapshot_id}",
                    agent_asserted=True,
                ),
                now=now,
                known=known_labels,
            )
            self.store.adopt_fact(
                conn,
                outcome.fact_id,
                source,
                scope,
                snapshot_id,
                None if outcome.created else fact.attributes,
            )
            if outcome.created:
                counts.facts_created += 1
            else:
                counts.facts_updated += 1
        self.store.confirm_facts(conn, confirmed, snapshot_id)


def _fact_digest(fact: FactInput) -> str:
    return _digest(
        {
            "valid_from": canonical_instant(fact.valid_from),
            "valid_to": canonical_instant(fact.valid_to) if fact.valid_to else None,
            "evidence": fact.evidence,
            "confidence": fact.confidence,
            "scopes": fact.scopes,
            "attributes": fact.attributes,
        }
    )
