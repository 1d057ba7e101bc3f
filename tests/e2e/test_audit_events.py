"""Explicit audit events and the audit CLI on the real services (docs/explanation/knowledge-model.md).

Development mode (auth off) hosts from tests/e2e/conftest.py, the real database and embedder. Checks:
RecordAuditEvent is idempotent by client_event_id and files the event under the request id's trace, bad
input names its fields and writes nothing, and ``cb delete`` / ``cb trace`` delete and read back a trace."""

from __future__ import annotations

import functools
import json
import uuid

import grpc
import pytest

from memory_service_grpc_client.memory.v1 import audit_service_pb2
from memory_service_grpc_client.memory.v1 import audit_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import document_service_pb2
from memory_service_grpc_client.memory.v1 import document_service_pb2_grpc
from tests.e2e.audit_reads import details_of
from tests.e2e.audit_reads import get_trace
from tests.e2e.audit_reads import trace_audit_events
from tests.e2e.refusals import refusal

pytestmark = pytest.mark.e2e


def test_record_audit_event_idempotent_and_request_id_trace(
    ingest_channel: grpc.Channel, query_channel: grpc.Channel, namespace: str
) -> None:
    stub = audit_service_pb2_grpc.AuditServiceStub(ingest_channel)
    trace_id = "exp-" + uuid.uuid4().hex
    request = audit_service_pb2.RecordAuditEventRequest(
        namespace=namespace,
        action="export",
        trace_id=trace_id,
        target_key="report:q3",
        details={"rows": 3, "format": "csv", "note": "квартальный отчёт $$ 'quoted' \\ back"},
        scopes=["task:PROJ-7"],
        client_event_id="job-7",
    )
    first = stub.RecordAuditEvent(request, timeout=60)
    retry = stub.RecordAuditEvent(request, timeout=60)
    assert first.created and not retry.created and retry.event.event_id == first.event.event_id
    assert details_of(retry.event)["note"] == "квартальный отчёт $$ 'quoted' \\ back"
    events = trace_audit_events(query_channel, namespace, trace_id)
    assert [e.event_id for e in events] == [first.event.event_id]
    assert list(events[0].scopes) == ["task:PROJ-7"] and events[0].client_event_id == "job-7"

    # Without a trace id, the event belongs to the request's id (x-request-id).
    request_id = "req-" + uuid.uuid4().hex
    event = stub.RecordAuditEvent(
        audit_service_pb2.RecordAuditEventRequest(namespace=namespace, action="review"),
        metadata=(("x-request-id", request_id),),
        timeout=60,
    ).event
    assert event.trace_id == request_id and event.request_id == request_id
    assert [e.event_id for e in trace_audit_events(query_channel, namespace, request_id)] == [event.event_id]


def test_record_audit_event_bad_input_writes_nothing(
    ingest_channel: grpc.Channel, query_channel: grpc.Channel, namespace: str
) -> None:
    stub = audit_service_pb2_grpc.AuditServiceStub(ingest_channel)
    failure = refusal(
        functools.partial(
            stub.RecordAuditEvent,
            audit_service_pb2.RecordAuditEventRequest(
                namespace=namespace,
                action="Not A Verb",
                trace_id="t" * 300,
                target_key="line\nbreak",
                scopes=["noscope"],
                client_event_id="c" * 200,
            ),
            timeout=60,
        )
    )
    assert failure.code == grpc.StatusCode.INVALID_ARGUMENT
    assert {v.field for v in failure.violations} == {
        "action",
        "trace_id",
        "target_key",
        "scopes[0]",
        "client_event_id",
    }
    empty = refusal(
        functools.partial(
            stub.RecordAuditEvent, audit_service_pb2.RecordAuditEventRequest(namespace=namespace), timeout=60
        )
    )
    assert [v.field for v in empty.violations] == ["action"]
    trace_failure = refusal(lambda: get_trace(query_channel, namespace, "t" * 300))
    assert trace_failure.code == grpc.StatusCode.INVALID_ARGUMENT
    assert [v.field for v in trace_failure.violations] == ["trace_id"]
    assert (
        refusal(lambda: get_trace(query_channel, namespace, "no-such-trace")).code == grpc.StatusCode.NOT_FOUND
    )


def test_cli_delete_and_trace(
    cli_addresses: list[str], ingest_channel: grpc.Channel, namespace: str
) -> None:
    from typer.testing import CliRunner

    from memory_service_tools.cli import app

    documents = document_service_pb2_grpc.DocumentServiceStub(ingest_channel)
    documents.Retain(
        document_service_pb2.RetainRequest(
            namespace=namespace, natural_key="doc:cli", title="CLI doc", content="# CLI doc\n\nbody"
        ),
        timeout=120,
    )
    runner = CliRunner()
    trace_id = "cli-" + uuid.uuid4().hex

    def run(*args: str, expect: int = 0) -> str:
        result = runner.invoke(app, [*cli_addresses, *args])
        assert result.exit_code == expect, result.output
        return result.output

    deleted = json.loads(
        run(
            "delete",
            "doc:cli",
            "--namespace",
            namespace,
            "--reason",
            "cli test",
            "--trace-id",
            trace_id,
            "--json",
        )
    )
    assert (
        deleted["naturalKey"] == "doc:cli"
        and deleted["chunksDeleted"] == 1
        and deleted["traceId"] == trace_id
    )
    trace = json.loads(run("trace", trace_id, "--namespace", namespace, "--json"))["trace"]
    [entry] = trace["entries"]
    assert entry["auditEvent"]["action"] == "delete" and entry["auditEvent"]["details"]["title"] == "CLI doc"
    table = run("trace", trace_id, "--namespace", namespace)
    assert "audit: delete" in table and "doc:cli" in table
    assert "NOT_FOUND" in run("delete", "doc:cli", "--namespace", namespace, expect=1)
