"""FactService, RedactObservation/PurgeObservation and GetObservation over real gRPC channels.

Servers run in-process on 127.0.0.1:0 (tests/e2e/conftest.py) with the real database and embedder.
Every test uses a namespace of its own.
"""

from __future__ import annotations

from datetime import UTC
from datetime import datetime
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from google.protobuf import timestamp_pb2

from common.kernel.identifiers import fact_id
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import fact_service_pb2
from memory_service_grpc_client.memory.v1 import fact_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import knowledge_pb2
from memory_service_grpc_client.memory.v1 import observation_query_service_pb2
from memory_service_grpc_client.memory.v1 import observation_query_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import observation_service_pb2
from memory_service_grpc_client.memory.v1 import observation_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2_grpc
from tests.e2e.context_packs import compile_pack
from tests.e2e.refusals import code_and_fields
from tests.work_observations import work_assigned

pytestmark = pytest.mark.e2e

JAN = "2026-01-01T00:00:00Z"
MAR = "2026-03-01T00:00:00Z"
JUN = "2026-06-01T00:00:00Z"
CODENAME = "KESTREL-9314"


def _ts(text: str) -> timestamp_pb2.Timestamp:
    message = timestamp_pb2.Timestamp()
    message.FromJsonString(text)
    return message


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text)


def _assertion(subject: Any, predicate: str, obj: Any, **fields: Any) -> knowledge_pb2.FactAssertion:
    return json_format.ParseDict(
        {"subject": subject, "predicate": predicate, "object": obj, **fields}, knowledge_pb2.FactAssertion()
    )


def _assert(
    channel: grpc.Channel, namespace: str, *facts: knowledge_pb2.FactAssertion, source_path: str = ""
) -> Any:
    stub = fact_service_pb2_grpc.FactServiceStub(channel)
    return stub.AssertFacts(
        fact_service_pb2.AssertFactsRequest(namespace=namespace, facts=list(facts), source_path=source_path),
        timeout=60,
    )


def _close(channel: grpc.Channel, namespace: str, fid: str, valid_to: str = "", reason: str = "") -> Any:
    request = fact_service_pb2.CloseFactRequest(namespace=namespace, fact_id=fid, reason=reason)
    if valid_to:
        request.valid_to.CopyFrom(_ts(valid_to))
    return fact_service_pb2_grpc.FactServiceStub(channel).CloseFact(request, timeout=60)


def _list(channel: grpc.Channel, namespace: str, subject: str, **fields: Any) -> list[Any]:
    stub = fact_query_service_pb2_grpc.FactQueryServiceStub(channel)
    return list(
        stub.ListFacts(
            fact_query_service_pb2.ListFactsRequest(namespace=namespace, subject=subject, **fields),
            timeout=60,
        ).facts
    )


def _observe(channel: grpc.Channel, observations: list[dict[str, Any]]) -> list[Any]:
    stub = observation_service_pb2_grpc.ObservationServiceStub(channel)
    request = observation_service_pb2.RecordObservationsRequest(
        observations=[json_format.ParseDict(item, knowledge_pb2.Observation()) for item in observations]
    )
    return list(stub.RecordObservations(request, timeout=120).results)


def _get(channel: grpc.Channel, namespace: str, observation_id: str) -> knowledge_pb2.Observation:
    stub = observation_query_service_pb2_grpc.ObservationQueryServiceStub(channel)
    request = observation_query_service_pb2.GetObservationRequest(
        namespace=namespace, observation_id=observation_id
    )
    return stub.GetObservation(request, timeout=60).observation


def _observation(
    namespace: str, external_id: str, assertions: list[dict[str, Any]], content: str = ""
) -> dict[str, Any]:
    return work_assigned(
        namespace,
        external_id,
        JAN,
        assertions,
        ("hr", "staffing"),
        content or f"staffing event {external_id}",
        actor={"type": "person", "id": "manager"},
        subject={"type": "person", "id": "alice"},
        scopes=["workspace:staffing"],
        data={"ticket": f"HR-{external_id}", "priority": 2},
        provenance={"uri": f"hr://staffing/{external_id}"},
    )


def _works_on(subject: str, project: str, valid_from: str = JAN, **extra: Any) -> dict[str, Any]:
    return {
        "fact": {
            "subject": subject,
            "predicate": "WORKS_ON",
            "object": project,
            "valid_from": valid_from,
            **extra,
        }
    }


# -- AssertFacts -------------------------------------------------------------------------------------


def test_assert_facts_creates_strengthens_and_supersedes(
    ingest_channel: grpc.Channel, query_channel: grpc.Channel, namespace: str
) -> None:
    alpha = fact_id(namespace, "person:alice", "WORKS_ON", "project:alpha", _at(JAN))
    beta = fact_id(namespace, "person:alice", "WORKS_ON", "project:beta", _at(MAR))
    first = _assert(
        ingest_channel,
        namespace,
        _assertion(
            {"type": "person", "id": "alice"}, "WORKS_ON", "project:alpha", valid_from=JAN, confidence=0.8
        ),
        source_path="agent:run/42",
    )
    assert [(r.fact_id, r.created, r.error) for r in first.results] == [(alpha, True, "")]
    again = _assert(
        ingest_channel,
        namespace,
        _assertion("person:alice", "WORKS_ON", "project:alpha", valid_from=JAN, confidence=0.9),
    )
    assert [(r.fact_id, r.created) for r in again.results] == [(alpha, False)]
    newer = _assert(
        ingest_channel,
        namespace,
        _assertion(
            "person:alice", "WORKS_ON", "project:beta", valid_from=MAR, supersedes=alpha, evidence="inferred"
        ),
    )
    assert [(r.fact_id, r.created) for r in newer.results] == [(beta, True)]

    history = {f.fact_id: f for f in _list(query_channel, namespace, "person:alice", include_history=True)}
    assert set(history) == {alpha, beta}
    old = history[alpha]
    assert old.valid_to.ToJsonString() == MAR and old.superseded_by == beta
    assert old.origin == "agent" and old.source_path == "agent:run/42" and list(old.observation_ids) == []
    assert old.confidence == pytest.approx(0.9) and not old.evidence_lost
    assert history[beta].supersedes == alpha and history[beta].evidence == "inferred"
    assert [f.fact_id for f in _list(query_channel, namespace, "person:alice")] == [beta]


def test_assert_facts_valid_from_defaults_to_the_request_time(
    ingest_channel: grpc.Channel, query_channel: grpc.Channel, namespace: str
) -> None:
    before = datetime.now(UTC)
    [result] = _assert(ingest_channel, namespace, _assertion("person:bob", "LIKES", "topic:tea")).results
    after = datetime.now(UTC)
    [stored] = _list(query_channel, namespace, "person:bob")
    assert stored.fact_id == result.fact_id
    assert before <= stored.valid_from.ToDatetime(tzinfo=UTC) <= after
    assert result.fact_id == fact_id(
        namespace, "person:bob", "LIKES", "topic:tea", stored.valid_from.ToDatetime(tzinfo=UTC)
    )


def test_assert_facts_reports_bad_items_and_rejects_a_request_with_none_valid(
    ingest_channel: grpc.Channel, query_channel: grpc.Channel, namespace: str
) -> None:
    out_of_range = _assertion("person:carol", "WORKS_ON", "project:x")
    out_of_range.valid_from.seconds = 253402300800  # year 10000: no RFC 3339 form
    bad_items = [
        _assertion("", "WORKS_ON", "project:x", valid_from=JAN),
        out_of_range,
        _assertion("person:carol", "WORKS ON", "project:x", valid_from=MAR, valid_to=JAN, confidence=1.5),
        _assertion({"type": "person"}, "WORKS_ON", "project:x", supersedes="fact-nothex", evidence="rumour"),
    ]
    code, fields = code_and_fields(lambda: _assert(ingest_channel, namespace, *bad_items))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert fields == [
        "facts[0].subject",
        "facts[1].valid_from",
        "facts[2].predicate",
        "facts[2].valid_to",
        "facts[2].confidence",
        "facts[3].subject.id",
        "facts[3].evidence",
        "facts[3].supersedes",
    ]
    assert _list(query_channel, namespace, "person:carol", include_history=True, include_lost=True) == []

    # a mixed request: the valid item is written, each invalid one reports its own violations
    mixed = _assert(
        ingest_channel,
        namespace,
        _assertion("person:carol", "WORKS_ON", "project:x", valid_from=JAN),
        _assertion("person:carol", "WORKS_ON", "project:y", valid_from=MAR, valid_to=JAN),
    )
    ok, bad = mixed.results
    assert ok.created and ok.error == ""
    assert (bad.fact_id, bad.created) == ("", False)
    assert list(bad.field_violations) == ["facts[1].valid_to: must not be before valid_from"]
    assert bad.error == bad.field_violations[0]
    assert [f.object for f in _list(query_channel, namespace, "person:carol")] == ["project:x"]

    # superseding another subject's fact is rejected; alone in a request it is INVALID_ARGUMENT
    carol_x = ok.fact_id
    code, fields = code_and_fields(
        lambda: _assert(
            ingest_channel,
            namespace,
            _assertion("person:dave", "WORKS_ON", "project:z", valid_from=MAR, supersedes=carol_x),
        )
    )
    assert (code, fields) == (grpc.StatusCode.INVALID_ARGUMENT, ["facts[0].supersedes"])
    assert _list(query_channel, namespace, "person:dave", include_history=True) == []
    [carol] = _list(query_channel, namespace, "person:carol", include_history=True)
    assert not carol.HasField("valid_to") and carol.superseded_by == ""

    stub = fact_service_pb2_grpc.FactServiceStub(ingest_channel)
    for request, field in (
        (fact_service_pb2.AssertFactsRequest(namespace=namespace), "facts"),
        (
            fact_service_pb2.AssertFactsRequest(namespace="", facts=[_assertion("a:b", "P", "c:d")]),
            "namespace",
        ),
    ):
        code, fields = code_and_fields(lambda: stub.AssertFacts(request, timeout=60))  # noqa: B023
        assert (code, fields) == (grpc.StatusCode.INVALID_ARGUMENT, [field])


# -- CloseFact ---------------------------------------------------------------------------------------


def test_close_fact_closes_never_widens_and_is_idempotent(
    ingest_channel: grpc.Channel, query_channel: grpc.Channel, namespace: str
) -> None:
    [result] = _assert(
        ingest_channel, namespace, _assertion("person:erin", "WORKS_ON", "project:x", valid_from=JAN)
    ).results
    fid = result.fact_id

    closed = _close(ingest_channel, namespace, fid, JUN, reason="no longer works on X").fact
    assert closed.fact_id == fid and closed.valid_to.ToJsonString() == JUN
    assert (
        _close(ingest_channel, namespace, fid, "2026-09-01T00:00:00Z").fact.valid_to.ToJsonString() == JUN
    )  # never widens
    assert _close(ingest_channel, namespace, fid, JUN).fact.valid_to.ToJsonString() == JUN  # idempotent
    assert (
        _close(ingest_channel, namespace, fid, MAR).fact.valid_to.ToJsonString() == MAR
    )  # an earlier end narrows
    [stored] = _list(query_channel, namespace, "person:erin", include_history=True)
    assert stored.valid_to.ToJsonString() == MAR
    assert _list(query_channel, namespace, "person:erin") == []

    # default: now
    [other] = _assert(
        ingest_channel, namespace, _assertion("person:erin", "KNOWS", "person:frank", valid_from=JAN)
    ).results
    before = datetime.now(UTC)
    now_closed = _close(ingest_channel, namespace, other.fact_id).fact
    assert before <= now_closed.valid_to.ToDatetime(tzinfo=UTC) <= datetime.now(UTC)

    assert code_and_fields(lambda: _close(ingest_channel, namespace, fid, "2025-12-31T23:59:59Z")) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        ["valid_to"],
    )
    assert (
        code_and_fields(lambda: _close(ingest_channel, namespace, "fact-" + "0" * 24))[0]
        == grpc.StatusCode.NOT_FOUND
    )
    assert code_and_fields(lambda: _close(ingest_channel, namespace + "x", fid))[0] == grpc.StatusCode.NOT_FOUND
    assert code_and_fields(lambda: _close(ingest_channel, namespace, "not-a-fact")) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        ["fact_id"],
    )


# -- GetObservation ----------------------------------------------------------------------------------


def test_get_observation_shows_processed_partially_processed_and_redacted(
    ingest_channel: grpc.Channel, query_channel: grpc.Channel, namespace: str
) -> None:
    alpha = fact_id(namespace, "person:alice", "WORKS_ON", "project:alpha", _at(JAN))
    first = _observation(
        namespace, "1", [_works_on("person:alice", "project:alpha")], content=f"Alice on alpha, {CODENAME}"
    )
    # observation 2 supersedes a fact of another subject: that assertion is rejected, the rest applied
    second = _observation(
        namespace,
        "2",
        [
            {"entity": {"key": "person:bob", "title": "Bob"}},
            _works_on("person:bob", "project:beta", MAR, supersedes=alpha),
        ],
    )
    r1, r2 = _observe(ingest_channel, [first, second])
    assert (r1.status, r2.status) == ("processed", "partially_processed")

    processed = _get(query_channel, namespace, r1.observation_id)
    assert processed.observation_id == r1.observation_id and processed.status == "processed"
    assert list(processed.status_details) == []
    assert processed.HasField("received_time") and processed.received_time.ToDatetime(
        tzinfo=UTC
    ) <= datetime.now(UTC)
    sent = json_format.ParseDict(first, knowledge_pb2.Observation())
    sent_fields = sent.ListFields()  # every field the request set comes back as it was sent
    names = "namespace source kind occurred_at actor subject scopes content data assertions provenance"
    assert {field.name for field, _ in sent_fields} == set(names.split())
    for field, value in sent_fields:
        assert getattr(processed, field.name) == value, field.name

    partial = _get(query_channel, namespace, r2.observation_id)
    assert partial.status == "partially_processed"
    [detail] = partial.status_details
    assert detail.startswith("assertions[1].fact.supersedes: ") and "person:alice" in detail

    stub = observation_service_pb2_grpc.ObservationServiceStub(ingest_channel)
    redacted = stub.RedactObservation(
        observation_service_pb2.RedactObservationRequest(
            namespace=namespace, observation_id=r1.observation_id, reason="contains a codename"
        ),
        timeout=60,
    )
    assert (redacted.facts_affected, redacted.facts_evidence_lost) == (1, 1)
    shown = _get(query_channel, namespace, r1.observation_id)
    assert shown == redacted.observation
    assert shown.status == "redacted" and list(shown.status_details) == ["contains a codename"]
    assert shown.content == "" and len(shown.data.fields) == 0 and len(shown.assertions) == 0
    assert (shown.source, shown.occurred_at, shown.kind) == (sent.source, sent.occurred_at, sent.kind)
    assert shown.received_time == processed.received_time

    get = observation_query_service_pb2_grpc.ObservationQueryServiceStub(query_channel).GetObservation
    assert (
        code_and_fields(
            lambda: get(
                observation_query_service_pb2.GetObservationRequest(
                    namespace=namespace, observation_id="obs-" + "0" * 24
                ),
                timeout=60,
            )
        )[0]
        == grpc.StatusCode.NOT_FOUND
    )
    assert (
        code_and_fields(
            lambda: get(
                observation_query_service_pb2.GetObservationRequest(
                    namespace=namespace + "x", observation_id=r1.observation_id
                ),
                timeout=60,
            )
        )[0]
        == grpc.StatusCode.NOT_FOUND
    )
    assert code_and_fields(lambda: get(observation_query_service_pb2.GetObservationRequest(), timeout=60)) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        ["namespace", "observation_id"],
    )


# -- evidence lost across every output -------------------------------------------------------------


def test_purged_evidence_leaves_list_facts_search_and_context(
    ingest_channel: grpc.Channel, query_channel: grpc.Channel, namespace: str
) -> None:
    [recorded] = _observe(
        ingest_channel,
        [
            _observation(
                namespace,
                "p",
                [
                    _works_on("person:alice", "project:falcon"),
                    {
                        "text": {
                            "text": f"Alice leads the {CODENAME} migration for project falcon.",
                            "title": "Notes",
                        }
                    },
                ],
                content=f"Alice assigned to falcon, codename {CODENAME}",
            )
        ],
    )
    falcon = fact_id(namespace, "person:alice", "WORKS_ON", "project:falcon", _at(JAN))
    search = retrieval_service_pb2_grpc.RetrievalServiceStub(query_channel)

    def search_keys() -> set[str]:
        hits = search.Search(
            retrieval_service_pb2.SearchRequest(namespace=namespace, query=CODENAME, top_k=10), timeout=120
        ).hits
        return {hit.node_key for hit in hits}

    def context_facts(*, redundant: bool = False) -> list[str]:
        request = {"query": "who works on falcon", "anchors": ["person:alice"], "token_budget": 2000}
        pack = compile_pack(query_channel, namespace, 120, dropped_limit=20, **request)
        if redundant:  # facts left out because their episode is in the pack
            return [
                item.provenance.fact_id
                for item in pack.dropped
                if item.drop_reason.startswith("adds nothing: its episode")
            ]
        return [item.provenance.fact_id for item in pack.items if item.kind == "fact"]

    # the anchor is also the observation's subject: the episode's SUBJECT fact reaches it, and gives
    # way to the episode itself, a hit
    about_alice = fact_id(namespace, recorded.episode_key, "SUBJECT", "person:alice", _at(JAN))
    assert search_keys() == {recorded.episode_key, f"text:{recorded.observation_id}/1"}
    assert context_facts() == [falcon]
    assert context_facts(redundant=True) == [about_alice]

    purged = observation_service_pb2_grpc.ObservationServiceStub(ingest_channel).PurgeObservation(
        observation_service_pb2.PurgeObservationRequest(
            namespace=namespace, observation_id=recorded.observation_id, reason="wrong tenant"
        ),
        timeout=60,
    )
    assert purged.observation_id == recorded.observation_id
    assert sorted(purged.nodes_deleted) == sorted([recorded.episode_key, f"text:{recorded.observation_id}/1"])
    assert (purged.chunks_deleted, purged.facts_affected, purged.facts_evidence_lost) == (2, 1, 1)

    assert _list(query_channel, namespace, "person:alice") == []
    assert _list(query_channel, namespace, "person:alice", include_history=True) == []
    [lost] = _list(query_channel, namespace, "person:alice", include_lost=True)
    assert lost.fact_id == falcon and lost.evidence_lost and list(lost.observation_ids) == []
    assert search_keys() == set()
    assert context_facts() == []

    assert (
        code_and_fields(lambda: _get(query_channel, namespace, recorded.observation_id))[0]
        == grpc.StatusCode.NOT_FOUND
    )
    stub = observation_service_pb2_grpc.ObservationServiceStub(ingest_channel)
    requests = (
        (stub.PurgeObservation, observation_service_pb2.PurgeObservationRequest),
        (stub.RedactObservation, observation_service_pb2.RedactObservationRequest),
    )
    for call, request_type in requests:
        known = request_type(namespace=namespace, observation_id=recorded.observation_id)
        assert code_and_fields(lambda: call(known, timeout=60))[0] == grpc.StatusCode.NOT_FOUND  # noqa: B023
        assert code_and_fields(lambda: call(request_type(), timeout=60)) == (  # noqa: B023
            grpc.StatusCode.INVALID_ARGUMENT,
            ["namespace", "observation_id"],
        )
