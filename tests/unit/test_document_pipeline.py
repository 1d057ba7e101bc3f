"""`EmbeddingPipeline` (ingest_service.documents.pipeline): documents embedded in batches across
documents on one thread, written in order on another, the model's next batch overlapping the writes of
the one before; failures stop the writes and reach the caller."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any
from typing import cast

import numpy as np
import pytest

from ingest_service.documents.model import PreparedDocument
from ingest_service.documents.pipeline import MAX_BATCHES_IN_FLIGHT
from ingest_service.documents.pipeline import EmbeddingPipeline
from ingest_service.documents.writer import DocumentWriter

WAIT = 30.0  # seconds: a bound on waits for the other thread, so that a broken pipeline fails, not hangs


class RecordingWriter:
    """The `DocumentWriter.embed` step of a writer: fills each document's vectors (one per input) and
    records the documents of every call; ``before_embed`` runs first in each call."""

    def __init__(self, before_embed: Callable[[int], None] = lambda call: None) -> None:
        self.calls: list[list[str]] = []
        self.before_embed = before_embed

    def embed(self, documents: list[PreparedDocument]) -> int:
        self.before_embed(len(self.calls))
        self.calls.append([document.node for document in documents])  # type: ignore[misc]
        for document in documents:
            document.vectors = [np.zeros(2, dtype=np.float32) for _ in document.inputs]
        return sum(len(document.missing) for document in documents)


def document(name: str, texts: int) -> PreparedDocument:
    """A prepared document named ``name`` (held in ``node``) with ``texts`` inputs to embed."""
    inputs = [f"{name} text {number}" for number in range(texts)]
    return PreparedDocument(
        node=cast(Any, name),
        chunks=[],
        links=[],
        delete_beyond=True,
        kinds=cast(Any, None),
        access=cast(Any, None),
        inputs=inputs,
        missing=inputs,
        stored={},
    )


def pipeline(
    writer: RecordingWriter, write: Callable[[str, PreparedDocument], None], batch_texts: int
) -> EmbeddingPipeline[str]:
    return EmbeddingPipeline(cast(DocumentWriter, writer), write, batch_texts=batch_texts)


def test_documents_are_embedded_in_batches_across_documents_and_written_in_order() -> None:
    writer = RecordingWriter()
    written: list[str] = []

    def write(tag: str, prepared: PreparedDocument) -> None:
        assert prepared.vectors is not None and len(prepared.vectors) == len(prepared.inputs)
        written.append(tag)

    with pipeline(writer, write, batch_texts=4) as documents:
        for number in range(5):
            documents.add(f"d{number}", document(f"d{number}", 2))
        documents.add("empty", document("empty", 0))  # nothing to embed: rides with the next batch
        documents.ship()
        documents.ship()  # nothing collected: no model call
        documents.finish()
    assert writer.calls == [["d0", "d1"], ["d2", "d3"], ["d4", "empty"]]
    assert written == ["d0", "d1", "d2", "d3", "d4", "empty"]


def test_the_model_embeds_the_next_batch_while_the_batch_before_is_written() -> None:
    second_batch_embedding = threading.Event()
    writer = RecordingWriter(before_embed=lambda call: second_batch_embedding.set() if call == 1 else None)
    overlapped: list[bool] = []

    def write(tag: str, prepared: PreparedDocument) -> None:
        if tag == "first":  # a serial pipeline would never start the second batch while this waits
            overlapped.append(second_batch_embedding.wait(WAIT))

    with pipeline(writer, write, batch_texts=1) as documents:
        documents.add("first", document("first", 1))
        documents.add("second", document("second", 1))
        documents.finish()
    assert overlapped == [True]


def test_a_failed_write_stops_the_later_writes_and_reaches_the_caller() -> None:
    writer = RecordingWriter()
    written: list[str] = []

    def write(tag: str, prepared: PreparedDocument) -> None:
        if tag == "d1":
            raise RuntimeError("the database went away")
        written.append(tag)

    with pytest.raises(RuntimeError, match="went away"), pipeline(writer, write, batch_texts=2) as documents:
        for number in range(6):
            documents.add(f"d{number}", document(f"d{number}", 1))
        documents.finish()
    assert written == ["d0"]


def test_a_failed_model_call_writes_nothing_of_its_batch() -> None:
    def fail(call: int) -> None:
        if call == 1:
            raise MemoryError("the model failed")

    writer = RecordingWriter(before_embed=fail)
    written: list[str] = []
    with pytest.raises(MemoryError), pipeline(writer, lambda tag, _: written.append(tag), 2) as documents:
        for number in range(6):
            documents.add(f"d{number}", document(f"d{number}", 1))
        documents.finish()
    assert written == ["d0", "d1"]


def test_leaving_without_finish_writes_nothing_more_after_the_document_in_hand() -> None:
    writing = threading.Event()
    release = threading.Event()
    written: list[str] = []

    def write(tag: str, prepared: PreparedDocument) -> None:
        writing.set()
        assert release.wait(WAIT)
        written.append(tag)

    with pytest.raises(RuntimeError, match="cancelled"), pipeline(RecordingWriter(), write, 10) as documents:
        documents.add("d0", document("d0", 1))
        documents.add("d1", document("d1", 1))
        documents.ship()
        assert writing.wait(WAIT)
        threading.Timer(0.05, release.set).start()
        raise RuntimeError("cancelled")  # the caller breaks off (a stream cancelled) while d0 is written
    assert written == ["d0"]


def test_a_caller_faster_than_the_writes_waits_once_the_batches_in_flight_are_full() -> None:
    release = threading.Event()
    shipped: list[int] = []

    def write(tag: str, prepared: PreparedDocument) -> None:
        assert release.wait(WAIT)

    def caller() -> None:
        with pipeline(RecordingWriter(), write, 1) as documents:
            for number in range(MAX_BATCHES_IN_FLIGHT + 2):
                documents.add(f"d{number}", document(f"d{number}", 1))
                shipped.append(number)
            documents.finish()

    thread = threading.Thread(target=caller)
    thread.start()
    thread.join(0.5)  # not a timing assertion: the caller must still be held back after any wait
    assert shipped == list(range(MAX_BATCHES_IN_FLIGHT))
    release.set()
    thread.join(WAIT)
    assert not thread.is_alive()
    assert shipped == list(range(MAX_BATCHES_IN_FLIGHT + 2))


def test_batch_texts_must_be_positive() -> None:
    with pytest.raises(ValueError, match="batch_texts"):
        pipeline(RecordingWriter(), lambda tag, _: None, 0)
