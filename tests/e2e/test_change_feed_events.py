"""The change feed's events of memory records, vault runs and snapshots (docs/how-to/change-feed.md, "Event
types"): each write done through its real path (the gRPC services, the enrichment job, the maintenance
run), each event read back through ChangeFeedService.WatchChanges over a real channel, in cursor order,
with the type, namespace, item key and the payload fields the how-to promises.

* memory: ``added`` (AddMemories), ``updated`` (UpdateMemory of the text), ``enriched`` (the enrichment
  job of that version), ``tier_changed`` (the tier policy), ``expired`` (the expiry sweep of a memory
  whose time ran out), ``deleted`` (DeleteMemory);
* vault: ``run_finished`` of each IngestVault run, ``document.swept`` of the document the second run no
  longer holds;
* snapshot: ``reconciled`` of a Reconcile.
"""

from __future__ import annotations

import time
import uuid
from datetime import UTC
from datetime import datetime
from datetime import timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import field_mask_pb2
from google.protobuf import json_format

from common.kernel.config import Settings
from common.kernel.memory_names import memory_namespace
from common.storage.database import Database
from common.text_models.embeddings.provider import EmbeddingProvider
from ingest_service.memories.enrichment.jobs import EnrichmentJob
from ingest_service.memories.enrichment.rule_enricher import RuleEnricher
from ingest_service.memories.maintenance import MemoryMaintenance
from ingest_service.memories.writer import MemoryWriter
from memory_service_grpc_client.memory.v1 import memory_query_service_pb2
from memory_service_grpc_client.memory.v1 import memory_query_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import memory_service_pb2
from memory_service_grpc_client.memory.v1 import memory_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import snapshot_service_pb2
from memory_service_grpc_client.memory.v1 import snapshot_service_pb2_grpc
from tests.e2e.change_feed_helpers import drain_changes
from tests.e2e.vault_helpers import ingest
from tests.e2e.vault_helpers import write

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]


def _changes(channel: grpc.Channel, namespace: str, event_types: list[str]) -> list[Any]:
    """Every change of ``namespace`` of those types committed so far: the stream up to its first
    heartbeat (everything committed is replayed before it)."""
    changes = drain_changes(channel, namespace, event_types=event_types)
    cursors = [change.cursor for change in changes]
    assert cursors == sorted(set(cursors)), "cursor order, each once"
    assert all(change.namespace == namespace for change in changes)
    return changes


def _payload(change: Any) -> dict[str, Any]:
    return dict(json_format.MessageToDict(change.payload))


def test_memory_writes_arrive_as_their_events_in_cursor_order(
    settings: Settings,
    database: Database,
    provider: EmbeddingProvider,
    ingest_channel: grpc.Channel,
    query_channel: grpc.Channel,
) -> None:
    user, project = "u-" + uuid.uuid4().hex[:12], "prj-" + uuid.uuid4().hex[:10]
    metadata = (("x-project-id", project),)
    write_stub = memory_service_pb2_grpc.MemoryServiceStub(ingest_channel)
    read_stub = memory_query_service_pb2_grpc.MemoryQueryServiceStub(query_channel)
    added = write_stub.AddMemories(
        json_format.ParseDict(
            {
                "userId": user,
                "memories": [
                    {"text": "Release notes are drafted on Mondays.", "tags": ["process"], "importance": 0.4},
                    {"text": "The staging password rotates hourly.", "ttl": "2s"},
                ],
            },
            memory_service_pb2.AddMemoriesRequest(),
        ),
        timeout=120,
        metadata=metadata,
    ).results
    kept, fleeting = added[0].memory_id, added[1].memory_id
    record = read_stub.GetMemory(
        memory_query_service_pb2.GetMemoryRequest(memory_id=kept, user_id=user), timeout=60, metadata=metadata
    ).memory
    scope = record.scope
    namespace = memory_namespace(scope.organization_id, scope.environment, scope.project_id)

    updated = write_stub.UpdateMemory(
        memory_service_pb2.UpdateMemoryRequest(
            memory_id=kept,
            user_id=user,
            memory=memory_service_pb2.NewMemory(text="Release notes are drafted on Tuesdays by Dana."),
            update_mask=field_mask_pb2.FieldMask(paths=["text"]),
        ),
        timeout=120,
        metadata=metadata,
    ).memory
    assert updated.version == 2
    writer = MemoryWriter(database, provider)
    assert EnrichmentJob(database, RuleEnricher()).run(namespace, kept, 2)
    maintenance = MemoryMaintenance(database, writer, settings)
    later = datetime.now(UTC) + timedelta(days=settings.memory_warm_after_days + 1)
    assert maintenance.apply_tier_policy(later, [namespace]) == (2, 0)
    time.sleep(2.5)  # the short-lived memory's time runs out (expires_at passes on the database's clock too)
    grace = timedelta(hours=settings.memory_expiry_grace_hours, seconds=1)
    expired_events, refused = maintenance.sweep_expired(datetime.now(UTC) + grace, [namespace])
    assert len(expired_events) == 1 and not refused
    write_stub.DeleteMemory(
        memory_service_pb2.DeleteMemoryRequest(memory_id=kept, user_id=user, reason="obsolete"),
        timeout=60,
        metadata=metadata,
    )

    changes = _changes(query_channel, namespace, ["memory.*"])
    # AddMemories inserts a batch in one statement, and the tier policy moves both memories in one
    # statement: the events of a statement come in item key order.
    both = sorted([kept, fleeting])
    assert [(c.event_type, c.item_key) for c in changes] == [
        ("memory.added", both[0]),
        ("memory.added", both[1]),
        ("memory.updated", kept),
        ("memory.enriched", kept),
        ("memory.tier_changed", both[0]),
        ("memory.tier_changed", both[1]),
        ("memory.expired", fleeting),
        ("memory.deleted", kept),
    ]
    payloads = {(c.event_type, c.item_key): _payload(c) for c in changes}
    first, second = payloads["memory.added", kept], payloads["memory.added", fleeting]
    assert first["user_id"] == user and first["project_id"] == project
    assert (first["tier"], first["version"], first["tags"]) == ("hot", 1, ["process"])
    assert first["importance"] == pytest.approx(0.4)
    assert first["expires_at"] is None and second["expires_at"] is not None
    assert "memory_type" in first
    update = payloads["memory.updated", kept]
    assert (update["version"], update["enriched_version"], update["hidden"]) == (2, 0, False)
    assert (update["tier"], update["previous_tier"], update["user_id"]) == ("hot", "hot", user)
    enriched = payloads["memory.enriched", kept]
    assert (enriched["version"], enriched["enriched_version"]) == (2, 2)
    tier = payloads["memory.tier_changed", kept]
    assert (tier["tier"], tier["previous_tier"], tier["version"]) == ("warm", "hot", 2)
    expired = payloads["memory.expired", fleeting]
    assert expired["expires_at"] == second["expires_at"] and expired["user_id"] == user
    deleted = payloads["memory.deleted", kept]
    assert (deleted["user_id"], deleted["project_id"], deleted["tier"]) == (user, project, "warm")


def test_vault_runs_a_swept_document_and_a_reconciled_snapshot_arrive_as_their_events(
    ingest_channel: grpc.Channel, query_channel: grpc.Channel, namespace: str, tmp_path: Path
) -> None:
    vault = tmp_path / "vault"
    for name in ("alpha", "beta", "gamma", "delta"):
        write(vault, f"{name}.md", f"# {name.title()}\n\nAbout {name}.\n")
    first = ingest(ingest_channel, vault, namespace)
    (vault / "delta.md").unlink()
    second = ingest(ingest_channel, vault, namespace)
    assert second.swept and len(second.swept_keys) == 1
    swept_key = second.swept_keys[0]

    snapshots = snapshot_service_pb2_grpc.SnapshotServiceStub(ingest_channel)
    reconciled = snapshots.Reconcile(
        json_format.ParseDict(
            {
                "namespace": namespace,
                "source": "archive",
                "scope": "suite:trixie",
                "snapshot_id": "s-1",
                "snapshot_time": "2025-01-02T00:00:00Z",
                "entities": [{"key": "package:zlib", "attributes": {"section": "libs"}}],
                "facts": [
                    {"subject": "package:zlib", "predicate": "HAS_VERSION", "object": "version:zlib@1.3"}
                ],
            },
            snapshot_service_pb2.ReconcileRequest(),
        ),
        timeout=120,
    )
    assert not reconciled.unchanged

    changes = _changes(query_channel, namespace, ["vault.*", "document.swept", "snapshot.*"])
    assert [(c.event_type, c.item_key) for c in changes] == [
        ("vault.run_finished", first.run_id),
        ("document.swept", swept_key),
        ("vault.run_finished", second.run_id),
        ("snapshot.reconciled", "archive/suite:trixie/s-1"),
    ]
    run, swept, rerun, snapshot = (_payload(c) for c in changes)
    for payload in (run, rerun):
        assert payload["status"] == "completed"
        assert {"source", "branch", "commit_sha", "report"} <= payload.keys()
        assert payload["started_at"] <= payload["finished_at"]
    assert swept["source_path"] == "delta.md" and swept["seen_run"] == first.run_id
    assert (snapshot["source"], snapshot["scope"]) == ("archive", "suite:trixie")
    assert snapshot["snapshot_id"] == "s-1"
    assert snapshot["snapshot_time"].startswith("2025-01-02")
    assert snapshot["counts"]["facts_created"] == 1
