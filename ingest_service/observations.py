"""Recording observations and projecting them into the graph (seed 000 "Наблюдения", "Эпизоды и сущности").

A batch is stored and projected in ONE transaction (one commit, one WAL flush, retried as a whole on
deadlock); for each observation: the immutable row, an episode node with
provenance to it, entity upserts, facts (fact engine) and text fragments (a text node + one embedded
chunk). A repeated observation_id is a duplicate: nothing is written. An assertion the fact engine
rejects (it checks before writing) is skipped and reported; the observation is then
``partially_processed``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import numpy as np

from common.storage.database import Database
from common.kernel.errors import FieldViolation, InvalidArgument
from common.kernel.identifiers import canonical_instant
from common.packs.kind_validation import KindValidator
from common.kernel.pii import PiiMarks
from common.storage.chunk_store import ChunkStore, ChunkWrite, NodeRef
from common.storage.fact_store import FactStore
from common.storage.graph_store import GraphStore, NodeWrite
from common.storage.key_locks import lock_node_keys
from common.storage.observation_store import ObservationStore
from common.domain.write_access import WriteAccess
from ingest_service.chunking import chunk_markdown
from ingest_service.documents import bounded_chunks
from ingest_service.fact_engine import AssertionRejected, FactEngine, FactWrite
from ingest_service.identifier_extraction import MentionLinker, MentionSource
from ingest_service.observation_validation import ObservationInput, validate_observation

log = logging.getLogger(__name__)

MAX_BATCH = 1000


class PassageEncoder(Protocol):
    def encode_passages(self, texts: list[str]) -> np.ndarray: ...


@dataclass
class RecordResult:
    """Outcome of one observation (mirrors memory.v1.ObservationResult)."""

    observation_id: str = ""
    created: bool = False
    status: str = ""
    error: str = ""
    field_violations: list[str] = field(default_factory=list)
    entities_upserted: int = 0
    facts_created: int = 0
    facts_strengthened: int = 0
    text_fragments: int = 0
    episode_key: str = ""


class ObservationRecorder:
    """Validates, stores and projects batches of observations."""

    def __init__(
        self,
        database: Database,
        *,
        encoder: PassageEncoder | None = None,
        kinds: KindValidator | None = None,
    ) -> None:
        self.database = database
        self.kinds = kinds or KindValidator(database)
        self.graph = GraphStore(database)
        self.facts = FactStore(self.graph)
        self.engine = FactEngine(self.graph, self.facts)
        self.mentions = MentionLinker(self.graph)
        self.observations = ObservationStore(database.settings)
        self.encoder = encoder
        self.chunks = ChunkStore(database.settings)

    def record_batch(self, raw_observations: list[dict[str, Any]]) -> list[RecordResult]:
        """Records observations given in proto3-JSON dict form (snake_case names), in order.

        Invalid items get status ``failed`` with their field violations and write nothing; the others
        are stored. When EVERY item is invalid the call raises `InvalidArgument` with all violations.

        Raises:
            InvalidArgument: empty batch, more than MAX_BATCH items, or no valid item.
            Unavailable: the database cannot be reached; the batch commits as one transaction, so
                nothing of it was written and retrying it is safe (duplicates change nothing).
        """
        if not raw_observations:
            raise InvalidArgument.single("observations", "at least one observation is required")
        if len(raw_observations) > MAX_BATCH:
            raise InvalidArgument.single("observations", f"at most {MAX_BATCH} observations per call")
        validated: list[tuple[ObservationInput | None, list[FieldViolation]]] = [
            validate_observation(raw, f"observations[{index}]") for index, raw in enumerate(raw_observations)
        ]
        # Write-side visibility scopes (issue 5 §3): an observation carrying a workspace:/principal: scope
        # the caller does not hold fails like any invalid item.
        access = WriteAccess.of_caller()
        for index, (item, _) in enumerate(validated):
            denied = access.scope_violations(item.scopes, f"observations[{index}].scopes") if item else []
            if denied:
                validated[index] = (None, denied)
        if all(item is None for item, _ in validated):
            raise InvalidArgument([violation for _, violations in validated for violation in violations])
        valid = [item for item, _ in validated if item is not None]
        embeddings = {item.observation_id: self._embed_texts(item) for item in valid if item.texts}

        def work(conn: Any) -> dict[str, RecordResult]:
            # Nodes this batch writes, locked in one order first, so concurrent batches sharing a node
            # wait for each other instead of deadlocking (common.storage.key_locks).
            lock_node_keys(conn, self._contended_keys(conn, valid))
            now = datetime.now(UTC)
            return {item.observation_id: self._record_one(conn, item, embeddings.get(item.observation_id), now) for item in valid}

        recorded = self.database.run_transaction(work)
        results: list[RecordResult] = []
        for item, violations in validated:
            if item is None:
                texts = [str(v) for v in violations]
                results.append(RecordResult(status="failed", error=texts[0], field_violations=texts))
            else:
                results.append(recorded[item.observation_id])
        return results

    def _contended_keys(self, conn: Any, valid: list[ObservationInput]) -> set[tuple[str, str]]:
        """(namespace, natural_key) of the nodes the batch may lock rows of: entities (upserted, which
        locks an existing row), fact subjects (their fact chains are updated) and subjects, plus fact
        objects that do not exist yet (two batches creating one placeholder wait for each other). An
        existing fact object is only read, so it is not locked: maintainers are the objects of most
        debian facts, and locking them serialised every concurrent batch (16 clients: 0.6x of one).
        A key a domain pack canonicalises is written under its canonical form, which is not covered
        (a deadlock there is still retried by `Database.run_transaction`)."""
        keys: set[tuple[str, str]] = set()
        objects: dict[str, set[str]] = {}
        for item in valid:
            keys.update((item.namespace, entity.key) for entity in item.entities)
            keys.update((item.namespace, fact.subject) for fact in item.facts)
            if item.subject:
                keys.add((item.namespace, f"{item.subject['type']}:{item.subject['id']}"))
            objects.setdefault(item.namespace, set()).update(fact.object for fact in item.facts)
        for namespace, candidates in objects.items():
            unlocked = sorted(key for key in candidates if (namespace, key) not in keys)
            existing = self.graph.node_labels(conn, namespace, unlocked) if unlocked else {}
            keys.update((namespace, key) for key in unlocked if key not in existing)
        return keys

    def _record_one(self, conn: Any, item: ObservationInput, embeddings: np.ndarray | None, now: datetime) -> RecordResult:
        """Stores and projects one valid observation inside the batch transaction.

        Idempotent by observation_id: an observation that exists (or appeared earlier in the same batch)
        is a duplicate and writes nothing.
        """
        result = RecordResult(observation_id=item.observation_id)
        inserted = self.observations.insert(
            conn,
            {
                "observation_id": item.observation_id,
                "namespace": item.namespace,
                "source_system": item.system,
                "source_stream": item.stream,
                "source_external_id": item.external_id or None,
                "kind": item.kind,
                "occurred_at": item.occurred_at,
                "actor": item.actor,
                "subject": item.subject,
                "scopes": item.scopes,
                "content": item.content,
                "data": item.data,
                "assertions": item.assertions,
                "provenance": item.provenance,
                "status": "processed",
            },
        )
        if not inserted:
            result.status = self.observations.statuses(conn, [item.observation_id]).get(item.observation_id, "")
            return result
        result.created = True
        rejected = self._project(conn, item, result, embeddings, now)
        result.status = "partially_processed" if rejected else "processed"
        if rejected:
            result.field_violations = [f"{field_path}: {reason}" for field_path, reason in rejected]
            result.error = result.field_violations[0]
            self.observations.set_status(
                conn,
                item.observation_id,
                result.status,
                {"rejected": [{"field": f, "reason": r} for f, r in rejected]},
            )
        return result

    def _embed_texts(self, item: ObservationInput) -> np.ndarray | None:
        if not item.texts:
            return None
        if self.encoder is None:
            raise RuntimeError("text assertions need an embedding provider")
        return self.encoder.encode_passages(
            [f"{text.title or item.kind} — {text.heading}\n{text.text}" for text in item.texts]
        )

    def _project(
        self,
        conn: Any,
        item: ObservationInput,
        result: RecordResult,
        embeddings: np.ndarray | None,
        now: datetime,
    ) -> list[tuple[str, str]]:
        """Writes the episode, entities, facts and text fragments; returns rejected (field, reason)."""
        source_path = str(item.provenance.get("uri", "")) if isinstance(item.provenance, dict) else ""
        episode_key = f"episode:{item.observation_id}"
        subject_key = f"{item.subject['type']}:{item.subject['id']}" if item.subject else ""
        # Personal data marks of the observation (seed 000 "Персональные данные"): explicit ones plus,
        # with CB_PII_PROTECTION, what the detector finds in everything the episode stands for.
        protection = self.database.settings.pii_protection
        marks = PiiMarks.of(
            pii=item.pii,
            categories=item.pii_categories,
            values=(item.content, item.data, item.assertions, item.provenance, item.actor, item.subject),
            protection=protection,
        )
        self.graph.upsert_node(
            conn,
            NodeWrite(
                namespace=item.namespace,
                natural_key=episode_key,
                node_type="episode",
                title=f"{item.kind} {subject_key}".strip(),
                source_path=source_path,
                source_id=item.observation_id,
                props={
                    "observation_id": item.observation_id,
                    "kind": item.kind,
                    "occurred_at": canonical_instant(item.occurred_at),
                    "actor": item.actor,
                    "subject": item.subject,
                    "scopes": item.scopes,
                    "provenance": {"observation_id": item.observation_id, **item.provenance},
                    **(marks.as_props() if marks.marked else {}),
                },
                asserted_at=item.occurred_at,
            ),
            now=now,
        )
        result.episode_key = episode_key
        searchable = episode_text(item)
        if searchable:
            # Long content (changelog entries reach 85 KB) is cut like a document, so one episode
            # chunk cannot dominate full-text ranking or a context budget.
            limit = self.database.settings.chunk_max_chars
            pieces = bounded_chunks(
                [(chunk.heading or item.kind, chunk.text) for chunk in chunk_markdown(searchable, limit)], 2 * limit
            ) or [(item.kind, searchable)]
            meta = {"observation_id": item.observation_id, "scopes": item.scopes}
            if marks.marked:
                meta.update(marks.as_props())
            self.chunks.replace_chunks(
                conn,
                NodeRef(item.namespace, episode_key, "episode", f"{item.kind} {subject_key}".strip(), source_path),
                [ChunkWrite(order, heading, text, None, meta) for order, (heading, text) in enumerate(pieces)],
            )
        known: dict[str, str] = {}
        rejected: list[tuple[str, str]] = []
        kinds = self.kinds.for_namespace(item.namespace, conn)
        # Entities whose node is hidden from the caller are not overwritten (issue 5 §3; read "not found").
        hidden = WriteAccess.of_caller().hidden_nodes(
            conn, self.graph, item.namespace, [entity.key for entity in item.entities]
        )
        for entity in item.entities:
            natural_key, node_type = entity.key, entity.node_type
            if natural_key in hidden:
                rejected.append((f"assertions[{entity.index}].entity", f"node {natural_key!r} not found"))
                continue
            if kinds.active:
                natural_key, node_type, violations = kinds.check_entity(
                    entity.key, entity.node_type, entity.attributes, f"assertions[{entity.index}].entity"
                )
                if violations:
                    rejected.extend((violation.field, violation.description) for violation in violations)
                    continue
            node = self.graph.upsert_node(
                conn,
                NodeWrite(
                    namespace=item.namespace,
                    natural_key=natural_key,
                    node_type=node_type,
                    title=entity.title,
                    source_path=source_path,
                    source_id=item.observation_id,
                    props={"attributes": entity.attributes},
                    asserted_at=item.occurred_at,
                ),
                now=now,
                overwrite=False,
                merge_props=True,
            )
            known[natural_key] = node.label
            result.entities_upserted += 1
        prefix = "assertions"
        for fact in item.facts:
            subject, object_ = fact.subject, fact.object
            if kinds.active:
                subject, object_, violations = kinds.check_fact(
                    fact.subject, fact.predicate, fact.object, f"{prefix}[{fact.index}].fact"
                )
                if violations:
                    rejected.extend((violation.field, violation.description) for violation in violations)
                    continue
            write = FactWrite(
                field=f"{prefix}[{fact.index}].fact",
                namespace=item.namespace,
                subject=subject,
                predicate=fact.predicate,
                object=object_,
                valid_from=fact.valid_from,
                valid_to=fact.valid_to,
                evidence=fact.evidence,
                confidence=fact.confidence,
                supersedes=fact.supersedes,
                scopes=fact.scopes or item.scopes,
                attributes=fact.attributes,
                observation_id=item.observation_id,
                observed_at=now,
                origin="agent",
                source_path=source_path,
            )
            try:
                outcome = self.engine.record(conn, write, now=now, known=known)
            except AssertionRejected as rejection:
                rejected.append((rejection.field, rejection.reason))
                continue
            if outcome.created:
                result.facts_created += 1
            else:
                result.facts_strengthened += 1
        for position, text in enumerate(item.texts):
            node_key = f"text:{item.observation_id}/{text.index}"
            title = text.title or f"{item.kind} {subject_key}".strip()
            fragment_marks = PiiMarks.of(
                pii=item.pii,
                categories=item.pii_categories,
                values=(text.text, title, text.heading),
                protection=protection,
            )
            fragment_meta: dict[str, Any] = {"observation_id": item.observation_id, "scopes": item.scopes}
            if fragment_marks.marked:
                fragment_meta.update(fragment_marks.as_props())
            self.graph.upsert_node(
                conn,
                NodeWrite(
                    namespace=item.namespace,
                    natural_key=node_key,
                    node_type="text",
                    title=title,
                    source_path=source_path,
                    source_id=item.observation_id,
                    props=dict(fragment_meta),
                ),
                now=now,
            )
            assert embeddings is not None
            self.chunks.replace_chunks(
                conn,
                NodeRef(item.namespace, node_key, "text", title, source_path),
                [
                    ChunkWrite(
                        0,
                        text.heading,
                        text.text,
                        embeddings[position],
                        fragment_meta,
                    )
                ],
            )
            result.text_fragments += 1
        # Identifiers of pack kinds in the content link the episode to existing nodes (issue 4 §4).
        self.mentions.link(
            conn,
            kinds,
            MentionSource(
                namespace=item.namespace,
                natural_key=episode_key,
                texts=[item.content, *(text.text for text in item.texts)],
                valid_from=item.occurred_at,
                observation_id=item.observation_id,
                scopes=item.scopes,
                source_path=source_path,
            ),
            now=now,
        )
        return rejected


def episode_text(item: ObservationInput) -> str:
    """The searchable text of an observation's episode: its content, then the scalar fields of ``data``
    (``version: 2.36-9+deb12u4``), so identifiers in the payload are found by full text and trigram search.
    """
    scalars = [f"{key}: {value}" for key, value in sorted(item.data.items()) if isinstance(value, (str, int, float, bool))]
    parts = [item.content.strip(), "; ".join(scalars)]
    return "\n\n".join(part for part in parts if part)
