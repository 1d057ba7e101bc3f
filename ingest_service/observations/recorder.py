"""Recording observations and projecting them into the graph (docs/explanation/knowledge-model.md).

A batch is stored and projected in ONE transaction (one commit, one WAL flush, retried as a whole on
deadlock); for each observation: the immutable row, then its projection
(`ingest_service.observations.projection`: an episode node with provenance to it, entity upserts, facts
through the fact engine, text fragments, identifier links). A repeated observation_id is a duplicate: nothing is written. An assertion the fact engine
rejects (it checks before writing) is skipped and reported; the observation is then
``partially_processed``.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field
from datetime import UTC
from datetime import datetime
from typing import Any

import numpy as np

from common.domain.episode_header import participant_key
from common.domain.write_access import WriteAccess
from common.kernel.errors import FieldViolation
from common.kernel.errors import InvalidArgument
from common.packs.kind_validation import KindValidator
from common.storage.chunks.store import ChunkStore
from common.storage.database import Database
from common.storage.graph.store import GraphStore
from common.storage.key_locks import lock_node_keys
from common.storage.observation_store import EncodedObservation
from common.storage.observation_store import ObservationStore
from common.storage.observation_store import encode_observation
from common.text_models.embeddings.provider import PassageEncoder
from ingest_service.facts.engine import FactEngine
from ingest_service.observations.projection import ObservationProjector
from ingest_service.observations.validation import ObservationInput
from ingest_service.observations.validation import validate_observation
from ingest_service.observations.write_lanes import WriteLanes
from ingest_service.validation.limits import MAX_OBSERVATIONS_PER_CALL

log = logging.getLogger(__name__)


@dataclass
class _Pending:
    """A valid observation waiting in a write lane, with its episode chunks, its text assertions' vectors
    (one row per text assertion) and, embedded inline, its episode chunks' vectors (None: left pending).
    Everything here is computed in the caller's thread, so the lane's one writer only writes."""

    item: ObservationInput
    row: EncodedObservation  # its immutable row (`encode_observation`), before the lane
    episode_pieces: list[tuple[str, str]]  # `ObservationProjector.episode_chunks`, before the lane
    text_vectors: np.ndarray | None
    episode_vectors: np.ndarray | None


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
        on_pending_embeddings: Callable[[], None] | None = None,
    ) -> None:
        """Args:
        on_pending_embeddings: called after a batch committed episode chunks with their embedding
            pending (the background embedder's `wake`).
        """
        self.database = database
        self.on_pending_embeddings = on_pending_embeddings
        self._in_flight = 0
        self._in_flight_lock = threading.Lock()
        self.kinds = kinds or KindValidator(database)
        self.graph = GraphStore(database)
        self.observations = ObservationStore(database.settings)
        self.encoder = encoder
        self.lanes: WriteLanes[_Pending, RecordResult] = WriteLanes(self._write)
        self.projector = ObservationProjector(
            self.graph,
            FactEngine(self.graph),
            ChunkStore(database.settings),
            self.kinds,
            database.settings,
        )

    def record_batch(self, raw_observations: list[dict[str, Any]]) -> list[RecordResult]:
        """Records observations given in proto3-JSON dict form (snake_case names), in order.

        Invalid items get status ``failed`` with their field violations and write nothing; the others
        are stored. When EVERY item is invalid the call raises `InvalidArgument` with all violations.

        Raises:
            InvalidArgument: empty batch, more than `MAX_OBSERVATIONS_PER_CALL` items, or no valid item.
            Unavailable: the database cannot be reached; the batch commits as one transaction, so
                nothing of it was written and retrying it is safe (duplicates change nothing).
        """
        if not raw_observations:
            raise InvalidArgument.single("observations", "at least one observation is required")
        if len(raw_observations) > MAX_OBSERVATIONS_PER_CALL:
            raise InvalidArgument.single(
                "observations", f"at most {MAX_OBSERVATIONS_PER_CALL} observations per call"
            )
        validated: list[tuple[ObservationInput | None, list[FieldViolation]]] = [
            validate_observation(raw, f"observations[{index}]") for index, raw in enumerate(raw_observations)
        ]
        # Write-side visibility scopes: an observation carrying a workspace:/principal: scope
        # the caller does not hold fails like any invalid item.
        access = WriteAccess.of_caller()
        for index, (item, _) in enumerate(validated):
            denied = access.scope_violations(item.scopes, f"observations[{index}].scopes") if item else []
            if denied:
                validated[index] = (None, denied)
        if all(item is None for item, _ in validated):
            raise InvalidArgument([violation for _, violations in validated for violation in violations])
        valid = [item for item, _ in validated if item is not None]
        with self._in_flight_lock:
            self._in_flight += 1
        try:
            # An id sent twice is written as its first item (`_record_all`), so that one is cut and embedded.
            first: dict[str, ObservationInput] = {}
            for item in valid:
                first.setdefault(item.observation_id, item)
            pieces = {key: self.projector.episode_chunks(item) for key, item in first.items()}
            embeddings = {key: self._embed_texts(item) for key, item in first.items() if item.texts}
            episode_vectors = self._embed_episodes(list(first.values()), pieces)
            pending = [
                _Pending(
                    item,
                    encode_observation(_row_of(item)),
                    pieces[item.observation_id],
                    embeddings.get(item.observation_id),
                    None if episode_vectors is None else episode_vectors[item.observation_id],
                )
                for item in valid
            ]
            # Batches of the same namespaces written together (group commit, `ingest_service.observations.write_lanes`).
            lane = tuple(sorted({item.namespace for item in valid}))
            recorded = self.lanes.submit(lane, pending, {item.observation_id for item in valid})
        finally:
            with self._in_flight_lock:
                self._in_flight -= 1
        if self.on_pending_embeddings is not None and episode_vectors is None:
            self.on_pending_embeddings()
        results: list[RecordResult] = []
        for item, violations in validated:
            if item is None:
                texts = [str(v) for v in violations]
                results.append(RecordResult(status="failed", error=texts[0], field_violations=texts))
            else:
                results.append(recorded[item.observation_id])
        return results

    def _write(self, pending: list[_Pending]) -> dict[str, RecordResult]:
        """Stores and projects ``pending`` (valid observations, with their chunks and vectors) in ONE
        transaction (`_record_all`); results by observation_id. Called by the write lane (`WriteLanes`)."""
        valid = [entry.item for entry in pending]
        rows = [entry.row for entry in pending]
        pieces = {entry.item.observation_id: entry.episode_pieces for entry in pending}
        embeddings = {e.item.observation_id: e.text_vectors for e in pending if e.text_vectors is not None}
        episode_vectors = (
            None
            if any(entry.episode_vectors is None for entry in pending)
            else {entry.item.observation_id: entry.episode_vectors for entry in pending}
        )
        now = datetime.now(UTC)

        def work(conn: Any) -> dict[str, RecordResult]:
            # Nodes this transaction writes, locked in one order first, so concurrent transactions (other
            # processes, other lanes) sharing a node wait for each other instead of deadlocking
            # (common.storage.key_locks).
            lock_node_keys(conn, self._contended_keys(conn, valid))
            return self._record_all(conn, valid, rows, pieces, embeddings, episode_vectors, now)

        return self.database.run_transaction(work)

    def busy(self) -> bool:
        """True while a call of `record_batch` with a valid item is in progress, from its episode
        chunking to its results, waiting in a write lane included (the background embedder defers its
        rounds meanwhile, so a round does not start in the gap between two transactions of a load;
        bench/RESULTS.md (git history))."""
        return self._in_flight > 0

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
            # the objects of its ACTOR/SUBJECT facts (`ingest_service.observations.episode_text`)
            objects[item.namespace].update(
                key for key in (participant_key(item.actor), participant_key(item.subject)) if key
            )
        for namespace, candidates in objects.items():
            unlocked = sorted(key for key in candidates if (namespace, key) not in keys)
            existing = self.graph.node_labels(conn, namespace, unlocked) if unlocked else {}
            keys.update((namespace, key) for key in unlocked if key not in existing)
        return keys

    def _record_all(
        self,
        conn: Any,
        valid: list[ObservationInput],
        rows: list[EncodedObservation],
        pieces: dict[str, list[tuple[str, str]]],
        embeddings: dict[str, np.ndarray],
        episode_vectors: dict[str, np.ndarray] | None,
        now: datetime,
    ) -> dict[str, RecordResult]:
        """Stores the immutable rows of ``valid`` (``rows``, encoded in the same order; one insert) and
        projects the new ones together (`ObservationProjector.project`), inside the batch transaction;
        results by observation_id.

        Idempotent by observation_id: an observation that exists (or appears twice in the batch) is a
        duplicate and writes nothing; its result carries the stored status.
        """
        inserted = self.observations.insert_many(conn, rows)
        new: dict[str, ObservationInput] = {}
        for item in valid:
            if item.observation_id in inserted:
                new.setdefault(item.observation_id, item)
        projections = self.projector.project(
            conn, list(new.values()), pieces, embeddings, now, episode_vectors
        )
        results: dict[str, RecordResult] = {}
        for item, projection in zip(new.values(), projections, strict=True):
            result = RecordResult(
                observation_id=item.observation_id,
                created=True,
                episode_key=projection.episode_key,
                entities_upserted=projection.entities_upserted,
                facts_created=projection.facts_created,
                facts_strengthened=projection.facts_strengthened,
                text_fragments=projection.text_fragments,
            )
            rejected = projection.rejected
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
            results[item.observation_id] = result
        # Duplicates, also the second of an id sent twice (its result replaces the first's, as before).
        repeated = [item.observation_id for item in valid if item.observation_id not in new]
        repeated += [
            i for i, n in Counter(item.observation_id for item in valid).items() if n > 1 and i in new
        ]
        statuses = self.observations.statuses(conn, sorted(set(repeated))) if repeated else {}
        for observation_id in set(repeated):
            results[observation_id] = RecordResult(
                observation_id=observation_id, status=statuses.get(observation_id, "")
            )
        return results

    def _embed_episodes(
        self, valid: list[ObservationInput], pieces: dict[str, list[tuple[str, str]]]
    ) -> dict[str, np.ndarray] | None:
        """With CB_EPISODE_EMBEDDING=inline, the vectors of every episode chunk of ``valid`` (no
        observation_id twice; ``pieces``: observation_id -> its chunks), embedded in one call
        (observation_id -> one row per chunk); None in background mode (chunks stay pending)."""
        if self.database.settings.episode_embedding != "inline" or self.encoder is None:
            return None
        inputs = {
            item.observation_id: self.projector.episode_inputs(item, pieces[item.observation_id])
            for item in valid
        }
        texts = [text for chunk_texts in inputs.values() for text in chunk_texts]
        vectors = self.encoder.encode_passages(texts) if texts else np.zeros((0, 0), dtype=np.float32)
        out: dict[str, np.ndarray] = {}
        offset = 0
        for observation_id, chunk_texts in inputs.items():
            out[observation_id] = vectors[offset : offset + len(chunk_texts)]
            offset += len(chunk_texts)
        return out

    def _embed_texts(self, item: ObservationInput) -> np.ndarray | None:
        if not item.texts:
            return None
        if self.encoder is None:
            raise RuntimeError("text assertions need an embedding provider")
        return self.encoder.encode_passages(
            [f"{text.title or item.kind} — {text.heading}\n{text.text}" for text in item.texts]
        )


def _row_of(item: ObservationInput) -> dict[str, Any]:
    """The immutable row of a valid observation (`ObservationStore.insert`), status ``processed``."""
    return {
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
    }
