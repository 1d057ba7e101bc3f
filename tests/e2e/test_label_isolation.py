"""The types and predicates of one namespace can never break another's writes.

All namespaces share one AGE graph and every type and predicate becomes a label. Over real gRPC, on a
fresh database (`fresh_settings`): an attacker namespace first writes, through observations (entity
types, placeholder types, predicates) and Retain (document types), every label name the project uses
itself, AGE's own label names, every predicate and type of the debian corpus in the other role, names
of 64+ characters and names that sanitise alike. Each must be stored or refused with a field violation,
never INTERNAL. Then the whole debian corpus loads into its own namespace with 0 failures and exactly
the facts the corpus implies (fact ids, subjects, objects, validity, as-of answers).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import grpc
import pytest
from google.protobuf import json_format

from common.kernel.config import Settings
from common.kernel.identifiers import entity_key
from common.kernel.identifiers import fact_id
from common.kernel.identifiers import parse_instant
from ingest_service.main import create_ingest_host
from memory_service_grpc_client import wait_for_serving
from memory_service_grpc_client.memory.v1 import document_service_pb2
from memory_service_grpc_client.memory.v1 import document_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import knowledge_pb2
from memory_service_grpc_client.memory.v1 import observation_service_pb2
from memory_service_grpc_client.memory.v1 import observation_service_pb2_grpc
from query_service.main import create_query_host
from tests.conftest import fresh_database
from tests.e2e.fact_pages import every_fact
from tests.e2e.test_real_corpora import UPLOADS
from tests.e2e.test_real_corpora import _observations
from tests.e2e.test_real_corpora import _record_all
from tests.e2e.test_real_corpora import as_of_mismatches

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]  # loads the debian corpus through gRPC

PROJECT_NAMES = [
    "episode",
    "entity",
    "document",
    "text",
    "MENTIONS",
    "LINKS_TO",
    "IN_TRACE",
    "audit_event",
    "pc_trace",
    "_ag_label_vertex",
    "_ag_label_edge",
    # the labels of the new mapping themselves, as names
    "n_package",
    "p_HAS_VERSION",
    "i_LINKS_TO",
    "i_IN_TRACE",
]
REFUSED_TYPES = {"audit_event", "pc_trace"}  # reserved for the audit trail (field violation)
REFUSED_PREDICATES = {"IN_TRACE"}


def _corpus_names() -> tuple[set[str], set[str]]:
    """(predicates, node types) of the debian corpus."""
    predicates: set[str] = set()
    types: set[str] = set()
    for line in (UPLOADS / "observations.jsonl").read_text("utf-8").splitlines():
        item = json.loads(line)
        types.update(item[role]["type"] for role in ("subject", "actor") if item.get(role))
        for assertion in item["assertions"]:
            if "fact" in assertion:
                predicates.add(assertion["fact"]["predicate"])
            if "entity" in assertion:
                types.add(assertion["entity"]["key"]["type"])
    return predicates, types


CORPUS_PREDICATES, CORPUS_TYPES = _corpus_names()
LONG_NAMES = ["T" * 64, "T" * 63 + "U", "P" * 128, "P" * 127 + "Q", "x" * 47, "x" * 46]
ALIKE_NAMES = ["a-b", "a.b", "a_b", "HAS-VERSION", "HAS.VERSION", "package.x", "package-x"]
NAMES = sorted({*PROJECT_NAMES, *CORPUS_PREDICATES, *CORPUS_TYPES, *LONG_NAMES, *ALIKE_NAMES})


@pytest.fixture(scope="module")
def module_fresh_settings(settings: Settings) -> Iterator[Settings]:
    """One fresh database for the module (`tests.conftest.fresh_database`)."""
    with fresh_database(settings) as fresh:
        yield fresh


@pytest.fixture(scope="module")
def channels(module_fresh_settings: Settings) -> Iterator[tuple[grpc.Channel, grpc.Channel]]:
    """(ingest, query) channels to both services on the fresh database."""
    ingest = create_ingest_host(module_fresh_settings, address="127.0.0.1:0", metrics_port=0)
    query = create_query_host(module_fresh_settings, address="127.0.0.1:0", metrics_port=0)
    ingest.start()
    query.start()
    opened = []
    try:
        for host in (ingest, query):
            address = f"127.0.0.1:{host.port}"
            assert wait_for_serving(address, timeout=120), f"{address} did not become SERVING"
            opened.append(grpc.insecure_channel(address))
        yield opened[0], opened[1]
    finally:
        for channel in opened:
            channel.close()
        ingest.stop(5)
        query.stop(5)


def _observation(namespace: str, assertions: list[dict[str, Any]]) -> knowledge_pb2.Observation:
    return json_format.ParseDict(
        {
            "namespace": namespace,
            "source": {"system": "attacker", "stream": "labels", "external_id": uuid.uuid4().hex},
            "kind": "labels.claimed",
            "occurred_at": "2020-01-01T00:00:00Z",
            "content": "",
            "assertions": assertions,
        },
        knowledge_pb2.Observation(),
    )


def _outcome(call: Any) -> str:
    """'stored', 'refused' (a field violation), or the status code name of anything else."""
    try:
        response = call()
    except grpc.RpcError as error:
        code = error.code()
        return "refused" if code == grpc.StatusCode.INVALID_ARGUMENT else code.name
    if isinstance(response, observation_service_pb2.RecordObservationsResponse):
        [result] = response.results
        if result.status == "processed":
            return "stored"
        return "refused" if result.status == "failed" and result.field_violations else result.status
    return "stored"


def _attack(ingest: grpc.Channel, namespace: str) -> dict[tuple[str, str], str]:
    """Writes every name of `NAMES` as an entity type, a placeholder type, a predicate and a document
    type, one request each; returns (role, name) -> outcome."""
    observations = observation_service_pb2_grpc.ObservationServiceStub(ingest)
    documents = document_service_pb2_grpc.DocumentServiceStub(ingest)
    outcomes: dict[tuple[str, str], str] = {}

    def record(*assertions: dict[str, Any]) -> str:
        request = observation_service_pb2.RecordObservationsRequest(
            observations=[_observation(namespace, list(assertions))]
        )
        return _outcome(lambda: observations.RecordObservations(request, timeout=60))

    for number, name in enumerate(NAMES):
        outcomes[("entity type", name)] = record({"entity": {"key": {"type": name, "id": "1"}}})
        outcomes[("placeholder type", name)] = record(
            {
                "fact": {
                    "subject": {"type": "thing", "id": "1"},
                    "predicate": "POINTS_AT",
                    "object": f"{name}:2",
                }
            }
        )
        outcomes[("predicate", name)] = record(
            {
                "fact": {
                    "subject": {"type": "thing", "id": "1"},
                    "predicate": name,
                    "object": {"type": "thing", "id": "2"},
                }
            }
        )
        retain = document_service_pb2.RetainRequest(
            namespace=namespace, natural_key=f"doc:{number}", type=name, content=f"a document of type {name}"
        )
        outcomes[("document type", name)] = _outcome(
            lambda retain=retain: documents.Retain(retain, timeout=60)
        )
    return outcomes


def _listed_facts(query: grpc.Channel, namespace: str, predicates: set[str]) -> list[knowledge_pb2.Fact]:
    """Every fact (history included) of ``predicates`` in ``namespace``, through ListFacts."""
    return [fact for predicate in sorted(predicates) for fact in every_fact(query, namespace, predicate)]


def _corpus_facts() -> dict[str, tuple[str, str, str, str]]:
    """fact_id -> (subject, predicate, object, valid_from) of every fact assertion of the corpus, the id
    computed with the formula of docs/explanation/knowledge-model.md (not by the service)."""
    expected: dict[str, tuple[str, str, str, str]] = {}
    for line in (UPLOADS / "observations.jsonl").read_text("utf-8").splitlines():
        item = json.loads(line)
        for assertion in item["assertions"]:
            if "fact" not in assertion:
                continue
            fact = assertion["fact"]
            subject = entity_key(fact["subject"]["type"], fact["subject"]["id"])
            object_ = entity_key(fact["object"]["type"], fact["object"]["id"])
            valid_from: datetime = parse_instant(fact["valid_from"])
            identifier = fact_id(item["namespace"], subject, fact["predicate"], object_, valid_from)
            expected[identifier] = (subject, fact["predicate"], object_, fact["valid_from"])
    return expected


def test_one_namespaces_types_and_predicates_never_break_anothers_writes(
    channels: tuple[grpc.Channel, grpc.Channel],
) -> None:
    ingest, query = channels
    attacker = "attacker-" + uuid.uuid4().hex[:8]
    outcomes = _attack(ingest, attacker)
    # First the other namespace: the whole corpus after the attack, with 0 failures and its own facts.
    try:
        results, load_error = _record_all(ingest, _observations()), ""
    except grpc.RpcError as error:
        results, load_error = [], error.code().name
    failures = [(r.observation_id, r.status, r.error) for r in results if r.status != "processed"]
    assert load_error == "" and len(results) == 5415 and failures == []
    facts = _listed_facts(query, "debian", CORPUS_PREDICATES)
    expected = _corpus_facts()
    assert len(expected) == 2 * 5415
    assert {
        f.fact_id: (f.subject, f.predicate, f.object, f.valid_from.ToJsonString()) for f in facts
    } == expected
    assert as_of_mismatches(query) == []  # validity intervals: every as-of answer of the corpus exact

    # Then the attacker's own writes: stored, or refused with a field violation; never INTERNAL.
    assert {outcome for outcome in outcomes.values()} <= {"stored", "refused"}, {
        key: outcome for key, outcome in outcomes.items() if outcome not in ("stored", "refused")
    }
    refused = {key for key, outcome in outcomes.items() if outcome == "refused"}
    # What is refused is refused by the input patterns and reservations, never by a label clash:
    # every project and corpus name, long or not, is stored in every role its pattern allows.
    for name in [*PROJECT_NAMES, *CORPUS_PREDICATES, *CORPUS_TYPES, "T" * 64, "T" * 63 + "U", "x" * 47]:
        for role in ("entity type", "placeholder type", "document type"):
            assert ((role, name) in refused) == (name in REFUSED_TYPES), (role, name)
    for name in [*PROJECT_NAMES, *CORPUS_PREDICATES, *CORPUS_TYPES, "P" * 128, "P" * 127 + "Q"]:
        assert (("predicate", name) in refused) == (name in REFUSED_PREDICATES), name
    for name in ALIKE_NAMES:  # "." and "-" are allowed in types, not in predicates
        assert ("entity type", name) not in refused and ("document type", name) not in refused
    stored_predicates = {
        name for (role, name), outcome in outcomes.items() if role == "predicate" and outcome == "stored"
    }
    listed = _listed_facts(query, attacker, stored_predicates | {"POINTS_AT"})
    # Clients see the names they wrote, not labels: one fact per stored predicate.
    assert sorted(f.predicate for f in listed if f.predicate != "POINTS_AT") == sorted(stored_predicates)
    assert {f.object.partition(":")[0] for f in listed if f.predicate == "POINTS_AT"} >= {
        name
        for (role, name), outcome in outcomes.items()
        if role == "placeholder type" and outcome == "stored"
    }
