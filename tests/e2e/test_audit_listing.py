"""Who reads the audit trail (AuditService.ListAuditEvents, TraceService.GetTrace, ``cb audit``) over real
channels with bearer tokens, personal data protection on, the real database and embedder.

* A cleared token makes the six reads that hand out personal data unmasked (Search, GetSource,
  GetObservation, ListFacts, CompileContext, CompileTypedContext) under one request id: the namespace
  admin sees all six ``pii_access`` events in the trace and in the listing; a reader of the namespace
  without the reader's scope sees none of them, and may not list.
* The listing pages and filters exactly: every filter and every page size is compared with the full list.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from typer.testing import CliRunner

from common.auth.principals import Right
from common.grpc.proto_mapping import instant
from common.grpc.proto_mapping import timestamp
from common.kernel.config import Settings
from common.kernel.identifiers import observation_id
from memory_service_grpc_client import rpc_failure
from memory_service_grpc_client.memory.v1 import audit_service_pb2
from memory_service_grpc_client.memory.v1 import audit_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import context_service_pb2
from memory_service_grpc_client.memory.v1 import context_service_pb2_grpc
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
from memory_service_tools.cli import app
from tests.e2e.audit_reads import every_audit_event
from tests.e2e.audit_reads import list_audit_events
from tests.e2e.audit_reads import trace_audit_events
from tests.e2e.conftest import TokenChannels
from tests.e2e.conftest import token_secured_services
from tests.e2e.pii_corpus import write_corpus
from tests.e2e.pii_corpus import write_team
from tests.e2e.test_domain_packs import _register
from tests.e2e.token_grants import grant
from tests.unit.test_domain_packs import delivery_pack

pytestmark = pytest.mark.e2e

SIX_METHODS = {
    "/memory.v1.RetrievalService/Search",
    "/memory.v1.SourceService/GetSource",
    "/memory.v1.ObservationQueryService/GetObservation",
    "/memory.v1.FactQueryService/ListFacts",
    "/memory.v1.ContextService/CompileContext",
    "/memory.v1.ContextService/CompileTypedContext",
}


class World(TokenChannels):
    """Tokens, addresses and two namespaces: ``namespace`` (the personal data corpus, with a domain pack
    for the typed context) and ``listed`` (explicit and delete events for the paging checks)."""

    def __init__(self, tokens_file: Path) -> None:
        self.tokens_file = tokens_file
        self.namespace = "aud-" + uuid.uuid4().hex[:10]
        self.listed = "aud-list-" + uuid.uuid4().hex[:10]
        both = (self.namespace, self.listed)
        other = "aud-other-" + uuid.uuid4().hex[:8]
        self.packs = grant(tokens_file, "aud-packs", Right.ADMIN, ["*"])
        self.writer = grant(tokens_file, "aud-writer", Right.WRITE, both)
        self.deleter = grant(tokens_file, "aud-deleter", Right.WRITE, both)
        self.officer = grant(tokens_file, "aud-officer", Right.READ, both, pii_clearance=True)
        self.auditor = grant(tokens_file, "aud-auditor", Right.ADMIN, both, pii_clearance=True)
        self.reader = grant(tokens_file, "aud-reader", Right.READ, both)
        self.masked_admin = grant(tokens_file, "aud-masked-admin", Right.ADMIN, both)
        self.other_admin = grant(tokens_file, "aud-other-admin", Right.ADMIN, [other])
        # One principal, two tokens: with the workspace:hr scope, and later without it.
        self.hr_scoped = grant(tokens_file, "aud-hr", Right.WRITE, [self.namespace], scopes=["workspace:hr"])
        self.hr_unscoped = grant(tokens_file, "aud-hr", Right.READ, [self.namespace])
        self.ingest_addr = self.query_addr = ""


@pytest.fixture(scope="module")
def world(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    world = World(tmp_path_factory.mktemp("audit") / "tokens.yaml")
    with token_secured_services(settings, world.tokens_file, pii_protection=True) as (
        world.ingest_addr,
        world.query_addr,
    ):
        with world.ingest(world.packs) as channel:
            _register(channel, delivery_pack(uuid.uuid4().hex), world.namespace, strict=False)
        with world.ingest(world.writer) as channel:
            write_corpus(channel, world.namespace)
            write_team(channel, world.namespace)
        yield world


def _six_cleared_reads(world: World, request_id: str) -> None:
    """The six reads of the officer (PII clearance), each handing out personal data, under ``request_id``
    (the request id of every call, and the trace id the context compilations are journaled under)."""
    ns = world.namespace
    metadata = (("x-request-id", request_id),)
    with world.query(world.officer) as channel:
        hits = retrieval_service_pb2_grpc.RetrievalServiceStub(channel).Search(
            retrieval_service_pb2.SearchRequest(
                namespace=ns, query="Support ticket SUP-4821", node_keys=["ticket:SUP-4821"]
            ),
            timeout=60,
            metadata=metadata,
        )
        assert hits.hits
        source_service_pb2_grpc.SourceServiceStub(channel).GetSource(
            source_service_pb2.GetSourceRequest(namespace=ns, natural_key="doc:refund-letter"),
            timeout=60,
            metadata=metadata,
        )
        observation_query_service_pb2_grpc.ObservationQueryServiceStub(channel).GetObservation(
            observation_query_service_pb2.GetObservationRequest(
                namespace=ns, observation_id=observation_id(ns, "crm", "calls", "call-1")
            ),
            timeout=60,
            metadata=metadata,
        )
        facts = fact_query_service_pb2_grpc.FactQueryServiceStub(channel).ListFacts(
            fact_query_service_pb2.ListFactsRequest(namespace=ns, subject="customer:c-1001"),
            timeout=60,
            metadata=metadata,
        )
        assert facts.facts
        contexts = context_service_pb2_grpc.ContextServiceStub(channel)
        contexts.CompileContext(
            context_service_pb2.CompileContextRequest(
                namespace=ns,
                query="Support ticket SUP-4821 customer phone",
                token_budget=800,
                trace_id=request_id,
            ),
            timeout=120,
            metadata=metadata,
        )
        contexts.CompileTypedContext(
            context_service_pb2.CompileTypedContextRequest(
                namespace=ns, anchors=["team:core"], token_budget=400, trace_id=request_id
            ),
            timeout=120,
            metadata=metadata,
        )


def test_the_admin_sees_the_six_cleared_reads_and_a_reader_none(world: World) -> None:
    request_id = "aud-six-" + uuid.uuid4().hex[:8]
    _six_cleared_reads(world, request_id)
    with world.query(world.auditor) as channel:
        in_trace = trace_audit_events(channel, world.namespace, request_id)
        listed = every_audit_event(channel, namespace=world.namespace, action="pii_access", principal="aud-officer")
    methods = [json_format.MessageToDict(event.details)["method"] for event in in_trace]
    assert sorted(methods) == sorted(SIX_METHODS)
    assert {event.action for event in in_trace} == {"pii_access"}
    assert {event.principal for event in in_trace} == {"aud-officer"}
    of_request = [event for event in listed if event.trace_id == request_id]
    assert sorted(json_format.MessageToDict(e.details)["method"] for e in of_request) == sorted(SIX_METHODS)
    assert {e.event_id for e in of_request} == {e.event_id for e in in_trace}
    # node_key finds an event listing the key among several (a typed context pack's pii_access).
    with world.query(world.auditor) as channel:
        about_alice = every_audit_event(channel, namespace=world.namespace, action="pii_access", node_key="person:alice")
    typed = [e for e in of_request if "CompileTypedContext" in json_format.MessageToDict(e.details)["method"]]
    assert typed and typed[0].target_key == "" and typed[0].event_id in {e.event_id for e in about_alice}
    assert all(
        "person:alice" in json_format.MessageToDict(e.details).get("natural_keys", []) for e in about_alice
    )
    # The officer reads its own events; a reader of the namespace without its scope sees none of them.
    with world.query(world.officer) as channel:
        assert len(trace_audit_events(channel, world.namespace, request_id)) == 6
    with world.query(world.reader) as channel:
        with pytest.raises(grpc.RpcError) as hidden:
            trace_audit_events(channel, world.namespace, request_id)
        assert hidden.value.code() == grpc.StatusCode.NOT_FOUND
        with pytest.raises(grpc.RpcError) as refused:
            list_audit_events(channel, namespace=world.namespace)
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    # A cleared token without the admin right may not list either (the listing shows others' events).
    with world.query(world.officer) as channel, pytest.raises(grpc.RpcError) as refused:
        list_audit_events(channel, namespace=world.namespace, principal="aud-officer")
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED


def test_an_admin_without_clearance_reads_the_listing_masked(world: World) -> None:
    key = "contact:olga.smirnova@example.ru"
    with world.ingest(world.writer) as channel:
        document_service_pb2_grpc.DocumentServiceStub(channel).Retain(
            document_service_pb2.RetainRequest(
                namespace=world.namespace, natural_key=key, content="# Contact\n\nCall +7 (916) 123-45-67.\n"
            ),
            timeout=120,
        )
    with world.query(world.officer) as channel:
        source_service_pb2_grpc.SourceServiceStub(channel).GetSource(
            source_service_pb2.GetSourceRequest(namespace=world.namespace, natural_key=key), timeout=60
        )
    with world.query(world.auditor) as channel:
        shown = every_audit_event(channel, namespace=world.namespace, action="pii_access", node_key=key)
    with world.query(world.masked_admin) as channel:
        listed = every_audit_event(channel, namespace=world.namespace, action="pii_access")
        # filtering by the unmasked key would confirm who "contact:[email]" is: refused, whatever is stored
        with pytest.raises(grpc.RpcError) as refused:
            every_audit_event(channel, namespace=world.namespace, action="pii_access", node_key=key)
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    masked = [e for e in listed if e.event_id in {s.event_id for s in shown}]
    assert [e.event_id for e in masked] == [e.event_id for e in shown] and len(shown) == 1
    assert shown[0].target_key == key and shown[0].principal == "aud-officer"
    assert masked[0].target_key == "contact:[email]" and masked[0].principal == "aud-officer"
    assert "olga.smirnova@example.ru" not in json_format.MessageToJson(masked[0])


def test_a_caller_reads_its_own_events_without_their_scope(world: World) -> None:
    trace_id = "aud-own-" + uuid.uuid4().hex[:8]
    with world.ingest(world.hr_scoped) as channel:
        audit_service_pb2_grpc.AuditServiceStub(channel).RecordAuditEvent(
            audit_service_pb2.RecordAuditEventRequest(
                namespace=world.namespace, action="review", trace_id=trace_id, scopes=["workspace:hr"]
            ),
            timeout=60,
        )
    with world.query(world.hr_unscoped) as channel:
        own = trace_audit_events(channel, world.namespace, trace_id)
    assert [(e.action, e.principal) for e in own] == [("review", "aud-hr")]
    with world.query(world.reader) as channel, pytest.raises(grpc.RpcError) as hidden:
        trace_audit_events(channel, world.namespace, trace_id)
    assert hidden.value.code() == grpc.StatusCode.NOT_FOUND
    # The namespace admin reads it whatever its scopes, and so does an admin of every namespace ("*");
    # an admin of another namespace reads nothing of this one.
    with world.query(world.masked_admin) as channel:
        assert [e.principal for e in trace_audit_events(channel, world.namespace, trace_id)] == ["aud-hr"]
    with world.query(world.packs) as channel:
        listed = every_audit_event(channel, namespace=world.namespace, action="review", principal="aud-hr")
    assert [e.trace_id for e in listed] == [trace_id]
    with world.query(world.other_admin) as channel:
        for read in (
            lambda: trace_audit_events(channel, world.namespace, trace_id),
            lambda: list_audit_events(channel, namespace=world.namespace),
        ):
            with pytest.raises(grpc.RpcError) as refused:
                read()
            assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED


@pytest.fixture(scope="module")
def listed_events(world: World) -> list[str]:
    """Explicit events of two actions by the writer, and deletions by the deleter, in ``world.listed``;
    returns the ids written."""
    ids: list[str] = []
    with world.ingest(world.writer) as channel:
        audit = audit_service_pb2_grpc.AuditServiceStub(channel)
        documents = document_service_pb2_grpc.DocumentServiceStub(channel)
        for index in range(14):
            recorded = audit.RecordAuditEvent(
                audit_service_pb2.RecordAuditEventRequest(
                    namespace=world.listed,
                    action="export" if index % 3 else "review",
                    target_key=f"doc:report-{index % 4}",
                    trace_id=f"batch-{index % 2}",
                ),
                timeout=60,
            )
            ids.append(recorded.event.event_id)
        for index in range(3):
            documents.Retain(
                document_service_pb2.RetainRequest(
                    namespace=world.listed,
                    natural_key=f"doc:gone-{index}",
                    content=f"# Gone {index}\n\nold.\n",
                ),
                timeout=120,
            )
    with world.ingest(world.deleter) as channel:
        documents = document_service_pb2_grpc.DocumentServiceStub(channel)
        for index in range(3):
            deleted = documents.DeleteNode(
                document_service_pb2.DeleteNodeRequest(
                    namespace=world.listed, natural_key=f"doc:gone-{index}", reason="retention"
                ),
                timeout=60,
            )
            ids.append(deleted.audit_event_id)
    return ids


def test_the_listing_is_newest_first_and_pages_exactly(world: World, listed_events: list[str]) -> None:
    with world.query(world.auditor) as channel:
        full = list(list_audit_events(channel, namespace=world.listed, page_size=1000).events)
        assert sorted(e.event_id for e in full) == sorted(listed_events)
        keys = [(instant(e.record_time), e.event_id) for e in full]
        assert keys == sorted(keys, reverse=True)
        for size in (1, 3, 4, 16, 17):
            pages = []
            token = ""
            while True:
                page = list_audit_events(channel, namespace=world.listed, page_size=size, page_token=token)
                assert len(page.events) <= size
                pages.append([e.event_id for e in page.events])
                token = page.next_page_token
                if not token:
                    break
            assert [i for p in pages for i in p] == [e.event_id for e in full], size
            assert len(pages) == max(1, -(-len(full) // size)), size


def test_each_filter_is_exact(world: World, listed_events: list[str]) -> None:
    with world.query(world.auditor) as channel:
        full = list(list_audit_events(channel, namespace=world.listed, page_size=1000).events)
        times = [instant(e.record_time) for e in full]
        start, end = times[-6], times[2]  # oldest first at the end: a window in the middle

        def expect(keep: Any) -> list[str]:
            return [e.event_id for e in full if keep(e)]

        cases: list[tuple[dict[str, Any], list[str]]] = [
            ({"action": "export"}, expect(lambda e: e.action == "export")),
            ({"action": "review"}, expect(lambda e: e.action == "review")),
            ({"action": "delete"}, expect(lambda e: e.action == "delete")),
            ({"principal": "aud-deleter"}, expect(lambda e: e.principal == "aud-deleter")),
            ({"principal": "aud-writer"}, expect(lambda e: e.principal == "aud-writer")),
            ({"node_key": "doc:report-1"}, expect(lambda e: e.target_key == "doc:report-1")),
            ({"node_key": "doc:gone-2"}, expect(lambda e: e.target_key == "doc:gone-2")),
            (
                {"start_time": timestamp(start), "end_time": timestamp(end)},
                expect(lambda e: start <= instant(e.record_time) < end),
            ),
            ({"start_time": timestamp(start)}, expect(lambda e: start <= instant(e.record_time))),
            ({"end_time": timestamp(end)}, expect(lambda e: instant(e.record_time) < end)),
            (
                {"action": "export", "node_key": "doc:report-2", "principal": "aud-writer"},
                expect(lambda e: e.action == "export" and e.target_key == "doc:report-2"),
            ),
            ({"action": "export", "principal": "aud-deleter"}, []),
        ]
        assert len(expect(lambda e: e.action == "delete")) == 3
        assert 0 < len(cases[7][1]) < len(full)
        for filters, wanted in cases:
            assert [e.event_id for e in every_audit_event(channel, namespace=world.listed, **filters)] == wanted, filters
            paged = every_audit_event(channel, namespace=world.listed, page_size=2, **filters)
            assert [e.event_id for e in paged] == wanted, filters


def altered(token: str) -> str:
    """``token`` with one character of its middle changed: a middle base64 character carries six bits of
    the token's bytes (the last may carry only padding bits, and may already be the replacement)."""
    middle = len(token) // 2
    return token[:middle] + ("B" if token[middle] == "A" else "A") + token[middle + 1 :]


def test_bad_filters_and_tokens_are_refused_precisely(world: World, listed_events: list[str]) -> None:
    with world.query(world.auditor) as channel:
        first = list_audit_events(channel, namespace=world.listed, page_size=2, action="export")
        assert first.next_page_token
        bad_requests: list[tuple[dict[str, Any], set[str]]] = [
            (
                {
                    "namespace": world.listed,
                    "action": "Delete Everything",
                    "principal": "a\nb",
                    "node_key": "k" * 600,
                    "page_size": 1001,
                },
                {"action", "principal", "node_key", "page_size"},
            ),
            ({"namespace": world.listed, "page_size": -1}, {"page_size"}),
            (
                {
                    "namespace": world.listed,
                    "start_time": timestamp(instant(first.events[0].record_time)),
                    "end_time": timestamp(instant(first.events[0].record_time) - timedelta(seconds=1)),
                },
                {"end_time"},
            ),
            # A token sent with other filters, altered, or made up.
            ({"namespace": world.listed, "page_token": first.next_page_token}, {"page_token"}),
            (
                {"namespace": world.listed, "action": "review", "page_token": first.next_page_token},
                {"page_token"},
            ),
            (
                {
                    "namespace": world.listed,
                    "action": "export",
                    "page_token": altered(first.next_page_token),
                },
                {"page_token"},
            ),
            (
                {"namespace": world.listed, "action": "export", "page_token": "bm90IGEgdG9rZW4"},
                {"page_token"},
            ),
        ]
        for fields, wanted in bad_requests:
            with pytest.raises(grpc.RpcError) as refused:
                list_audit_events(channel, **fields)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, fields
            assert {v.field for v in rpc_failure(refused.value).violations} == wanted, fields
        # The token still works with the request it was issued for.
        second = list_audit_events(
            channel, namespace=world.listed, page_size=2, action="export", page_token=first.next_page_token
        )
        assert second.events and second.events[0].event_id not in {e.event_id for e in first.events}
    # A writer is not an admin; ingest_service does not serve the read.
    with world.query(world.writer) as channel, pytest.raises(grpc.RpcError) as refused:
        list_audit_events(channel, namespace=world.listed)
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    with world.ingest(world.auditor) as channel, pytest.raises(grpc.RpcError) as unserved:
        list_audit_events(channel, namespace=world.listed)
    assert unserved.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_cb_audit_answers_who_deleted_what(world: World, listed_events: list[str]) -> None:
    base = ["--ingest-addr", world.ingest_addr, "--query-addr", world.query_addr, "--token", world.auditor]
    runner = CliRunner()
    result = runner.invoke(
        app, [*base, "audit", "--namespace", world.listed, "--action", "delete", "--page-size", "1", "--json"]
    )
    assert result.exit_code == 0, result.output
    events = json.loads(result.output)["events"]
    assert sorted(e["targetKey"] for e in events) == ["doc:gone-0", "doc:gone-1", "doc:gone-2"]
    assert {e["principal"] for e in events} == {"aud-deleter"}
    assert sorted(e["eventId"] for e in events) == sorted(listed_events[-3:])
    since = events[-1]["recordTime"]
    windowed = runner.invoke(
        app,
        [
            *base,
            "audit",
            "-n",
            world.listed,
            "--principal",
            "aud-deleter",
            "--since",
            since,
            "--until",
            events[0]["recordTime"],
            "--json",
        ],
    )
    assert windowed.exit_code == 0, windowed.output
    assert [e["eventId"] for e in json.loads(windowed.output)["events"]] == [e["eventId"] for e in events[1:]]
    table = runner.invoke(app, [*base, "audit", "-n", world.listed, "--node-key", "doc:gone-1"])
    assert table.exit_code == 0 and "doc:gone-1" in table.output and "1 events" in table.output, table.output
    refused = runner.invoke(
        app,
        ["--ingest-addr", world.ingest_addr, "--query-addr", world.query_addr, "--token", world.reader]
        + ["audit", "-n", world.listed],
    )
    assert refused.exit_code == 1 and "PERMISSION_DENIED" in refused.output, refused.output
