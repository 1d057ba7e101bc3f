"""Write-time identifier extraction on the real database: idPatterns of the namespace's packs
link episodes and documents to EXISTING nodes with MENTIONS facts of evidence ``extracted``, in the
transaction of the write, idempotently; missing targets are skipped."""

from __future__ import annotations

import uuid
from datetime import UTC
from datetime import datetime
from typing import Any

import pytest

from common.kernel.config import Settings
from common.kernel.identifiers import fact_id
from common.kernel.identifiers import graph_label
from common.packs.domain_packs import PackRegistry
from common.packs.kind_validation import KindValidator
from common.storage.database import Database
from ingest_service.documents.validation import ChunkInput
from ingest_service.documents.validation import PutChunksInput
from ingest_service.documents.validation import RetainInput
from ingest_service.documents.writer import DocumentWriter
from ingest_service.observations.recorder import ObservationRecorder
from tests.integration.test_domain_packs import enable
from tests.unit.test_domain_packs import delivery_pack

pytestmark = pytest.mark.integration

T0 = "2026-03-01T09:00:00Z"


def _observation(
    namespace: str, content: str, assertions: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    return {
        "namespace": namespace,
        "source": {"system": "jira", "stream": "comments", "external_id": uuid.uuid4().hex},
        "kind": "issue.commented",
        "occurred_at": T0,
        "scopes": ["project:alpha"],
        "content": content,
        "assertions": assertions or [],
    }


def _mentions(database: Database, namespace: str) -> list[dict[str, Any]]:
    with database.connection() as conn:
        rows = conn.execute(
            "SELECT fact_id, subject_key, object_key, evidence, confidence, observation_ids, valid_from, valid_to,"
            " scopes FROM facts WHERE namespace = %s AND predicate = 'MENTIONS' ORDER BY subject_key, object_key,"
            " valid_from",
            (namespace,),
        ).fetchall()
    names = ("fact_id", "subject", "object", "evidence", "confidence", "observation_ids", "valid_from")
    return [dict(zip((*names, "valid_to", "scopes"), row)) for row in rows]


def _node_exists(database: Database, namespace: str, key: str) -> bool:
    with database.connection() as conn:
        row = conn.execute(
            "SELECT 1 FROM graph_nodes WHERE namespace = %s AND natural_key = %s", (namespace, key)
        ).fetchone()
    return row is not None


def _edge_count(database: Database, settings: Settings, namespace: str, fact: str) -> int:
    with database.connection() as conn:
        row = conn.execute(
            f'SELECT count(*) FROM "{settings.graph_name}"."{graph_label("predicate", "MENTIONS")}"'
            " WHERE properties @> %s::ag_catalog.agtype",
            (f'{{"namespace": "{namespace}", "fact_id": "{fact}"}}',),
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_observation_content_links_the_episode_to_existing_nodes_only(
    database: Database,
    settings: Settings,
    registry: PackRegistry,
    kinds: KindValidator,
    recorder: ObservationRecorder,
    namespace: str,
) -> None:
    enable(registry, kinds, namespace, delivery_pack(uuid.uuid4().hex), strict=False)
    [setup] = recorder.record_batch([_observation(namespace, "", [{"entity": {"key": "issue:PROJ-123"}}])])
    assert setup.status == "processed"
    raw = _observation(
        namespace,
        "Deploy blocked by PROJ-123; PROJ-999 is unknown; PROJ-123 again. New: PROJ-5",
        [{"entity": {"key": "issue:PROJ-5", "title": "asserted in the same observation"}}],
    )
    [result] = recorder.record_batch([raw])
    assert result.status == "processed"
    episode = f"episode:{result.observation_id}"
    mentions = _mentions(database, namespace)
    assert [(m["subject"], m["object"]) for m in mentions] == [
        (episode, "issue:PROJ-123"),
        (episode, "issue:PROJ-5"),  # the entity asserted by the same observation exists by then
    ]
    first = mentions[0]
    valid_from = datetime(2026, 3, 1, 9, tzinfo=UTC)
    assert first["fact_id"] == fact_id(namespace, episode, "MENTIONS", "issue:PROJ-123", valid_from)
    assert first["evidence"] == "extracted" and first["confidence"] == 1.0
    assert first["observation_ids"] == [result.observation_id] and first["valid_from"] == valid_from
    assert first["valid_to"] is None and first["scopes"] == ["project:alpha"]
    assert _edge_count(database, settings, namespace, first["fact_id"]) == 1
    assert not _node_exists(database, namespace, "issue:PROJ-999")  # no placeholder for a missing target
    again = recorder.record_batch([raw])
    assert not again[0].created and _mentions(database, namespace) == mentions


def test_namespaces_without_packs_extract_nothing(
    database: Database, recorder: ObservationRecorder, namespace: str
) -> None:
    recorder.record_batch([_observation(namespace, "", [{"entity": {"key": "issue:PROJ-1"}}])])
    recorder.record_batch([_observation(namespace, "see PROJ-1")])
    assert _mentions(database, namespace) == []


def test_documents_link_idempotently_and_retain_closes_what_it_no_longer_names(
    database: Database,
    registry: PackRegistry,
    kinds: KindValidator,
    recorder: ObservationRecorder,
    writer: DocumentWriter,
    namespace: str,
) -> None:
    enable(registry, kinds, namespace, delivery_pack(uuid.uuid4().hex), strict=True)
    recorder.record_batch(
        [
            _observation(
                namespace, "", [{"entity": {"key": "issue:PROJ-1"}}, {"entity": {"key": "issue:PROJ-2"}}]
            )
        ]
    )
    doc = RetainInput(
        namespace=namespace,
        natural_key="doc:postmortem",
        title="Postmortem",
        content="# Outage\n\nRoot cause tracked in PROJ-1 and PROJ-404.",
        scopes=("workspace:sre",),
        source_path="docs/postmortem.md",
    )
    writer.retain(doc)
    mentions = _mentions(database, namespace)
    assert [(m["subject"], m["object"], m["evidence"]) for m in mentions] == [
        ("doc:postmortem", "issue:PROJ-1", "extracted")
    ]
    assert mentions[0]["scopes"] == ["workspace:sre"] and mentions[0]["observation_ids"] == []
    assert not _node_exists(database, namespace, "issue:PROJ-404")
    writer.retain(doc)  # the same input again creates nothing
    writer.retain(RetainInput(**{**doc.__dict__, "title": "Postmortem (edited)"}))  # changed, same mentions
    assert _mentions(database, namespace) == mentions
    writer.retain(RetainInput(**{**doc.__dict__, "content": "# Outage\n\nNow only PROJ-2."}))
    after = _mentions(database, namespace)
    assert [(m["object"], m["valid_to"] is None) for m in after] == [
        ("issue:PROJ-1", False),
        ("issue:PROJ-2", True),
    ]
    writer.put_chunks(
        PutChunksInput(
            namespace=namespace,
            natural_key="doc:postmortem",
            chunks=(ChunkInput(chunk_order=7, heading="", text="Follow-up in PROJ-1."),),
        )
    )
    final = _mentions(database, namespace)
    open_targets = sorted(m["object"] for m in final if m["valid_to"] is None)
    assert open_targets == ["issue:PROJ-1", "issue:PROJ-2"]  # PutChunks adds, never closes
    assert len(final) == 3
