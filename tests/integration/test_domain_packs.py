"""Domain packs, strict mode on every write path, and snapshot reconciliation on the real database.

Packs are global, so each test registers its own version (uuid); namespaces are unique per test.
"""

from __future__ import annotations

import uuid
from datetime import UTC
from datetime import datetime
from typing import Any

import pytest

from common.kernel.errors import AlreadyExists
from common.kernel.errors import InvalidArgument
from common.kernel.errors import NotFound
from common.kernel.identifiers import fact_id
from common.packs.domain_packs import PackRegistry
from common.packs.kind_validation import KindValidator
from common.storage.database import Database
from ingest_service.documents.validation import ChunkInput
from ingest_service.documents.validation import PutChunksInput
from ingest_service.documents.validation import RetainInput
from ingest_service.documents.writer import DocumentWriter
from ingest_service.facts.assertions import FactAsserter
from ingest_service.observations.recorder import ObservationRecorder
from ingest_service.snapshots.reconciler import SnapshotReconciler
from tests.database_rows import fetch_rows
from tests.unit.test_domain_packs import delivery_pack

pytestmark = pytest.mark.integration

T0 = "2026-01-01T00:00:00Z"


@pytest.fixture(scope="module")
def asserter(database: Database, kinds: KindValidator) -> FactAsserter:
    return FactAsserter(database, kinds=kinds)


@pytest.fixture(scope="module")
def reconciler(database: Database, kinds: KindValidator) -> SnapshotReconciler:
    return SnapshotReconciler(database, kinds=kinds)


def enable(
    registry: PackRegistry, kinds: KindValidator, namespace: str, pack: dict[str, Any], strict: bool
) -> None:
    registry.register(pack)
    registry.set_namespace_kinds(namespace, [{"name": pack["name"], "version": pack["version"]}], strict)
    kinds.invalidate(namespace)


def observation(namespace: str, assertions: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "namespace": namespace,
        "source": {"system": "jira", "stream": "events", "external_id": uuid.uuid4().hex},
        "kind": "issue.updated",
        "occurred_at": T0,
        "assertions": assertions,
    }


def test_registration_is_immutable_and_reserved_names_are_refused(registry: PackRegistry) -> None:
    pack = delivery_pack(uuid.uuid4().hex)
    first = registry.register(pack)
    again = registry.register(delivery_pack(pack["version"]))
    assert first.created and not again.created and again.content == first.content
    changed = delivery_pack(pack["version"])
    changed["kinds"][2]["attributes"] = {"type": "object"}
    with pytest.raises(AlreadyExists):
        registry.register(changed)
    with pytest.raises(InvalidArgument) as raised:
        registry.register({**delivery_pack("1"), "name": "default"})
    assert [v.field for v in raised.value.violations] == ["package.name"]
    assert registry.get(pack["name"], pack["version"]).content == first.content
    listed, _ = registry.list_packs(1000)
    assert any(view.content["version"] == pack["version"] for view in listed)
    with pytest.raises(NotFound):
        registry.get("no-such-pack")


def test_namespace_kinds(registry: PackRegistry, namespace: str) -> None:
    assert registry.get_namespace_kinds(namespace).packages == []
    with pytest.raises(NotFound):
        registry.set_namespace_kinds(namespace, [{"name": "software-delivery", "version": "never"}], True)
    with pytest.raises(InvalidArgument):
        registry.set_namespace_kinds(namespace, [{"name": "software-delivery"}], True)
    pack = delivery_pack(uuid.uuid4().hex)
    registry.register(pack)
    view = registry.set_namespace_kinds(namespace, [{"name": pack["name"], "version": pack["version"]}], True)
    assert view.strict and "service" in view.kinds and "document" in view.kinds and "OWNS" in view.relations
    again = registry.get_namespace_kinds(namespace)
    assert again.packages == [{"name": pack["name"], "version": pack["version"]}] and again.strict


def _recorded_under_a_pack(
    registry: PackRegistry,
    kinds: KindValidator,
    recorder: ObservationRecorder,
    namespace: str,
    strict: bool,
    assertions: list[dict[str, Any]],
) -> Any:
    """Enables a new delivery pack in ``namespace`` (``strict`` or not), then records one observation of
    ``assertions``; its result."""
    enable(registry, kinds, namespace, delivery_pack(uuid.uuid4().hex), strict=strict)
    [result] = recorder.record_batch([observation(namespace, assertions)])
    return result


def test_strict_observations_reject_assertions_outside_the_pack(
    registry: PackRegistry, kinds: KindValidator, recorder: ObservationRecorder, namespace: str
) -> None:
    outside = [
        {"entity": {"key": {"type": "svc", "id": "checkout"}, "attributes": {"tier": "gold"}}},
        {"entity": {"key": "robot:r2"}},
        {"entity": {"key": "service:payments", "attributes": {"tier": "bronze"}}},
        {"fact": {"subject": "team:core", "predicate": "OWNS", "object": "svc:checkout"}},
        {"fact": {"subject": "person:alice", "predicate": "OWNS", "object": "service:checkout"}},
        {"fact": {"subject": "team:core", "predicate": "HATES", "object": "service:checkout"}},
    ]
    result = _recorded_under_a_pack(registry, kinds, recorder, namespace, True, outside)
    assert result.status == "partially_processed"
    fields = {text.split(": ", 1)[0] for text in result.field_violations}
    assert fields == {
        "assertions[1].entity.key",
        "assertions[2].entity.attributes.tier",
        "assertions[4].fact.subject",
        "assertions[5].fact.predicate",
    }
    assert any("software-delivery" in text and "service" in text for text in result.field_violations)
    assert result.entities_upserted == 1 and result.facts_created == 1
    with kinds.database.connection() as conn:
        keys = {
            row[0]
            for row in conn.execute("SELECT natural_key FROM graph_nodes WHERE namespace = %s", (namespace,))
        }
        facts = conn.execute(
            "SELECT subject_key, object_key FROM facts WHERE namespace = %s", (namespace,)
        ).fetchall()
    assert "service:checkout-svc" in keys and "robot:r2" not in keys  # kindAlias and alias resolved
    assert facts == [("team:core", "service:checkout-svc")]


def test_non_strict_observations_store_unknown_kinds_as_free_nodes(
    registry: PackRegistry, kinds: KindValidator, recorder: ObservationRecorder, namespace: str
) -> None:
    unknown = [
        {"entity": {"key": "robot:r2", "attributes": {"anything": 1}}},
        {"entity": {"key": "svc:checkout", "attributes": {"tier": "bronze"}}},
        {"fact": {"subject": "robot:r2", "predicate": "LIKES", "object": "svc:checkout"}},
    ]
    result = _recorded_under_a_pack(registry, kinds, recorder, namespace, False, unknown)
    assert result.status == "processed" and result.entities_upserted == 2 and result.facts_created == 1
    with kinds.database.connection() as conn:
        nodes = dict(
            conn.execute("SELECT natural_key, node_type FROM graph_nodes WHERE namespace = %s", (namespace,))
        )
    assert nodes["robot:r2"] == "robot" and nodes["service:checkout-svc"] == "service"


def test_namespaces_without_packs_are_unchanged(recorder: ObservationRecorder, namespace: str) -> None:
    [result] = recorder.record_batch([observation(namespace, [{"entity": {"key": "robot:r2"}}])])
    assert result.status == "processed" and result.entities_upserted == 1


def test_assert_facts_in_strict_mode(
    registry: PackRegistry, kinds: KindValidator, asserter: FactAsserter, namespace: str
) -> None:
    enable(registry, kinds, namespace, delivery_pack(uuid.uuid4().hex), strict=True)
    results = asserter.assert_facts(
        namespace,
        [
            {"subject": "user:alice", "predicate": "MEMBER_OF", "object": "team:core"},
            {"subject": "service:checkout", "predicate": "EXPOSES", "object": "endpoint:GET /orders"},
            {"subject": "service:checkout", "predicate": "EXPOSES", "object": "endpoint:GET"},
            {"subject": "issue:PROJ-7", "predicate": "ASSIGNED_TO", "object": "team:core"},
        ],
    )
    assert [bool(r.fact_id) for r in results] == [True, True, False, False]
    assert results[2].field_violations[0].startswith("facts[2].object: pack software-delivery, kind endpoint")
    assert results[3].field_violations[0].startswith("facts[3].object")
    with pytest.raises(InvalidArgument) as raised:
        asserter.assert_facts(
            namespace, [{"subject": "robot:r2", "predicate": "OWNS", "object": "team:core"}]
        )
    assert {v.field for v in raised.value.violations} == {"facts[0].subject", "facts[0].object"}


def test_retain_in_strict_mode(
    registry: PackRegistry, kinds: KindValidator, writer: DocumentWriter, namespace: str
) -> None:
    enable(registry, kinds, namespace, delivery_pack(uuid.uuid4().hex), strict=True)
    ok = writer.retain(RetainInput(namespace=namespace, natural_key="doc:readme", content="# Readme\n\ntext"))
    assert ok.created
    ok = writer.retain(
        RetainInput(namespace=namespace, natural_key="issue:PROJ-1", type="issue", content="a bug")
    )
    assert ok.created
    with pytest.raises(InvalidArgument) as raised:
        writer.retain(RetainInput(namespace=namespace, natural_key="notes/1", type="memo", content="x"))
    assert [v.field for v in raised.value.violations] == ["type"]
    with pytest.raises(InvalidArgument) as raised:
        writer.retain(RetainInput(namespace=namespace, natural_key="issue:BUG-1", type="issue", content="x"))
    assert [v.field for v in raised.value.violations] == ["natural_key"]


def debian_pack(version: str) -> dict[str, Any]:
    return {
        "name": "debian",
        "version": version,
        "kinds": [
            {"kind": "package", "naturalKey": {"type": "string", "pattern": "^[a-z0-9][a-z0-9.+-]*$"}},
            {"kind": "version", "naturalKey": "<package>@<version>"},
            {"kind": "person"},
        ],
        "relations": [
            {
                "relation": "HAS_VERSION",
                "fromKinds": ["package"],
                "toKinds": ["version"],
                "cardinality": "one",
            },
            {"relation": "UPLOADED_BY", "fromKinds": ["version"], "toKinds": ["person"]},
        ],
    }


def open_facts(database: Database, namespace: str, predicate: str) -> dict[str, tuple[str, str]]:
    query = "SELECT fact_id, subject_key, object_key FROM facts WHERE namespace = %s AND predicate = %s"
    rows = fetch_rows(database, query + " AND valid_to IS NULL", namespace, predicate)
    return {row[0]: (row[1], row[2]) for row in rows}


def test_reconcile_creates_updates_closes_and_is_idempotent(
    registry: PackRegistry,
    kinds: KindValidator,
    reconciler: SnapshotReconciler,
    database: Database,
    namespace: str,
) -> None:
    enable(registry, kinds, namespace, debian_pack(uuid.uuid4().hex), strict=True)
    t1, t2 = datetime(2026, 2, 1, tzinfo=UTC), datetime(2026, 3, 1, tzinfo=UTC)
    entities = [
        {"key": "package:time", "attributes": {"section": "utils"}},
        {"key": "package:zlib", "attributes": {"section": "libs"}},
    ]
    facts = [
        {"subject": "package:time", "predicate": "HAS_VERSION", "object": "version:time@1.9-3"},
        {
            "subject": "package:zlib",
            "predicate": "HAS_VERSION",
            "object": "version:zlib@1.3",
            "attributes": {"a": 1},
        },
    ]
    first = reconciler.reconcile(namespace, "archive", "suite:trixie", "s1", t1, entities, facts)
    assert (first.counts.entities_created, first.counts.facts_created, first.counts.facts_closed) == (2, 2, 0)
    again = reconciler.reconcile(namespace, "archive", "suite:trixie", "s1", t1, entities, facts)
    assert again.unchanged and again.counts == first.counts
    # An unrelated fact of the same predicate from another path is never closed by a snapshot.
    with database.connection() as conn:
        conn.execute(
            "INSERT INTO facts (fact_id, namespace, subject_key, predicate, object_key, valid_from, observed_at,"
            " evidence, confidence) VALUES (%s, %s, 'package:bash', 'HAS_VERSION', 'version:bash@5', %s, %s,"
            " 'asserted', 1)",
            (fact_id(namespace, "package:bash", "HAS_VERSION", "version:bash@5", t1), namespace, t1, t1),
        )
    entities[1]["attributes"] = {"section": "oldlibs"}
    facts2 = [facts[1] | {"attributes": {"a": 2}}]
    second = reconciler.reconcile(namespace, "archive", "suite:trixie", "s2", t2, entities, facts2)
    assert second.previous_snapshot_id == "s1"
    assert (second.counts.entities_updated, second.counts.entities_unchanged) == (1, 1)
    assert (second.counts.facts_updated, second.counts.facts_closed, second.counts.facts_created) == (1, 1, 0)
    current = open_facts(database, namespace, "HAS_VERSION")
    assert sorted(current.values()) == [
        ("package:bash", "version:bash@5"),
        ("package:zlib", "version:zlib@1.3"),
    ]
    closed_id = fact_id(namespace, "package:time", "HAS_VERSION", "version:time@1.9-3", t1)
    with database.connection() as conn:
        row = conn.execute(
            "SELECT valid_to, snapshot_source, snapshot_scope, snapshot_id FROM facts WHERE fact_id = %s",
            (closed_id,),
        ).fetchone()
        counts = conn.execute(
            "SELECT counts FROM source_snapshots WHERE namespace = %s AND snapshot_id = 's2'", (namespace,)
        ).fetchone()
    assert row == (t2, "archive", "suite:trixie", "s1")
    assert counts is not None and counts[0]["facts_closed"] == 1
    third = reconciler.reconcile(namespace, "archive", "suite:trixie", "s3", t2, entities, facts2)
    assert (third.counts.entities_unchanged, third.counts.facts_unchanged, third.counts.facts_closed) == (
        2,
        1,
        0,
    )


def test_reconcile_recreates_a_deleted_node_the_source_still_states(
    registry: PackRegistry,
    kinds: KindValidator,
    reconciler: SnapshotReconciler,
    database: Database,
    namespace: str,
) -> None:
    """DeleteNode forgets the node in the snapshot journals: the next snapshot that still states it
    creates it and its facts again instead of counting them as unchanged."""
    from ingest_service.documents.node_deletion import DeleteNodeInput
    from ingest_service.documents.node_deletion import NodeDeleter

    enable(registry, kinds, namespace, debian_pack(uuid.uuid4().hex), strict=True)
    t1, t2 = datetime(2026, 2, 1, tzinfo=UTC), datetime(2026, 3, 1, tzinfo=UTC)
    entities = [{"key": "package:time", "attributes": {"section": "utils"}}]
    facts = [{"subject": "package:time", "predicate": "HAS_VERSION", "object": "version:time@1.9-3"}]
    reconciler.reconcile(namespace, "archive", "suite:trixie", "s1", t1, entities, facts)
    deleted = NodeDeleter(database).delete(DeleteNodeInput(namespace=namespace, natural_key="package:time"))
    assert deleted.facts_deleted == 1
    assert open_facts(database, namespace, "HAS_VERSION") == {}
    second = reconciler.reconcile(namespace, "archive", "suite:trixie", "s2", t2, entities, facts)
    assert (second.counts.entities_created, second.counts.facts_created, second.counts.facts_closed) == (
        1,
        1,
        0,
    )
    assert sorted(open_facts(database, namespace, "HAS_VERSION").values()) == [
        ("package:time", "version:time@1.9-3")
    ]


def test_reconcile_strict_checks_relations_and_cardinality(
    registry: PackRegistry, kinds: KindValidator, reconciler: SnapshotReconciler, namespace: str
) -> None:
    enable(registry, kinds, namespace, debian_pack(uuid.uuid4().hex), strict=True)
    with pytest.raises(InvalidArgument) as raised:
        reconciler.reconcile(
            namespace,
            "archive",
            "suite:trixie",
            "bad",
            datetime(2026, 2, 1, tzinfo=UTC),
            [{"key": "package:Bad Name"}, {"key": "distro:debian"}],
            [
                {"subject": "package:time", "predicate": "HAS_VERSION", "object": "version:time@1"},
                {"subject": "package:time", "predicate": "HAS_VERSION", "object": "version:time@2"},
                {"subject": "person:x", "predicate": "HAS_VERSION", "object": "version:time@3"},
            ],
        )
    fields = {v.field for v in raised.value.violations}
    assert {"entities[0].key", "entities[1].key", "facts[1]", "facts[2].subject"} <= fields
    assert any("cardinality one" in v.description for v in raised.value.violations)


def test_non_strict_assert_facts_and_documents_accept_free_kinds(
    registry: PackRegistry,
    kinds: KindValidator,
    asserter: FactAsserter,
    writer: DocumentWriter,
    namespace: str,
) -> None:
    enable(registry, kinds, namespace, delivery_pack(uuid.uuid4().hex), strict=False)
    [free, aliased] = asserter.assert_facts(
        namespace,
        [
            {"subject": "robot:r2", "predicate": "LIKES", "object": "team:core"},
            {"subject": "svc:checkout", "predicate": "DEPENDS_ON", "object": "service:payments"},
        ],
    )
    assert free.created and aliased.created
    with kinds.database.connection() as conn:
        subjects = {
            row[0] for row in conn.execute("SELECT subject_key FROM facts WHERE namespace = %s", (namespace,))
        }
    assert subjects == {"robot:r2", "service:checkout-svc"}
    assert writer.retain(
        RetainInput(namespace=namespace, natural_key="memo:1", type="memo", content="x")
    ).created
    chunks = (ChunkInput(0, "h", "text of a chunk"),)
    assert writer.put_chunks(
        PutChunksInput(namespace=namespace, natural_key="memo:2", chunks=chunks, type="memo")
    ).created


def test_put_chunks_in_strict_mode(
    registry: PackRegistry, kinds: KindValidator, writer: DocumentWriter, namespace: str
) -> None:
    enable(registry, kinds, namespace, delivery_pack(uuid.uuid4().hex), strict=True)
    chunks = (ChunkInput(0, "h", "text of a chunk"),)
    with pytest.raises(InvalidArgument) as raised:
        writer.put_chunks(
            PutChunksInput(namespace=namespace, natural_key="notes/2", chunks=chunks, type="memo")
        )
    assert [v.field for v in raised.value.violations] == ["type"]
    assert writer.put_chunks(PutChunksInput(namespace=namespace, natural_key="doc:2", chunks=chunks)).created
