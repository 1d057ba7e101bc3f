"""Embedding one batch of documents while the batch before is written (the vault: "batch across
documents, use the cores").

`DocumentWriter.retain` embeds a document, then writes it: the model and the transaction never overlap,
and the model gets one document's chunks at a time. `EmbeddingPipeline` takes documents prepared by
`DocumentWriter.prepare_retain` as they come and runs two stages on threads of their own:

* the model: a batch of documents at a time, about ``batch_texts`` texts across documents
  (`DocumentWriter.embed`);
* the writes: each document of an embedded batch in its own transaction, in the order they were added.

So the model embeds batch k+1 while batch k is written and the calling thread parses what comes next.
The model's passes release the interpreter lock in their matrix products and a transaction mostly waits
on PostgreSQL, so the stages overlap on the cores.

A batch goes to the model when it holds ``batch_texts`` texts, or when the caller says so (`ship`: a vault
run ships at the end of each stream message, so no document waits for the next message to be written).
At most ``MAX_BATCHES_IN_FLIGHT`` batches are queued or running; `add` and `ship` wait for the oldest
beyond that (the caller then reads its input no faster than the model embeds).

Failures: the first exception of a stage (the model, or ``write``) stops the writes (no later document is
written) and is raised by the caller's next `add`, `ship` or `finish`. Leaving the ``with`` block
without `finish` (the caller broke off) lets the write in progress end and writes nothing more.
"""

from __future__ import annotations

import contextvars
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Generic
from typing import TypeVar

from ingest_service.documents.model import PreparedDocument
from ingest_service.documents.writer import DocumentWriter

Tag = TypeVar("Tag")

# Texts per model call: the default model's throughput is flat from about 64 texts up (its passes run
# side by side on slices of a call); 128 texts take it about 0.7 s on two cores.
DEFAULT_BATCH_TEXTS = 128
# Batches queued or running (being embedded or written) before `add` waits for the oldest.
MAX_BATCHES_IN_FLIGHT = 2


class EmbeddingPipeline(Generic[Tag]):
    """Embeds added documents in batches and writes them in order, on threads of their own (see the
    module doc). Use as a context manager and call `finish` at the end.

    Args:
        writer: embeds the batches (`DocumentWriter.embed`).
        write: ``write(tag, document)`` writes one embedded document (called on the write thread, in the
            contextvars of the caller's `add`/`ship`); what it raises stops the writes.
        batch_texts: a batch goes to the model once its documents hold this many texts to embed.
    """

    def __init__(
        self,
        writer: DocumentWriter,
        write: Callable[[Tag, PreparedDocument], None],
        *,
        batch_texts: int = DEFAULT_BATCH_TEXTS,
    ) -> None:
        if batch_texts < 1:
            raise ValueError("batch_texts must be at least 1")
        self.writer = writer
        self.write = write
        self.batch_texts = batch_texts
        self._collecting: list[tuple[Tag, PreparedDocument]] = []
        self._in_flight: deque[Future[None]] = deque()
        self._stop = threading.Event()  # a stage failed, or the caller broke off
        self._model = ThreadPoolExecutor(1, thread_name_prefix="document-embedding")
        self._writes = ThreadPoolExecutor(1, thread_name_prefix="document-writes")

    def add(self, tag: Tag, document: PreparedDocument) -> None:
        """Queues ``document`` (``tag`` is handed back to ``write``); ships the batch once it is full.

        Raises:
            Exception: the first failure of the model or of ``write`` so far.
        """
        self._raise_failure()
        self._collecting.append((tag, document))
        if sum(len(collected.missing) for _, collected in self._collecting) >= self.batch_texts:
            self.ship()

    def ship(self) -> None:
        """Sends the documents added since the last batch to the model (they are written after it),
        waiting first while `MAX_BATCHES_IN_FLIGHT` batches are in flight.

        Raises:
            Exception: the first failure of the model or of ``write`` so far.
        """
        self._raise_failure()
        if not self._collecting:
            return
        while len(self._in_flight) >= MAX_BATCHES_IN_FLIGHT:
            self._wait_oldest()
        batch, self._collecting = self._collecting, []
        documents = [document for _, document in batch]
        embedded = self._model.submit(contextvars.copy_context().run, self.writer.embed, documents)
        self._in_flight.append(
            self._writes.submit(contextvars.copy_context().run, self._write_batch, batch, embedded)
        )

    def finish(self) -> None:
        """Embeds and writes every document added; returns when all are written.

        Raises:
            Exception: the first failure of the model or of ``write``.
        """
        self.ship()
        while self._in_flight:
            self._wait_oldest()

    def _wait_oldest(self) -> None:
        """Waits for the oldest batch in flight to be written; raises its failure."""
        failure = self._in_flight.popleft().exception()
        if failure is not None:
            raise failure

    def _write_batch(self, batch: list[tuple[Tag, PreparedDocument]], embedded: Future[int]) -> None:
        try:
            if self._stop.is_set():
                return
            embedded.result()
            for tag, document in batch:
                if self._stop.is_set():
                    return
                self.write(tag, document)
        except BaseException:
            self._stop.set()
            raise

    def _raise_failure(self) -> None:
        """Raises the failure of a batch in flight that has ended with one (without waiting)."""
        for future in self._in_flight:
            failure = future.exception() if future.done() else None
            if failure is not None:
                raise failure

    def __enter__(self) -> EmbeddingPipeline[Tag]:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._stop.set()  # after `finish` nothing is left; otherwise nothing more is written
        self._writes.shutdown(wait=True, cancel_futures=True)
        self._model.shutdown(wait=True, cancel_futures=True)


__all__ = ["DEFAULT_BATCH_TEXTS", "MAX_BATCHES_IN_FLIGHT", "EmbeddingPipeline"]
