"""Redacting and purging observations (docs/explanation/knowledge-model.md).

Both run in ONE transaction (retried as a whole on deadlock) and both strike the observation from every
fact's ``observation_ids`` (row and edge); a fact left with no observation and not asserted directly
through FactService (``agent_asserted``) gets ``evidence_lost``: it leaves ListFacts (unless
``include_lost``), Search and CompileContext, and stays in the table and the graph for audit. A later
observation or agent assertion of the same fact revives it (strengthening clears ``evidence_lost``).
Supersession closures the struck observation caused are kept: history is never rewritten, and a fact
closed by a now-lost successor stays closed.

**Redact** replaces the content with ``REDACTED_CONTENT`` (the empty string), ``data`` with ``{}`` and
``assertions`` with ``[]`` (assertions repeat the content: entity titles and attributes, fact ends, text
fragments), sets status ``redacted`` and keeps the reason (``status_detail.reason``, shown as
``status_details``). Identity (observation_id, source), times, actor, subject, scopes and provenance stay.
Every searchable copy of the removed content goes too: the episode's chunk and the text fragment nodes
with their chunks. The episode vertex stays (it holds no content: kind, participants, time, provenance),
so the graph still records that something happened, and so do its participant facts (ACTOR, SUBJECT:
`ingest_service.observations.episode_text`), which the redacted observation still proves (they are struck with the
rest, then recorded again, so they count in neither ``facts_affected`` nor ``facts_evidence_lost``). In other words the projection left behind is the
one the redacted observation itself would produce. Redacting a redacted observation changes nothing
(the first reason is kept).

**Purge** removes the observation row and what its projection alone created: the episode vertex, the
text fragment vertices (label tables, their edges and ``graph_nodes`` rows) and their chunks. Entities
and placeholders stay (other observations may rely on them). A node that is the end of some fact is
not "the projection's alone": its chunks go, its vertex stays. The facts of the episode (its ACTOR and
SUBJECT facts, the MENTIONS from it) are its projection's alone when the purge left every one of them
without evidence: they are deleted with the episode (and, like its nodes, not counted in
``facts_affected``); otherwise they stay, lost, and so does the episode vertex. Purging an unknown (or purged)
observation is NOT_FOUND; recording the same observation again after a purge stores it anew.

**Audit** (docs/explanation/knowledge-model.md: every deletion is audited; a redaction deletes content). A
purge and a first redaction each write an audit event in their own transaction
(`common.domain.audit.AuditTrail.record_in`): action ``"delete"``, ``details.operation``
``"purge_observation"`` / ``"redact_observation"``, target the observation id, a snapshot of what went (kind,
source, occurred_at, nodes and chunk count removed, facts affected, reason), the observation's restricting
scopes, linked to ``trace_id`` (default: the request id). A repeated redaction removes nothing and writes no
event.

**Scopes** (`common.domain.write_access`): an observation hidden from the caller's scopes is NOT_FOUND, like a
missing one.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from dataclasses import field
from datetime import UTC
from datetime import datetime
from typing import Any

from common.domain.audit import AuditTrail
from common.domain.audit import default_trace_id
from common.domain.observation_view import REDACTED
from common.domain.observation_view import ObservationView
from common.domain.observation_view import observation_view
from common.domain.write_access import WriteAccess
from common.kernel.errors import NotFound
from common.kernel.errors import ViolationCollector
from common.kernel.identifiers import canonical_instant
from common.packs.kind_validation import KindValidator
from common.storage.chunks.store import ChunkStore
from common.storage.database import Database
from common.storage.fact_rows import FactRow
from common.storage.graph.store import GraphStore
from common.storage.observation_store import ObservationStore
from ingest_service.facts.engine import FactEngine
from ingest_service.facts.engine import accepted
from ingest_service.observations.episode_text import participant_facts
from ingest_service.validation.legal_holds import ensure_not_held
from ingest_service.validation.limits import check_reason
from ingest_service.validation.limits import check_trace_id

log = logging.getLogger(__name__)

REDACTED_CONTENT = ""


@dataclass(frozen=True)
class RedactOutcome:
    """The redacted observation and the facts that lost it as evidence (counts are 0 on a repeat)."""

    observation: ObservationView
    facts_affected: int
    facts_evidence_lost: int
    audit_event_id: str = ""


@dataclass(frozen=True)
class PurgeOutcome:
    """What a purge removed: natural keys of the deleted nodes, chunk count, and the facts touched."""

    observation_id: str
    facts_affected: int
    facts_evidence_lost: int
    nodes_deleted: list[str] = field(default_factory=list)
    chunks_deleted: int = 0
    audit_event_id: str = ""


def episode_key(observation_id: str) -> str:
    """Natural key of an observation's episode node (`ingest_service.observations.recorder`)."""
    return f"episode:{observation_id}"


def text_fragment_keys(observation_id: str, assertions: list[Any]) -> list[str]:
    """Natural keys of the text fragment nodes the projection made from ``assertions``
    (``text:<observation_id>/<assertion index>``)."""
    return [
        f"text:{observation_id}/{index}"
        for index, assertion in enumerate(assertions or [])
        if isinstance(assertion, dict) and "text" in assertion
    ]


def _validate(namespace: str, observation_id: str, reason: str, trace_id: str = "") -> None:
    check = ViolationCollector()
    check_trace_id(check, trace_id)
    if not namespace.strip():
        check.add("namespace", "required")
    if not observation_id.strip():
        check.add("observation_id", "required")
    check_reason(check, reason)
    check.raise_if_any()


class ObservationRemover:
    """Redacts and purges observations (see the module doc)."""

    def __init__(
        self, database: Database, audit: AuditTrail | None = None, *, kinds: KindValidator | None = None
    ) -> None:
        self.database = database
        self.kinds = kinds or KindValidator(database)
        self.audit = audit or AuditTrail(database)
        self.graph = GraphStore(database)
        self.engine = FactEngine(self.graph)
        self.facts = self.engine.facts
        self.observations = ObservationStore(database.settings)
        self.chunks = ChunkStore(database.settings)

    def redact(
        self,
        namespace: str,
        observation_id: str,
        reason: str = "",
        *,
        trace_id: str = "",
        access: WriteAccess | None = None,
    ) -> RedactOutcome:
        """Redacts one observation. Idempotent; the first redaction is audited (see the module doc).

        Args:
            access: the caller's write access (default: the RPC's caller).

        Raises:
            InvalidArgument: empty ``namespace`` or ``observation_id``, or an oversized ``reason``/``trace_id``.
            NotFound: no such observation in ``namespace`` (or hidden from the caller).
            Unavailable: the database cannot be reached (nothing was changed).
        """
        access, trace_id = self._prepare(namespace, observation_id, reason, trace_id, access)
        outcome = self.database.run_transaction(
            lambda conn: self.redact_in(conn, namespace, observation_id, reason, trace_id=trace_id, access=access)
        )
        log.info(
            "redacted %s in %s (reason %r): %d facts lost it, %d now without evidence",
            observation_id,
            namespace,
            reason,
            outcome.facts_affected,
            outcome.facts_evidence_lost,
        )
        return outcome

    def redact_in(
        self,
        conn: Any,
        namespace: str,
        observation_id: str,
        reason: str,
        *,
        trace_id: str,
        access: WriteAccess,
        audited: bool = True,
    ) -> RedactOutcome:
        """`redact` inside the caller's transaction (an erasure redacts each observation like this, with
        ``audited`` False: its own event records the redactions without the values)."""
        row, struck = self._strike(conn, namespace, observation_id, access)
        reproven = self._reprove_participants(conn, row)
        struck = [fact for fact in struck if fact.fact_id not in reproven]
        texts = text_fragment_keys(observation_id, row["assertions"])
        _, episode_chunks = self._remove_content(conn, namespace, [episode_key(observation_id)], delete_nodes=False)
        nodes, text_chunks = self._remove_content(conn, namespace, texts, delete_nodes=True)
        event_id = ""
        if row["status"] != REDACTED:
            snapshot = _snapshot(row, "redact_observation", reason, nodes, episode_chunks + text_chunks, struck)
            detail = {"reason": reason, "previous_status": row["status"]}
            updated = self.observations.redact(conn, namespace, observation_id, content=REDACTED_CONTENT, detail=detail)
            assert updated is not None
            if audited:
                event_id = self._audit(conn, row, trace_id, snapshot)
            row = updated
        return RedactOutcome(observation_view(row), len(struck), _lost(struck), event_id)

    def purge(
        self,
        namespace: str,
        observation_id: str,
        reason: str = "",
        *,
        trace_id: str = "",
        access: WriteAccess | None = None,
    ) -> PurgeOutcome:
        """Purges one observation and audits it (see the module doc).

        Args:
            access: the caller's write access (default: the RPC's caller).

        Raises:
            InvalidArgument: empty ``namespace`` or ``observation_id``, or an oversized ``reason``/``trace_id``.
            NotFound: no such observation in ``namespace`` (also when it was purged before, or is hidden
                from the caller).
            Unavailable: the database cannot be reached (nothing was changed).
        """
        access, trace_id = self._prepare(namespace, observation_id, reason, trace_id, access)

        def work(conn: Any) -> PurgeOutcome:
            row, struck = self._strike(conn, namespace, observation_id, access)
            ensure_not_held(conn, self.database.settings, namespace, [observation_id, episode_key(observation_id)])
            keys = [episode_key(observation_id), *text_fragment_keys(observation_id, row["assertions"])]
            episode_facts = self.facts.touching(conn, namespace, episode_key(observation_id))
            if episode_facts and all(fact.evidence_lost for fact in episode_facts):
                deleted = {fact.fact_id for fact in self.engine.delete_touching(conn, namespace, keys[0])}
                struck = [fact for fact in struck if fact.fact_id not in deleted]
            nodes, chunks = self._remove_content(conn, namespace, keys, delete_nodes=True)
            self.observations.delete(conn, namespace, observation_id)
            snapshot = _snapshot(row, "purge_observation", reason, nodes, chunks, struck)
            event_id = self._audit(conn, row, trace_id, snapshot)
            return PurgeOutcome(observation_id, len(struck), _lost(struck), nodes, chunks, event_id)

        outcome = self.database.run_transaction(work)
        # The reason is not stored anywhere else (the row is gone): the log line is its record.
        log.info(
            "purged %s in %s (reason %r): nodes %s, %d chunks; %d facts lost it, %d now without evidence",
            observation_id,
            namespace,
            reason,
            outcome.nodes_deleted,
            outcome.chunks_deleted,
            outcome.facts_affected,
            outcome.facts_evidence_lost,
        )
        return outcome

    def _prepare(
        self, namespace: str, observation_id: str, reason: str, trace_id: str, access: WriteAccess | None
    ) -> tuple[WriteAccess, str]:
        """Checks the request and prepares the audit labels (graph DDL must not wait behind the
        transaction); returns the caller's access and the trace id (default: the request id).

        Raises:
            InvalidArgument: see `redact` and `purge`.
        """
        _validate(namespace, observation_id, reason, trace_id)
        access = access or WriteAccess.of_caller()
        trace_id = trace_id or default_trace_id()
        self.audit.prepare()
        return access, trace_id

    def _strike(
        self, conn: Any, namespace: str, observation_id: str, access: WriteAccess
    ) -> tuple[dict[str, Any], list[FactRow]]:
        """Locks the observation's row and strikes it from the evidence of its facts (`FactEngine.
        strike_observation`); returns the row as it was and the facts changed.

        Raises:
            NotFound: no such observation in ``namespace``, or it is hidden from the caller.
        """
        row = self.observations.get(conn, namespace, observation_id, lock=True, visibility=access.visibility)
        if row is None:
            raise NotFound(f"observation {observation_id} not found in namespace {namespace}")
        return row, self.engine.strike_observation(conn, namespace, observation_id)

    def _reprove_participants(self, conn: Any, row: dict[str, Any]) -> set[str]:
        """Records the episode's ACTOR and SUBJECT facts again from the (kept) participants of the
        observation ``row``, so redaction leaves them proven; returns their fact_ids."""
        namespace, observation_id = str(row["namespace"]), str(row["observation_id"])
        provenance = row.get("provenance") if isinstance(row.get("provenance"), dict) else {}
        facts = participant_facts(
            namespace=namespace,
            episode_key=episode_key(observation_id),
            observation_id=observation_id,
            occurred_at=row["occurred_at"],
            actor=row.get("actor"),
            subject=row.get("subject"),
            scopes=[s for s in row.get("scopes") or [] if isinstance(s, str)],
            source_path=str(provenance.get("uri", "")),
            kinds=self.kinds.for_namespace(namespace, conn),
            pii_protection=self.database.settings.pii_protection,
        )
        now = datetime.now(UTC)
        return {outcome.fact_id for outcome in accepted(self.engine.record(conn, facts, now=now))}

    def _audit(self, conn: Any, row: dict[str, Any], trace_id: str, snapshot: dict[str, Any]) -> str:
        """Writes the deletion's audit event in the caller's transaction; returns its event id."""
        scopes = [s for s in row.get("scopes") or [] if isinstance(s, str)]
        namespace, observation_id = str(row["namespace"]), str(row["observation_id"])
        event = self.audit.record_deletion_in(
            conn, namespace, observation_id, snapshot, trace_id=trace_id, scopes=scopes
        )
        return event.event_id

    def _remove_content(
        self, conn: Any, namespace: str, keys: list[str], *, delete_nodes: bool
    ) -> tuple[list[str], int]:
        """Deletes the chunks of ``keys`` and, with ``delete_nodes``, their vertices except fact ends.
        Returns (keys of the nodes deleted, chunks deleted)."""
        chunks = sum(self.chunks.delete_chunks(conn, namespace, key) for key in keys)
        if not delete_nodes:
            return [], chunks
        fact_ends = self.facts.referenced_keys(conn, namespace, keys)
        nodes = self.graph.delete_nodes(conn, namespace, [key for key in keys if key not in fact_ends])
        return nodes, chunks


def _snapshot(
    row: dict[str, Any],
    operation: str,
    reason: str,
    nodes: list[str],
    chunks: int,
    struck: list[FactRow],
) -> dict[str, Any]:
    """The audit snapshot of a purge or redaction: what the observation was and what went with it."""
    occurred = row.get("occurred_at")
    return {
        "operation": operation,
        "observation_id": str(row["observation_id"]),
        "kind": str(row.get("kind") or ""),
        "source": {
            "system": str(row.get("source_system") or ""),
            "stream": str(row.get("source_stream") or ""),
            "external_id": str(row.get("source_external_id") or ""),
        },
        "occurred_at": canonical_instant(occurred) if occurred is not None else "",
        "previous_status": str(row.get("status") or ""),
        "content_chars": len(str(row.get("content") or "")),
        "nodes_removed": nodes,
        "chunk_count": chunks,
        "facts_affected": len(struck),
        "facts_evidence_lost": _lost(struck),
        "reason": reason,
    }


def _lost(rows: list[FactRow]) -> int:
    return sum(1 for row in rows if row.evidence_lost)
