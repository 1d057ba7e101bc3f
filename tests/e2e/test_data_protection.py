"""Legal holds, retention with a moved clock, erasure of a memory user with summaries, erasure killed
with SIGKILL mid-way, and erasure while writers name the subject: real servers, real database."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
import psycopg
import pytest
from google.protobuf import json_format
from google.rpc import error_details_pb2, status_pb2
from memory_service_grpc_client import rpc_failure
from memory_service_grpc_client.memory.v1 import (
    data_protection_service_pb2 as dp,
)
from memory_service_grpc_client.memory.v1 import (
    data_protection_service_pb2_grpc,
    document_service_pb2,
    document_service_pb2_grpc,
    memory_service_pb2,
    memory_service_pb2_grpc,
    observation_service_pb2,
    observation_service_pb2_grpc,
)
from typer.testing import CliRunner

from common.domain.audit import AuditEventInput, AuditTrail
from common.kernel.config import Settings
from common.storage.database import Database
from ingest_service.data_protection.retention import RetentionEnforcer
from ingest_service.memories.maintenance import MemoryMaintenance
from ingest_service.memories.writer import MemoryWriter
from ingest_service.observations.removal import ObservationRemover
from memory_service_tools.cli.app import app
from tests.e2e.data_protection_helpers import debian_slice, record_all, residue

pytestmark = pytest.mark.e2e


def _error_info(error: grpc.RpcError) -> error_details_pb2.ErrorInfo:
    for key, value in error.trailing_metadata() or ():  # type: ignore[attr-defined]
        if key == "grpc-status-details-bin":
            status = status_pb2.Status.FromString(value)
            for detail in status.details:
                info = error_details_pb2.ErrorInfo()
                if detail.Unpack(info):
                    return info
    raise AssertionError("no ErrorInfo")


def _held(call: Any, hold_id: str) -> None:
    with pytest.raises(grpc.RpcError) as refused:
        call()
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION, refused.value.details()
    info = _error_info(refused.value)
    assert info.reason == "LEGAL_HOLD" and info.metadata["hold_id"] == hold_id
    assert hold_id in refused.value.details()


class _NoPassages:
    def encode_passages(self, texts: Any) -> Any:
        raise AssertionError("retention writes no text")


@pytest.fixture
def protection(ingest_channel: grpc.Channel) -> Any:
    return data_protection_service_pb2_grpc.DataProtectionServiceStub(ingest_channel)


def _observation(namespace: str, n: int, kind: str, occurred: datetime, text: str) -> dict[str, Any]:
    return {
        "namespace": namespace,
        "source": {"system": "test", "stream": "s", "external_id": f"e{n}"},
        "kind": kind,
        "occurred_at": occurred.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "actor": {"type": "person", "id": f"p{n}"},
        "content": text,
    }


def _memories(ingest: grpc.Channel, user: str, texts: list[str]) -> list[str]:
    stub = memory_service_pb2_grpc.MemoryServiceStub(ingest)
    request = json_format.ParseDict(
        {"userId": user, "memories": [{"text": t, "idempotencyKey": str(i)} for i, t in enumerate(texts)]},
        memory_service_pb2.AddMemoriesRequest(),
    )
    response = stub.AddMemories(request, timeout=120)
    assert all(r.memory_id for r in response.results), response
    return [r.memory_id for r in response.results]


def _memory_namespace(settings: Settings, user: str) -> str:
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        return str(
            conn.execute("SELECT namespace FROM memories WHERE user_id = %s LIMIT 1", (user,)).fetchone()[0]
        )


def test_a_hold_stops_every_deletion_until_lifted(
    settings: Settings, namespace: str, ingest_channel: grpc.Channel, protection: Any
) -> None:
    now = datetime.now(UTC)
    record_all(ingest_channel, [_observation(namespace, 1, "note", now - timedelta(days=40), "old note")])
    documents = document_service_pb2_grpc.DocumentServiceStub(ingest_channel)
    documents.Retain(
        document_service_pb2.RetainRequest(namespace=namespace, natural_key="doc:a", content="# A\n\ntext\n"),
        timeout=120,
    )
    with pytest.raises(grpc.RpcError) as bad:
        protection.CreateLegalHold(dp.CreateLegalHoldRequest(namespace="bad namespace!"), timeout=30)
    assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    hold = protection.CreateLegalHold(
        dp.CreateLegalHoldRequest(namespace=namespace, reason="litigation 2026-17"), timeout=30
    ).hold
    assert hold.hold_id.startswith("hold-") and hold.create_principal
    listed = protection.ListLegalHolds(dp.ListLegalHoldsRequest(namespace=namespace), timeout=30).holds
    assert [h.hold_id for h in listed] == [hold.hold_id]
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        observation_id = conn.execute(
            "SELECT observation_id FROM observations WHERE namespace = %s", (namespace,)
        ).fetchone()[0]
    observations = observation_service_pb2_grpc.ObservationServiceStub(ingest_channel)
    _held(
        lambda: documents.DeleteNode(
            document_service_pb2.DeleteNodeRequest(namespace=namespace, natural_key="doc:a"), timeout=30
        ),
        hold.hold_id,
    )
    _held(
        lambda: observations.PurgeObservation(
            observation_service_pb2.PurgeObservationRequest(
                namespace=namespace, observation_id=observation_id
            ),
            timeout=30,
        ),
        hold.hold_id,
    )
    _held(
        lambda: protection.EraseSubject(
            dp.EraseSubjectRequest(namespace=namespace, node_key="person:p1", confirm=True), timeout=30
        ),
        hold.hold_id,
    )
    # A preview is answered under the hold, and names it: what the erasure removes once it is lifted.
    held_preview = protection.EraseSubject(
        dp.EraseSubjectRequest(namespace=namespace, node_key="doc:a", validate_only=True), timeout=60
    ).receipt
    assert held_preview.validate_only and held_preview.blocked_by_hold == hold.hold_id
    assert held_preview.counts["nodes_deleted"] == 1 and held_preview.counts["chunks_deleted"] >= 1

    # Retention is stopped too, and says so.
    database = Database(settings)
    try:
        enforcer = RetentionEnforcer(
            database, ObservationRemover(database), MemoryWriter(database, _NoPassages())
        )
        protection.SetRetentionRule(
            dp.SetRetentionRuleRequest(
                rule=dp.RetentionRule(
                    namespace=namespace,
                    data_class="observations",
                    max_age=json_format.Parse('"2592000s"', dp.RetentionRule().max_age),
                )
            ),
            timeout=30,
        )
        outcomes = enforcer.enforce(now, (namespace,))
        assert [(o.deleted, o.blocked_by_hold) for o in outcomes] == [(0, hold.hold_id)]
        preview = protection.PreviewRetention(dp.PreviewRetentionRequest(namespace=namespace), timeout=30)
        assert preview.previews[0].due_count == 1 and preview.previews[0].blocked_by_hold == hold.hold_id

        lifted = protection.LiftLegalHold(
            dp.LiftLegalHoldRequest(namespace=namespace, hold_id=hold.hold_id), timeout=30
        ).hold
        assert lifted.lift_principal and lifted.HasField("lift_time")
        with pytest.raises(grpc.RpcError) as again:
            protection.LiftLegalHold(
                dp.LiftLegalHoldRequest(namespace=namespace, hold_id=hold.hold_id), timeout=30
            )
        assert again.value.code() == grpc.StatusCode.NOT_FOUND
        assert [o.deleted for o in enforcer.enforce(now, (namespace,))] == [1]
        unheld = protection.EraseSubject(
            dp.EraseSubjectRequest(namespace=namespace, node_key="doc:a", validate_only=True), timeout=60
        ).receipt
        assert unheld.blocked_by_hold == "" and unheld.counts == held_preview.counts
        documents.DeleteNode(
            document_service_pb2.DeleteNodeRequest(namespace=namespace, natural_key="doc:a"), timeout=30
        )
    finally:
        database.close()
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        conn.execute("LOAD 'age'")
        conn.execute('SET search_path = ag_catalog, "$user", public')
        actions = sorted(
            r[0]
            for r in conn.execute(
                "SELECT ag_catalog.agtype_out(v.properties)::text FROM company_brain.n_audit_event v"
                " JOIN graph_nodes g ON g.vertex_id = v.id WHERE g.namespace = %s",
                (namespace,),
            )
        )
    assert any('"legal_hold.set"' in a for a in actions) and any('"legal_hold.lift"' in a for a in actions)


def test_a_subject_hold_stops_memory_deletion_and_expiry(
    settings: Settings, ingest_channel: grpc.Channel, protection: Any
) -> None:
    user = "u-" + uuid.uuid4().hex[:10]
    stub = memory_service_pb2_grpc.MemoryServiceStub(ingest_channel)
    added = stub.AddMemories(
        json_format.ParseDict(
            {
                "userId": user,
                "memories": [
                    {"text": "A note to keep for the audit.", "idempotencyKey": "1"},
                    {"text": "A note that expires.", "idempotencyKey": "2", "ttl": "3600s"},
                ],
            },
            memory_service_pb2.AddMemoriesRequest(),
        ),
        timeout=120,
    ).results
    memory_id, expiring = added[0].memory_id, added[1].memory_id
    namespace = _memory_namespace(settings, user)
    holds = [
        protection.CreateLegalHold(
            dp.CreateLegalHoldRequest(namespace=namespace, subject_key=key, reason="audit"), timeout=30
        ).hold
        for key in (memory_id, expiring)
    ]
    _held(
        lambda: stub.DeleteMemory(
            memory_service_pb2.DeleteMemoryRequest(memory_id=memory_id, user_id=user), timeout=30
        ),
        holds[0].hold_id,
    )
    database = Database(settings)
    try:
        maintenance = MemoryMaintenance(database, MemoryWriter(database, _NoPassages()), settings)
        later = datetime.now(UTC) + timedelta(days=30)

        def exists(key: str) -> bool:
            with psycopg.connect(settings.database_url, autocommit=True) as conn:
                return (
                    conn.execute("SELECT 1 FROM memories WHERE memory_id = %s", (key,)).fetchone() is not None
                )

        maintenance.run(now=later, namespaces=[namespace])  # the namespace is shared: other memories may go
        assert exists(expiring)  # held: kept
        for hold in holds:
            protection.LiftLegalHold(
                dp.LiftLegalHoldRequest(namespace=namespace, hold_id=hold.hold_id), timeout=30
            )
        maintenance.run(now=later, namespaces=[namespace])
        assert not exists(expiring) and exists(memory_id)
    finally:
        database.close()
    stub.DeleteMemory(memory_service_pb2.DeleteMemoryRequest(memory_id=memory_id, user_id=user), timeout=30)


def test_retention_deletes_exactly_the_classes_whose_time_has_come(
    settings: Settings, namespace: str, ingest_channel: grpc.Channel, protection: Any
) -> None:
    now = datetime.now(UTC)
    record_all(
        ingest_channel,
        [
            _observation(namespace, 1, "chat", now - timedelta(days=10), "chat ten days ago"),
            _observation(namespace, 2, "chat", now - timedelta(days=1), "chat yesterday"),
            _observation(namespace, 3, "ticket", now - timedelta(days=10), "ticket ten days ago"),
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
        with psycopg.connect(settings.database_url, autocommit=True) as conn:
            return sorted(
                r[0]
                for r in conn.execute(
                    "SELECT source_external_id FROM observations WHERE namespace = %s", (namespace,)
                )
            )

    database = Database(settings)
    try:
        enforcer = RetentionEnforcer(
            database, ObservationRemover(database), MemoryWriter(database, _NoPassages())
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
        with psycopg.connect(settings.database_url, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT g.natural_key, (SELECT count(*) FROM chunks c WHERE c.namespace = g.namespace"
                " AND c.node_key = g.natural_key) FROM graph_nodes g WHERE g.namespace = %s"
                " AND g.node_type = 'document'",
                (namespace,),
            ).fetchall()
        return {str(key): int(chunks) for key, chunks in rows}

    assert set(stored()) == {"doc:faq-1", "doc:faq-2", "doc:manual"} and all(stored().values())
    now = datetime.now(UTC)
    database = Database(settings)
    try:
        enforcer = RetentionEnforcer(
            database, ObservationRemover(database), MemoryWriter(database, _NoPassages())
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
        with psycopg.connect(settings.database_url, autocommit=True) as conn:
            reasons = conn.execute(
                "SELECT props -> 'details' ->> 'reason' FROM audit_events WHERE namespace = %s AND action = 'delete'"
                " AND target_key LIKE 'doc:faq-%%'",
                (namespace,),
            ).fetchall()
        assert sorted(str(r[0]) for r in reasons) == ["retention documents/faq"] * 2  # audited per document
        with psycopg.connect(settings.database_url, autocommit=True) as conn:
            rule_set = conn.execute(
                "SELECT props -> 'details' FROM audit_events WHERE namespace = %s AND action = 'retention_rule.set'",
                (namespace,),
            ).fetchall()
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
            **_observation(namespace, 1, "chat", now, "Write to me at dana@example.org"),
            "pii_categories": ["email"],
        },
        {**_observation(namespace, 2, "chat", now, "Call me on +1 555 0100"), "pii_categories": ["phone"]},
        _observation(namespace, 3, "chat", now, "The build is green again"),
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
        with psycopg.connect(settings.database_url, autocommit=True) as conn:
            observations = conn.execute(
                "SELECT source_external_id FROM observations WHERE namespace = %s ORDER BY 1", (namespace,)
            ).fetchall()
            nodes = conn.execute(
                "SELECT DISTINCT node_key FROM chunks WHERE namespace = %s ORDER BY 1", (namespace,)
            ).fetchall()
        return [str(r[0]) for r in observations], [str(r[0]) for r in nodes]

    observations, nodes = stored()
    assert observations == ["e1", "e2", "e3"] and "doc:contacts" in nodes and len(nodes) == 4
    database = Database(settings)
    try:
        enforcer = RetentionEnforcer(
            database, ObservationRemover(database), MemoryWriter(database, _NoPassages())
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
        with psycopg.connect(settings.database_url, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT event_id FROM audit_events WHERE namespace = %s", (namespace,)
            ).fetchall()
            nodes = conn.execute(
                "SELECT natural_key FROM graph_nodes WHERE namespace = %s AND node_type IN ('audit_event', 'pc_trace')",
                (namespace,),
            ).fetchall()
        keys = {str(n[0]) for n in nodes}
        return (
            {str(r[0]) for r in rows},
            {k for k in keys if k.startswith("audit_event:")},
            keys - {k for k in keys if k.startswith("audit_event:")},
        )

    now = datetime.now(UTC)
    enforcer = RetentionEnforcer(
        database, ObservationRemover(database), MemoryWriter(database, _NoPassages())
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
        with psycopg.connect(settings.database_url, autocommit=True) as conn:
            kept = conn.execute(
                "SELECT props FROM audit_events WHERE namespace = %s AND target_key = 'audit_events'",
                (namespace,),
            ).fetchall()
        details = [row[0]["details"] for row in kept]
        assert [d["deleted"] for d in details] == [outcome[0].deleted]  # the trail says it was shortened
        protection.DeleteRetentionRule(
            dp.DeleteRetentionRuleRequest(namespace=namespace, data_class="audit_events"), timeout=30
        )
        with psycopg.connect(settings.database_url, autocommit=True) as conn:
            changes = conn.execute(
                "SELECT action, target_key FROM audit_events WHERE namespace = %s AND action LIKE 'retention_rule.%%'"
                " ORDER BY recorded_at",
                (namespace,),
            ).fetchall()
        # the rule set before the sweep went with the old events; its removal is on record
        assert changes[-1] == ("retention_rule.delete", "audit_events/*")
    finally:
        database.close()


def test_erasing_a_memory_user_removes_memories_and_the_summaries_that_used_them(
    settings: Settings, ingest_channel: grpc.Channel, protection: Any
) -> None:
    user, other = "u-" + uuid.uuid4().hex[:10], "u-" + uuid.uuid4().hex[:10]
    name = "Dana Whitfield-" + uuid.uuid4().hex[:6]  # a name no other run wrote
    ids = _memories(
        ingest_channel,
        user,
        [
            f"{name} prefers morning meetings before nine.",
            f"{name} works on the billing migration this quarter.",
            f"{name} asked for invoices in PDF.",
        ],
    )
    kept = _memories(ingest_channel, other, ["The other user likes tea."])
    stub = memory_service_pb2_grpc.MemoryServiceStub(ingest_channel)
    summary = stub.SummarizeMemories(
        memory_service_pb2.SummarizeMemoriesRequest(memory_ids=ids[:2], user_id=user), timeout=120
    ).summary
    namespace = _memory_namespace(settings, user)
    receipt = protection.EraseSubject(
        dp.EraseSubjectRequest(namespace=namespace, memory_user=user, confirm=True), timeout=300
    ).receipt
    assert receipt.counts["memories_deleted"] == 4  # three originals and their summary
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM memories WHERE user_id = %s", (user,)).fetchone()[0] == 0
        assert (
            conn.execute("SELECT count(*) FROM memories WHERE memory_id = %s", (kept[0],)).fetchone()[0] == 1
        )
        for value in (name, user, summary.memory_id, *ids):
            assert residue(conn, settings.graph_name, value) == {}, value


_KILLABLE = """
import sys
from common.kernel.config import Settings
from common.storage.database import Database
from ingest_service.data_protection.erasure import EraseInput, SubjectEraser
from ingest_service.documents.node_deletion import NodeDeleter
from ingest_service.observations.removal import ObservationRemover
import ingest_service.data_protection.erasure as erasure

database = Database(Settings())
original = erasure.SubjectEraser._delete_node
calls = []
def slow(self, conn, namespace, key, reason):
    calls.append(key)
    if len(calls) == 3:
        print("MIDWAY", flush=True)
        import time; time.sleep(600)
    return original(self, conn, namespace, key, reason)
erasure.SubjectEraser._delete_node = slow
eraser = SubjectEraser(database, ObservationRemover(database), NodeDeleter(database))
eraser.erase(EraseInput(namespace=sys.argv[1], node_key=sys.argv[2], confirm=True))
print("DONE", flush=True)
"""


def test_erasure_killed_midway_changes_nothing_and_a_retry_completes(
    settings: Settings, namespace: str, ingest_channel: grpc.Channel, protection: Any
) -> None:
    observations, subject_key, person = debian_slice(namespace, 200)
    record_all(ingest_channel, observations)
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        before = residue(conn, settings.graph_name, person)
    assert before
    child = subprocess.Popen(
        [sys.executable, "-c", _KILLABLE, namespace, subject_key],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "CB_DATABASE_URL": settings.database_url},
        cwd=os.getcwd(),
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()  # the transaction has redacted observations and deleted nodes
        assert line.strip() == "MIDWAY", line
        os.kill(child.pid, signal.SIGKILL)
        child.wait(30)
    finally:
        if child.poll() is None:
            child.kill()
    deadline = time.monotonic() + 30
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        while time.monotonic() < deadline:  # the server notices the dead client and rolls back
            if residue(conn, settings.graph_name, person) == before:
                break
            time.sleep(0.5)
        assert residue(conn, settings.graph_name, person) == before  # all or nothing: nothing
        assert (
            conn.execute(
                "SELECT count(*) FROM erasure_receipts WHERE namespace = %s", (namespace,)
            ).fetchone()[0]
            == 0
        )
    receipt = protection.EraseSubject(
        dp.EraseSubjectRequest(namespace=namespace, node_key=subject_key, confirm=True), timeout=600
    ).receipt
    assert receipt.counts["observations_redacted"] > 0
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        assert residue(conn, settings.graph_name, person) == {}


def test_erasure_while_writers_name_the_subject_ends_without_deadlock_or_residue(
    settings: Settings, namespace: str, ingest_channel: grpc.Channel, protection: Any
) -> None:
    observations, subject_key, person = debian_slice(namespace, 200)
    record_all(ingest_channel, observations)
    stop = threading.Event()
    errors: list[BaseException] = []
    written = [0]

    def writer(worker: int) -> None:
        n = 0
        while not stop.is_set():
            n += 1
            item = _observation(
                namespace, 10_000 * worker + n, "note", datetime.now(UTC), f"{person} uploaded again"
            )
            item["actor"] = {"type": "person", "id": person}
            try:
                record_all(ingest_channel, [item])
                written[0] += 1
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
                return

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(3)]
    for thread in threads:
        thread.start()
    time.sleep(1.0)
    started = time.monotonic()
    try:
        first = protection.EraseSubject(
            dp.EraseSubjectRequest(namespace=namespace, node_key=subject_key, confirm=True), timeout=120
        ).receipt
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
    took = time.monotonic() - started
    assert not errors, errors[:1]
    assert not any(t.is_alive() for t in threads)
    assert first.counts["observations_redacted"] > 0 and took < 120
    # What the writers committed after the erasure is new data; a second erasure takes it, then none is left.
    protection.EraseSubject(
        dp.EraseSubjectRequest(namespace=namespace, node_key=subject_key, confirm=True), timeout=120
    )
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        assert residue(conn, settings.graph_name, person) == {}
    assert written[0] > 0


def test_the_cli_previews_erases_reads_the_receipt_holds_and_explains_retention(
    namespace: str, ingest_channel: grpc.Channel, ingest_host: Any, query_host: Any
) -> None:
    email = f"jo-{uuid.uuid4().hex[:6]}@example.net"
    record_all(ingest_channel, [_observation(namespace, 1, "mail", datetime.now(UTC), f"mail from {email}")])
    base = ["--ingest-addr", f"127.0.0.1:{ingest_host.port}", "--query-addr", f"127.0.0.1:{query_host.port}"]
    runner = CliRunner()

    def cb(*args: str) -> str:
        result = runner.invoke(app, [*base, *args])
        assert result.exit_code == 0, result.output
        return result.output

    preview = cb("erase", "-n", namespace, "--value", email)
    assert "preview (nothing erased)" in preview and "observations_redacted" in preview
    assert "1" in preview.split("observations_redacted")[1].split("\n")[0]
    done = cb("erase", "-n", namespace, "--value", email, "--yes", "--json")
    receipt_id = json_format.Parse(done, dp.EraseSubjectResponse()).receipt.receipt_id
    assert email not in done
    assert receipt_id in cb("receipt", receipt_id, "-n", namespace)
    held = cb("hold", "set", "-n", namespace, "--reason", "case 7")
    hold_id = held.split()[0]
    assert hold_id in cb("hold", "list", "-n", namespace)
    cb("retention", "set", "observations", "--days", "30", "-n", namespace, "--selector", "mail")
    shown = cb("retention", "show", "-n", namespace)
    assert "observations/mail: kept 30 days" in shown and f"stopped by legal hold {hold_id}" in shown
    cb("hold", "lift", hold_id, "-n", namespace)
    assert "no retention rules" not in cb("retention", "show", "-n", namespace)
