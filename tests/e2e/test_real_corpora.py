"""The whole debian upload stream and the whole docs vault, loaded through the gRPC API.

Checks, over real servers, the real database and the real embedder:
- every as-of question of asof-dev.jsonl is answered exactly by ListFacts (object, fact_id, history_len);
- every `supersedes` id of the corpus is the fact_id the service computed for the previous upload;
- re-sending the whole observation file creates nothing and changes no fact;
- GetSource returns every retained document byte for byte;
- Search finds a document from a distinctive sentence of it (hit@5 >= 0.95 over 200 sampled documents),
  and an exact Debian version string through trigram matching.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from google.protobuf import timestamp_pb2

from memory_service_grpc_client.memory.v1 import document_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import knowledge_pb2
from memory_service_grpc_client.memory.v1 import observation_service_pb2
from memory_service_grpc_client.memory.v1 import observation_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import source_service_pb2
from memory_service_grpc_client.memory.v1 import source_service_pb2_grpc
from memory_service_tools.markdown_vault import find_documents
from memory_service_tools.markdown_vault import read_document
from tests.conftest import CORPORA
from tests.document_corpus import first_distinctive_sentences
from tests.e2e.fact_pages import every_fact

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(3600)]  # loads both corpora through gRPC

UPLOADS = CORPORA / "debian-uploads"
VAULT = CORPORA / "docs-vault"
VAULT_NAMESPACE = "docs-vault"


def _observations() -> list[knowledge_pb2.Observation]:
    return [
        json_format.Parse(line, knowledge_pb2.Observation())
        for line in (UPLOADS / "observations.jsonl").read_text("utf-8").splitlines()
    ]


def _record_all(channel: grpc.Channel, observations: list[knowledge_pb2.Observation]) -> list[Any]:
    stub = observation_service_pb2_grpc.ObservationServiceStub(channel)
    results = []
    for start in range(0, len(observations), 200):
        batch = observations[start : start + 200]
        response = stub.RecordObservations(
            observation_service_pb2.RecordObservationsRequest(observations=batch), timeout=300
        )
        results.extend(response.results)
    return results


def _fact_state(channel: grpc.Channel) -> list[tuple[Any, ...]]:
    state: list[tuple[Any, ...]] = []
    for predicate in ("HAS_VERSION", "UPLOADED_BY"):
        state.extend(
            (
                f.fact_id,
                f.valid_from.ToJsonString(),
                f.valid_to.ToJsonString() if f.HasField("valid_to") else "",
                tuple(f.observation_ids),
                f.superseded_by,
                f.confidence,
            )
            for f in every_fact(channel, "debian", predicate)
        )
    return sorted(state)


@pytest.fixture(scope="module")
def debian_loaded(ingest_channel: grpc.Channel) -> list[Any]:
    results = _record_all(ingest_channel, _observations())
    assert all(r.status in ("processed",) for r in results), [
        r.error for r in results if r.status != "processed"
    ][:5]
    return results


def _vault_files() -> list[Path]:
    return find_documents(VAULT)


@pytest.fixture(scope="module")
def vault_loaded(ingest_channel: grpc.Channel) -> dict[str, Path]:
    stub = document_service_pb2_grpc.DocumentServiceStub(ingest_channel)
    keys: dict[str, Path] = {}
    for path in _vault_files():
        request = read_document(path, VAULT, namespace=VAULT_NAMESPACE)
        response = stub.Retain(request, timeout=300)
        assert response.chunk_count >= 1
        keys[request.natural_key] = path
    assert len(keys) == 398
    return keys


def as_of_mismatches(query_channel: grpc.Channel) -> list[tuple[Any, ...]]:
    """The questions of asof-dev.jsonl (all 180) that ListFacts does not answer exactly (object,
    fact_id, history length), with the answer given; empty when every answer is exact."""
    stub = fact_query_service_pb2_grpc.FactQueryServiceStub(query_channel)
    questions = [json.loads(line) for line in (UPLOADS / "asof-dev.jsonl").read_text("utf-8").splitlines()]
    assert len(questions) == 180
    wrong = []
    for question in questions:
        as_of = timestamp_pb2.Timestamp()
        as_of.FromJsonString(question["as_of"])
        current = stub.ListFacts(
            fact_query_service_pb2.ListFactsRequest(
                namespace=question["namespace"],
                subject=question["subject"],
                predicate=question["predicate"],
                as_of=as_of,
            ),
            timeout=10,
        ).facts
        history = stub.ListFacts(
            fact_query_service_pb2.ListFactsRequest(
                namespace=question["namespace"],
                subject=question["subject"],
                predicate=question["predicate"],
                as_of=as_of,
                include_history=True,
                page_size=1000,
            ),
            timeout=10,
        ).facts
        answer = (
            [(f.object, f.fact_id) for f in current],
            len(history),
        )
        expected = ([(question["expected_object"], question["expected_fact_id"])], question["history_len"])
        if answer != expected:
            wrong.append((question, answer))
    return wrong


def test_every_as_of_question_is_answered_exactly(
    debian_loaded: list[Any], query_channel: grpc.Channel
) -> None:
    assert as_of_mismatches(query_channel) == []


def test_corpus_supersedes_ids_are_the_service_fact_ids(
    debian_loaded: list[Any], query_channel: grpc.Channel
) -> None:
    expected_links = 0
    for observation in _observations():
        for assertion in observation.assertions:
            if assertion.WhichOneof("assertion") == "fact" and assertion.fact.supersedes:
                expected_links += 1
    facts = every_fact(query_channel, "debian", "HAS_VERSION")
    ids = {f.fact_id for f in facts}
    linked = [f for f in facts if f.supersedes]
    assert len(facts) == 5415  # one HAS_VERSION fact per upload
    assert len(linked) == expected_links == 5053
    assert all(f.supersedes in ids for f in linked)
    by_id = {f.fact_id: f for f in facts}
    assert all(by_id[f.supersedes].superseded_by == f.fact_id for f in linked)
    assert all(by_id[f.supersedes].valid_to == f.valid_from for f in linked)


def test_resending_the_whole_file_creates_nothing(
    debian_loaded: list[Any], ingest_channel: grpc.Channel, query_channel: grpc.Channel
) -> None:
    before = _fact_state(query_channel)
    again = _record_all(ingest_channel, _observations())
    assert [r.created for r in again] == [False] * 5415
    assert [r.observation_id for r in again] == [r.observation_id for r in debian_loaded]
    assert _fact_state(query_channel) == before


def test_get_source_returns_every_document_byte_for_byte(
    vault_loaded: dict[str, Path], query_channel: grpc.Channel
) -> None:
    stub = source_service_pb2_grpc.SourceServiceStub(query_channel)
    mismatched = []
    for key, path in vault_loaded.items():
        source = stub.GetSource(
            source_service_pb2.GetSourceRequest(namespace=VAULT_NAMESPACE, natural_key=key), timeout=30
        ).source
        if source.content.encode("utf-8") != path.read_bytes() or source.content_source != "original":
            mismatched.append(key)
    assert mismatched == []


def _distinctive_sentences(keys: dict[str, Path], sample: int) -> list[tuple[str, str]]:
    """(natural_key, sentence) for `sample` documents: a sentence found in no other document."""
    texts = {key: path.read_text("utf-8") for key, path in keys.items()}
    rng = random.Random(20261129)
    return first_distinctive_sentences(texts, rng.sample(sorted(texts), len(texts)), rng, sample)


def test_search_finds_a_document_from_a_distinctive_sentence(
    vault_loaded: dict[str, Path], query_channel: grpc.Channel
) -> None:
    stub = retrieval_service_pb2_grpc.RetrievalServiceStub(query_channel)
    probes = _distinctive_sentences(vault_loaded, 200)
    assert len(probes) == 200
    hits = 0
    for key, sentence in probes:
        response = stub.Search(
            retrieval_service_pb2.SearchRequest(namespace=VAULT_NAMESPACE, query=sentence, top_k=5),
            timeout=30,
        )
        hits += key in [hit.node_key for hit in response.hits]
        for hit in response.hits:
            assert hit.provenance.node_key == hit.node_key
    assert hits / len(probes) >= 0.95, f"hit@5 = {hits / len(probes):.3f}"


def test_search_finds_an_exact_debian_version_string(
    debian_loaded: list[Any], query_channel: grpc.Channel
) -> None:
    stub = retrieval_service_pb2_grpc.RetrievalServiceStub(query_channel)
    response = stub.Search(
        retrieval_service_pb2.SearchRequest(namespace="debian", query="2.36-9+deb12u4", top_k=5), timeout=30
    )
    assert response.hits, "no hit for an exact version string"
    top = response.hits[0]
    assert "2.36-9+deb12u4" in top.text
    assert top.trigram_score > 0
