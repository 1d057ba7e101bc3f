"""The fact engine: the one way facts are written (docs/explanation/knowledge-model.md).

Every write path (observations, AssertFacts and CloseFact, Reconcile, identifier links, redaction and
purge, DeleteNode) writes facts through `FactEngine`; none calls the fact-writing methods of
`common.storage.fact_store.FactStore` (or `SnapshotStore.adopt_facts`) itself. The engine:

- **creates and strengthens** (`record`, set-based; one fact is a batch of one): ``fact_id`` is
  deterministic (docs/explanation/knowledge-model.md), so a repeated assertion from a new observation
  strengthens the existing fact (observation_ids union, confidence max) instead of creating an edge;
- **supersedes** (`record` with ``supersedes``): the superseded fact's valid_to becomes the new fact's
  valid_from and its superseded_by is set; history is never deleted. When the superseded fact has not
  arrived yet, the closure is applied when it arrives (delivery order does not matter). A supersession
  naming a fact of another subject or predicate is rejected (`AssertionRejected`), and the assertion
  writes nothing. A superseded fact hidden from the caller counts as not arrived yet (never closed by
  this write, answered like a fact id that does not exist);
- **closes** (`close`, `close_many`): CloseFact, mentions no longer named, facts a snapshot dropped;
  an interval is never widened;
- **strikes** an observation from the facts it proved (`strike_observation`); a fact left without
  evidence becomes evidence_lost;
- **adopts** facts for a snapshot's (source, scope) (`adopt_for_snapshot`);
- **removes** the rows of a deleted node's facts (`delete_touching`, DeleteNode only).

The input of every write is one type, `FactInput`: a validated assertion
(`ingest_service.facts.validation.validate_fact_assertion`) with the provenance its write path
adds; `FactEngine.row_of` is the one mapping from it to the stored row.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from common.domain.scope_inheritance import reaches_beyond
from common.domain.scope_inheritance import restricting_scopes
from common.domain.write_access import WriteAccess
from common.kernel.identifiers import fact_id as compute_fact_id
from common.storage.fact_rows import FactRow
from common.storage.fact_store import FactStore
from common.storage.graph.store import GraphStore
from common.storage.snapshot_store import SnapshotStore

AGENT_ORIGIN = "agent"  # the documented origins are "agent" and "vault"


class AssertionRejected(Exception):
    """One assertion cannot be applied; ``field`` names it relative to the request."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


@dataclass(frozen=True)
class FactOutcome:
    """The fact_id an assertion was written under, and whether it was created (False: strengthened).
    ``withheld``: a fact of that id exists that more readers see than the assertion's scopes allow, so
    it was left unchanged (`common.domain.scope_inheritance` rule 2)."""

    fact_id: str
    created: bool
    withheld: bool = False


@dataclass(frozen=True, kw_only=True)
class FactInput:
    """One fact assertion, validated, with the provenance its write path adds: what the engine writes.

    Attributes:
        field: the assertion's path for error messages (``assertions[2].fact``, ``facts[1]``).
        subject: natural key of the subject (``type:id``).
        predicate: the relation, ``[A-Za-z_][A-Za-z0-9_]{0,127}``.
        object: natural key of the object.
        valid_from: start of validity (aware UTC).
        valid_to: end of validity, None for open.
        evidence: evidence class (`ingest_service.validation.limits.EVIDENCE_CLASSES`).
        confidence: in [0, 1].
        supersedes: fact_id this fact supersedes, or None.
        scopes: visibility and relevance scopes (``type:id``).
        attributes: free-form attributes (JSON object).
        index: the assertion's position in its request (``assertions[i]``, ``facts[i]``).
        namespace: set by the write path.
        observation_id: the observation proving the fact, None for agent facts and snapshots.
        observed_at: when the fact was written; None means the engine's ``now``.
        origin: ``"agent"`` or ``"vault"``.
        source_path: the citation target.
        agent_asserted: direct evidence (AssertFacts, snapshots) that no redaction or purge can take away.
    """

    field: str
    subject: str
    predicate: str
    object: str
    valid_from: datetime
    valid_to: datetime | None = None
    evidence: str = "asserted"
    confidence: float = 1.0
    supersedes: str | None = None
    scopes: list[str] = dataclasses.field(default_factory=list)
    attributes: dict[str, Any] = dataclasses.field(default_factory=dict)
    index: int = 0
    namespace: str = ""
    observation_id: str | None = None
    observed_at: datetime | None = None
    origin: str = AGENT_ORIGIN
    source_path: str = ""
    agent_asserted: bool = False

    @property
    def fact_id(self) -> str:
        """The deterministic fact_id of (namespace, subject, predicate, object, valid_from)
        (docs/explanation/knowledge-model.md)."""
        return compute_fact_id(self.namespace, self.subject, self.predicate, self.object, self.valid_from)


class FactEngine:
    """Writes facts inside the caller's transaction (see the module doc).

    Args:
        graph: the graph store (fact end nodes and edges).
        facts: the fact store over ``graph`` (default: a new one); its read methods are free for
            callers to use.
    """

    def __init__(self, graph: GraphStore, facts: FactStore | None = None) -> None:
        self.graph = graph
        self.facts = facts if facts is not None else FactStore(graph)
        self.snapshot_journal = SnapshotStore(graph.database.settings)

    # -- create, strengthen, supersede -------------------------------------------------------------

    def record(
        self,
        conn: psycopg.Connection[Any],
        facts: Sequence[FactInput],
        *,
        now: datetime,
        check_access: bool = True,
    ) -> list[FactOutcome | AssertionRejected]:
        """Creates or strengthens ``facts`` and applies supersession both ways: the one write of facts
        (any namespaces, ``supersedes`` allowed; one fact is a batch of one).

        Set-based: per namespace one read of the superseded and of the narrower-scoped facts, one
        `ensure_nodes`, one multi-row insert per round of distinct fact_ids, one look-up of earlier
        successors, then one closing statement per supersession.

        Each fact is checked before anything is written: the caller's write access
        (`common.domain.write_access.WriteAccess.fact_violations`; ``check_access=False`` only where the
        caller checked the whole write itself, as Reconcile does with ``require_writable``) and the
        supersession rules (not itself, a fact of the same subject and predicate, seen by no reader
        outside this fact's scopes, no cycle; a superseded fact earlier in ``facts`` counts as stored).
        A rejected fact writes nothing and its result is the `AssertionRejected`; a fact that more
        readers see than this one's scopes is left alone (``withheld``). The end state is that of
        recording the facts one by one (supersession is applied both ways, so the order does not
        matter); results in the order of ``facts``.
        """
        access = WriteAccess.of_caller() if check_access else None
        results: dict[int, FactOutcome | AssertionRejected] = {}
        namespaces: dict[str, list[int]] = {}
        for index, fact in enumerate(facts):
            namespaces.setdefault(fact.namespace, []).append(index)
        for namespace, indices in namespaces.items():
            results.update(
                self._record_namespace(conn, namespace, [(i, facts[i]) for i in indices], now, access)
            )
        return [results[index] for index in range(len(facts))]

    def _record_namespace(
        self,
        conn: psycopg.Connection[Any],
        namespace: str,
        facts: list[tuple[int, FactInput]],
        now: datetime,
        access: WriteAccess | None,
    ) -> dict[int, FactOutcome | AssertionRejected]:
        """`record` of the facts ``(index, fact)`` of one namespace (``access`` None: not checked)."""
        results: dict[int, FactOutcome | AssertionRejected] = {}
        wanted = sorted(
            {f.supersedes for _, f in facts if f.supersedes}
            | {f.fact_id for _, f in facts if restricting_scopes(f.scopes)}
        )
        stored = {row.fact_id: row for row in self.facts.get_many(conn, namespace, wanted)}
        # A superseded fact hidden from the caller answers like one that has not arrived yet: no rule is
        # checked against it (its subject would leak) and it is never closed.
        superseded = {
            fact_id: row
            for fact_id, row in stored.items()
            if access is None or access.sees_fact(conn, self.facts, namespace, row)
        }
        earlier: dict[str, FactInput] = {}  # accepted facts of this batch, by fact_id, as `record` sees them
        accepted: list[tuple[int, FactInput]] = []
        for index, fact in facts:
            new_id = fact.fact_id
            # Write-side visibility scopes: nothing for development mode and in-process callers.
            refused = (
                access.fact_violations(
                    conn,
                    self.facts,
                    namespace=namespace,
                    path=fact.field,
                    fact_id=new_id,
                    subject=fact.subject,
                    object_=fact.object,
                    scopes=fact.scopes,
                )
                if access is not None
                else []
            )
            if refused:
                results[index] = AssertionRejected(refused[0].field, refused[0].description)
                continue
            same = stored.get(new_id) if restricting_scopes(fact.scopes) else None
            if same is not None and reaches_beyond(same.scopes, fact.scopes):
                results[index] = FactOutcome(fact_id=new_id, created=False, withheld=True)
                continue
            rejection = self._supersession_rejection(fact, superseded.get(fact.supersedes or ""), earlier)
            if rejection is not None:
                results[index] = rejection
                continue
            earlier.setdefault(new_id, fact)
            accepted.append((index, fact))
        if not accepted:
            return results
        self.graph.ensure_nodes(
            conn,
            namespace,
            [key for _, fact in accepted for key in (fact.subject, fact.object)],
            now=now,
            scopes=_end_scopes(fact for _, fact in accepted),
        )
        pending = [(index, self.row_of(fact, now=now)) for index, fact in accepted]
        written: dict[str, FactRow] = {}
        while pending:  # rounds of distinct fact_ids (a multi-row upsert touches each row once)
            round_: list[tuple[int, FactRow]] = []
            later: list[tuple[int, FactRow]] = []
            seen: set[str] = set()
            for index, row in pending:
                (later if row.fact_id in seen else round_).append((index, row))
                seen.add(row.fact_id)
            for (index, _), (created, row) in zip(
                round_, self.facts.insert_or_strengthen_many(conn, [row for _, row in round_]), strict=True
            ):
                results[index] = FactOutcome(fact_id=row.fact_id, created=created)
                written[row.fact_id] = row
            pending = later
        created_ids = sorted(
            {o.fact_id for o in results.values() if isinstance(o, FactOutcome) and o.created}
        )
        closes = [
            (fact_id, first.valid_from, first.fact_id)
            for fact_id, first in self.facts.first_superseding(conn, namespace, created_ids).items()
            if _pending_supersession_holds(written[fact_id], first)
        ]
        closes += [
            (fact.supersedes, fact.valid_from, fact.fact_id)
            for _, fact in accepted
            if fact.supersedes and (fact.supersedes in superseded or fact.supersedes in written)
        ]
        self.facts.close_superseded_many(conn, namespace, closes)
        return results

    @staticmethod
    def _supersession_rejection(
        fact: FactInput, stored: FactRow | None, earlier: dict[str, FactInput]
    ) -> AssertionRejected | None:
        """Why `record` would reject the supersession of ``fact`` (None: it would not), given the stored
        superseded row (None when not stored) and the facts accepted earlier in the batch."""
        if not fact.supersedes:
            return None
        path = f"{fact.field}.supersedes"
        if fact.supersedes == fact.fact_id:
            return AssertionRejected(path, "a fact cannot supersede itself")
        previous = earlier.get(fact.supersedes)
        if stored is None and previous is None:
            return None  # not arrived yet: closed when it arrives
        subject, predicate, scopes, supersedes = (
            (stored.subject_key, stored.predicate, stored.scopes, stored.supersedes)
            if stored is not None
            else (previous.subject, previous.predicate, previous.scopes, previous.supersedes)  # type: ignore[union-attr]
        )
        if reaches_beyond(scopes, fact.scopes):
            return AssertionRejected(
                path,
                f"{fact.supersedes} is seen by readers outside this fact's scopes; a fact with"
                " narrower scopes cannot supersede it",
            )
        if subject != fact.subject or predicate != fact.predicate:
            return AssertionRejected(
                path,
                f"{fact.supersedes} is a fact of ({subject}, {predicate}), "
                f"not of ({fact.subject}, {fact.predicate})",
            )
        if supersedes == fact.fact_id:
            return AssertionRejected(path, "supersession cycle")
        return None

    @staticmethod
    def row_of(fact: FactInput, *, now: datetime) -> FactRow:
        """The row ``fact`` is stored as (before strengthening): the one mapping from input to storage.
        ``observed_at`` defaults to ``now``."""
        return FactRow(
            fact_id=fact.fact_id,
            namespace=fact.namespace,
            subject_key=fact.subject,
            predicate=fact.predicate,
            object_key=fact.object,
            valid_from=fact.valid_from,
            valid_to=fact.valid_to,
            observed_at=fact.observed_at or now,
            evidence=fact.evidence,
            confidence=fact.confidence,
            observation_ids=[fact.observation_id] if fact.observation_id else [],
            supersedes=fact.supersedes,
            superseded_by=None,
            origin=fact.origin,
            scopes=fact.scopes,
            attributes=fact.attributes,
            source_path=fact.source_path,
            evidence_lost=False,
            agent_asserted=fact.agent_asserted,
        )

    # -- close -------------------------------------------------------------------------------------

    def close(
        self, conn: psycopg.Connection[Any], namespace: str, fact_id: str, valid_to: datetime
    ) -> FactRow | None:
        """Closes the fact ``fact_id`` at ``valid_to`` (never widening its interval, never before its
        valid_from) without a successor. Returns the row after the write, None when there is no such fact."""
        return self.facts.close(conn, namespace, fact_id, valid_to, None)

    def close_many(
        self, conn: psycopg.Connection[Any], namespace: str, fact_ids: list[str], valid_to: datetime
    ) -> list[FactRow]:
        """`close` of many facts in one statement (rows locked in fact_id order); the rows after the
        write, ordered by fact_id (missing ones left out)."""
        return self.facts.close_many(conn, namespace, fact_ids, valid_to)

    # -- evidence ----------------------------------------------------------------------------------

    def strike_observation(
        self, conn: psycopg.Connection[Any], namespace: str, observation_id: str
    ) -> list[FactRow]:
        """Removes ``observation_id`` from the evidence of every fact of ``namespace`` it proved; a fact
        left with none and not ``agent_asserted`` becomes evidence_lost (docs/explanation/knowledge-model.md:
        lost evidence). Supersession closures stay. Returns the facts changed, ordered by fact_id;
        repeating the call changes nothing."""
        return self.facts.strike_observation(conn, namespace, observation_id)

    # -- snapshots ---------------------------------------------------------------------------------

    def adopt_for_snapshot(
        self,
        conn: psycopg.Connection[Any],
        namespace: str,
        *,
        source: str,
        scope: str,
        snapshot_id: str,
        adoptions: list[tuple[str, dict[str, Any] | None]],
    ) -> None:
        """Marks the facts ``(fact_id, attributes)`` as owned by the snapshots of (``source``, ``scope``)
        and last written by ``snapshot_id``; sets the attributes when given (None keeps them) and
        rewrites the edges of those facts (attributes are edge properties too)."""
        self.snapshot_journal.adopt_facts(conn, source, scope, snapshot_id, adoptions)
        rewritten = [fact_id for fact_id, attributes in adoptions if attributes is not None]
        self.facts.sync_edges(conn, self.facts.get_many(conn, namespace, rewritten))

    # -- removal -----------------------------------------------------------------------------------

    def delete_touching(
        self, conn: psycopg.Connection[Any], namespace: str, natural_key: str
    ) -> list[FactRow]:
        """Deletes the rows of every fact whose subject or object is ``natural_key``, history and lost
        facts included, and returns them ordered by fact_id: DeleteNode only, which forgets the entity
        itself (`ingest_service.documents.node_deletion`); the caller deletes the node's vertex, and with it the
        facts' edges, in the same transaction. Knowledge that merely stops holding is closed instead."""
        return self.facts.delete_touching(conn, namespace, natural_key)


def _pending_supersession_holds(arrived: FactRow, successor: FactRow) -> bool:
    """Whether a supersession recorded before its target arrived closes that target now: under the rules
    of a direct one (same subject and predicate; a successor with narrower scopes never closes what more
    readers see), so a fact id computed in advance cannot close a fact its writer would not be allowed to."""
    return (
        arrived.subject_key == successor.subject_key
        and arrived.predicate == successor.predicate
        and not reaches_beyond(arrived.scopes, successor.scopes)
    )


def _end_scopes(facts: Iterable[FactInput]) -> dict[str, list[str]]:
    """Placeholder scopes of the ends of ``facts`` (``ensure_nodes``' ``scopes``): per key, the union of
    the restricting scopes of the facts naming it, or ``[]`` once a visible fact names it."""
    out: dict[str, list[str]] = {}
    for fact in facts:
        scopes = restricting_scopes(fact.scopes)
        for key in (fact.subject, fact.object):
            if key in out and (not out[key] or not scopes):
                out[key] = []
            else:
                out[key] = sorted({*out.get(key, []), *scopes})
    return out


def accepted(results: list[FactOutcome | AssertionRejected]) -> list[FactOutcome]:
    """The outcomes of `FactEngine.record`, for a write that fails as a whole when one fact is rejected.

    Raises:
        AssertionRejected: the first rejection in ``results``.
    """
    for result in results:
        if isinstance(result, AssertionRejected):
            raise result
    return [result for result in results if isinstance(result, FactOutcome)]
