"""Enrichment of the jobs a worker runs at once in one batch: the language models called once for the
texts of all of them (spaCy's ``pipe`` costs less per text than a call per text).

`BatchingEnricher` wraps an enricher with ``enrich_many`` (`RuleEnricher`). Every job's thread calls
`BatchingEnricher.enrich` with its own text; one of the waiting threads takes every text waiting at that
moment and enriches them in one ``enrich_many`` call while the others wait for their results; texts that
arrive meanwhile make the next batch. Nothing waits for a batch to fill: an idle worker enriches a lone
text at once, and batches grow with the number of jobs running (``cb worker --concurrency``).

Only the model call is shared: each job still reads and writes its own memory in its own transactions
(`ingest_service.memories.enrichment.jobs`), so the queue's guarantees (one job per memory at a time,
retries, idempotent writes) are those of a single job. A failing batch fails every job in it; each is
retried by the queue on its own.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Protocol

from ingest_service.memories.enrichment.model import Enrichment
from ingest_service.memories.enrichment.model import MemoryText


class ManyEnricher(Protocol):
    """An enricher that also enriches several texts in one call."""

    name: str

    def enrich(self, item: MemoryText) -> Enrichment:
        """The semantic fields of ``item``."""
        ...

    def enrich_many(self, items: Sequence[MemoryText]) -> list[Enrichment]:
        """`enrich` of each item, in order."""
        ...


class _Waiting:
    """One caller's text and, once its batch ran, its result or the batch's error."""

    __slots__ = ("done", "error", "item", "result")

    def __init__(self, item: MemoryText) -> None:
        self.item = item
        self.done = False
        self.result: Enrichment | None = None
        self.error: BaseException | None = None


class BatchingEnricher:
    """`Enricher` that batches the concurrent callers' texts (see the module doc). Thread-safe.

    Args:
        inner: the enricher whose ``enrich_many`` runs each batch.
        max_batch: at most this many texts per model call.
    """

    def __init__(self, inner: ManyEnricher, *, max_batch: int = 64) -> None:
        self.inner = inner
        self.name = inner.name
        self.max_batch = max_batch
        self._changed = threading.Condition()
        self._waiting: list[_Waiting] = []
        self._running = False

    def enrich(self, item: MemoryText) -> Enrichment:
        """The semantic fields of ``item``, computed in a batch with the texts of the other callers.

        Raises:
            Exception: what the inner enricher raised for the batch ``item`` was in.
        """
        mine = _Waiting(item)
        with self._changed:
            self._waiting.append(mine)
        while True:
            with self._changed:
                while not mine.done and self._running:
                    self._changed.wait()
                if mine.done:
                    break
                # nobody runs a batch: this caller runs the next one (the oldest texts, its own among
                # them unless more than max_batch wait before it)
                self._running = True
                batch, self._waiting = self._waiting[: self.max_batch], self._waiting[self.max_batch :]
            self._run(batch)
        if mine.error is not None:
            raise mine.error
        assert mine.result is not None
        return mine.result

    def _run(self, batch: list[_Waiting]) -> None:
        try:
            results = self.inner.enrich_many([waiting.item for waiting in batch])
            for waiting, result in zip(batch, results, strict=True):
                waiting.result = result
        except Exception as error:  # every job of the batch fails, and is retried by the queue
            for waiting in batch:
                waiting.error = error
        finally:
            with self._changed:
                for waiting in batch:
                    waiting.done = True
                self._running = False
                self._changed.notify_all()
