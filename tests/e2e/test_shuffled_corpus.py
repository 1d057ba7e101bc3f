"""Every as-of question answered exactly after loading the debian corpus in shuffled order.

The corpus goes into a namespace of its own (fact ids and `supersedes` recomputed for it with the
formula of docs/explanation/knowledge-model.md), shuffled, so supersessions often arrive before the facts they
close.
"""

from __future__ import annotations

import json
import random
import uuid

import grpc
import pytest
from google.protobuf import timestamp_pb2

from common.kernel.identifiers import fact_id
from common.kernel.identifiers import parse_instant
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import observation_service_pb2
from memory_service_grpc_client.memory.v1 import observation_service_pb2_grpc
from tests.conftest import CORPORA
from tests.e2e.test_database_outage import corpus_in

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]


def test_as_of_answers_after_a_shuffled_load(
    ingest_channel: grpc.Channel, query_channel: grpc.Channel
) -> None:
    namespace = "shuffled-" + uuid.uuid4().hex[:8]
    observations = corpus_in(namespace, 10**6)
    assert len(observations) == 5415
    random.Random(20261129).shuffle(observations)
    ingest = observation_service_pb2_grpc.ObservationServiceStub(ingest_channel)
    for offset in range(0, len(observations), 200):
        results = ingest.RecordObservations(
            observation_service_pb2.RecordObservationsRequest(
                observations=observations[offset : offset + 200]
            ),
            timeout=600,
        ).results
        assert all(r.status == "processed" for r in results), [
            r.error for r in results if r.status != "processed"
        ][:3]

    uploaded_at = {}  # version key -> valid_from of its HAS_VERSION fact
    for line in (CORPORA / "debian-uploads" / "observations.jsonl").read_text("utf-8").splitlines():
        record = json.loads(line)
        for assertion in record["assertions"]:
            fact = assertion.get("fact")
            if fact and fact["predicate"] == "HAS_VERSION":
                uploaded_at[f"{fact['object']['type']}:{fact['object']['id']}"] = fact["valid_from"]

    facts = fact_query_service_pb2_grpc.FactQueryServiceStub(query_channel)
    wrong = []
    questions = [
        json.loads(line)
        for line in (CORPORA / "debian-uploads" / "asof-dev.jsonl").read_text("utf-8").splitlines()
    ]
    for question in questions:
        as_of = timestamp_pb2.Timestamp()
        as_of.FromJsonString(question["as_of"])
        common = {
            "namespace": namespace,
            "subject": question["subject"],
            "predicate": "HAS_VERSION",
            "as_of": as_of,
        }
        current = facts.ListFacts(fact_query_service_pb2.ListFactsRequest(**common), timeout=10).facts
        history = facts.ListFacts(
            fact_query_service_pb2.ListFactsRequest(**common, include_history=True, page_size=1000),
            timeout=10,
        ).facts
        expected_id = fact_id(
            namespace,
            question["subject"],
            "HAS_VERSION",
            question["expected_object"],
            parse_instant(uploaded_at[question["expected_object"]]),
        )
        answer = ([(f.object, f.fact_id) for f in current], len(history))
        if answer != ([(question["expected_object"], expected_id)], question["history_len"]):
            wrong.append((question["subject"], question["as_of"], answer))
    assert wrong == []
