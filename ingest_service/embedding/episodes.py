"""The background embedder of episode chunks ("embedding batched across observations").

RecordObservations writes an episode's chunks with ``embedding`` NULL and ``embedding_pending`` true
(`ingest_service.observations.projection`), so an observation is stored, found by full text and trigram
search, and acknowledged without waiting for the model (the default model embeds 300-450 texts/s on two
cores; observations arrive at more than 1,000/s). `EpisodeEmbedder` fills those vectors afterwards, in
batches across observations, so Search's vector arm sees an episode a moment after it was recorded.

The state is in the database only (the ``embedding_pending`` column, migration 0010): one round
(`embed_once`) locks up to ``batch_size`` pending chunks oldest first with ``FOR UPDATE SKIP LOCKED``,
embeds their `embedding_input` texts, stores the vectors and clears the flag, in ONE transaction. So:

* a crash or restart mid-round rolls the round back and the chunks stay pending (nothing lost);
* several ingest processes share the backlog without embedding a chunk twice (skipped locks);
* repeating is harmless: a chunk no longer pending, or deleted meanwhile (redaction, purge), is skipped;
* a redaction or purge that meets a claimed chunk waits for the round (well under a second).

The backlog is public: `backlog` (and the RPC ``ObservationService.GetEmbeddingBacklog``), and the gauges
``memory_embedding_backlog_chunks`` (queue depth) and ``memory_embedding_backlog_lag_seconds`` (queue lag:
age of the oldest pending chunk, 0 when none) with the counter ``memory_embeddings_filled_total`` on the
ingest service's metrics endpoint.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC
from datetime import datetime
from typing import Any

from prometheus_client import REGISTRY
from prometheus_client import CollectorRegistry
from prometheus_client import Counter
from prometheus_client import Gauge

from common.storage.chunks.store import ChunkStore
from common.storage.database import Database
from common.text_models.embeddings.provider import PassageEncoder

log = logging.getLogger(__name__)

DEFAULT_BATCH_SIZE = 128  # texts per model call: the model's throughput is flat from about 64 texts up
DEFAULT_IDLE_SECONDS = 1.0  # how long an idle embedder sleeps before looking at the backlog again
DEFAULT_MAX_DEFERRAL_SECONDS = 2.0  # longest wait for a round while writes are in flight
# Threads taking rounds side by side: while one stores its vectors (the UPDATE, mostly PostgreSQL's HNSW
# insertions: 30% of a round on two cores), the other's model runs. Debian backlog, 12 rounds of 128 in
# process: model 4.90 s, UPDATE 2.07 s (bench/RESULTS.md (git history)).
DEFAULT_WORKERS = 2
DEFERRAL_POLL_SECONDS = 0.05


@dataclass(frozen=True)
class Backlog:
    """Chunks waiting for their embedding and when the oldest was written (None: the backlog is empty)."""

    pending: int
    oldest_written_at: datetime | None


@dataclass(frozen=True)
class _Metrics:
    backlog: Gauge
    lag: Gauge
    filled: Counter


_metrics_lock = threading.Lock()
_metrics_by_registry: dict[int, _Metrics] = {}


def _metrics(registry: CollectorRegistry = REGISTRY) -> _Metrics:
    """The process-wide embedder metrics of ``registry`` (several in-process services share them)."""
    with _metrics_lock:
        metrics = _metrics_by_registry.get(id(registry))
        if metrics is None:
            metrics = _Metrics(
                backlog=Gauge(
                    "memory_embedding_backlog_chunks",
                    "Chunks written without their embedding and waiting for the background embedder"
                    " (all namespaces), as last seen by this process.",
                    registry=registry,
                ),
                lag=Gauge(
                    "memory_embedding_backlog_lag_seconds",
                    "Age of the oldest chunk waiting for its embedding (all namespaces), 0 when none waits;"
                    " as last seen by this process.",
                    registry=registry,
                ),
                filled=Counter(
                    "memory_embeddings_filled_total",
                    "Chunk embeddings stored by the background embedder of this process.",
                    registry=registry,
                ),
            )
            _metrics_by_registry[id(registry)] = metrics
        return metrics


class EpisodeEmbedder:
    """Fills the embeddings of pending chunks in batches, from a daemon thread or on demand.

    Args:
        database: the database whose chunks table holds the backlog.
        encoder: the embedding provider (the one the rest of the service embeds with).
        batch_size: chunks per round (one model call, one transaction).
        idle_seconds: sleep of the thread when the backlog is empty; `wake` cuts it short.
        namespace: embed the backlog of this namespace only (None: of every namespace, the service's).
        busy: True while the service is writing (RecordObservations batches in flight): the next round
            is then deferred, for at most ``max_deferral_seconds`` since the last one, so that on a
            small machine the model does not take the cores from the writes (they are acknowledged
            sooner, and the backlog is embedded in the gaps and after the load).
        workers: daemon threads taking rounds side by side (`start`) once no write was in flight for
            ``max_deferral_seconds`` (before that, one round at a time); each round claims its own
            chunks (``SKIP LOCKED``), so no chunk is embedded twice.
    """

    def __init__(
        self,
        database: Database,
        encoder: PassageEncoder,
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        idle_seconds: float = DEFAULT_IDLE_SECONDS,
        namespace: str | None = None,
        busy: Callable[[], bool] | None = None,
        max_deferral_seconds: float = DEFAULT_MAX_DEFERRAL_SECONDS,
        workers: int = DEFAULT_WORKERS,
    ) -> None:
        if workers < 1:
            raise ValueError("workers must be at least 1")
        self.workers = workers
        self.database = database
        self.namespace = namespace
        self.busy = busy
        self.max_deferral_seconds = max_deferral_seconds
        self.encoder = encoder
        self.chunks = ChunkStore(database.settings)
        self.batch_size = batch_size
        self.idle_seconds = idle_seconds
        self._metrics = _metrics()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._round_lock = threading.Lock()
        self._last_round = time.monotonic()  # when the last round of any thread started
        self._last_busy = float("-inf")  # when writes were last seen in flight
        self._running = 0  # rounds running now

    def embed_once(self) -> int:
        """One round: claims up to ``batch_size`` pending chunks, embeds and stores them in one
        transaction; returns how many were filled (0: the backlog had nothing unclaimed).

        Raises:
            Unavailable: the database cannot be reached (nothing changed).
        """

        def work(conn: Any) -> int:
            claimed = self.chunks.claim_pending_embeddings(conn, self.batch_size, self.namespace)
            if not claimed:
                return 0
            vectors = self.encoder.encode_passages([text for _, text in claimed])
            return self.chunks.fill_embeddings(conn, [chunk_id for chunk_id, _ in claimed], vectors)

        filled = self.database.run_transaction(work)
        if filled:
            self._metrics.filled.inc(filled)
        return filled

    def drain(self) -> int:
        """Rounds until nothing is left to claim; returns how many chunks were filled."""
        total = 0
        while filled := self.embed_once():
            total += filled
        return total

    def backlog(self, namespace: str | None = None) -> Backlog:
        """The chunks waiting for their embedding: of ``namespace``, or of all namespaces when None."""
        with self.database.connection() as conn:
            pending, oldest = self.chunks.embedding_backlog(conn, namespace)
        if namespace == self.namespace:
            self._metrics.backlog.set(pending)
            lag = (datetime.now(UTC) - oldest).total_seconds() if oldest is not None else 0.0
            self._metrics.lag.set(max(0.0, lag))
        return Backlog(pending, oldest)

    # -- the daemon thread -------------------------------------------------------------------------

    def start(self) -> None:
        """Starts the ``workers`` daemon threads (once)."""
        if self._threads:
            return
        self._stop.clear()
        self._threads = [
            threading.Thread(target=self._run, name=f"episode-embedder-{number}", daemon=True)
            for number in range(self.workers)
        ]
        for thread in self._threads:
            thread.start()

    def wake(self) -> None:
        """Tells idle threads that chunks were written (RecordObservations calls it after a commit)."""
        self._wake.set()

    def stop(self, timeout: float = 10.0) -> None:
        """Stops the threads after their current rounds (an interrupted round is rolled back, see above);
        waits at most ``timeout`` seconds for each."""
        self._stop.set()
        self._wake.set()
        for thread in self._threads:
            thread.join(timeout)
        self._threads = []

    def _may_start_round(self) -> bool:
        """Whether a thread may start a round now; if so, counts it as running (`_round_ended`).

        One round at a time, deferred while writes are in flight for at most ``max_deferral_seconds``
        since the last one started (what a single thread does); a second round side by side only once
        no write was in flight for ``max_deferral_seconds``, so that during a load the threads together
        take no more of the cores than one would."""
        with self._round_lock:
            now = time.monotonic()
            busy = self.busy is not None and self.busy()
            if busy:
                self._last_busy = now
            if self._running and now - self._last_busy < self.max_deferral_seconds:
                return False
            if busy and now - self._last_round < self.max_deferral_seconds:
                return False
            self._last_round = now
            self._running += 1
            return True

    def _round_ended(self) -> None:
        with self._round_lock:
            self._running -= 1

    def _run(self) -> None:
        while not self._stop.is_set():
            if not self._may_start_round():
                self._stop.wait(DEFERRAL_POLL_SECONDS)
                continue
            try:
                filled = self.embed_once()
                self.backlog(self.namespace)  # the gauge
                if filled:
                    continue
            except Exception:  # the database down, the model failing: log, wait, try again
                log.exception("episode embedder: round failed; retrying in %.1f s", self.idle_seconds)
            finally:
                self._round_ended()
            self._wake.wait(self.idle_seconds)
            self._wake.clear()
