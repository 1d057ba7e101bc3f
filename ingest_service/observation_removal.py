"""Redacting and purging observations (seed 000 "Наблюдения", "Потеря свидетельства"; issue 3 §2).

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
so the graph still records that something happened. In other words the projection left behind is the
one the redacted observation itself would produce. Redacting a redacted observation changes nothing
(the first reason is kept).

**Purge** removes the observation row and what its projection alone created: the episode vertex, the
text fragment vertices (label tables, their edges and ``graph_nodes`` rows) and their chunks. Entities
and placeholders stay (other observations may rely on them). A node that is the end of some fact is
not "the projection's alone": its chunks go, its vertex stays. Purging an unknown (or purged)
observation is NOT_FOUND; recording the same observation again after a purge stores it anew.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from common.db import Database
from common.errors import NotFound, ViolationCollector
from common.observation_view import REDACTED, ObservationView, observation_view
from common.storage.chunk_store import ChunkStore
from common.storage.fact_store import FactRow, FactStore
from common.storage.graph_store import GraphStore
from common.storage.observation_store import ObservationStore

log = logging.getLogger(__name__)

REDACTED_CONTENT = ""
MAX_REASON_CHARS = 4096


@dataclass(frozen=True)
class RedactOutcome:
    """The redacted observation and the facts that lost it as evidence (counts are 0 on a repeat)."""

    observation: ObservationView
    facts_affected: int
    facts_evidence_lost: int


@dataclass(frozen=True)
class PurgeOutcome:
    """What a purge removed: natural keys of the deleted nodes, chunk count, and the facts touched."""

    observation_id: str
    facts_affected: int
    facts_evidence_lost: int
    nodes_deleted: list[str] = field(default_factory=list)
    chunks_deleted: int = 0


def episode_key(observation_id: str) -> str:
    """Natural key of an observation's episode node (`ingest_service.observations`)."""
    return f"episode:{observation_id}"


def text_fragment_keys(observation_id: str, assertions: list[Any]) -> list[str]:
    """Natural keys of the text fragment nodes the projection made from ``assertions``
    (``text:<observation_id>/<assertion index>``)."""
    return [
        f"text:{observation_id}/{index}"
        for index, assertion in enumerate(assertions or [])
        if isinstance(assertion, dict) and "text" in assertion
    ]


def _validate(namespace: str, observation_id: str, reason: str) -> None:
    check = ViolationCollector()
    if not namespace.strip():
        check.add("namespace", "required")
    if not observation_id.strip():
        check.add("observation_id", "required")
    if len(reason) > MAX_REASON_CHARS or "\x00" in reason:
        check.add("reason", f"at most {MAX_REASON_CHARS} characters, no NUL")
    check.raise_if_any()


class ObservationRemover:
    """Redacts and purges observations (see the module doc)."""

    def __init__(self, database: Database) -> None:
        self.database = database
        self.graph = GraphStore(database)
        self.facts = FactStore(self.graph)
        self.observations = ObservationStore(database.settings)
        self.chunks = ChunkStore(database.settings)

    def redact(self, namespace: str, observation_id: str, reason: str = "") -> RedactOutcome:
        """Redacts one observation. Idempotent.

        Raises:
            InvalidArgument: empty ``namespace`` or ``observation_id``, or an oversized ``reason``.
            NotFound: no such observation in ``namespace``.
            Unavailable: the database cannot be reached (nothing was changed).
        """
        _validate(namespace, observation_id, reason)

        def work(conn: Any) -> RedactOutcome:
            row = self.observations.get(conn, namespace, observation_id, lock=True)
            if row is None:
                raise NotFound(f"observation {observation_id} not found in namespace {namespace}")
            struck = self.facts.strike_observation(conn, namespace, observation_id)
            texts = text_fragment_keys(observation_id, row["assertions"])
            self._remove_content(conn, namespace, [episode_key(observation_id)], delete_nodes=False)
            self._remove_content(conn, namespace, texts, delete_nodes=True)
            if row["status"] != REDACTED:
                detail = {"reason": reason, "previous_status": row["status"]}
                updated = self.observations.redact(
                    conn, namespace, observation_id, content=REDACTED_CONTENT, detail=detail
                )
                assert updated is not None
                row = updated
            return RedactOutcome(observation_view(row), len(struck), _lost(struck))

        outcome = self.database.run_transaction(work)
        log.info(
            "redacted %s in %s (reason %r): %d facts lost it, %d now without evidence",
            observation_id,
            namespace,
            reason,
            outcome.facts_affected,
            outcome.facts_evidence_lost,
        )
        return outcome

    def purge(self, namespace: str, observation_id: str, reason: str = "") -> PurgeOutcome:
        """Purges one observation.

        Raises:
            InvalidArgument: empty ``namespace`` or ``observation_id``, or an oversized ``reason``.
            NotFound: no such observation in ``namespace`` (also when it was purged before).
            Unavailable: the database cannot be reached (nothing was changed).
        """
        _validate(namespace, observation_id, reason)

        def work(conn: Any) -> PurgeOutcome:
            row = self.observations.get(conn, namespace, observation_id, lock=True)
            if row is None:
                raise NotFound(f"observation {observation_id} not found in namespace {namespace}")
            struck = self.facts.strike_observation(conn, namespace, observation_id)
            keys = [episode_key(observation_id), *text_fragment_keys(observation_id, row["assertions"])]
            nodes, chunks = self._remove_content(conn, namespace, keys, delete_nodes=True)
            self.observations.delete(conn, namespace, observation_id)
            return PurgeOutcome(observation_id, len(struck), _lost(struck), nodes, chunks)

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


def _lost(rows: list[FactRow]) -> int:
    return sum(1 for row in rows if row.evidence_lost)
