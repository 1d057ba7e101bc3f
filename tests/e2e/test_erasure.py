"""EraseSubject end to end: a debian slice, documents, traces, audit events and queue jobs naming one
person; after the erasure no column of any table (public, the AGE graph schema, the queue's tables) holds
the person's values, on the primary and on the replica after the erasure's token; the receipt's counts
equal what this test measured before; reads return nothing of the person; a second erasure is empty."""

from __future__ import annotations

import json
import time
from typing import Any

import grpc
import psycopg
import pytest
from google.protobuf import json_format

from common.kernel.config import Settings
from common.kernel.consistency import decode_token
from memory_service_grpc_client.memory.v1 import audit_service_pb2
from memory_service_grpc_client.memory.v1 import audit_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import context_service_pb2
from memory_service_grpc_client.memory.v1 import context_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import data_protection_service_pb2 as dp
from memory_service_grpc_client.memory.v1 import document_service_pb2
from memory_service_grpc_client.memory.v1 import document_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import observation_query_service_pb2
from memory_service_grpc_client.memory.v1 import observation_query_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import source_service_pb2
from memory_service_grpc_client.memory.v1 import source_service_pb2_grpc
from tests.e2e.data_protection_helpers import columns_scanned
from tests.e2e.data_protection_helpers import debian_slice
from tests.e2e.data_protection_helpers import record_all
from tests.e2e.data_protection_helpers import residue

pytestmark = pytest.mark.e2e

SLICE = 400


def _like(value: str) -> str:
    return "%" + value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def _measure(conn: psycopg.Connection[Any], namespace: str, values: list[str], graph: str) -> dict[str, int]:
    """What an erasure of ``values`` should remove, measured here with SQL of this test's own."""
    patterns = [_like(v) for v in values]
    conn.execute("LOAD 'age'")
    conn.execute('SET search_path = ag_catalog, "$user", public')
    obs = [r[0] for r in conn.execute(
        "SELECT observation_id FROM observations o WHERE namespace = %s AND (o.*)::text ILIKE ANY(%s)",
        (namespace, patterns),
    )]
    fragments = [f"text:{o}/" for o in obs]
    episodes = [f"episode:{o}" for o in obs]
    nodes: set[str] = set()
    labels = [r[0] for r in conn.execute(
        "SELECT l.name FROM ag_catalog.ag_label l JOIN ag_catalog.ag_graph g ON l.graph = g.graphid"
        " WHERE g.name = %s AND l.kind = 'v' AND l.name <> '_ag_label_vertex'", (graph,),
    )]
    for label in labels:
        nodes |= {r[0] for r in conn.execute(
            psycopg.sql.SQL(
                "SELECT g.natural_key FROM {} v JOIN graph_nodes g ON g.vertex_id = v.id"
                " WHERE g.namespace = %s AND ag_catalog.agtype_out(v.properties)::text ILIKE ANY(%s)"
                " AND g.node_type NOT IN ('audit_event', 'pc_trace')"
            ).format(psycopg.sql.Identifier(graph, label)),
            (namespace, patterns),
        )}
    # A chunk naming the person deletes its node, unless the redaction of its observation removes the
    # chunk first (episodes and text fragments of the observations found).
    nodes |= {r[0] for r in conn.execute(
        "SELECT DISTINCT node_key FROM chunks WHERE namespace = %s AND text ILIKE ANY(%s)", (namespace, patterns)
    )} - set(episodes)
    nodes = {n for n in nodes if not any(n.startswith(f) for f in fragments)}
    facts = conn.execute(
        "SELECT count(*) FROM facts WHERE namespace = %s AND (subject_key = ANY(%s) OR object_key = ANY(%s))",
        (namespace, list(nodes), list(nodes)),
    ).fetchone()[0]
    chunks = conn.execute(
        "SELECT count(*) FROM chunks WHERE namespace = %s AND (node_key = ANY(%s) OR node_key LIKE ANY(%s))",
        (namespace, list(nodes | set(episodes)), [f + "%" for f in fragments]),
    ).fetchone()[0]
    traces = conn.execute(
        "SELECT count(*) FROM context_traces t WHERE namespace = %s AND (t.*)::text ILIKE ANY(%s)",
        (namespace, patterns + [_like(n) for n in nodes]),
    ).fetchone()[0]
    jobs = conn.execute(
        "SELECT count(*) FROM procrastinate_jobs WHERE args::text ILIKE ANY(%s)", (patterns,)
    ).fetchone()[0]
    audit = 0
    for label in labels:
        audit += conn.execute(
            psycopg.sql.SQL(
                "SELECT count(*) FROM {} v JOIN graph_nodes g ON g.vertex_id = v.id WHERE g.namespace = %s"
                " AND g.node_type = 'audit_event' AND ag_catalog.agtype_out(v.properties)::text ILIKE ANY(%s)"
            ).format(psycopg.sql.Identifier(graph, label)),
            (namespace, patterns),
        ).fetchone()[0]
    return {
        "observations_redacted": len(obs),
        "nodes_deleted": len(nodes),
        "facts_deleted": int(facts),
        "chunks_deleted": int(chunks),
        "context_traces_deleted": int(traces),
        "queue_jobs_deleted": int(jobs),
        "audit_events_scrubbed": int(audit),
    }


def test_erase_a_person_leaves_no_residue_and_a_matching_receipt(
    settings: Settings, namespace: str, ingest_channel: grpc.Channel, query_channel: grpc.Channel, protection: Any
) -> None:
    observations, subject_key, person = debian_slice(namespace, SLICE)
    record_all(ingest_channel, observations)
    email = f"{person}@example.org"
    documents = document_service_pb2_grpc.DocumentServiceStub(ingest_channel)
    documents.Retain(
        document_service_pb2.RetainRequest(
            namespace=namespace, natural_key="doc:maintainers", type="document", title="Maintainers",
            content=f"# Maintainers\n\nThe uploads of {person} are reviewed by the release team.\n"
            f"Contact: {email}\n",
        ),
        timeout=120,
    )
    documents.Retain(
        document_service_pb2.RetainRequest(
            namespace=namespace, natural_key="doc:policy", type="document", title="Policy",
            content="# Policy\n\nEvery upload names its maintainer and distribution.\n",
        ),
        timeout=120,
    )
    compiler = context_service_pb2_grpc.ContextServiceStub(query_channel)
    compiler.CompileContext(
        context_service_pb2.CompileContextRequest(
            namespace=namespace, query=f"what did {person} upload", token_budget=800, trace_id="t-erasure-1"
        ),
        timeout=120,
    )
    audit = audit_service_pb2_grpc.AuditServiceStub(ingest_channel)
    audit.RecordAuditEvent(
        audit_service_pb2.RecordAuditEventRequest(
            namespace=namespace, action="review", target_key=subject_key, trace_id="t-erasure-2",
            details=json_format.ParseDict({"note": f"checked {email}"}, audit_service_pb2.RecordAuditEventRequest().details),
        ),
        timeout=60,
    )
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO procrastinate_jobs (queue_name, task_name, args, status)"
            " VALUES ('erasure-test', 'notify', %s::jsonb, 'todo')",
            (json.dumps({"namespace": namespace, "recipient": email}),),
        )
        values = [subject_key, person]
        before = _measure(conn, namespace, values, settings.graph_name)
        before_residue = residue(conn, settings.graph_name, person)
    assert before["observations_redacted"] > 5 and before["audit_events_scrubbed"] == 1
    assert before["queue_jobs_deleted"] == 1 and before["context_traces_deleted"] >= 1
    assert before_residue  # the scan sees the data before

    with pytest.raises(grpc.RpcError) as refused:
        protection.EraseSubject(dp.EraseSubjectRequest(namespace=namespace, node_key=subject_key), timeout=60)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # no confirm: nothing erased

    preview = protection.EraseSubject(
        dp.EraseSubjectRequest(namespace=namespace, node_key=subject_key, validate_only=True), timeout=600
    ).receipt
    assert preview.validate_only
    started = time.perf_counter()
    response = protection.EraseSubject(
        dp.EraseSubjectRequest(namespace=namespace, node_key=subject_key, confirm=True, reason="art. 17 request"),
        timeout=600,
    )
    elapsed = time.perf_counter() - started
    receipt = response.receipt
    counts = dict(receipt.counts)
    for kind, measured in before.items():
        assert counts.get(kind, 0) == measured, (kind, counts, before)
    assert dict(preview.counts) == counts  # the preview said exactly what went
    assert response.consistency_token

    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        scanned = columns_scanned(conn, settings.graph_name)
        for value in (person, subject_key, email):
            assert residue(conn, settings.graph_name, value) == {}, value
        # The receipt and its audit event hold hashes, not values.
        stored = conn.execute("SELECT row_to_json(r)::text FROM erasure_receipts r WHERE receipt_id = %s",
                              (receipt.receipt_id,)).fetchone()[0]
        assert person not in stored.lower()
    print(f"\nerasure of {subject_key}: {elapsed:.2f} s, counts {counts}, {scanned} columns scanned: 0 residue")

    # The replica, once it has replayed the erasure's commit.
    replica_url = settings.database_url.replace(":55432/", ":55433/")
    position = decode_token(response.consistency_token)
    with psycopg.connect(replica_url, autocommit=True) as replica:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            lsn = replica.execute("SELECT pg_last_wal_replay_lsn()").fetchone()[0]
            hi, lo = (int(x, 16) for x in str(lsn).split("/"))
            if (hi << 32) + lo >= position:
                break
            time.sleep(0.2)
        for value in (person, subject_key, email):
            assert residue(replica, settings.graph_name, value) == {}, value

    # Reads return nothing of the person.
    facts = fact_query_service_pb2_grpc.FactQueryServiceStub(query_channel)
    for field in ("subject", "object"):
        listed = facts.ListFacts(
            fact_query_service_pb2.ListFactsRequest(namespace=namespace, include_history=True, **{field: subject_key}),
            timeout=60,
        )
        assert list(listed.facts) == []
    search = retrieval_service_pb2_grpc.RetrievalServiceStub(query_channel)
    hits = search.Search(retrieval_service_pb2.SearchRequest(namespace=namespace, query=person, top_k=20), timeout=60)
    assert person not in str(hits).lower()
    pack = compiler.CompileContext(
        context_service_pb2.CompileContextRequest(namespace=namespace, query=f"uploads by {person}", token_budget=800),
        timeout=120,
    )
    assert person not in pack.pack.text.lower()
    sources = source_service_pb2_grpc.SourceServiceStub(query_channel)
    for key in (subject_key, "doc:maintainers"):
        with pytest.raises(grpc.RpcError) as missing:
            sources.GetSource(source_service_pb2.GetSourceRequest(namespace=namespace, natural_key=key), timeout=60)
        assert missing.value.code() == grpc.StatusCode.NOT_FOUND
    assert sources.GetSource(
        source_service_pb2.GetSourceRequest(namespace=namespace, natural_key="doc:policy"), timeout=60
    ).source.content
    reader = observation_query_service_pb2_grpc.ObservationQueryServiceStub(query_channel)
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        some = conn.execute(
            "SELECT observation_id FROM observations WHERE namespace = %s AND status = 'redacted' LIMIT 3", (namespace,)
        ).fetchall()
    assert some
    for (observation_id,) in some:
        seen = reader.GetObservation(
            observation_query_service_pb2.GetObservationRequest(namespace=namespace, observation_id=observation_id),
            timeout=60,
        )
        assert person not in str(seen).lower() and seen.observation.content == ""

    # The receipt reads back, and a second erasure finds nothing.
    again = protection.GetErasureReceipt(
        dp.GetErasureReceiptRequest(namespace=namespace, receipt_id=receipt.receipt_id), timeout=60
    ).receipt
    assert dict(again.counts) == counts and list(again.match_hashes) == list(receipt.match_hashes)
    second = protection.EraseSubject(
        dp.EraseSubjectRequest(namespace=namespace, node_key=subject_key, confirm=True), timeout=600
    ).receipt
    # Only the trace of the CompileContext above, whose query named the person after the erasure.
    assert {k: v for k, v in second.counts.items() if v} == {"context_traces_deleted": 1}, dict(second.counts)
    third = protection.EraseSubject(
        dp.EraseSubjectRequest(namespace=namespace, node_key=subject_key, confirm=True), timeout=600
    ).receipt
    assert all(v == 0 for v in third.counts.values()), dict(third.counts)


def test_erase_by_value_reaches_documents_and_bad_requests_change_nothing(
    namespace: str, ingest_channel: grpc.Channel, protection: Any, settings: Settings
) -> None:
    documents = document_service_pb2_grpc.DocumentServiceStub(ingest_channel)
    phone = "+49 30 5550 1234"
    documents.Retain(
        document_service_pb2.RetainRequest(
            namespace=namespace, natural_key="doc:contact", type="document", title="Contact",
            content=f"# Contact\n\nCall the on-call engineer at {phone}.\n",
        ),
        timeout=120,
    )
    for bad, field in (
        (dp.EraseSubjectRequest(namespace=namespace, confirm=True), "subject"),
        (dp.EraseSubjectRequest(namespace=namespace, value="abc", confirm=True), "value"),
        (dp.EraseSubjectRequest(namespace=namespace, value=phone, node_key="person:x", confirm=True), "subject"),
    ):
        with pytest.raises(grpc.RpcError) as refused:
            protection.EraseSubject(bad, timeout=60)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert field in refused.value.details()
    receipt = protection.EraseSubject(
        dp.EraseSubjectRequest(namespace=namespace, value=phone, confirm=True), timeout=120
    ).receipt
    assert receipt.counts["nodes_deleted"] == 1 and receipt.counts["chunks_deleted"] >= 1
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        assert residue(conn, settings.graph_name, phone) == {}
