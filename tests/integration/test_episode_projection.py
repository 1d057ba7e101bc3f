"""Episodes as retrieval candidates on the real database and model: the header line of the
episode text, the embedding backlog and the background embedder, the ACTOR and SUBJECT facts with their
scopes, personal data, redaction and purge.

Every test works in a namespace of its own, and its embedder only embeds that namespace's backlog. The
tests of the backlog itself run in a database of their own (`fresh_database`), where no ingest service of
another test embeds behind their back.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC
from datetime import datetime
from typing import Any
from typing import cast

import numpy as np
import pytest
from prometheus_client import REGISTRY

from common.domain.episode_header import episode_header
from common.kernel.config import Settings
from common.kernel.identifiers import fact_id
from common.storage.chunks.store import embedding_input
from common.storage.database import Database
from common.storage.schema import migrations
from common.text_models.embeddings.provider import EmbeddingProvider
from ingest_service.embedding.episodes import EpisodeEmbedder
from ingest_service.observations.recorder import ObservationRecorder
from ingest_service.observations.removal import ObservationRemover
from tests.conftest import fresh_database
from tests.database_rows import fetch_rows

pytestmark = pytest.mark.integration

AT = "2023-05-08T13:56:10Z"


def turn(namespace: str, index: int, speaker: str = "Caroline", **extra: Any) -> dict[str, Any]:
    return {
        "namespace": namespace,
        "source": {"system": "chat", "stream": "conv-1", "external_id": f"turn-{index}"},
        "kind": "chat.message",
        "occurred_at": AT,
        "actor": {"type": "person", "id": speaker},
        "subject": {"type": "conversation", "id": "conv-1"},
        "content": f"turn {index}: I went to the support group yesterday",
        "provenance": {"uri": f"chat://conv-1/{index}"},
        **extra,
    }


def chunk_rows(database: Database, namespace: str) -> list[tuple[str, str, bool, Any, dict[str, Any]]]:
    """(node_key, text, embedding_pending, embedding, meta) of the namespace's episode chunks."""
    with database.connection() as conn:
        return conn.execute(
            "SELECT node_key, text, embedding_pending, embedding, meta FROM chunks"
            " WHERE namespace = %s AND node_type = 'episode' ORDER BY node_key, chunk_order",
            (namespace,),
        ).fetchall()


def facts_of(database: Database, namespace: str) -> dict[str, tuple[str, str, bool, list[str], list[str]]]:
    """fact_id -> (predicate, object, evidence_lost, observation_ids, scopes) of the namespace's facts."""
    columns = "fact_id, predicate, object_key, evidence_lost, observation_ids, scopes, evidence"
    rows = fetch_rows(database, f"SELECT {columns} FROM facts WHERE namespace = %s", namespace)
    for row in rows:
        assert row[6] == "asserted"
    return {row[0]: (row[1], row[2], row[3], list(row[4]), list(row[5])) for row in rows}


def registry(database: Database, namespace: str) -> dict[str, tuple[bool, list[str]]]:
    """natural_key -> (placeholder, scopes) of the namespace's graph_nodes rows."""
    with database.connection() as conn:
        rows = conn.execute(
            "SELECT natural_key, placeholder, scopes FROM graph_nodes WHERE namespace = %s", (namespace,)
        ).fetchall()
    return {row[0]: (row[1], list(row[2])) for row in rows}


@pytest.fixture(scope="module")
def recorder(database: Database, provider: EmbeddingProvider) -> ObservationRecorder:
    return ObservationRecorder(database, encoder=provider)


@pytest.fixture(scope="module")
def own_database(settings: Settings) -> Iterator[Database]:
    """A database of its own for the backlog tests (dropped at the end)."""
    with fresh_database(settings) as fresh:
        database = Database(fresh, prepare=migrations.apply)
        migrations.apply(database)
        yield database
        database.close()


@pytest.fixture(scope="module")
def own_recorder(own_database: Database, provider: EmbeddingProvider) -> ObservationRecorder:
    return ObservationRecorder(own_database, encoder=provider)


def test_episode_text_carries_date_actor_and_subject_and_waits_for_its_embedding(
    own_database: Database, own_recorder: ObservationRecorder, provider: EmbeddingProvider, namespace: str
) -> None:
    results = own_recorder.record_batch([turn(namespace, 1), turn(namespace, 2, speaker="Melanie")])
    assert [result.status for result in results] == ["processed", "processed"]
    rows = chunk_rows(own_database, namespace)
    assert sorted(row[1].split("\n")[0] for row in rows) == [
        "2023-05-08 13:56 · Caroline · conversation:conv-1",
        "2023-05-08 13:56 · Melanie · conversation:conv-1",
    ]
    assert all(row[1].split("\n")[1].startswith("turn ") for row in rows)
    assert all(row[2] and row[3] is None for row in rows)  # written with the embedding pending
    embedder = EpisodeEmbedder(own_database, provider, batch_size=1, namespace=namespace)
    assert embedder.backlog(namespace).pending == 2
    assert embedder.backlog(namespace).oldest_written_at is not None
    # Queue depth and lag on the metrics endpoint: the gauges of this embedder's backlog.
    assert REGISTRY.get_sample_value("memory_embedding_backlog_chunks") == 2
    assert (REGISTRY.get_sample_value("memory_embedding_backlog_lag_seconds") or 0) > 0

    assert embedder.drain() == 2  # one chunk per round
    rows = chunk_rows(own_database, namespace)
    assert all(not row[2] and row[3] is not None for row in rows)
    expected = provider.encode_passages(
        [embedding_input("chat.message conversation:conv-1", "chat.message", rows[0][1])]
    )
    assert float(np.dot(np.asarray(rows[0][3], dtype=np.float32), expected[0])) > 0.999
    assert embedder.backlog(namespace).pending == 0
    assert embedder.backlog(namespace).oldest_written_at is None
    assert REGISTRY.get_sample_value("memory_embedding_backlog_lag_seconds") == 0
    assert embedder.drain() == 0  # nothing twice


class FailingEncoder:
    """An encoder that fails like a model crashing mid-round."""

    def encode_passages(self, texts: list[str]) -> np.ndarray:
        raise RuntimeError("model crashed")


def test_a_round_that_fails_loses_nothing(
    own_database: Database, own_recorder: ObservationRecorder, provider: EmbeddingProvider, namespace: str
) -> None:
    own_recorder.record_batch([turn(namespace, index) for index in range(3)])
    with pytest.raises(RuntimeError):
        EpisodeEmbedder(own_database, FailingEncoder(), namespace=namespace).embed_once()
    assert [row[2] for row in chunk_rows(own_database, namespace)] == [True, True, True]
    assert EpisodeEmbedder(own_database, provider, namespace=namespace).drain() == 3
    assert [row[2] for row in chunk_rows(own_database, namespace)] == [False, False, False]


def test_concurrent_embedders_share_the_backlog(
    own_database: Database, own_recorder: ObservationRecorder, provider: EmbeddingProvider, namespace: str
) -> None:
    own_recorder.record_batch([turn(namespace, index) for index in range(12)])
    embedders = [EpisodeEmbedder(own_database, provider, batch_size=2, namespace=namespace) for _ in range(3)]
    filled = [0, 0, 0]

    def run(position: int) -> None:
        filled[position] = embedders[position].drain()

    threads = [threading.Thread(target=run, args=(position,)) for position in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(filled) == 12
    assert all(not row[2] and row[3] is not None for row in chunk_rows(own_database, namespace))


def test_the_background_thread_fills_the_backlog_when_woken(
    own_database: Database, provider: EmbeddingProvider, namespace: str
) -> None:
    embedder = EpisodeEmbedder(own_database, provider, idle_seconds=3600, namespace=namespace)
    woken = ObservationRecorder(own_database, encoder=provider, on_pending_embeddings=embedder.wake)
    embedder.start()
    try:
        woken.record_batch([turn(namespace, 1)])
        done = threading.Event()
        while not done.wait(0.2):  # a wait, not a timed assertion: the thread sleeps an hour unless woken
            if embedder.backlog(namespace).pending == 0:
                done.set()
    finally:
        embedder.stop()
    assert all(row[3] is not None for row in chunk_rows(own_database, namespace))


def test_inline_mode_embeds_in_the_write(
    settings: Settings, provider: EmbeddingProvider, namespace: str
) -> None:
    inline = Database(settings.model_copy(update={"episode_embedding": "inline"}), prepare=migrations.apply)
    try:
        ObservationRecorder(inline, encoder=provider).record_batch(
            [turn(namespace, 1), turn(namespace, 2, content="")]
        )
        rows = chunk_rows(inline, namespace)
    finally:
        inline.close()
    assert len(rows) == 1  # the turn without content (nor data) has no episode text
    assert not rows[0][2] and rows[0][3] is not None


def test_participants_become_nodes_linked_by_actor_and_subject_facts_with_the_scopes(
    database: Database, recorder: ObservationRecorder, namespace: str
) -> None:
    [hidden] = recorder.record_batch([turn(namespace, 1, scopes=["workspace:w1"])])
    at = datetime(2023, 5, 8, 13, 56, 10, tzinfo=UTC)
    actor = fact_id(namespace, hidden.episode_key, "ACTOR", "person:Caroline", at)
    subject = fact_id(namespace, hidden.episode_key, "SUBJECT", "conversation:conv-1", at)
    facts = facts_of(database, namespace)
    assert facts == {
        actor: ("ACTOR", "person:Caroline", False, [hidden.observation_id], ["workspace:w1"]),
        subject: ("SUBJECT", "conversation:conv-1", False, [hidden.observation_id], ["workspace:w1"]),
    }
    nodes = registry(database, namespace)
    assert nodes["person:Caroline"] == (True, ["workspace:w1"])  # a placeholder as hidden as the turn
    assert nodes["conversation:conv-1"] == (True, ["workspace:w1"])
    # a public turn of the same speaker makes her node public; the hidden turn's facts stay hidden
    [public] = recorder.record_batch([turn(namespace, 2)])
    assert registry(database, namespace)["person:Caroline"] == (True, [])
    assert facts_of(database, namespace)[actor][4] == ["workspace:w1"]
    assert len(facts_of(database, namespace)) == 4
    # the same turn again is a duplicate and writes no fact
    recorder.record_batch([turn(namespace, 2)])
    assert len(facts_of(database, namespace)) == 4
    assert public.created


def test_a_participant_key_holding_personal_data_gets_no_node(
    settings: Settings, provider: EmbeddingProvider, namespace: str
) -> None:
    protected = Database(settings.model_copy(update={"pii_protection": True}), prepare=migrations.apply)
    try:
        [result] = ObservationRecorder(protected, encoder=provider).record_batch(
            [turn(namespace, 1, speaker="caroline@example.org")]
        )
        facts = facts_of(protected, namespace)
        nodes = registry(protected, namespace)
        [row] = chunk_rows(protected, namespace)
    finally:
        protected.close()
    assert [predicate for predicate, *_ in facts.values()] == ["SUBJECT"]
    assert "person:caroline@example.org" not in nodes
    assert result.status == "processed"
    assert row[4]["pii"] is True and "email" in row[4]["pii_categories"]


def test_redaction_keeps_the_participant_facts_and_purge_deletes_them_with_the_episode(
    database: Database, recorder: ObservationRecorder, namespace: str
) -> None:
    [first, second] = recorder.record_batch([turn(namespace, 1), turn(namespace, 2)])
    remover = ObservationRemover(database)
    redacted = remover.redact(namespace, first.observation_id, "asked to forget")
    assert (redacted.facts_affected, redacted.facts_evidence_lost) == (0, 0)
    facts = facts_of(database, namespace)
    assert len(facts) == 4 and not any(lost for _, _, lost, _, _ in facts.values())
    assert [row[0] for row in chunk_rows(database, namespace)] == [second.episode_key]

    purged = remover.purge(namespace, first.observation_id, "wrong tenant")
    assert purged.nodes_deleted == [first.episode_key]
    assert (purged.facts_affected, purged.facts_evidence_lost) == (0, 0)
    remaining = facts_of(database, namespace)
    assert len(remaining) == 2
    assert all(ids == [second.observation_id] for _, _, _, ids, _ in remaining.values())
    nodes = registry(database, namespace)
    assert first.episode_key not in nodes and "person:Caroline" in nodes


def test_episode_header_leaves_out_missing_parts() -> None:
    at = datetime(2023, 5, 8, 13, 56, 10, tzinfo=UTC)
    assert episode_header(at, None, None) == "2023-05-08 13:56"
    assert episode_header(at, {"type": "person", "id": "Caroline"}, None) == "2023-05-08 13:56 · Caroline"


@pytest.mark.parametrize(
    "content",
    [
        "a short turn",
        "  * debian/rules: adapted\n  * debian/control: policy 3.0.1",
        "# Title\n\nbody text",
        "Title\n=====\n\nbody",
        "line\n---\nmore",
        "word " * 400,
    ],
)
def test_short_bodies_skip_the_markdown_cut_with_the_same_pieces(content: str) -> None:
    from ingest_service.documents.chunking import bounded_chunks
    from ingest_service.documents.chunking import chunk_markdown
    from ingest_service.observations.episode_text import episode_body
    from ingest_service.observations.episode_text import episode_pieces

    at = datetime(2023, 5, 8, 13, 56, 10, tzinfo=UTC)
    body = episode_body(content, {"version": "1.0"})
    cut = bounded_chunks(
        [(chunk.heading or "k", chunk.text) for chunk in chunk_markdown(body, 1500)], 3000
    ) or [("k", body)]
    pieces = episode_pieces(
        kind="k",
        occurred_at=at,
        actor=None,
        subject=None,
        content=content,
        data={"version": "1.0"},
        limit=1500,
    )
    assert pieces == [(heading, f"2023-05-08 13:56\n{text}") for heading, text in cut]


def test_a_key_asserted_twice_in_one_batch_ends_as_its_newest_assertion(
    database: Database, recorder: ObservationRecorder, settings: Settings
) -> None:
    from common.storage.graph.store import GraphStore

    def upload(namespace: str, index: int, occurred_at: str, urgency: str) -> dict[str, Any]:
        return {
            **turn(namespace, index),
            "occurred_at": occurred_at,
            "assertions": [
                {"entity": {"key": {"type": "package", "id": "time"}, "attributes": {"urgency": urgency}}}
            ],
        }

    older, newer = ("2023-01-01T00:00:00Z", "low"), ("2023-02-01T00:00:00Z", "high")
    graph = GraphStore(database)
    for order in ((older, newer), (newer, older)):
        namespace = f"test-twice-{uuid.uuid4().hex[:10]}"
        results = recorder.record_batch([upload(namespace, i, *pair) for i, pair in enumerate(order)])
        assert [result.entities_upserted for result in results] == [1, 1]
        with database.connection() as conn:
            node = graph.get_node(conn, namespace, "package:time")
        assert node is not None and node["props"]["attributes"] == {"urgency": "high"}, order


def test_an_id_sent_twice_in_a_batch_is_stored_as_its_first_item(
    database: Database, recorder: ObservationRecorder, namespace: str
) -> None:
    # The episode chunks are cut before the write lane; they must be those of the item that is written.
    first = turn(namespace, 1)
    second = {**turn(namespace, 1), "content": "another text under the same observation id"}
    recorder.record_batch([first, second])
    rows = chunk_rows(database, namespace)
    assert len(rows) == 1
    assert "turn 1: I went to the support group yesterday" in rows[0][1]
    assert "another text" not in rows[0][1]


def test_the_background_threads_take_rounds_side_by_side_without_embedding_a_chunk_twice(
    own_database: Database, own_recorder: ObservationRecorder, provider: EmbeddingProvider, namespace: str
) -> None:
    """`workers` threads drain one backlog (of a database only they embed in): the rounds fill every
    chunk once, and more than one thread took a round."""
    own_recorder.record_batch([turn(namespace, index) for index in range(24)])
    embedder = EpisodeEmbedder(own_database, provider, batch_size=2, namespace=namespace, workers=3)
    filled_by_thread: dict[str, int] = {}
    embed_once = embedder.embed_once

    def counted_round() -> int:
        filled = embed_once()
        name = threading.current_thread().name
        filled_by_thread[name] = filled_by_thread.get(name, 0) + filled
        return filled

    embedder.embed_once = counted_round  # type: ignore[method-assign]
    embedder.start()
    try:
        for _ in range(600):  # a bounded wait (0.2 s steps), not a timed assertion: a stall fails below
            if embedder.backlog(namespace).pending == 0:
                break
            time.sleep(0.2)
    finally:
        embedder.stop()
    assert sum(filled_by_thread.values()) == 24
    assert len([name for name, filled in filled_by_thread.items() if filled]) > 1
    assert all(not row[2] and row[3] is not None for row in chunk_rows(own_database, namespace))


def test_an_embedder_needs_a_worker() -> None:
    with pytest.raises(ValueError, match="workers"):
        EpisodeEmbedder(cast(Database, None), cast(EmbeddingProvider, None), workers=0)


def test_rounds_run_side_by_side_only_once_writes_stopped_for_a_deferral(
    own_database: Database, provider: EmbeddingProvider
) -> None:
    """While writes are in flight the threads take one round at a time, at most one per deferral, as one
    thread would; side by side only once no write was in flight for a deferral."""
    clock = {"writing": True}
    embedder = EpisodeEmbedder(
        own_database, provider, workers=2, busy=lambda: clock["writing"], max_deferral_seconds=3600
    )
    embedder._last_round -= 7200  # the last round was long ago: the next may start
    assert embedder._may_start_round()  # one thread's round
    assert not embedder._may_start_round()  # not beside it while writes are in flight
    embedder._round_ended()
    assert not embedder._may_start_round()  # nor after it: a round started less than a deferral ago
    clock["writing"] = False
    assert embedder._may_start_round()  # no write in flight now: the next round starts at once
    assert not embedder._may_start_round()  # but not beside it: writes were seen a moment ago
    embedder._last_busy -= 7200  # no write for longer than a deferral
    assert embedder._may_start_round()  # side by side
