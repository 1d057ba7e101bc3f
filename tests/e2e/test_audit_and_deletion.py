"""Audit and deletion on the real services (docs/explanation/knowledge-model.md; docs/explanation/architecture.md).

Development mode (auth off) hosts from tests/e2e/conftest.py, the real database and embedder. Checks:
DeleteNode removes the node and everything of it (Search, GetSource, ListFacts with history,
CompileContext, and the tables underneath), protected audit nodes are refused and unchanged, every
deletion (DeleteNode, PurgeObservation, RedactObservation) writes an audit event with a snapshot
readable through GetTrace, GetTrace includes the context compilations of the trace, and bad input names
its fields. Explicit audit events and the CLI are in test_audit_events.py.
"""

from __future__ import annotations

import functools
import json
import uuid
from typing import Any

import grpc
import pytest
from google.protobuf import json_format

from common.storage.database import Database
from memory_service_grpc_client.memory.v1 import context_service_pb2
from memory_service_grpc_client.memory.v1 import context_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import document_service_pb2
from memory_service_grpc_client.memory.v1 import document_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import fact_service_pb2
from memory_service_grpc_client.memory.v1 import fact_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import knowledge_pb2
from memory_service_grpc_client.memory.v1 import observation_service_pb2
from memory_service_grpc_client.memory.v1 import observation_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import source_service_pb2
from memory_service_grpc_client.memory.v1 import source_service_pb2_grpc
from tests.e2e.audit_reads import details_of
from tests.e2e.audit_reads import get_trace
from tests.e2e.audit_reads import record_audit_event
from tests.e2e.audit_reads import trace_audit_events
from tests.e2e.note_observations import asserted_fact
from tests.e2e.note_observations import note
from tests.e2e.query_service_data import retain
from tests.e2e.refusals import refusal

pytestmark = pytest.mark.e2e


def _fact(subject: str, predicate: str, obj: str, when: str, **extra: Any) -> knowledge_pb2.FactAssertion:
    return json_format.ParseDict(
        {"subject": subject, "predicate": predicate, "object": obj, "valid_from": when, **extra},
        knowledge_pb2.FactAssertion(),
    )


def _list_facts(query: grpc.Channel, namespace: str, **filters: str) -> list[Any]:
    stub = fact_query_service_pb2_grpc.FactQueryServiceStub(query)
    request = fact_query_service_pb2.ListFactsRequest(
        namespace=namespace, include_history=True, include_lost=True, **filters
    )
    return list(stub.ListFacts(request, timeout=60).facts)


def _row_counts(database: Database, namespace: str, key: str) -> dict[str, int]:
    """What the tables still hold of ``key``: registry row, vertices, chunks, fact rows, edges."""
    graph = database.settings.graph_name
    with database.connection() as conn:
        registry = conn.execute(
            "SELECT count(*) FROM graph_nodes WHERE namespace = %s AND natural_key = %s", (namespace, key)
        ).fetchone()
        vertices = conn.execute(
            f'SELECT count(*) FROM "{graph}"._ag_label_vertex WHERE properties @> %s::ag_catalog.agtype',
            (json.dumps({"namespace": namespace, "natural_key": key}),),
        ).fetchone()
        chunks = conn.execute(
            f'SELECT count(*) FROM "{database.settings.chunks_table}" WHERE namespace = %s AND node_key = %s',
            (namespace, key),
        ).fetchone()
        facts = conn.execute(
            "SELECT count(*) FROM facts WHERE namespace = %s AND (subject_key = %s OR object_key = %s)",
            (namespace, key, key),
        ).fetchone()
    assert registry and vertices and chunks and facts
    return {"registry": registry[0], "vertices": vertices[0], "chunks": chunks[0], "facts": facts[0]}


@pytest.fixture
def loaded(ingest_channel: grpc.Channel, namespace: str) -> dict[str, str]:
    """doc:target (article linked from doc:linker and linking to doc:other), facts with it as subject and
    object (one closed by supersession), and an observation naming it."""
    marker = "quokkatarget" + uuid.uuid4().hex[:6]
    retain(ingest_channel, namespace, "doc:other", "# Other\n\nUnrelated canteen menu.", title="Other")
    target = f"# Target runbook {marker}\n\nRestart the {marker} daemon.\n\n## Later\n\nCheck {marker} logs."
    target_fields = {"title": f"Target runbook {marker}", "links": ["doc:other"]}
    retain(ingest_channel, namespace, "doc:target", target, **target_fields)
    linker = "# Linker\n\nSee the target runbook."
    retain(ingest_channel, namespace, "doc:linker", linker, title="Linker", links=["doc:target"])
    facts = fact_service_pb2_grpc.FactServiceStub(ingest_channel)
    first = facts.AssertFacts(
        fact_service_pb2.AssertFactsRequest(
            namespace=namespace,
            facts=[
                _fact("person:alice", "MAINTAINS", "doc:target", "2024-01-01T00:00:00Z"),
                _fact("doc:target", "PART_OF", "project:alpha", "2024-01-01T00:00:00Z"),
                _fact("person:alice", "WORKS_ON", "project:alpha", "2024-01-01T00:00:00Z"),
            ],
        ),
        timeout=60,
    ).results
    assert all(not r.error for r in first), [r.error for r in first]
    superseding = facts.AssertFacts(
        fact_service_pb2.AssertFactsRequest(
            namespace=namespace,
            facts=[
                _fact(
                    "person:alice",
                    "MAINTAINS",
                    "doc:other",
                    "2024-06-01T00:00:00Z",
                    supersedes=first[0].fact_id,
                )
            ],
        ),
        timeout=60,
    ).results
    assert not superseding[0].error
    return {"marker": marker, "maintains_target": first[0].fact_id, "maintains_other": superseding[0].fact_id}


def test_delete_node_removes_everything_and_is_audited(
    ingest_channel: grpc.Channel,
    query_channel: grpc.Channel,
    database: Database,
    namespace: str,
    loaded: dict[str, str],
) -> None:
    marker = loaded["marker"]
    search = retrieval_service_pb2_grpc.RetrievalServiceStub(query_channel)
    sources = source_service_pb2_grpc.SourceServiceStub(query_channel)
    contexts = context_service_pb2_grpc.ContextServiceStub(query_channel)

    def compile_pack() -> context_service_pb2.ContextPack:
        request = context_service_pb2.CompileContextRequest(
            namespace=namespace, query=marker, anchors=["doc:target", "person:alice"], token_budget=3000
        )
        return contexts.CompileContext(request, timeout=120).pack

    # Before: every read path finds it.
    hits = search.Search(
        retrieval_service_pb2.SearchRequest(namespace=namespace, query=marker, top_k=20), timeout=60
    )
    assert "doc:target" in {hit.node_key for hit in hits.hits}
    assert len(_list_facts(query_channel, namespace, subject="doc:target")) == 1
    assert len(_list_facts(query_channel, namespace, object="doc:target")) == 1
    assert "doc:target" in compile_pack().text
    before = _row_counts(database, namespace, "doc:target")
    assert before["registry"] == 1 and before["chunks"] >= 1 and before["facts"] == 2

    trace_id = "del-" + uuid.uuid4().hex
    response = document_service_pb2_grpc.DocumentServiceStub(ingest_channel).DeleteNode(
        document_service_pb2.DeleteNodeRequest(
            namespace=namespace, natural_key="doc:target", reason="GDPR request 42", trace_id=trace_id
        ),
        timeout=60,
    )
    assert response.natural_key == "doc:target" and response.type == "document"
    assert response.chunks_deleted == before["chunks"] and response.facts_deleted == 2
    assert response.edges_deleted == 2  # LINKS_TO from doc:linker and to doc:other
    assert response.trace_id == trace_id and response.audit_event_id.startswith("aud-")

    # After: nothing of it anywhere.
    hits = search.Search(
        retrieval_service_pb2.SearchRequest(namespace=namespace, query=marker, top_k=50), timeout=60
    )
    assert all(hit.node_key != "doc:target" and marker not in hit.text for hit in hits.hits)
    failure = refusal(
        functools.partial(
            sources.GetSource,
            source_service_pb2.GetSourceRequest(namespace=namespace, natural_key="doc:target"),
            timeout=60,
        )
    )
    assert failure.code == grpc.StatusCode.NOT_FOUND
    assert _list_facts(query_channel, namespace, subject="doc:target") == []
    assert _list_facts(query_channel, namespace, object="doc:target") == []
    alice = _list_facts(query_channel, namespace, subject="person:alice")
    assert {f.fact_id for f in alice} >= {loaded["maintains_other"]}
    assert all("doc:target" not in (f.subject, f.object) for f in alice)
    pack = compile_pack()
    assert "doc:target" not in pack.text and marker not in pack.text
    assert all(item.provenance.node_key != "doc:target" for item in pack.items)
    assert _row_counts(database, namespace, "doc:target") == {
        "registry": 0,
        "vertices": 0,
        "chunks": 0,
        "facts": 0,
    }
    # The linking document and the link target survive; the supersession history of the survivor stays.
    linker = sources.GetSource(
        source_service_pb2.GetSourceRequest(namespace=namespace, natural_key="doc:linker"), timeout=60
    )
    assert linker.source.content.startswith("# Linker")
    sources.GetSource(
        source_service_pb2.GetSourceRequest(namespace=namespace, natural_key="doc:other"), timeout=60
    )

    # The audit event with its snapshot, in the same namespace, linked to the trace.
    events = trace_audit_events(query_channel, namespace, trace_id)
    assert [(e.action, e.target_key, e.event_id) for e in events] == [
        ("delete", "doc:target", response.audit_event_id)
    ]
    snapshot = details_of(events[0])
    assert snapshot["type"] == "document" and snapshot["title"] == f"Target runbook {marker}"
    assert snapshot["chunk_count"] == before["chunks"] and snapshot["facts_removed"] == 2
    assert snapshot["reason"] == "GDPR request 42" and events[0].principal == "development"
    assert len(snapshot["facts"]) == 2 and loaded["maintains_target"] in {
        f["fact_id"] for f in snapshot["facts"]
    }
    assert all("doc:target" in (f["subject"], f["object"]) for f in snapshot["facts"])
    assert snapshot["edges_removed"]["LINKS_TO"] == 2

    # Deleting it again: NOT_FOUND, no second event.
    again = refusal(
        lambda: document_service_pb2_grpc.DocumentServiceStub(ingest_channel).DeleteNode(
            document_service_pb2.DeleteNodeRequest(
                namespace=namespace, natural_key="doc:target", trace_id=trace_id
            ),
            timeout=60,
        )
    )
    assert again.code == grpc.StatusCode.NOT_FOUND
    assert len(trace_audit_events(query_channel, namespace, trace_id)) == 1


def test_audit_nodes_are_protected(
    ingest_channel: grpc.Channel, query_channel: grpc.Channel, database: Database, namespace: str
) -> None:
    trace_id = "prot-" + uuid.uuid4().hex
    event = record_audit_event(ingest_channel, namespace, "export", trace_id, details={"rows": 12})
    documents = document_service_pb2_grpc.DocumentServiceStub(ingest_channel)
    for key in (f"audit_event:{event.event_id}", f"pc_trace:{trace_id}"):
        before = _row_counts(database, namespace, key)
        failure = refusal(
            functools.partial(
                documents.DeleteNode,
                document_service_pb2.DeleteNodeRequest(namespace=namespace, natural_key=key),
                timeout=60,
            )
        )
        assert failure.code == grpc.StatusCode.FAILED_PRECONDITION and failure.reason == "PROTECTED_NODE", key
        assert (
            _row_counts(database, namespace, key)
            == before
            == {
                "registry": 1,
                "vertices": 1,
                "chunks": 0,
                "facts": 0,
            }
        )
        # Nor can a document write overwrite it.
        overwrite = refusal(
            functools.partial(
                documents.Retain,
                document_service_pb2.RetainRequest(
                    namespace=namespace, natural_key=key, content="erase the trail"
                ),
                timeout=60,
            )
        )
        assert overwrite.code == grpc.StatusCode.INVALID_ARGUMENT
        assert [v.field for v in overwrite.violations] == ["natural_key"]
    # A document cannot take the key of a trace anchor before the trace exists either.
    reserved = refusal(
        functools.partial(
            documents.Retain,
            document_service_pb2.RetainRequest(
                namespace=namespace, natural_key="pc_trace:future", content="x"
            ),
            timeout=60,
        )
    )
    assert reserved.code == grpc.StatusCode.INVALID_ARGUMENT
    events = trace_audit_events(query_channel, namespace, trace_id)
    assert [(e.event_id, details_of(e)) for e in events] == [(event.event_id, {"rows": 12})]


def test_delete_node_bad_input_and_unknown_key(ingest_channel: grpc.Channel, namespace: str) -> None:
    documents = document_service_pb2_grpc.DocumentServiceStub(ingest_channel)
    failure = refusal(
        functools.partial(
            documents.DeleteNode,
            document_service_pb2.DeleteNodeRequest(
                namespace="bad namespace!", natural_key=" ", reason="x" * 5000
            ),
            timeout=60,
        )
    )
    assert failure.code == grpc.StatusCode.INVALID_ARGUMENT
    assert {v.field for v in failure.violations} == {"namespace", "natural_key", "reason"}
    missing = refusal(
        functools.partial(
            documents.DeleteNode,
            document_service_pb2.DeleteNodeRequest(namespace=namespace, natural_key="doc:never-written"),
            timeout=60,
        )
    )
    assert missing.code == grpc.StatusCode.NOT_FOUND


def _observation(namespace: str, external_id: str, content: str) -> knowledge_pb2.Observation:
    assertions = [
        asserted_fact("person:ivan", "WORKS_ON", "project:audit"),
        {"text": {"text": f"Fragment: {content}", "title": "Fragment"}},
    ]
    return note(namespace, "audit-test", external_id, content, assertions=assertions)


def test_purge_and_redact_are_audited(
    ingest_channel: grpc.Channel, query_channel: grpc.Channel, namespace: str
) -> None:
    observations = observation_service_pb2_grpc.ObservationServiceStub(ingest_channel)
    recorded = observations.RecordObservations(
        observation_service_pb2.RecordObservationsRequest(
            observations=[
                _observation(namespace, "p-1", "purge me"),
                _observation(namespace, "r-1", "redact me"),
            ]
        ),
        timeout=120,
    ).results
    purge_id, redact_id = recorded[0].observation_id, recorded[1].observation_id
    trace_id = "rm-" + uuid.uuid4().hex
    purged = observations.PurgeObservation(
        observation_service_pb2.PurgeObservationRequest(
            namespace=namespace, observation_id=purge_id, reason="wrong channel", trace_id=trace_id
        ),
        timeout=60,
    )
    observations.RedactObservation(
        observation_service_pb2.RedactObservationRequest(
            namespace=namespace, observation_id=redact_id, reason="contains a secret", trace_id=trace_id
        ),
        timeout=60,
    )
    # A repeated redaction removes nothing and writes no event.
    observations.RedactObservation(
        observation_service_pb2.RedactObservationRequest(
            namespace=namespace, observation_id=redact_id, reason="again", trace_id=trace_id
        ),
        timeout=60,
    )
    events = trace_audit_events(query_channel, namespace, trace_id)
    assert [(e.action, e.target_key) for e in events] == [("delete", purge_id), ("delete", redact_id)]
    purge, redact = (details_of(e) for e in events)
    assert purge["operation"] == "purge_observation" and purge["reason"] == "wrong channel"
    assert purge["kind"] == "note" and purge["source"] == {
        "system": "audit-test",
        "stream": "notes",
        "external_id": "p-1",
    }
    assert sorted(purge["nodes_removed"]) == sorted(purged.nodes_deleted)
    assert f"episode:{purge_id}" in purge["nodes_removed"]
    assert purge["chunk_count"] == purged.chunks_deleted >= 2 and purge["facts_affected"] == 1
    assert redact["operation"] == "redact_observation" and redact["reason"] == "contains a secret"
    assert redact["content_chars"] == len("redact me") and redact["previous_status"] == "processed"
    assert redact["chunk_count"] >= 2 and redact["nodes_removed"] == [f"text:{redact_id}/1"]


def test_get_trace_includes_context_compilations(
    ingest_channel: grpc.Channel, query_channel: grpc.Channel, namespace: str, loaded: dict[str, str]
) -> None:
    trace_id = "ctx-trail-" + uuid.uuid4().hex
    contexts = context_service_pb2_grpc.ContextServiceStub(query_channel)
    contexts.CompileContext(
        context_service_pb2.CompileContextRequest(
            namespace=namespace, query=loaded["marker"], anchors=["doc:target"], trace_id=trace_id
        ),
        timeout=120,
    )
    record_audit_event(ingest_channel, namespace, "review", trace_id)
    trace = get_trace(query_channel, namespace, trace_id)
    kinds = [entry.WhichOneof("entry") for entry in trace.entries]
    assert kinds == ["context_compilation", "audit_event"]  # ordered by time
    times = [entry.time.ToDatetime() for entry in trace.entries]
    assert times == sorted(times)
    compilation = trace.entries[0].context_compilation
    request = json_format.MessageToDict(compilation.request)
    assert request["query"] == loaded["marker"] and request["anchors"] == ["doc:target"]
    decisions = [json_format.MessageToDict(d) for d in compilation.decisions]
    assert any(d["key"].startswith("doc:target#") and d["decision"] == "kept" for d in decisions)
    assert compilation.hidden_decision_count == 0

    # After DeleteNode, decisions about the deleted node are left out of the trail (counted as hidden).
    document_service_pb2_grpc.DocumentServiceStub(ingest_channel).DeleteNode(
        document_service_pb2.DeleteNodeRequest(
            namespace=namespace, natural_key="doc:target", trace_id=trace_id
        ),
        timeout=60,
    )
    trace = get_trace(query_channel, namespace, trace_id)
    assert [entry.WhichOneof("entry") for entry in trace.entries] == [
        "context_compilation",
        "audit_event",
        "audit_event",
    ]
    compilation = trace.entries[0].context_compilation
    kept = [json_format.MessageToDict(d)["key"] for d in compilation.decisions]
    assert all(not key.startswith("doc:target") for key in kept)
    assert loaded["maintains_target"] not in kept
    assert compilation.hidden_decision_count >= 1
