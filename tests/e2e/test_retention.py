"""Retention with a moved clock on real servers and the real database: exactly the classes whose time has come
are deleted (observations by kind, documents of a collection with their chunks, personal data of a
category, audit events past the floor), a subject hold keeps what it names, and the trail says so."""

from __future__ import annotations

from datetime import UTC
from datetime import datetime
from datetime import timedelta
from typing import Any

import grpc
import pytest

from common.domain.audit import AuditEventInput
from common.domain.audit import AuditTrail
from common.kernel.config import Settings
from common.storage.database import Database
from ingest_service.data_protection.retention import RetentionEnforcer
from ingest_service.memories.writer import MemoryWriter
from ingest_service.observations.removal import ObservationRemover
from memory_service_grpc_client import rpc_failure
from memory_service_grpc_client.memory.v1 import data_protection_service_pb2 as dp
from memory_service_grpc_client.memory.v1 import document_service_pb2
from memory_service_grpc_client.memory.v1 import document_service_pb2_grpc
from tests.database_rows import fetch_rows_at
from tests.e2e.data_protection_helpers import NoPassages
from tests.e2e.data_protection_helpers import observation_of
from tests.e2e.data_protection_helpers import record_all

pytestmark = pytest.mark.e2e


def test_retention_deletes_exactly_the_classes_whose_time_has_come(
    settings: Settings, namespace: str, ingest_channel: grpc.Channel, protection: Any
) -> None:
    now = datetime.now(UTC)
    record_all(
        ingest_channel,
        [
            observation_of(namespace, 1, "chat", now - timedelta(days=10), "chat ten days ago"),
            observation_of(namespace, 2, "chat", now - timedelta(days=1), "chat yesterday"),
            observation_of(namespace, 3, "ticket", now - timedelta(days=10), "ticket ten days ago"),
        ],
    )

    def rule(data_class: str, selector: str, hours: int) -> None:
        message = dp.RetentionRule(namespace=namespace, data_class=data_class, selector=selector)
        message.max_age.FromTimedelta(timedelta(hours=hours))
        protection.SetRetentionRule(dp.SetRetentionRuleRequest(rule=message), timeout=30)

    rule("observations", "chat", 24 * 7)  # chats live a week; tickets have no rule
    with pytest.raises(grpc.RpcError) as bad:
        rule("observations", "", 0)
    assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "max_age" in bad.value.details()

    def remaining() -> list[str]:
        query = "SELECT source_external_id FROM observations WHERE namespace = %s"
        return sorted(r[0] for r in fetch_rows_at(settings.database_url, query, namespace))

    database = Database(settings)
    try:
        enforcer = RetentionEnforcer(
            database, ObservationRemover(database), MemoryWriter(database, NoPassages())
        )
        enforcer.enforce(now, (namespace,))
        assert remaining() == ["e2", "e3"]  # only the chat older than a week
        enforcer.enforce(
            now + timedelta(days=5), (namespace,)
        )  # the clock moves: yesterday's chat is 6 days old
        assert remaining() == ["e2", "e3"]
        enforcer.enforce(now + timedelta(days=7), (namespace,))  # now 8 days old
        assert remaining() == ["e3"]
        preview = {p.rule.selector: p.due for p in enforcer.preview(namespace, now + timedelta(days=30))}
        assert preview == {"chat": 0}
    finally:
        database.close()


def test_documents_of_a_collection_age_out_with_their_chunks_and_a_subject_hold_keeps_one(
    settings: Settings, namespace: str, ingest_channel: grpc.Channel, protection: Any
) -> None:
    documents = document_service_pb2_grpc.DocumentServiceStub(ingest_channel)
    for key, collection in (("doc:faq-1", "faq"), ("doc:faq-2", "faq"), ("doc:manual", "manual")):
        request = document_service_pb2.RetainRequest(
            namespace=namespace, natural_key=key, title=key, content=f"# {key}\n\nAnswers about {key}."
        )
        request.meta.update({"collection": collection})
        documents.Retain(request, timeout=120)
    message = dp.RetentionRule(namespace=namespace, data_class="documents", selector="faq")
    message.max_age.FromTimedelta(timedelta(days=7))
    protection.SetRetentionRule(dp.SetRetentionRuleRequest(rule=message), timeout=30)

    def stored() -> dict[str, int]:
        query = (
            "SELECT g.natural_key, (SELECT count(*) FROM chunks c WHERE c.namespace = g.namespace"
            " AND c.node_key = g.natural_key) FROM graph_nodes g WHERE g.namespace = %s"
            " AND g.node_type = 'document'"
        )
        rows = fetch_rows_at(settings.database_url, query, namespace)
        return {str(key): int(chunks) for key, chunks in rows}

    assert set(stored()) == {"doc:faq-1", "doc:faq-2", "doc:manual"} and all(stored().values())
    now = datetime.now(UTC)
    database = Database(settings)
    try:
        enforcer = RetentionEnforcer(
            database, ObservationRemover(database), MemoryWriter(database, NoPassages())
        )
        assert [p.due for p in enforcer.preview(namespace, now + timedelta(days=8))] == [2]
        enforcer.enforce(now + timedelta(days=5), (namespace,))  # five days old: kept
        assert set(stored()) == {"doc:faq-1", "doc:faq-2", "doc:manual"}
        hold = protection.CreateLegalHold(
            dp.CreateLegalHoldRequest(namespace=namespace, subject_key="doc:faq-2", reason="dispute"),
            timeout=30,
        ).hold
        outcome = enforcer.enforce(now + timedelta(days=8), (namespace,))  # eight days old: the faq goes
        assert outcome[0].deleted == 1 and outcome[0].blocked_by_hold == hold.hold_id
        assert set(stored()) == {"doc:faq-2", "doc:manual"}  # held, and of another collection
        protection.LiftLegalHold(
            dp.LiftLegalHoldRequest(namespace=namespace, hold_id=hold.hold_id), timeout=30
        )
        enforcer.enforce(now + timedelta(days=8), (namespace,))
        assert set(stored()) == {"doc:manual"}
        audited = "SELECT props -> 'details' ->> 'reason' FROM audit_events WHERE namespace = %s"
        query = audited + " AND action = 'delete' AND target_key LIKE 'doc:faq-%%'"
        reasons = fetch_rows_at(settings.database_url, query, namespace)
        assert sorted(str(r[0]) for r in reasons) == ["retention documents/faq"] * 2  # audited per document
        query = "SELECT props -> 'details' FROM audit_events WHERE namespace = %s AND action = 'retention_rule.set'"
        rule_set = fetch_rows_at(settings.database_url, query, namespace)
        assert [row[0] for row in rule_set] == [
            {"data_class": "documents", "selector": "faq", "max_age_seconds": 7 * 86400}
        ]
    finally:
        database.close()


def test_personal_data_of_a_category_ages_out_whatever_holds_it(
    settings: Settings, namespace: str, ingest_channel: grpc.Channel, protection: Any
) -> None:
    now = datetime.now(UTC)
    marked = [
        {
            **observation_of(namespace, 1, "chat", now, "Write to me at dana@example.org"),
            "pii_categories": ["email"],
        },
        {**observation_of(namespace, 2, "chat", now, "Call me on +1 555 0100"), "pii_categories": ["phone"]},
        observation_of(namespace, 3, "chat", now, "The build is green again"),
    ]
    record_all(ingest_channel, marked)
    documents = document_service_pb2_grpc.DocumentServiceStub(ingest_channel)
    request = document_service_pb2.RetainRequest(
        namespace=namespace,
        natural_key="doc:contacts",
        title="Contacts",
        content="# Contacts\n\nMail the team.",
    )
    request.pii = True
    request.pii_categories.append("email")
    documents.Retain(request, timeout=120)
    message = dp.RetentionRule(namespace=namespace, data_class="personal_data", selector="email")
    message.max_age.FromTimedelta(timedelta(days=30))
    protection.SetRetentionRule(dp.SetRetentionRuleRequest(rule=message), timeout=30)
    with pytest.raises(grpc.RpcError) as bad:
        bad_rule = dp.RetentionRule(namespace=namespace, data_class="personal_data", selector="E-Mail")
        bad_rule.max_age.FromTimedelta(timedelta(days=30))
        protection.SetRetentionRule(dp.SetRetentionRuleRequest(rule=bad_rule), timeout=30)
    assert [v.field for v in rpc_failure(bad.value).violations] == ["rule.selector"]

    def stored() -> tuple[list[str], list[str]]:
        url = settings.database_url
        observations = fetch_rows_at(
            url, "SELECT source_external_id FROM observations WHERE namespace = %s ORDER BY 1", namespace
        )
        nodes = fetch_rows_at(url, "SELECT DISTINCT node_key FROM chunks WHERE namespace = %s ORDER BY 1", namespace)
        return [str(r[0]) for r in observations], [str(r[0]) for r in nodes]

    observations, nodes = stored()
    assert observations == ["e1", "e2", "e3"] and "doc:contacts" in nodes and len(nodes) == 4
    database = Database(settings)
    try:
        enforcer = RetentionEnforcer(
            database, ObservationRemover(database), MemoryWriter(database, NoPassages())
        )
        assert [p.due for p in enforcer.preview(namespace, now + timedelta(days=20))] == [0]
        assert [p.due for p in enforcer.preview(namespace, now + timedelta(days=31))] == [2]
        enforcer.enforce(now + timedelta(days=20), (namespace,))
        assert stored() == (observations, nodes)  # 20 days old: kept
        outcome = enforcer.enforce(now + timedelta(days=31), (namespace,))
        assert outcome[0].deleted == 2  # the e-mail observation and the e-mail document
        left_observations, left_nodes = stored()
        assert left_observations == ["e2", "e3"] and "doc:contacts" not in left_nodes and len(left_nodes) == 2
    finally:
        database.close()


def test_audit_events_age_out_only_past_the_floor_a_hold_stops_it_and_the_trail_says_so(
    settings: Settings, namespace: str, protection: Any
) -> None:
    database = Database(settings)
    trail = AuditTrail(database)
    old = [
        trail.record(AuditEventInput(namespace=namespace, action="export", trace_id=f"t-{n}", principal="p"))
        for n in range(3)
    ]

    def rule(days: int) -> None:
        message = dp.RetentionRule(namespace=namespace, data_class="audit_events")
        message.max_age.FromTimedelta(timedelta(days=days))
        protection.SetRetentionRule(dp.SetRetentionRuleRequest(rule=message), timeout=30)

    with pytest.raises(grpc.RpcError) as below_floor:  # the operator's floor is 365 days
        rule(30)
    failure = rpc_failure(below_floor.value)
    assert failure.code == grpc.StatusCode.INVALID_ARGUMENT
    assert [v.field for v in failure.violations] == ["rule.max_age"]
    rule(366)

    def stored() -> tuple[set[str], set[str], set[str]]:
        url = settings.database_url
        rows = fetch_rows_at(url, "SELECT event_id FROM audit_events WHERE namespace = %s", namespace)
        audit_nodes = "node_type IN ('audit_event', 'pc_trace')"
        nodes = fetch_rows_at(
            url, f"SELECT natural_key FROM graph_nodes WHERE namespace = %s AND {audit_nodes}", namespace
        )
        keys = {str(n[0]) for n in nodes}
        return (
            {str(r[0]) for r in rows},
            {k for k in keys if k.startswith("audit_event:")},
            keys - {k for k in keys if k.startswith("audit_event:")},
        )

    now = datetime.now(UTC)
    enforcer = RetentionEnforcer(
        database, ObservationRemover(database), MemoryWriter(database, NoPassages())
    )
    try:
        before, vertices, _ = stored()
        assert {e.event_id for e in old} <= before and len(vertices) == len(before)
        enforcer.enforce(now + timedelta(days=300), (namespace,))  # 300 days old: younger than the rule
        assert stored()[0] == before
        hold = protection.CreateLegalHold(
            dp.CreateLegalHoldRequest(namespace=namespace, reason="audit under review"), timeout=30
        ).hold
        outcome = enforcer.enforce(now + timedelta(days=400), (namespace,))
        assert [o.blocked_by_hold for o in outcome] == [hold.hold_id] and stored()[0] >= before
        protection.LiftLegalHold(
            dp.LiftLegalHoldRequest(namespace=namespace, hold_id=hold.hold_id), timeout=30
        )
        outcome = enforcer.enforce(now + timedelta(days=400), (namespace,))  # 400 days old: past the rule
        left, vertices, anchors = stored()
        assert outcome[0].deleted >= len(before) and not (left & before)
        assert vertices == {f"audit_event:{event_id}" for event_id in left}
        assert not {f"pc_trace:t-{n}" for n in range(3)} & anchors  # anchors of emptied traces went too
        query = "SELECT props FROM audit_events WHERE namespace = %s AND target_key = 'audit_events'"
        kept = fetch_rows_at(settings.database_url, query, namespace)
        details = [row[0]["details"] for row in kept]
        assert [d["deleted"] for d in details] == [outcome[0].deleted]  # the trail says it was shortened
        protection.DeleteRetentionRule(
            dp.DeleteRetentionRuleRequest(namespace=namespace, data_class="audit_events"), timeout=30
        )
        query = "SELECT action, target_key FROM audit_events WHERE namespace = %s AND action LIKE 'retention_rule.%%'"
        changes = fetch_rows_at(settings.database_url, query + " ORDER BY recorded_at", namespace)
        # the rule set before the sweep went with the old events; its removal is on record
        assert changes[-1] == ("retention_rule.delete", "audit_events/*")
    finally:
        database.close()
