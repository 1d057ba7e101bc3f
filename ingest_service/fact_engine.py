"""The fact engine: temporal facts with idempotent strengthening and supersession (seed 000, "Факты").

Rules:
- ``fact_id`` is deterministic (DESIGN §3), so a repeated assertion from a new observation strengthens
  the existing fact (observation_ids union, confidence max) instead of creating an edge.
- ``supersedes``: the superseded fact's valid_to becomes the new fact's valid_from and its
  superseded_by is set; history is never deleted. When the superseded fact has not arrived yet, the
  closure is applied when it arrives (delivery order does not matter).
- A supersession naming a fact of another subject or predicate is rejected (`AssertionRejected`), and
  the assertion writes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from common.kernel.identifiers import fact_id as compute_fact_id
from common.storage.fact_store import FactRow, FactStore
from common.storage.graph_store import GraphStore
from common.domain.write_access import WriteAccess


class AssertionRejected(Exception):
    """One assertion cannot be applied; ``field`` names it relative to the observation."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


@dataclass(frozen=True)
class FactOutcome:
    fact_id: str
    created: bool


@dataclass(frozen=True)
class FactWrite:
    """A fact assertion after validation; ``field`` is its path for error messages."""

    field: str
    namespace: str
    subject: str
    predicate: str
    object: str
    valid_from: datetime
    valid_to: datetime | None
    evidence: str
    confidence: float
    supersedes: str | None
    scopes: list[str]
    attributes: dict[str, Any]
    observation_id: str | None
    observed_at: datetime
    origin: str = "agent"
    source_path: str = ""
    # True for FactService.AssertFacts: direct evidence that no redaction or purge can take away.
    agent_asserted: bool = False


class FactEngine:
    def __init__(self, graph: GraphStore, facts: FactStore) -> None:
        self.graph = graph
        self.facts = facts

    def record(
        self, conn: psycopg.Connection[Any], write: FactWrite, *, now: datetime, known: dict[str, str] | None = None
    ) -> FactOutcome:
        """Creates or strengthens one fact and applies supersession both ways.

        ``known`` maps natural keys already written in this transaction to their labels; it is updated.

        Every check happens before the first write, so a rejected assertion writes nothing.

        Raises:
            AssertionRejected: the supersession names a fact of another subject/predicate, or itself; or
                the caller may not write it (`common.write_access.WriteAccess.fact_violations`).
        """
        new_id = compute_fact_id(write.namespace, write.subject, write.predicate, write.object, write.valid_from)
        # Write-side visibility scopes (issue 5 §3): nothing for development mode and in-process callers.
        refused = WriteAccess.of_caller().fact_violations(
            conn,
            self.facts,
            namespace=write.namespace,
            path=write.field,
            fact_id=new_id,
            subject=write.subject,
            object_=write.object,
            scopes=write.scopes,
            supersedes=write.supersedes,
        )
        if refused:
            raise AssertionRejected(refused[0].field, refused[0].description)
        superseded: FactRow | None = None
        if write.supersedes:
            if write.supersedes == new_id:
                raise AssertionRejected(f"{write.field}.supersedes", "a fact cannot supersede itself")
            superseded = self.facts.get(conn, write.namespace, write.supersedes, lock=True)
            if superseded is not None and (
                superseded.subject_key != write.subject or superseded.predicate != write.predicate
            ):
                raise AssertionRejected(
                    f"{write.field}.supersedes",
                    f"{write.supersedes} is a fact of ({superseded.subject_key}, {superseded.predicate}), "
                    f"not of ({write.subject}, {write.predicate})",
                )
            if superseded is not None and superseded.supersedes == new_id:
                raise AssertionRejected(f"{write.field}.supersedes", "supersession cycle")
        known = {} if known is None else known
        subject_label = known[write.subject] = self.graph.ensure_node(conn, write.namespace, write.subject, now=now, known=known)
        object_label = known[write.object] = self.graph.ensure_node(conn, write.namespace, write.object, now=now, known=known)
        row = self._row(write)
        assert row.fact_id == new_id
        created, row = self.facts.insert_or_strengthen(
            conn, row, subject_label=subject_label, object_label=object_label
        )
        if superseded is not None:
            self.facts.close(conn, write.namespace, superseded.fact_id, row.valid_from, row.fact_id)
        if created:
            successors = self.facts.superseding(conn, write.namespace, row.fact_id)
            if successors:
                first = successors[0]
                self.facts.close(conn, write.namespace, row.fact_id, first.valid_from, first.fact_id)
        return FactOutcome(fact_id=row.fact_id, created=created)

    def record_many(
        self, conn: psycopg.Connection[Any], namespace: str, writes: list[FactWrite], *, now: datetime
    ) -> list[FactOutcome]:
        """`record` for many facts of ``namespace`` without ``supersedes``, set-based: one look-up and
        one insert of the missing end nodes, one multi-row insert of the facts (`FactStore.
        insert_or_strengthen_many`), one look-up of earlier facts superseding the new ones. Outcomes in
        the order of ``writes``; a fact_id written twice in ``writes`` is created once and strengthened.

        Raises:
            ValueError: a write names ``supersedes`` (use `record`) or another namespace.
        """
        if any(write.supersedes for write in writes) or any(write.namespace != namespace for write in writes):
            raise ValueError("record_many takes facts of one namespace without supersedes")
        self.graph.ensure_nodes(
            conn, namespace, [key for write in writes for key in (write.subject, write.object)], now=now
        )
        rows = [self._row(write) for write in writes]
        outcomes: dict[int, FactOutcome] = {}
        pending = list(enumerate(rows))
        while pending:  # rounds of distinct fact_ids (a multi-row upsert touches each row once)
            round_: list[tuple[int, FactRow]] = []
            later: list[tuple[int, FactRow]] = []
            seen: set[str] = set()
            for index, row in pending:
                (later if row.fact_id in seen else round_).append((index, row))
                seen.add(row.fact_id)
            written = self.facts.insert_or_strengthen_many(conn, [row for _, row in round_])
            for (index, _), (created, stored) in zip(round_, written, strict=True):
                outcomes[index] = FactOutcome(fact_id=stored.fact_id, created=created)
            pending = later
        created_ids = sorted({o.fact_id for o in outcomes.values() if o.created})
        for fact_id, first in self.facts.first_superseding(conn, namespace, created_ids).items():
            self.facts.close(conn, namespace, fact_id, first.valid_from, first.fact_id)
        return [outcomes[index] for index in range(len(rows))]

    @staticmethod
    def _row(write: FactWrite) -> FactRow:
        return FactRow(
            fact_id=compute_fact_id(write.namespace, write.subject, write.predicate, write.object, write.valid_from),
            namespace=write.namespace,
            subject_key=write.subject,
            predicate=write.predicate,
            object_key=write.object,
            valid_from=write.valid_from,
            valid_to=write.valid_to,
            observed_at=write.observed_at,
            evidence=write.evidence,
            confidence=write.confidence,
            observation_ids=[write.observation_id] if write.observation_id else [],
            supersedes=write.supersedes,
            superseded_by=None,
            origin=write.origin,
            scopes=write.scopes,
            attributes=write.attributes,
            source_path=write.source_path,
            evidence_lost=False,
            agent_asserted=write.agent_asserted,
        )
