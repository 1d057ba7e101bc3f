"""Search returns no chunk that only the vector ranking found below the relevance floor
(docs/explanation/retrieval.md, "Relevance floor"): real servers, real database, real embedding model.

What a user saw: ``cb search "BILL-42"`` listed every chunk of the namespace, unrelated ones with a
negative similarity included, because the vector ranking always returns its candidates.
"""

from __future__ import annotations

import uuid

import grpc
import pytest

from common.text_models.embeddings.relevance import MIN_RELEVANT_SIMILARITY
from memory_service_grpc_client.memory.v1 import document_service_pb2
from memory_service_grpc_client.memory.v1 import document_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2_grpc

pytestmark = pytest.mark.e2e

NOTES = {
    "doc:postmortem": "Postmortem BILL-42: invoices were sent twice after the payments-api retry storm.\n\n"
    "Action items: idempotency keys on invoice creation.",
    "doc:parking": "Parking: the garage under building B is free for staff.",
    "doc:vpn": "Remote access: install the WireGuard client and import the profile the IT desk sends you.",
    "doc:holidays": "Holiday calendar: the office is closed between Christmas and New Year.",
    "doc:onboarding": "Onboarding checklist: laptop, badge, accounts.",
}


@pytest.fixture(scope="module")
def namespace(ingest_channel: grpc.Channel) -> str:
    name = f"floor-{uuid.uuid4().hex[:10]}"
    documents = document_service_pb2_grpc.DocumentServiceStub(ingest_channel)
    for key, text in NOTES.items():
        documents.Retain(
            document_service_pb2.RetainRequest(namespace=name, natural_key=key, content=text), timeout=120
        )
    return name


def _search(channel: grpc.Channel, namespace: str, query: str) -> list[retrieval_service_pb2.SearchHit]:
    stub = retrieval_service_pb2_grpc.RetrievalServiceStub(channel)
    return list(stub.Search(retrieval_service_pb2.SearchRequest(namespace=namespace, query=query), timeout=60).hits)


def test_an_identifier_returns_the_chunk_naming_it_and_nothing_unrelated(
    query_channel: grpc.Channel, namespace: str
) -> None:
    hits = _search(query_channel, namespace, "BILL-42")
    assert [hit.node_key for hit in hits] == ["doc:postmortem"]
    assert hits[0].trigram_score > 0 or hits[0].text_score > 0  # a lexical hit stays


def test_an_identifier_no_chunk_names_returns_nothing(query_channel: grpc.Channel, namespace: str) -> None:
    assert _search(query_channel, namespace, "INC-7781") == []


def test_a_related_chunk_found_by_meaning_alone_is_still_returned(
    query_channel: grpc.Channel, namespace: str
) -> None:
    hits = _search(query_channel, namespace, "when is the company shut for the winter break")
    assert hits and hits[0].node_key == "doc:holidays"
    assert hits[0].text_score == 0 and hits[0].vector_score >= MIN_RELEVANT_SIMILARITY  # vector only
    assert all(hit.vector_score >= MIN_RELEVANT_SIMILARITY or hit.text_score or hit.trigram_score for hit in hits)
