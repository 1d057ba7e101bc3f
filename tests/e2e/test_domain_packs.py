"""DomainPackService and SnapshotService over real gRPC: a software-delivery pack in
strict mode on the observation path, and a debian pack whose "current version per package" snapshot,
built from a subset of the debian corpus, reconciles to exactly the current facts ListFacts gives; a
second snapshot that drops packages closes exactly their facts."""

from __future__ import annotations

import json
import uuid
from collections import defaultdict
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from google.protobuf import timestamp_pb2

from common.kernel.identifiers import entity_key
from common.kernel.identifiers import fact_id
from common.kernel.identifiers import parse_instant
from memory_service_grpc_client import rpc_failure
from memory_service_grpc_client.memory.v1 import domain_pack_service_pb2
from memory_service_grpc_client.memory.v1 import domain_pack_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import knowledge_pb2
from memory_service_grpc_client.memory.v1 import observation_service_pb2
from memory_service_grpc_client.memory.v1 import observation_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import snapshot_service_pb2
from memory_service_grpc_client.memory.v1 import snapshot_service_pb2_grpc
from tests.conftest import CORPORA
from tests.e2e.fact_pages import every_fact
from tests.e2e.pack_registration import enable_pack
from tests.e2e.pack_registration import register_pack
from tests.integration.test_domain_packs import debian_pack
from tests.unit.test_domain_packs import delivery_pack

pytestmark = pytest.mark.e2e

DEBIAN = CORPORA / "debian-uploads" / "observations.jsonl"
PACKAGES = 25


def _ts(text: str) -> timestamp_pb2.Timestamp:
    message = timestamp_pb2.Timestamp()
    message.FromJsonString(text)
    return message


def _register(channel: grpc.Channel, pack: dict[str, Any], namespace: str, strict: bool) -> None:
    assert register_pack(channel, pack)
    enable_pack(channel, namespace, pack, strict)


def _observe(channel: grpc.Channel, observations: list[dict[str, Any]]) -> list[Any]:
    stub = observation_service_pb2_grpc.ObservationServiceStub(channel)
    results = []
    for start in range(0, len(observations), 200):
        request = observation_service_pb2.RecordObservationsRequest(
            observations=[
                json_format.ParseDict(o, knowledge_pb2.Observation())
                for o in observations[start : start + 200]
            ]
        )
        results += list(stub.RecordObservations(request, timeout=300).results)
    return results


def _current(channel: grpc.Channel, namespace: str, predicate: str) -> dict[str, tuple[str, str]]:
    facts = every_fact(channel, namespace, predicate, include_history=False)
    return {fact.fact_id: (fact.subject, fact.object) for fact in facts}


def _reconcile(channel: grpc.Channel, request: dict[str, Any]) -> Any:
    stub = snapshot_service_pb2_grpc.SnapshotServiceStub(channel)
    return stub.Reconcile(
        json_format.ParseDict(request, snapshot_service_pb2.ReconcileRequest()), timeout=300
    )


def test_pack_rpcs_and_strict_observations(ingest_channel: grpc.Channel) -> None:
    namespace = "test-" + uuid.uuid4().hex[:12]
    pack = delivery_pack(uuid.uuid4().hex)
    _register(ingest_channel, pack, namespace, strict=True)
    stub = domain_pack_service_pb2_grpc.DomainPackServiceStub(ingest_channel)
    again = stub.RegisterPackage(
        json_format.ParseDict({"package": pack}, domain_pack_service_pb2.RegisterPackageRequest()), timeout=60
    )
    assert not again.created
    got = json_format.MessageToDict(
        stub.GetPackage(
            domain_pack_service_pb2.GetPackageRequest(name=pack["name"], version=pack["version"])
        ).package
    )
    assert (
        got["kinds"][0]["naturalKey"] == pack["kinds"][0]["naturalKey"]
        and got["relations"][3]["cardinality"] == "one"
    )
    changed = {**pack, "relations": pack["relations"][:1]}
    with pytest.raises(grpc.RpcError) as raised:
        stub.RegisterPackage(
            json_format.ParseDict({"package": changed}, domain_pack_service_pb2.RegisterPackageRequest()),
            timeout=60,
        )
    assert raised.value.code() == grpc.StatusCode.ALREADY_EXISTS
    with pytest.raises(grpc.RpcError) as raised:
        stub.RegisterPackage(
            json_format.ParseDict(
                {
                    "package": {
                        "name": "x",
                        "version": "1",
                        "kinds": [{"kind": "a", "attributes": {"type": 5}}],
                    }
                },
                domain_pack_service_pb2.RegisterPackageRequest(),
            ),
            timeout=60,
        )
    failure = rpc_failure(raised.value)
    assert failure.code == grpc.StatusCode.INVALID_ARGUMENT
    assert [v.field for v in failure.violations] == ["package.kinds[0].attributes.type"]
    with pytest.raises(grpc.RpcError) as raised:
        stub.SetNamespaceKinds(
            domain_pack_service_pb2.SetNamespaceKindsRequest(
                namespace=namespace, packages=[domain_pack_service_pb2.PackageRef(name="nope", version="1")]
            ),
            timeout=60,
        )
    assert raised.value.code() == grpc.StatusCode.NOT_FOUND
    kinds = stub.GetNamespaceKinds(
        domain_pack_service_pb2.GetNamespaceKindsRequest(namespace=namespace), timeout=60
    )
    assert kinds.strict and "team" in kinds.kinds and "MEMBER_OF" in kinds.relations
    [result] = _observe(
        ingest_channel,
        [
            {
                "namespace": namespace,
                "source": {"system": "jira", "stream": "events", "external_id": "1"},
                "kind": "issue.assigned",
                "occurred_at": "2026-01-01T00:00:00Z",
                "assertions": [
                    {"entity": {"key": "issue:PROJ-1"}},
                    {"entity": {"key": "issue:BUG-1"}},
                    {"fact": {"subject": "issue:PROJ-1", "predicate": "ASSIGNED_TO", "object": "user:alice"}},
                    {"fact": {"subject": "issue:PROJ-1", "predicate": "ASSIGNED_TO", "object": "team:core"}},
                ],
            }
        ],
    )
    assert result.status == "partially_processed"
    assert [text.split(": ")[0] for text in result.field_violations] == [
        "assertions[1].entity.key",
        "assertions[3].fact.object",
    ]


def _debian_subset(namespace: str) -> list[dict[str, Any]]:
    """The observations of the first PACKAGES packages, moved to ``namespace``: the corpus's ``supersedes``
    ids are fact_ids of namespace "debian", so they are recomputed for ``namespace``."""
    lines = [json.loads(line) for line in DEBIAN.read_text(encoding="utf-8").splitlines() if line.strip()]
    packages = sorted({line["subject"]["id"] for line in lines})[:PACKAGES]
    subset = [dict(line, namespace=namespace) for line in lines if line["subject"]["id"] in packages]
    moved: dict[str, str] = {}
    for line in subset:
        for assertion in line["assertions"]:
            fact = assertion.get("fact")
            if fact:
                subject = entity_key(fact["subject"]["type"], fact["subject"]["id"])
                obj = entity_key(fact["object"]["type"], fact["object"]["id"])
                start = parse_instant(fact["valid_from"])
                moved[fact_id("debian", subject, fact["predicate"], obj, start)] = fact_id(
                    namespace, subject, fact["predicate"], obj, start
                )
    for line in subset:
        for assertion in line["assertions"]:
            fact = assertion.get("fact")
            if fact and fact.get("supersedes"):
                fact["supersedes"] = moved[fact["supersedes"]]
    return subset


def test_debian_current_versions_snapshot_matches_list_facts(
    ingest_channel: grpc.Channel, query_channel: grpc.Channel
) -> None:
    assert DEBIAN.exists(), f"debian corpus not found at {DEBIAN} (../shared/corpora beside the repository)"
    namespace = "test-" + uuid.uuid4().hex[:12]
    _register(ingest_channel, debian_pack(uuid.uuid4().hex), namespace, strict=True)
    subset = _debian_subset(namespace)
    results = _observe(ingest_channel, subset)
    assert {result.status for result in results} == {"processed"}
    # "Current version per package" from the corpus itself: the HAS_VERSION facts no other fact supersedes.
    has_version: dict[str, dict[str, Any]] = {}
    superseded: set[str] = set()
    for line in subset:
        for assertion in line["assertions"]:
            fact = assertion.get("fact")
            if fact and fact["predicate"] == "HAS_VERSION":
                subject, obj = (
                    entity_key(fact["subject"]["type"], fact["subject"]["id"]),
                    entity_key(fact["object"]["type"], fact["object"]["id"]),
                )
                fid = fact_id(namespace, subject, "HAS_VERSION", obj, parse_instant(fact["valid_from"]))
                has_version[fid] = {
                    "subject": subject,
                    "predicate": "HAS_VERSION",
                    "object": obj,
                    "valid_from": fact["valid_from"],
                }
                if fact.get("supersedes"):
                    superseded.add(fact["supersedes"])
    current = {fid: fact for fid, fact in has_version.items() if fid not in superseded}
    per_package = defaultdict(list)
    for fact in current.values():
        per_package[fact["subject"]].append(fact)
    assert len(per_package) == PACKAGES and all(len(facts) == 1 for facts in per_package.values())
    packages = sorted(per_package)
    snapshot = {
        "namespace": namespace,
        "source": "debian-archive",
        "scope": "suite:unstable",
        "snapshot_id": "s1",
        "snapshot_time": "2026-01-01T00:00:00Z",
        "entities": [{"key": package, "type": "package"} for package in packages],
        "facts": [per_package[package][0] for package in packages],
    }
    first = _reconcile(ingest_channel, snapshot)
    assert first.counts.facts_created == 0 and first.counts.facts_closed == 0
    assert first.counts.facts_updated == PACKAGES  # the observation facts were adopted by the snapshot
    listed = _current(query_channel, namespace, "HAS_VERSION")
    assert set(listed) == set(current)
    uploaded_before = _current(query_channel, namespace, "UPLOADED_BY")
    repeated = _reconcile(ingest_channel, snapshot)
    assert repeated.unchanged and _current(query_channel, namespace, "HAS_VERSION") == listed
    dropped = set(packages[:5])
    second = _reconcile(
        ingest_channel,
        snapshot
        | {
            "snapshot_id": "s2",
            "snapshot_time": "2026-02-01T00:00:00Z",
            "entities": [e for e in snapshot["entities"] if e["key"] not in dropped],
            "facts": [f for f in snapshot["facts"] if f["subject"] not in dropped],
        },
    )
    assert second.counts.facts_closed == len(dropped) and second.counts.facts_unchanged == PACKAGES - len(
        dropped
    )
    after = _current(query_channel, namespace, "HAS_VERSION")
    assert set(after) == {fid for fid, fact in current.items() if fact["subject"] not in dropped}
    assert _current(query_channel, namespace, "UPLOADED_BY") == uploaded_before
    history = fact_query_service_pb2_grpc.FactQueryServiceStub(query_channel).ListFacts(
        fact_query_service_pb2.ListFactsRequest(
            namespace=namespace, subject=min(dropped), predicate="HAS_VERSION", include_history=True
        ),
        timeout=60,
    )
    closed = [fact for fact in history.facts if fact.fact_id in current]
    assert len(closed) == 1 and closed[0].valid_to.ToJsonString() == "2026-02-01T00:00:00Z"
