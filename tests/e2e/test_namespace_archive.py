"""ExportNamespace -> ImportNamespace into a fresh database: the same fact ids as of many instants, the
same CompileContext items and GetSource answers; a second import writes nothing; a bad archive
changes nothing; a token without a scope exports without the hidden items and says so."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import psycopg
import pytest
from google.protobuf import json_format
from typer.testing import CliRunner

from common.auth.principals import Right
from common.kernel.config import Settings
from ingest_service.main import create_ingest_host
from memory_service_grpc_client import ClientSecurity
from memory_service_grpc_client import make_channel
from memory_service_grpc_client import wait_for_serving
from memory_service_grpc_client.memory.v1 import context_service_pb2
from memory_service_grpc_client.memory.v1 import context_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import data_protection_service_pb2 as dp
from memory_service_grpc_client.memory.v1 import data_protection_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import document_service_pb2
from memory_service_grpc_client.memory.v1 import document_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import fact_service_pb2
from memory_service_grpc_client.memory.v1 import fact_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import knowledge_pb2
from memory_service_grpc_client.memory.v1 import observation_service_pb2
from memory_service_grpc_client.memory.v1 import observation_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import source_service_pb2
from memory_service_grpc_client.memory.v1 import source_service_pb2_grpc
from memory_service_tools.cli.app import app
from memory_service_tools.token_writer import add_token
from query_service.main import create_query_host
from tests.conftest import fresh_database
from tests.database_rows import fetch_rows_at
from tests.e2e.conftest import token_secured_services
from tests.e2e.data_protection_helpers import debian_slice
from tests.e2e.data_protection_helpers import record_all
from tests.e2e.query_service_data import retain

pytestmark = pytest.mark.e2e


def _export(channel: grpc.Channel, namespace: str) -> bytes:
    stub = data_protection_service_pb2_grpc.DataProtectionServiceStub(channel)
    return b"".join(
        m.data for m in stub.ExportNamespace(dp.ExportNamespaceRequest(namespace=namespace), timeout=600)
    )


def _import(
    channel: grpc.Channel, namespace: str, archive: bytes, piece: int = 100_000
) -> dp.ImportNamespaceResponse:
    stub = data_protection_service_pb2_grpc.DataProtectionServiceStub(channel)

    def messages() -> Iterator[dp.ImportNamespaceRequest]:
        for start in range(0, len(archive), piece):
            yield dp.ImportNamespaceRequest(
                namespace=namespace if start == 0 else "", data=archive[start : start + piece]
            )

    return stub.ImportNamespace(messages(), timeout=600)


def _answers(query: grpc.Channel, namespace: str, subjects: list[str], instants: list[str]) -> dict[str, Any]:
    facts = fact_query_service_pb2_grpc.FactQueryServiceStub(query)
    out: dict[str, Any] = {}
    for subject in subjects:
        for instant in instants:
            request = fact_query_service_pb2.ListFactsRequest(
                namespace=namespace, subject=subject, page_size=200
            )
            request.as_of.FromJsonString(instant)
            out[f"{subject}@{instant}"] = sorted(
                f.fact_id for f in facts.ListFacts(request, timeout=60).facts
            )
        history = facts.ListFacts(
            fact_query_service_pb2.ListFactsRequest(
                namespace=namespace, subject=subject, include_history=True, page_size=200
            ),
            timeout=60,
        )
        out[f"{subject}@history"] = sorted(f.fact_id for f in history.facts)
    compiler = context_service_pb2_grpc.ContextServiceStub(query)
    for question in ("which versions of time were uploaded", "who uploaded to unstable"):
        pack = compiler.CompileContext(
            context_service_pb2.CompileContextRequest(namespace=namespace, query=question, token_budget=600),
            timeout=120,
        ).pack
        out[question] = [(i.kind, i.text, str(i.provenance)) for i in pack.items]
    sources = source_service_pb2_grpc.SourceServiceStub(query)
    out["source"] = sources.GetSource(
        source_service_pb2.GetSourceRequest(namespace=namespace, natural_key="doc:release-notes"), timeout=60
    ).source.content
    return out


def _counts(url: str, namespace: str) -> dict[str, int]:
    with psycopg.connect(url, autocommit=True) as conn:
        return {
            table: int(
                conn.execute(f"SELECT count(*) FROM {table} WHERE namespace = %s", (namespace,)).fetchone()[0]
            )
            for table in ("observations", "graph_nodes", "facts", "chunks", "context_traces")
        }


def test_export_import_gives_the_same_answers_and_reimport_writes_nothing(
    settings: Settings, namespace: str, ingest_channel: grpc.Channel, query_channel: grpc.Channel
) -> None:
    observations, _, _ = debian_slice(namespace, 300)
    record_all(ingest_channel, observations)
    document_service_pb2_grpc.DocumentServiceStub(ingest_channel).Retain(
        document_service_pb2.RetainRequest(
            namespace=namespace,
            natural_key="doc:release-notes",
            type="document",
            title="Release notes",
            content="# Release notes\n\nThe time package moved to debhelper.\n\nSee also [[doc:policy]].\n",
        ),
        timeout=120,
    )
    backlog = observation_service_pb2_grpc.ObservationServiceStub(ingest_channel)
    deadline = time.monotonic() + 600
    while (
        backlog.GetEmbeddingBacklog(
            observation_service_pb2.GetEmbeddingBacklogRequest(namespace=namespace), timeout=30
        ).pending_chunks
        and time.monotonic() < deadline
    ):
        time.sleep(1)
    subjects = sorted({o["subject"]["type"] + ":" + o["subject"]["id"] for o in observations})[:15]
    instants = [
        "1999-12-31T00:00:00Z",
        "2002-06-30T00:00:00Z",
        "2005-01-01T00:00:00Z",
        "2030-01-01T00:00:00Z",
    ]
    before = _answers(query_channel, namespace, subjects, instants)
    assert any(before[f"{s}@2030-01-01T00:00:00Z"] for s in subjects)
    started = time.perf_counter()
    archive = _export(ingest_channel, namespace)
    export_seconds = time.perf_counter() - started
    header = json.loads(archive.split(b"\n", 1)[0])
    assert header["format"] == "memory-service-archive" and header["version"] == 1
    assert header["scopes_filtered"] is False
    source_counts = _counts(settings.database_url, namespace)

    with fresh_database(settings) as fresh:
        ingest = create_ingest_host(fresh, address="127.0.0.1:0", metrics_port=0)
        query = create_query_host(fresh, address="127.0.0.1:0", metrics_port=0)
        ingest.start()
        query.start()
        try:
            for port in (ingest.port, query.port):
                assert wait_for_serving(f"127.0.0.1:{port}", timeout=120)
            to_ingest = grpc.insecure_channel(f"127.0.0.1:{ingest.port}")
            to_query = grpc.insecure_channel(f"127.0.0.1:{query.port}")
            with pytest.raises(grpc.RpcError) as wrong:
                _import(to_ingest, "another-namespace", archive)
            assert wrong.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            with pytest.raises(grpc.RpcError) as truncated:
                _import(to_ingest, namespace, archive[: len(archive) // 2])
            assert truncated.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert _counts(fresh.database_url, namespace) == dict.fromkeys(source_counts, 0)

            started = time.perf_counter()
            first = _import(to_ingest, namespace, archive)
            import_seconds = time.perf_counter() - started
            assert _counts(fresh.database_url, namespace) == source_counts
            after = _answers(to_query, namespace, subjects, instants)
            # Compared before the new CompileContext traces of `after` are counted again.
            second = _import(to_ingest, namespace, archive)
            assert sum(second.written_counts.values()) == 0, dict(second.written_counts)
            assert sum(first.written_counts.values()) > 0
            for key in before:
                assert after[key] == before[key], key
            to_ingest.close()
            to_query.close()
        finally:
            ingest.stop(5)
            query.stop(5)
    megabytes = len(archive) / 1e6
    print(
        f"\narchive {megabytes:.2f} MB: export {megabytes / export_seconds:.2f} MB/s, "
        f"import {megabytes / import_seconds:.2f} MB/s"
    )


def test_an_export_without_a_scope_leaves_hidden_items_out_and_says_so(
    settings: Settings, tmp_path: Path
) -> None:
    namespace = "arc-" + uuid.uuid4().hex[:10]
    tokens = tmp_path / "tokens.json"
    admin_all, _ = add_token(
        tokens, principal="dpo", namespaces={namespace: [Right.ADMIN]}, scopes=["workspace:hr"]
    )
    admin_plain, _ = add_token(tokens, principal="ops", namespaces={namespace: [Right.ADMIN]})
    writer, _ = add_token(
        tokens, principal="w", namespaces={namespace: [Right.WRITE]}, scopes=["workspace:hr"]
    )
    reader, _ = add_token(tokens, principal="r", namespaces={namespace: [Right.READ]})
    with token_secured_services(settings, tokens) as (ingest_addr, _query_addr):
        with make_channel(ingest_addr, security=ClientSecurity(token=writer)) as channel:
            retain(channel, namespace, "doc:open", "# Open\n\nfor everyone\n")
            salaries = "# Salaries\n\nconfidential\n"
            retain(channel, namespace, "doc:salaries", salaries, scopes=["workspace:hr"])
        with make_channel(ingest_addr, security=ClientSecurity(token=reader)) as channel:
            with pytest.raises(grpc.RpcError) as denied:
                _export(channel, namespace)
            assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
        with make_channel(ingest_addr, security=ClientSecurity(token=admin_plain)) as channel:
            partial = _export(channel, namespace)
        with make_channel(ingest_addr, security=ClientSecurity(token=admin_all)) as channel:
            full = _export(channel, namespace)
    lines = [json.loads(line) for line in partial.splitlines()]
    assert lines[0]["scopes_filtered"] is True and lines[0]["principal"] == "ops"
    assert lines[-1]["hidden_left_out"]["node"] == 1 and lines[-1]["hidden_left_out"]["chunk"] >= 1
    assert b"confidential" not in partial and b"doc:salaries" not in partial
    assert b"confidential" in full and b"doc:open" in partial


def test_cb_export_and_import_round_trip_a_namespace_file(
    namespace: str, ingest_channel: grpc.Channel, ingest_host: Any, query_host: Any, tmp_path: Path
) -> None:
    document_service_pb2_grpc.DocumentServiceStub(ingest_channel).Retain(
        document_service_pb2.RetainRequest(
            namespace=namespace, natural_key="doc:x", content="# X\n\nexported\n"
        ),
        timeout=120,
    )
    base = ["--ingest-addr", f"127.0.0.1:{ingest_host.port}", "--query-addr", f"127.0.0.1:{query_host.port}"]
    archive = tmp_path / "ns.jsonl"
    result = CliRunner().invoke(app, [*base, "export", "-n", namespace, "-o", str(archive)])
    assert result.exit_code == 0, result.output
    assert json.loads(archive.read_text().splitlines()[0])["namespace"] == namespace
    result = CliRunner().invoke(app, [*base, "import", str(archive), "-n", namespace, "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert int(report["readCounts"]["node"]) >= 1
    assert all(int(v) == 0 for v in report.get("writtenCounts", {}).values())  # it was all there


def test_a_subject_export_holds_what_an_erasure_would_match_and_nothing_else(
    settings: Settings, ingest_channel: grpc.Channel
) -> None:
    namespace = "arc-" + uuid.uuid4().hex[:10]
    documents = document_service_pb2_grpc.DocumentServiceStub(ingest_channel)
    for key, title, text in (
        ("person:dana", "Dana Whitfield", "Dana Whitfield leads billing; mail dana.w@example.org"),
        ("doc:billing", "Billing", "The billing team meets on Mondays. Dana Whitfield chairs it."),
        ("doc:weather", "Weather", "It rained all week in the valley."),
    ):
        documents.Retain(
            document_service_pb2.RetainRequest(
                namespace=namespace, natural_key=key, title=title, content=text
            ),
            timeout=120,
        )
    record_all(
        ingest_channel,
        [
            {
                "namespace": namespace,
                "source": {"system": "t", "stream": "s", "external_id": f"e{n}"},
                "kind": "chat",
                "occurred_at": "2026-11-01T10:00:00Z",
                "actor": {"type": "person", "id": f"p{n}"},
                "content": text,
            }
            for n, text in enumerate(("Dana Whitfield asked for the invoice.", "The build is green."))
        ],
    )
    fact_service_pb2_grpc.FactServiceStub(ingest_channel).AssertFacts(
        fact_service_pb2.AssertFactsRequest(
            namespace=namespace,
            facts=[
                json_format.ParseDict(
                    {"subject": s, "predicate": p, "object": o}, knowledge_pb2.FactAssertion()
                )
                for s, p, o in (
                    ("person:dana", "LEADS", "team:billing"),
                    ("doc:weather", "ABOUT", "topic:rain"),
                )
            ],
        ),
        timeout=60,
    )
    stub = data_protection_service_pb2_grpc.DataProtectionServiceStub(ingest_channel)

    def export(**subject: str) -> list[dict[str, Any]]:
        request = dp.ExportNamespaceRequest(namespace=namespace, **subject)
        data = b"".join(m.data for m in stub.ExportNamespace(request, timeout=600))
        return [json.loads(line) for line in data.splitlines()]

    lines = export(node_key="person:dana")
    assert lines[0]["subject"] == "node_key" and lines[-1]["records"] == len(lines) - 2
    nodes = {r["row"]["natural_key"] for r in lines if r["kind"] == "node"}
    assert {"person:dana", "doc:billing"} <= nodes and "doc:weather" not in nodes
    assert not [key for key in nodes if key.startswith(("audit_event:", "pc_trace:"))]
    texts = [r["row"]["content"] for r in lines if r["kind"] == "observation"]
    assert texts == ["Dana Whitfield asked for the invoice."]  # the build observation is not about her
    assert all(r["row"]["node_key"] in nodes for r in lines if r["kind"] == "chunk")
    assert not any("embedding" in r["row"] for r in lines if r["kind"] == "chunk")
    facts = [(r["row"]["subject_key"], r["row"]["predicate"]) for r in lines if r["kind"] == "fact"]
    assert ("person:dana", "LEADS") in facts and ("doc:weather", "ABOUT") not in facts
    edges = [(r["row"]["start"], r["row"]["label"], r["row"]["end"]) for r in lines if r["kind"] == "edge"]
    assert ("person:dana", "p_LEADS", "team:billing") in edges  # edge labels carry the predicate prefix
    assert all(start in nodes or end in nodes for start, _, end in edges), edges
    by_value = export(value="dana.w@example.org")
    assert {r["row"]["natural_key"] for r in by_value if r["kind"] == "node"} == {"person:dana"}
    with pytest.raises(grpc.RpcError) as two:
        export(node_key="person:dana", value="dana.w@example.org")
    assert two.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "subject" in (two.value.details() or "")
    archive = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
    with pytest.raises(grpc.RpcError) as refused:
        _import(ingest_channel, namespace, archive)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "access request" in (
        refused.value.details() or ""
    )
    exports = "SELECT target_key, props -> 'details' FROM audit_events WHERE namespace = %s AND action = 'export'"
    audited = fetch_rows_at(settings.database_url, exports + " ORDER BY recorded_at", namespace)
    assert [row[0] for row in audited[:2]] == ["person:dana", ""]
    assert "value_sha256" in audited[1][1] and "dana.w@example.org" not in json.dumps(audited[1][1])
