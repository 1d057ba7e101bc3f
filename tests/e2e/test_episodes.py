"""Observations as retrieval candidates over real gRPC channels: who spoke and when is in the
text of a hit, the episode is embedded in the background (GetEmbeddingBacklog tells when) and then reached
by the vector arm, and the speaker is a node an anchor reaches through the ACTOR facts.

Servers run in-process on 127.0.0.1:0 (tests/e2e/conftest.py) with the real database and embedder.
"""

from __future__ import annotations

import threading
from datetime import UTC
from datetime import datetime
from typing import Any

import grpc
import pytest

from common.kernel.identifiers import fact_id
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import observation_service_pb2
from memory_service_grpc_client.memory.v1 import observation_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2_grpc
from tests.e2e.context_packs import compile_pack
from tests.e2e.query_service_data import observe

pytestmark = pytest.mark.e2e

TURNS = [
    ("Caroline", "2023-05-07T18:02:00Z", "I went to the LGBTQ support group yesterday and it was powerful."),
    ("Melanie", "2023-05-07T18:03:00Z", "That is wonderful! I painted a sunrise over the lake last week."),
    ("Caroline", "2023-05-08T09:15:00Z", "The adoption agency called me back about the counselling course."),
]


def _turn(namespace: str, index: int) -> dict[str, Any]:
    speaker, occurred_at, text = TURNS[index]
    return {
        "namespace": namespace,
        "source": {"system": "chat", "stream": "conv-26", "external_id": f"D1:{index}"},
        "kind": "chat.message",
        "occurred_at": occurred_at,
        "actor": {"type": "person", "id": speaker.lower()},
        "subject": {"type": "conversation", "id": "conv-26"},
        "content": text,
        "provenance": {"uri": f"chat://conv-26/D1:{index}"},
    }


def _wait_for_embeddings(ingest_channel: grpc.Channel, namespace: str) -> None:
    """Polls GetEmbeddingBacklog until the namespace has nothing pending (what a client does)."""
    stub = observation_service_pb2_grpc.ObservationServiceStub(ingest_channel)
    request = observation_service_pb2.GetEmbeddingBacklogRequest(namespace=namespace)
    done = threading.Event()
    while not done.wait(0.2):
        if stub.GetEmbeddingBacklog(request, timeout=30).pending_chunks == 0:
            done.set()


def test_turns_are_found_with_speaker_and_date_then_by_vector_and_through_the_speaker(
    ingest_channel: grpc.Channel, query_channel: grpc.Channel, namespace: str
) -> None:
    results = observe(ingest_channel, [_turn(namespace, index) for index in range(len(TURNS))])
    assert [result.status for result in results] == ["processed"] * 3
    search = retrieval_service_pb2_grpc.RetrievalServiceStub(query_channel)

    def hits(query: str) -> list[Any]:
        return list(
            search.Search(
                retrieval_service_pb2.SearchRequest(namespace=namespace, query=query, top_k=3), timeout=60
            ).hits
        )

    # full text at once: the speaker's name is in the text, and so is the date
    named = [hit for hit in hits("what did caroline say") if hit.node_key != results[1].episode_key]
    assert {hit.node_key for hit in named} == {results[0].episode_key, results[2].episode_key}
    by_key = {hit.node_key: hit for hit in hits("support group")}
    first = by_key[results[0].episode_key]
    assert first.text.split("\n")[0] == "2023-05-07 18:02 · caroline · conversation:conv-26"

    _wait_for_embeddings(ingest_channel, namespace)
    backlog = observation_service_pb2_grpc.ObservationServiceStub(ingest_channel).GetEmbeddingBacklog(
        observation_service_pb2.GetEmbeddingBacklogRequest(namespace=namespace), timeout=30
    )
    assert backlog.pending_chunks == 0 and not backlog.HasField("oldest_pending_written_at")
    # the vector arm sees the episode: its own words are its nearest neighbour in the whole table (a
    # query far from the other turns reaches them only within the index's scan limit of a shared table)
    found = {hit.node_key: hit for hit in hits(TURNS[0][2])}
    assert found[results[0].episode_key].vector_score > 0.5

    # the speaker is a node: ListFacts by the ACTOR relation, and an anchor of CompileContext
    facts = fact_query_service_pb2_grpc.FactQueryServiceStub(query_channel)
    listed = facts.ListFacts(
        fact_query_service_pb2.ListFactsRequest(
            namespace=namespace, subject=results[0].episode_key, predicate="ACTOR"
        ),
        timeout=60,
    ).facts
    at = datetime(2023, 5, 7, 18, 2, tzinfo=UTC)
    assert [(fact.fact_id, fact.object, fact.evidence) for fact in listed] == [
        (
            fact_id(namespace, results[0].episode_key, "ACTOR", "person:caroline", at),
            "person:caroline",
            "asserted",
        )
    ]
    assert list(listed[0].observation_ids) == [results[0].observation_id]
    anchors = ["person:caroline"]
    pack = compile_pack(
        query_channel, namespace, query="adoption", anchors=anchors, token_budget=2000, dropped_limit=20
    )
    # her ACTOR facts are candidates; each repeats a turn the pack holds, so it gives way to that turn
    assert {results[0].episode_key, results[2].episode_key} <= {
        item.provenance.node_key for item in pack.items if item.kind == "chunk"
    }
    anchored = {
        item.provenance.fact_id
        for item in pack.dropped
        if item.kind == "fact" and item.drop_reason.startswith("adds nothing: its episode")
    }
    caroline = {
        fact_id(
            namespace,
            results[index].episode_key,
            "ACTOR",
            "person:caroline",
            datetime.fromisoformat(TURNS[index][1]),
        )
        for index in (0, 2)
    }
    assert caroline <= anchored
