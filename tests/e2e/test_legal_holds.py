"""Legal holds on real servers and the real database: a hold on a namespace stops every deletion (DeleteNode,
PurgeObservation, RedactObservation, EraseSubject, retention) until it is lifted, and a hold on a subject
stops the deletion and expiry of that user's memories; each refusal is FAILED_PRECONDITION naming the hold."""

from __future__ import annotations

import uuid
from datetime import UTC
from datetime import datetime
from datetime import timedelta
from typing import Any

import grpc
import psycopg
import pytest
from google.protobuf import json_format

from common.kernel.config import Settings
from common.storage.database import Database
from ingest_service.data_protection.retention import RetentionEnforcer
from ingest_service.memories.maintenance import MemoryMaintenance
from ingest_service.memories.writer import MemoryWriter
from ingest_service.observations.removal import ObservationRemover
from memory_service_grpc_client.memory.v1 import data_protection_service_pb2 as dp
from memory_service_grpc_client.memory.v1 import document_service_pb2
from memory_service_grpc_client.memory.v1 import document_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import memory_service_pb2
from memory_service_grpc_client.memory.v1 import memory_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import observation_service_pb2
from memory_service_grpc_client.memory.v1 import observation_service_pb2_grpc
from tests.e2e.data_protection_helpers import NoPassages
from tests.e2e.data_protection_helpers import assert_held
from tests.e2e.data_protection_helpers import memory_namespace
from tests.e2e.data_protection_helpers import observation_of
from tests.e2e.data_protection_helpers import record_all

pytestmark = pytest.mark.e2e


def test_a_hold_stops_every_deletion_until_lifted(
    settings: Settings, namespace: str, ingest_channel: grpc.Channel, protection: Any
) -> None:
    now = datetime.now(UTC)
    record_all(ingest_channel, [observation_of(namespace, 1, "note", now - timedelta(days=40), "old note")])
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
    assert_held(
        lambda: documents.DeleteNode(
            document_service_pb2.DeleteNodeRequest(namespace=namespace, natural_key="doc:a"), timeout=30
        ),
        hold.hold_id,
    )
    assert_held(
        lambda: observations.PurgeObservation(
            observation_service_pb2.PurgeObservationRequest(
                namespace=namespace, observation_id=observation_id
            ),
            timeout=30,
        ),
        hold.hold_id,
    )
    assert_held(
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
            database, ObservationRemover(database), MemoryWriter(database, NoPassages())
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
    namespace = memory_namespace(settings, user)
    holds = [
        protection.CreateLegalHold(
            dp.CreateLegalHoldRequest(namespace=namespace, subject_key=key, reason="audit"), timeout=30
        ).hold
        for key in (memory_id, expiring)
    ]
    assert_held(
        lambda: stub.DeleteMemory(
            memory_service_pb2.DeleteMemoryRequest(memory_id=memory_id, user_id=user), timeout=30
        ),
        holds[0].hold_id,
    )
    database = Database(settings)
    try:
        maintenance = MemoryMaintenance(database, MemoryWriter(database, NoPassages()), settings)
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
