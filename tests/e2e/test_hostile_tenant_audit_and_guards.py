"""Hostile-tenant and careless-user attacks on the audit trail, the mass-deletion guard, request checks and
the MCP server, against the real services (in-process, real database and embedder) started with bearer
tokens like the other e2e tests.

1. AuditService.ListAuditEvents / TraceService.GetTrace: who may read which events, masking for an
   uncleared admin (principal, target key, details and scopes), crafted page tokens.
2. The mass-deletion guard: vault runs of an empty / non-Markdown folder, dry runs (a document hidden
   from the caller is neither counted nor named), empty snapshots.
3. Bad input on every RPC: undefined enum numbers, U+0000 in every string field, 1 MB read filters
   (Search ``meta`` included), negative and huge sizes, crafted page tokens of every listing
   (overflowing instants, deep JSON, U+0000, wrong shapes), ``x-project-id``.
4. The MCP server (``cb mcp``): isError for refused and partly refused items, the token's namespaces,
   ``supersedes`` of a hidden fact answering like that of a fact not arrived yet.

Each check asserts what the documentation promises (docs/reference/errors.md, docs/reference/mcp-tools.md,
docs/how-to/safe-bulk-deletion.md, docs/explanation/knowledge-model.md).
"""

from __future__ import annotations

import base64
import importlib
import json
import os
import pkgutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import grpc
import memory_service_grpc_client.memory.v1 as memory_v1
import pytest
from google.protobuf import json_format, timestamp_pb2
from google.protobuf.descriptor import Descriptor, FieldDescriptor, MethodDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from memory_service_grpc_client import ClientSecurity, iter_pages, make_channel, rpc_failure
from memory_service_grpc_client.memory.v1 import (
    audit_service_pb2,
    audit_service_pb2_grpc,
    document_service_pb2,
    document_service_pb2_grpc,
    domain_pack_service_pb2,
    domain_pack_service_pb2_grpc,
    fact_query_service_pb2,
    fact_query_service_pb2_grpc,
    knowledge_pb2,
    memory_query_service_pb2,
    memory_query_service_pb2_grpc,
    memory_service_pb2,
    memory_service_pb2_grpc,
    snapshot_service_pb2,
    snapshot_service_pb2_grpc,
    source_service_pb2,
    source_service_pb2_grpc,
    trace_service_pb2,
    trace_service_pb2_grpc,
    vault_service_pb2,
    vault_service_pb2_grpc,
)

from common.auth.principals import Right
from common.grpc.proto_mapping import timestamp
from common.kernel.config import Settings
from common.kernel.memory_names import memory_namespace
from common.storage.database import Database
from memory_service_tools.token_writer import add_token
from query_service.main import SERVICE_NAMES as QUERY_SERVICES
from tests.e2e.conftest import token_secured_services
from tests.e2e.mcp_http import free_port, http_tool_calls, mcp_over_http, tool_text
from tests.e2e.vault_helpers import ingest, write

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

NEVER = {grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN}
EMAIL = "olga.smirnova@example.ru"
COUNTED_TABLES = (
    "graph_nodes",
    "chunks",
    "facts",
    "observations",
    "memories",
    "audit_events",
    "vault_documents",
    "vault_runs",
    "source_snapshots",
    "domain_packs",
    "namespace_settings",
    "context_traces",
)


_KEY_COLUMN = {"graph_nodes": "natural_key", "chunks": "node_key", "memories": "memory_id"}


def _counts(database: Database, excluding: list[str] | tuple[str, ...] = ()) -> dict[str, int]:
    """Rows of every table, leaving out the rows of the memories ``excluding`` names."""
    with database.connection() as conn:
        found = {}
        for table in COUNTED_TABLES:
            column = _KEY_COLUMN.get(table)
            where = f" WHERE NOT ({column} = ANY(%s))" if column else ""
            params = (list(excluding),) if column else ()
            row = conn.execute(f"SELECT count(*) FROM {table}{where}", params).fetchone()
            assert row is not None
            found[table] = int(row[0])
    return found


def _ns_counts(database: Database, namespace: str) -> dict[str, int]:
    """Rows of ``namespace``: vault documents, document nodes, chunks, facts (all / open), audit events,
    observations."""
    queries = {
        "vault_documents": "SELECT count(*) FROM vault_documents WHERE namespace = %s",
        "nodes": "SELECT count(*) FROM graph_nodes WHERE namespace = %s AND node_type <> 'audit_event'"
        " AND node_type <> 'pc_trace'",
        "chunks": "SELECT count(*) FROM chunks WHERE namespace = %s",
        "facts": "SELECT count(*) FROM facts WHERE namespace = %s",
        "open_facts": "SELECT count(*) FROM facts WHERE namespace = %s AND valid_to IS NULL",
        "audit_events": "SELECT count(*) FROM audit_events WHERE namespace = %s",
        "observations": "SELECT count(*) FROM observations WHERE namespace = %s",
        "snapshots": "SELECT count(*) FROM source_snapshots WHERE namespace = %s",
    }
    with database.connection() as conn:
        out = {}
        for name, query in queries.items():
            row = conn.execute(query, (namespace,)).fetchone()
            assert row is not None
            out[name] = int(row[0])
    return out


def _failure(call: Any) -> Any:
    """Runs ``call`` and returns the decoded failure; fails the test when the call succeeds."""
    try:
        call()
    except grpc.RpcError as error:
        return rpc_failure(error)
    pytest.fail("the call succeeded where a refusal was expected")


def _fields(failure: Any) -> list[str]:
    return [v.field for v in failure.violations]


def _describe(failure: Any) -> str:
    return f"{failure.code.name}: {failure.message} reason={failure.reason} violations={_fields(failure)}"


# ======================================================================================================
# Part 3 (first, in dev mode, before the token world writes anything): bad input on every RPC
# ======================================================================================================


def _methods() -> Iterator[MethodDescriptor]:
    for module in pkgutil.iter_modules(memory_v1.__path__):
        if module.name.endswith("_pb2"):
            file = importlib.import_module(f"{memory_v1.__name__}.{module.name}").DESCRIPTOR
            for service in file.services_by_name.values():
                yield from service.methods


def _served_by_query(method: MethodDescriptor) -> bool:
    if method.containing_service.name == "AuditService":
        return method.name == "ListAuditEvents"
    return method.containing_service.full_name in QUERY_SERVICES


def _invoke(channel: grpc.Channel, method: MethodDescriptor, request: Message, **kwargs: Any) -> Any:
    path = f"/{method.containing_service.full_name}/{method.name}"
    response_type = GetMessageClass(method.output_type)
    serialize, deserialize = type(request).SerializeToString, response_type.FromString
    if method.client_streaming:
        stub = channel.stream_unary(path, request_serializer=serialize, response_deserializer=deserialize)
        return stub(iter([request]), timeout=60, **kwargs)
    if method.server_streaming:
        stub = channel.unary_stream(path, request_serializer=serialize, response_deserializer=deserialize)
        return list(stub(request, timeout=60, **kwargs))
    stub = channel.unary_unary(path, request_serializer=serialize, response_deserializer=deserialize)
    return stub(request, timeout=60, **kwargs)


@dataclass(frozen=True)
class Site:
    """A field reachable in a request: the message steps to it, the field, how it is set, its path."""

    steps: tuple[FieldDescriptor, ...]
    leaf: FieldDescriptor
    mode: str  # scalar | repeated | map_key | map_value | struct
    path: str


_DESCEND = ("memory.v1.", "google.protobuf.FieldMask")


def _sites(message: Descriptor, kinds: set[int], steps: tuple[FieldDescriptor, ...] = (), path: str = "",
           seen: tuple[str, ...] = ()) -> Iterator[Site]:
    if len(steps) > 4:
        return
    for f in message.fields:
        where = f"{path}.{f.name}" if path else f.name
        if f.message_type is not None and f.message_type.GetOptions().map_entry:
            key, value = f.message_type.fields_by_name["key"], f.message_type.fields_by_name["value"]
            if key.type in kinds:
                yield Site(steps, f, "map_key", where)
            if value.type in kinds:
                yield Site(steps, f, "map_value", where)
            continue
        if f.type in kinds:
            yield Site(steps, f, "repeated" if f.is_repeated else "scalar", f"{where}[0]" if f.is_repeated else where)
        elif f.type == FieldDescriptor.TYPE_MESSAGE:
            name = f.message_type.full_name
            if name == "google.protobuf.Struct" and FieldDescriptor.TYPE_STRING in kinds:
                yield Site(steps, f, "struct", where)
            elif name.startswith(_DESCEND) and name not in seen:
                yield from _sites(
                    f.message_type, kinds, (*steps, f), f"{where}[0]" if f.is_repeated else where,
                    (*seen, message.full_name),
                )


def _with_value(method: MethodDescriptor, site: Site, value: Any) -> Message:
    request = GetMessageClass(method.input_type)()
    target: Any = request
    name = site.leaf.name

    def prefill(message: Any) -> None:  # a valid namespace, so the violation is about the bad field
        ns = message.DESCRIPTOR.fields_by_name.get("namespace")
        plain = ns is not None and ns.type == FieldDescriptor.TYPE_STRING and not ns.is_repeated
        if plain and not (message is target and name == "namespace") and not message.namespace:
            message.namespace = "atk-bad-input"

    for step in site.steps:
        target = getattr(target, step.name).add() if step.is_repeated else getattr(target, step.name)
    holder: Any = request
    for step in (*site.steps, None):
        if holder is not target or name != "namespace":
            prefill(holder)
        if step is None:
            break
        nxt = getattr(holder, step.name)
        holder = nxt[0] if step.is_repeated else nxt
    if site.mode == "scalar":
        setattr(target, name, value)
    elif site.mode == "repeated":
        getattr(target, name).append(value)
    elif site.mode == "map_key":
        getattr(target, name)[value] = "v" if isinstance(value, str) else 1
    elif site.mode == "map_value":
        getattr(target, name)["k"] = value
    else:
        getattr(target, name).update({"k": value})
    return request


def _site_params(kinds: set[int], only_query: bool = False) -> list[Any]:
    out = []
    for method in _methods():
        if only_query and not _served_by_query(method):
            continue
        for site in _sites(method.input_type, kinds):
            out.append(
                pytest.param(method, site, id=f"{method.containing_service.name}.{method.name}:{site.path}")
            )
    return out


STRING_SITES = _site_params({FieldDescriptor.TYPE_STRING})
READ_STRING_SITES = _site_params({FieldDescriptor.TYPE_STRING}, only_query=True)
ENUM_SITES = _site_params({FieldDescriptor.TYPE_ENUM})
SIZE_NAMES = {"page_size", "top_k", "token_budget", "dropped_limit", "max_depth", "max_sentences"}
SIZE_SITES = [
    p for p in _site_params({FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_INT64})
    if p.values[1].leaf.name in SIZE_NAMES
]


@pytest.fixture(scope="module")
def dev_channels(ingest_channel: grpc.Channel, query_channel: grpc.Channel) -> tuple[grpc.Channel, grpc.Channel]:
    return ingest_channel, query_channel


@pytest.fixture(scope="module")
def before_bad_input(dev_channels: Any, database: Database) -> dict[str, int]:
    return _counts(database)


def _expect_invalid(
    dev_channels: tuple[grpc.Channel, grpc.Channel], method: MethodDescriptor, request: Message, path: str,
    *, prefix_match: bool = True,
) -> None:
    channel = dev_channels[1] if _served_by_query(method) else dev_channels[0]
    expected = f"messages[0].{path}" if method.client_streaming else path

    def names(field: str) -> bool:
        return field == expected or (
            prefix_match
            and (field.startswith(expected) or expected.startswith((field + ".", field + "[")))
            and field != ""
        )

    try:
        response = _invoke(channel, method, request)
    except grpc.RpcError as error:
        failure = rpc_failure(error)
    else:
        # A batch answered item by item (AddMemories): every item failed, naming the field.
        results = list(getattr(response, "results", []))
        assert results and all(r.status == "failed" for r in results), (
            f"accepted with status OK ({type(response).__name__} {str(response)[:200]!r})"
        )
        violations = [v.split(":", 1)[0] for r in results for v in r.field_violations]
        assert any(names(v) for v in violations), f"no item violation names {expected}: {violations}"
        return
    assert failure.code not in NEVER, _describe(failure)
    assert failure.code == grpc.StatusCode.INVALID_ARGUMENT, _describe(failure)
    named = [f for f in _fields(failure) if names(f)]
    assert named, f"no field violation names {expected}: {_describe(failure)}"


def test_bad_input_section_starts(before_bad_input: dict[str, int]) -> None:
    assert before_bad_input  # snapshot of every table before the bad-input calls


@pytest.mark.parametrize(("method", "site"), ENUM_SITES)
def test_out_of_range_enum_is_invalid_argument(dev_channels: Any, method: MethodDescriptor, site: Site) -> None:
    _expect_invalid(dev_channels, method, _with_value(method, site, 99), site.path)
    _expect_invalid(dev_channels, method, _with_value(method, site, -5), site.path)


@pytest.mark.parametrize(("method", "site"), STRING_SITES)
def test_u0000_in_any_string_field_is_invalid_argument(
    dev_channels: Any, method: MethodDescriptor, site: Site
) -> None:
    _expect_invalid(dev_channels, method, _with_value(method, site, "a\u0000b"), site.path)


@pytest.mark.parametrize(("method", "site"), READ_STRING_SITES)
def test_one_megabyte_read_filter_is_invalid_argument(
    dev_channels: Any, method: MethodDescriptor, site: Site
) -> None:
    request = _with_value(method, site, "k" * (1 << 20))
    query = request.DESCRIPTOR.fields_by_name.get("query")
    if query is not None and site.path != "query" and not site.steps:
        request.query = "billing"  # a valid query, so the violation is about the oversized field
    _expect_invalid(dev_channels, method, request, site.path)


def test_add_memories_with_nothing_valid_answers_every_item_failed(dev_channels: Any, database: Database) -> None:
    """docs/reference/errors.md: AddMemories answers OK even when no item is valid, every result failed."""
    # (changed from "rejected as a whole": AddMemories answers item by item by design, as its proto says)
    before = _counts(database)["memories"]
    response = memory_service_pb2_grpc.MemoryServiceStub(dev_channels[0]).AddMemories(
        memory_service_pb2.AddMemoriesRequest(memories=[memory_service_pb2.NewMemory(text="a\u0000b")]),
        timeout=60,
    )
    assert [r.status for r in response.results] == ["failed"], response
    assert response.results[0].error_code == "INVALID_ARGUMENT", response
    assert any(v.startswith("memories[0].text") for v in response.results[0].field_violations), response
    assert _counts(database)["memories"] == before


@pytest.mark.parametrize(("method", "site"), SIZE_SITES)
@pytest.mark.parametrize("value", [-1, -(2**31), 2**31 - 1], ids=["minus1", "int_min", "int_max"])
def test_negative_and_huge_sizes_are_invalid_argument(
    dev_channels: Any, method: MethodDescriptor, site: Site, value: int
) -> None:
    _expect_invalid(dev_channels, method, _with_value(method, site, value), site.path, prefix_match=False)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode()


_DEEP = b"[" * 50_000 + b"]" * 50_000
LISTING_TOKENS = {
    "overflowing_instant_list": _b64(json.dumps(["s:a", "P", "0001-01-01T00:00:00+01:00", "fact-x"]).encode()),
    "overflowing_instant_obj": _b64(json.dumps({"t": "9999-12-31T23:59:59-01:00", "id": "x"}).encode()),
    "deep_json": _b64(_DEEP),
    "nul_inside": _b64(json.dumps(["a\u0000", "b"]).encode()),
    "nul_raw": "\u0000",
    "non_utf8": _b64(b"\xff\xfe\x00"),
    "huge": "A" * (1 << 20),
}


@pytest.mark.parametrize("token", list(LISTING_TOKENS.values()), ids=list(LISTING_TOKENS))
@pytest.mark.parametrize("listing", ["ListFacts", "ListMemories", "ListPackages"])
def test_every_listings_page_token_refuses_crafted_tokens(dev_channels: Any, listing: str, token: str) -> None:
    ingest, query = dev_channels
    calls = {
        "ListFacts": lambda: fact_query_service_pb2_grpc.FactQueryServiceStub(query).ListFacts(
            fact_query_service_pb2.ListFactsRequest(namespace="atk-tokens", subject="s:a", page_token=token),
            timeout=60,
        ),
        "ListMemories": lambda: memory_query_service_pb2_grpc.MemoryQueryServiceStub(query).ListMemories(
            memory_query_service_pb2.ListMemoriesRequest(page_token=token), timeout=60
        ),
        "ListPackages": lambda: domain_pack_service_pb2_grpc.DomainPackServiceStub(ingest).ListPackages(
            domain_pack_service_pb2.ListPackagesRequest(page_token=token), timeout=60
        ),
    }
    failure = _failure(calls[listing])
    assert failure.code == grpc.StatusCode.INVALID_ARGUMENT, _describe(failure)
    assert "page_token" in _fields(failure), _describe(failure)


ACCEPTED_MEMORIES: list[str] = []


@pytest.mark.parametrize(
    ("project", "accepted"),
    # (an empty x-project-id is accepted as "no project": the header is optional, docs/how-to/memory-records.md)
    [("prj_8f3a", True), ("prj:8f3a", False), ("", True), ("p" * 1024, False)],
    ids=["prj_8f3a", "colon", "empty", "1KB"],
)
def test_x_project_id(dev_channels: Any, database: Database, project: str, accepted: bool) -> None:
    ingest, query = dev_channels
    user = "atk-" + uuid.uuid4().hex[:8]
    before = _counts(database)["memories"]
    add = lambda: memory_service_pb2_grpc.MemoryServiceStub(ingest).AddMemories(
        memory_service_pb2.AddMemoriesRequest(
            user_id=user, memories=[memory_service_pb2.NewMemory(text="The user ships on Fridays.")]
        ),
        metadata=(("x-project-id", project),),
        timeout=120,
    )
    listing = lambda: memory_query_service_pb2_grpc.MemoryQueryServiceStub(query).ListMemories(
        memory_query_service_pb2.ListMemoriesRequest(user_id=user),
        metadata=(("x-project-id", project),),
        timeout=60,
    )
    if accepted:
        added = add()
        ACCEPTED_MEMORIES.append(added.results[0].memory_id)
        assert added.results[0].status == "created", added
        listed = listing()
        assert [m.memory_id for m in listed.memories] == [added.results[0].memory_id]
        assert listed.memories[0].scope.project_id == project
        return
    try:
        unexpected = add()
    except grpc.RpcError:
        pass
    else:
        ACCEPTED_MEMORIES.extend(r.memory_id for r in unexpected.results if r.created)
        pytest.fail(f"x-project-id {project[:20]!r} accepted: {unexpected}")
    for call in (add, listing):
        failure = _failure(call)
        assert failure.code == grpc.StatusCode.INVALID_ARGUMENT, _describe(failure)
        assert _fields(failure) == ["x-project-id"], _describe(failure)
    assert _counts(database)["memories"] == before


def test_bad_input_wrote_nothing(before_bad_input: dict[str, int], database: Database) -> None:
    # the memories the x-project-id checks stored (prj_8f3a, and any id accepted by mistake) are left out
    assert _counts(database, ACCEPTED_MEMORIES) == before_bad_input


# ======================================================================================================
# Part 1: who reads the audit trail (tokens, personal data protection on)
# ======================================================================================================


class World:
    def __init__(self, tokens_file: Path) -> None:
        tag = uuid.uuid4().hex[:8]
        self.tokens_file = tokens_file
        self.a = f"atk-a-{tag}"
        self.b = f"atk-b-{tag}"
        self.ghost = f"atk-c-{tag}"  # a namespace nobody wrote to: refusals about it must look the same
        self.v = f"atk-vault-{tag}"
        self.m = f"atk-mcp-{tag}"

        def token(principal: str, namespaces: dict[str, list[Right]], **kw: Any) -> str:
            value, _ = add_token(tokens_file, principal=principal, namespaces=namespaces, **kw)
            return value

        self.a_admin = token("atk-auditor", {self.a: [Right.ADMIN]}, pii_clearance=True)
        self.a_masked_admin = token("atk-masked-admin", {self.a: [Right.ADMIN]})
        self.a_reader = token("atk-reader", {self.a: [Right.READ]})
        self.a_writer = token("atk-writer", {self.a: [Right.WRITE]})
        self.a_hr = token("atk-hr", {self.a: [Right.WRITE]}, scopes=["workspace:hr"])
        self.officer = token(EMAIL, {self.a: [Right.READ]}, pii_clearance=True)
        self.b_admin = token("atk-b-admin", {self.b: [Right.ADMIN]}, pii_clearance=True)
        self.star_reader = token("atk-star-reader", {"*": [Right.READ, Right.WRITE]}, pii_clearance=True)
        try:
            self.nobody = token("atk-nobody", {})
        except Exception:  # noqa: BLE001 - a token must name a namespace: one unrelated to A
            self.nobody = token("atk-nobody", {f"atk-unrelated-{tag}": [Right.READ]})
        self.unknown = "cbt_" + "0" * 40
        # the vault / snapshot tenant
        self.v_writer = token("atk-v-writer", {self.v: [Right.WRITE]}, scopes=["workspace:vs"])
        self.v_narrow = token("atk-v-narrow", {self.v: [Right.WRITE]})
        # the MCP tenants
        self.m_writer = token("atk-m-writer", {self.m: [Right.WRITE]})
        self.m_reader = token("atk-m-reader", {self.m: [Right.READ]})
        self.m_scoped = token("atk-m-hr", {self.m: [Right.WRITE]}, scopes=["workspace:hr"])
        self.m_other = token("atk-m-other", {self.b: [Right.ADMIN]})
        self.m_admin_all = token("atk-m-root", {"*": [Right.ADMIN]})
        self.organization = "atk" + tag
        self.m_user = token(
            "atk-chat-app",
            {memory_namespace(self.organization, "production"): [Right.READ, Right.WRITE]},
            memory_scope=(self.organization, "production", "8821"),
        )
        self.ingest_addr = self.query_addr = ""
        self.pii_trace = f"atk-pii-{tag}"
        self.hr_trace = f"atk-hr-del-{tag}"
        self.export_trace = f"atk-export-{tag}"
        self.b_trace = f"atk-b-{tag}"
        self.ids: dict[str, list[str]] = {}

    def ingest(self, token: str) -> grpc.Channel:
        return make_channel(self.ingest_addr, security=ClientSecurity(token=token))

    def query(self, token: str) -> grpc.Channel:
        return make_channel(self.query_addr, security=ClientSecurity(token=token))


def _populate(world: World) -> None:
    a, b = world.a, world.b
    with world.ingest(world.a_writer) as channel:
        docs = document_service_pb2_grpc.DocumentServiceStub(channel)
        docs.Retain(
            document_service_pb2.RetainRequest(
                namespace=a, natural_key=f"contact:{EMAIL}",
                content=f"# Contact\n\nWrite to {EMAIL} or call +7 (916) 123-45-67.\n",
            ),
            timeout=120,
        )
        docs.Retain(
            document_service_pb2.RetainRequest(
                namespace=a, natural_key="doc:plain", content="# Plain\n\nNothing personal here.\n"
            ),
            timeout=120,
        )
        recorded = audit_service_pb2_grpc.AuditServiceStub(channel).RecordAuditEvent(
            audit_service_pb2.RecordAuditEventRequest(
                namespace=a, action="export", target_key="doc:plain", trace_id=world.export_trace
            ),
            timeout=60,
        )
        world.ids["export"] = [recorded.event.event_id]
    with world.query(world.officer) as channel:
        source_service_pb2_grpc.SourceServiceStub(channel).GetSource(
            source_service_pb2.GetSourceRequest(namespace=a, natural_key=f"contact:{EMAIL}"),
            metadata=(("x-request-id", world.pii_trace),),
            timeout=60,
        )
    with world.ingest(world.a_hr) as channel:
        docs = document_service_pb2_grpc.DocumentServiceStub(channel)
        docs.Retain(
            document_service_pb2.RetainRequest(
                namespace=a, natural_key="doc:hr-secret", scopes=["workspace:hr"],
                content="# Layoffs\n\nThe Q3 layoff list is in the HR vault.\n",
            ),
            timeout=120,
        )
        deleted = docs.DeleteNode(
            document_service_pb2.DeleteNodeRequest(
                namespace=a, natural_key="doc:hr-secret", reason="atk", trace_id=world.hr_trace
            ),
            timeout=60,
        )
        world.ids["hr_delete"] = [deleted.audit_event_id]
    with world.ingest(world.b_admin) as channel:
        audit = audit_service_pb2_grpc.AuditServiceStub(channel)
        world.ids["b"] = [
            audit.RecordAuditEvent(
                audit_service_pb2.RecordAuditEventRequest(
                    namespace=b, action="export", target_key=f"doc:b-{i}", trace_id=world.b_trace
                ),
                timeout=60,
            ).event.event_id
            for i in range(3)
        ]


@pytest.fixture(scope="module")
def world(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    folder = tmp_path_factory.mktemp("attacks")
    world = World(folder / "tokens.yaml")
    with token_secured_services(settings, world.tokens_file, pii_protection=True) as (
        world.ingest_addr,
        world.query_addr,
    ):
        _populate(world)
        yield world


def _list(channel: grpc.Channel, **fields: Any) -> audit_service_pb2.ListAuditEventsResponse:
    return audit_service_pb2_grpc.AuditServiceStub(channel).ListAuditEvents(
        audit_service_pb2.ListAuditEventsRequest(**fields), timeout=60
    )


def _all(channel: grpc.Channel, **fields: Any) -> list[audit_service_pb2.AuditEvent]:
    return list(
        iter_pages(
            lambda request: _list(channel, **{**fields, "page_token": request.page_token}),
            audit_service_pb2.ListAuditEventsRequest(),
            lambda page: page.events,
        )
    )


def _trace(channel: grpc.Channel, namespace: str, trace_id: str) -> Any:
    return trace_service_pb2_grpc.TraceServiceStub(channel).GetTrace(
        trace_service_pb2.GetTraceRequest(namespace=namespace, trace_id=trace_id), timeout=60
    )


def _db_event_ids(database: Database, namespace: str) -> set[str]:
    with database.connection() as conn:
        return {str(r[0]) for r in conn.execute("SELECT event_id FROM audit_events WHERE namespace = %s", (namespace,))}


def _forge(namespace: str, payload: dict[str, Any] | bytes, **filters: Any) -> str:
    """A page token computed like the service does (its check value is not secret)."""
    from query_service.audit_reader import AuditListInput, _check_value, _filter_digest

    if isinstance(payload, dict):
        payload = {**payload, "f": payload.get("f", _filter_digest(AuditListInput(namespace=namespace, **filters)))}
        data = json.dumps(payload, separators=(",", ":")).encode()
    else:
        data = payload
    return base64.urlsafe_b64encode(data).decode().rstrip("=") + "." + _check_value(data)


def test_the_admin_of_a_sees_every_event_of_a_and_nothing_else(world: World, database: Database) -> None:
    stored = _db_event_ids(database, world.a)
    with world.query(world.a_admin) as channel:
        listed = _all(channel, namespace=world.a, page_size=2)
    ids = {e.event_id for e in listed}
    # the cleared admin's own listing is audited (one pii_access event) after it was read
    assert stored <= ids <= _db_event_ids(database, world.a), (stored - ids, ids - stored)
    assert not ids & set(world.ids["b"])
    pii = [e for e in listed if e.action == "pii_access"]
    assert pii and {e.principal for e in pii} == {EMAIL}, "the other principal's pii_access events"
    assert world.ids["hr_delete"][0] in ids, "the scoped delete event of another principal"
    # its trace as well, whatever the events' scopes
    with world.query(world.a_admin) as channel:
        for trace_id in (world.pii_trace, world.hr_trace, world.export_trace):
            entries = _trace(channel, world.a, trace_id).trace.entries
            assert entries, trace_id


def test_an_uncleared_admin_reads_every_value_masked(world: World) -> None:
    with world.query(world.a_masked_admin) as channel:
        listed = _all(channel, namespace=world.a, action="pii_access")
        trace = _trace(channel, world.a, world.pii_trace)
    assert listed and all(e.principal != EMAIL for e in listed)
    leaks = [
        (e.event_id, json_format.MessageToDict(e))
        for e in listed
        if EMAIL in json_format.MessageToJson(e)
    ]
    problems = [f"ListAuditEvents shows {EMAIL} to the uncleared admin: {leaks}"] if leaks else []
    if EMAIL in json_format.MessageToJson(trace):
        problems.append(f"GetTrace shows {EMAIL} to the uncleared admin: {json_format.MessageToDict(trace)}")
    assert not problems, "\n".join(problems)


def _denied_variants(world: World, namespace: str) -> list[dict[str, Any]]:
    now = datetime.now(UTC)
    return [
        {},
        {"page_size": 1000},
        {"action": "pii_access"},
        {"principal": EMAIL},
        {"node_key": f"contact:{EMAIL}"},
        {"start_time": timestamp(now - timedelta(days=1)), "end_time": timestamp(now + timedelta(days=1))},
        {"page_token": _forge(namespace, {"t": now.isoformat(), "id": "aud-" + "f" * 24})},
        {"page_token": "garbage"},
        {"action": "Not An Action", "page_size": -1},
    ]


@pytest.mark.parametrize(
    "who", ["a_reader", "a_writer", "officer", "b_admin", "star_reader", "nobody", "unknown"]
)
def test_nobody_but_an_admin_of_a_lists_a_or_learns_anything(world: World, who: str) -> None:
    token = getattr(world, who)
    expected = grpc.StatusCode.UNAUTHENTICATED if who == "unknown" else grpc.StatusCode.PERMISSION_DENIED
    # a page token issued for B's listing, used on A
    with world.query(world.b_admin) as channel:
        b_token = _list(channel, namespace=world.b, page_size=1).next_page_token
    assert b_token
    answers: dict[str, list[tuple[Any, str, str]]] = {}
    with world.query(token) as channel:
        for namespace in (world.a, world.ghost):
            seen = []
            for fields in [*_denied_variants(world, namespace), {"page_token": b_token}]:
                failure = _failure(lambda: _list(channel, namespace=namespace, **fields))  # noqa: B023 - called at once
                meta = {k: v for k, v in failure.metadata.items() if k != "request_id"}
                seen.append((failure.code, failure.message.replace(namespace, "<NS>"), json.dumps(meta, sort_keys=True).replace(namespace, "<NS>")))
                assert failure.code == expected, (fields, _describe(failure))
                for secret in (*([] if who == "officer" else [EMAIL]), "pii_access", world.pii_trace, *world.ids["export"], *world.ids["hr_delete"]):
                    if secret not in json.dumps({k: str(v) for k, v in fields.items()}):
                        assert secret not in failure.message and secret not in str(failure.metadata), (
                            fields, _describe(failure)
                        )
            answers[namespace] = seen
    assert answers[world.a] == answers[world.ghost], "refusals about A differ from those about an empty namespace"


@pytest.mark.parametrize("who", ["a_reader", "a_writer", "b_admin", "nobody", "unknown"])
def test_get_trace_keeps_others_events_hidden(world: World, who: str) -> None:
    token = getattr(world, who)
    ghost_trace = "atk-no-such-trace-" + uuid.uuid4().hex[:6]
    with world.query(token) as channel:
        results = {}
        for trace_id in (world.pii_trace, world.hr_trace, ghost_trace):
            failure = _failure(lambda: _trace(channel, world.a, trace_id))  # noqa: B023 - called at once
            results[trace_id] = (failure.code, failure.message.replace(trace_id, "<T>"))
    if who in ("a_reader", "a_writer"):
        assert {code for code, _ in results.values()} == {grpc.StatusCode.NOT_FOUND}, results
    elif who == "unknown":
        assert {code for code, _ in results.values()} == {grpc.StatusCode.UNAUTHENTICATED}, results
    else:
        assert {code for code, _ in results.values()} == {grpc.StatusCode.PERMISSION_DENIED}, results
    assert len(set(results.values())) == 1, f"a hidden trace answers unlike a missing one: {results}"
    # the officer reads its own pii_access event; in another namespace the trace does not exist
    with world.query(world.officer) as channel:
        own = _trace(channel, world.a, world.pii_trace).trace.entries
        # (each cleared GetTrace that shows personal data is itself audited under the trace)
        assert own and {e.audit_event.principal for e in own} == {EMAIL}
    with world.query(world.b_admin) as channel:
        failure = _failure(lambda: _trace(channel, world.b, world.pii_trace))
        assert failure.code == grpc.StatusCode.NOT_FOUND, _describe(failure)


@pytest.mark.parametrize(
    "trace_id", ["a\u0000b", "t" * 257, "t" * (1 << 20), " "], ids=["nul", "257", "1MB", "blank"]
)
def test_get_trace_bad_ids(world: World, trace_id: str) -> None:
    with world.query(world.a_admin) as channel:
        failure = _failure(lambda: _trace(channel, world.a, trace_id))
    assert failure.code == grpc.StatusCode.INVALID_ARGUMENT and "trace_id" in _fields(failure), _describe(failure)


def _page_token_cases(world: World, issued: str, b_token: str) -> dict[str, tuple[dict[str, Any], str]]:
    body, _, check = issued.partition(".")
    flipped = body[:-2] + ("A" if body[-2] != "A" else "B") + body[-1]
    now = datetime.now(UTC).isoformat()
    return {
        "tampered_body": ({}, flipped + "." + check),
        "tampered_check": ({}, body + "." + ("0" if check[0] != "0" else "1") + check[1:]),
        "no_check": ({}, body),
        "other_filters": ({"action": "export"}, issued),
        "other_time_range": ({"start_time": timestamp(datetime(2020, 1, 1, tzinfo=UTC))}, issued),
        "other_namespace_token": ({}, b_token),
        "nul_raw": ({}, "\u0000"),
        "nul_in_body": ({}, body + "\u0000." + check),
        "forged_nul_in_id": ({}, _forge(world.a, {"t": now, "id": "aud-\u0000"})),
        "forged_nul_in_time": ({}, _forge(world.a, {"t": now + "\u0000", "id": "aud-x"})),
        "forged_instant_overflow_low": ({}, _forge(world.a, {"t": "0001-01-01T00:00:00+01:00", "id": "aud-x"})),
        "forged_instant_overflow_high": ({}, _forge(world.a, {"t": "9999-12-31T23:59:59-01:00", "id": "aud-x"})),
        "forged_deep_json": ({}, _forge(world.a, _DEEP)),
        "forged_list_payload": ({}, _forge(world.a, b"[1,2,3]")),
        "forged_number_time": ({}, _forge(world.a, {"t": 12, "id": "aud-x"})),
        "forged_non_utf8": ({}, _forge(world.a, b"\xff\xfe{}")),
        "huge_1MB": ({}, "A" * (1 << 20)),
        "huge_3MB": ({}, body + "A" * (3 << 20) + "." + check),
    }


def test_page_tokens_are_invalid_argument_never_internal(world: World) -> None:
    with world.query(world.a_admin) as channel:
        first = _list(channel, namespace=world.a, page_size=1)
    with world.query(world.b_admin) as channel:
        b_token = _list(channel, namespace=world.b, page_size=1).next_page_token
    assert first.next_page_token and b_token
    wrong: list[str] = []
    with world.query(world.a_admin) as channel:
        for name, (filters, token) in _page_token_cases(world, first.next_page_token, b_token).items():
            try:
                _list(channel, namespace=world.a, page_size=1, page_token=token, **filters)
            except grpc.RpcError as error:
                failure = rpc_failure(error)
                if failure.code != grpc.StatusCode.INVALID_ARGUMENT or _fields(failure) != ["page_token"]:
                    wrong.append(f"{name}: {_describe(failure)}")
                continue
            wrong.append(f"{name}: accepted")
        # the issued token still works with its own request
        again = _list(channel, namespace=world.a, page_size=1, page_token=first.next_page_token)
        assert again.events and again.events[0].event_id != first.events[0].event_id
    assert not wrong, "\n".join(wrong)


def test_out_of_range_times_and_sizes_on_the_listing(world: World) -> None:
    cases = {
        "start_far_future": ({"start_time": timestamp_pb2.Timestamp(seconds=2**40)}, "start_time"),
        "end_far_past": ({"end_time": timestamp_pb2.Timestamp(seconds=-(2**40))}, "end_time"),
        "nanos": ({"start_time": timestamp_pb2.Timestamp(seconds=0, nanos=2_000_000_000)}, "start_time"),
        "end_before_start": (
            {"start_time": timestamp(datetime(2026, 1, 2, tzinfo=UTC)), "end_time": timestamp(datetime(2026, 1, 1, tzinfo=UTC))},
            "end_time",
        ),
        "page_size_negative": ({"page_size": -1}, "page_size"),
        "page_size_huge": ({"page_size": 2**31 - 1}, "page_size"),
        "principal_nul": ({"principal": "x\u0000"}, "principal"),
        "node_key_1MB": ({"node_key": "k" * (1 << 20)}, "node_key"),
        "action_1MB": ({"action": "a" * (1 << 20)}, "action"),
    }
    wrong = []
    with world.query(world.a_admin) as channel:
        for name, (fields, path) in cases.items():
            failure = _failure(lambda: _list(channel, namespace=world.a, **fields))  # noqa: B023 - called at once
            if failure.code != grpc.StatusCode.INVALID_ARGUMENT or path not in _fields(failure):
                wrong.append(f"{name}: {_describe(failure)}")
    assert not wrong, "\n".join(wrong)


# ======================================================================================================
# Part 2: the mass-deletion guard
# ======================================================================================================


def _vault(root: Path) -> None:
    write(root, "alpha.md", "# Alpha\n\nAlpha runbook. Related: [Beta](beta.md).\n")
    write(root, "beta.md", "---\nrelated_to: alpha.md\n---\n# Beta\n\nBeta runbook, see [[alpha]].\n")
    write(root, "gamma.md", "---\nscopes: [workspace:vs]\nrelated_to: beta.md\n---\n# Gamma\n\nGamma (restricted).\n")


def _stream(namespace: str, *, dry_run: bool = False, allow: bool = False) -> Iterator[Any]:
    yield vault_service_pb2.IngestVaultRequest(
        header=vault_service_pb2.IngestVaultHeader(namespace=namespace, dry_run=dry_run, allow_mass_sweep=allow)
    )
    yield vault_service_pb2.IngestVaultRequest(end=vault_service_pb2.IngestVaultEnd(document_count=0))


def _refusal(failure: Any) -> dict[str, str]:
    assert failure.code == grpc.StatusCode.FAILED_PRECONDITION, _describe(failure)
    assert failure.reason == "MASS_SWEEP_REFUSED", _describe(failure)
    return {k: v for k, v in failure.metadata.items() if k != "request_id"}


@pytest.fixture(scope="module")
def vault_world(world: World, tmp_path_factory: pytest.TempPathFactory, database: Database) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("vault") / "vault"
    _vault(root)
    with world.ingest(world.v_writer) as channel:
        first = ingest(channel, root, world.v)
    assert first.counts.documents_new == 3, first
    loaded = _ns_counts(database, world.v)
    assert loaded["vault_documents"] == 3 and loaded["chunks"] > 0 and loaded["facts"] > 0, loaded
    empty = tmp_path_factory.mktemp("typo")
    other = tmp_path_factory.mktemp("not-markdown")
    (other / "picture.png").write_bytes(b"\x89PNG\r\n\x1a\n")  # not a format the vault reads
    (other / "notes.orig").write_text("# a file of no format the vault reads\n")
    (other / "doc.md.bak").write_text("# a backup\n")
    (other / "data.bin").write_bytes(b"\x00\x01")
    (other / ".hidden").mkdir()
    (other / ".hidden" / "x.md").write_text("# in a hidden folder\n")
    return {"root": root, "empty": empty, "other": other, "loaded": loaded}


def _last_run_status(database: Database, namespace: str) -> str:
    with database.connection() as conn:
        row = conn.execute(
            "SELECT status FROM vault_runs WHERE namespace = %s ORDER BY started_at DESC LIMIT 1", (namespace,)
        ).fetchone()
    return str(row[0]) if row else ""


@pytest.mark.parametrize("folder", ["empty", "other", "raw_stream"])
def test_a_typo_folder_is_refused_and_changes_nothing(
    world: World, vault_world: dict[str, Any], database: Database, folder: str
) -> None:
    before = _ns_counts(database, world.v)
    with world.ingest(world.v_writer) as channel:
        if folder == "raw_stream":
            stub = vault_service_pb2_grpc.VaultServiceStub(channel)
            failure = _failure(lambda: stub.IngestVault(_stream(world.v), timeout=120))
        else:
            failure = _failure(lambda: ingest(channel, vault_world[folder], world.v))
    assert _refusal(failure) == {"would_sweep": "3", "total": "3", "share": "0.5"}
    assert _ns_counts(database, world.v) == before
    assert _last_run_status(database, world.v) == "refused"
    # the dry run says the same and writes nothing
    with world.ingest(world.v_writer) as channel:
        if folder == "raw_stream":
            dry = vault_service_pb2_grpc.VaultServiceStub(channel).IngestVault(_stream(world.v, dry_run=True), timeout=120)
        else:
            dry = ingest(channel, vault_world[folder], world.v, dry_run=True)
    assert dry.counts.documents_swept == 3 and dry.sweep_refused and not dry.swept, dry
    assert _ns_counts(database, world.v) == before


def test_a_narrow_writers_dry_run_does_not_reveal_hidden_documents(
    world: World, vault_world: dict[str, Any], database: Database
) -> None:
    """The narrow writer (no workspace:vs) cannot see doc gamma; a dry run of an empty folder must not
    name it (a hidden item answers like a missing one)."""
    with world.ingest(world.v_narrow) as channel:
        dry = ingest(channel, vault_world["empty"], world.v, dry_run=True)
        failure = _failure(lambda: ingest(channel, vault_world["empty"], world.v))
    hidden = [k for k in dry.swept_keys if "gamma" in k]
    assert not hidden, (
        f"dry run by a token without workspace:vs lists hidden keys {list(dry.swept_keys)} "
        f"(documents_swept={dry.counts.documents_swept}); the refusal says {_describe(failure)} {dict(failure.metadata)}"
    )


def test_a_vault_sweep_with_the_flag_runs(world: World, vault_world: dict[str, Any], database: Database) -> None:
    with world.ingest(world.v_writer) as channel:
        swept = ingest(channel, vault_world["empty"], world.v, allow_mass_sweep=True)
    assert swept.swept and swept.counts.documents_swept == 3, swept
    after = _ns_counts(database, world.v)
    assert after["vault_documents"] == 0 and after["chunks"] == 0, after


def _facts(count: int) -> list[Any]:
    return [
        json_format.ParseDict(
            {"subject": f"package:p{i}", "predicate": "DEPENDS_ON", "object": "package:libc6"},
            knowledge_pb2.FactAssertion(),
        )
        for i in range(count)
    ]


def test_an_empty_snapshot_is_refused_and_the_flag_works(world: World, database: Database) -> None:
    ns = world.v + "-snap"
    with world.ingest(world.star_reader) as channel:
        stub = snapshot_service_pb2_grpc.SnapshotServiceStub(channel)

        def reconcile(snapshot_id: str, day: int, facts: list[Any], **extra: Any) -> Any:
            return stub.Reconcile(
                snapshot_service_pb2.ReconcileRequest(
                    namespace=ns, source="atk", scope="suite:x", snapshot_id=snapshot_id,
                    snapshot_time=timestamp_pb2.Timestamp(seconds=1_767_225_600 + day * 86_400),
                    facts=facts, **extra,
                ),
                timeout=60,
            )

        def stream(snapshot_id: str, day: int, allow: bool) -> Any:
            header = snapshot_service_pb2.ReconcileStreamHeader(
                namespace=ns, source="atk", scope="suite:x", snapshot_id=snapshot_id,
                snapshot_time=timestamp_pb2.Timestamp(seconds=1_767_225_600 + day * 86_400),
                allow_mass_sweep=allow,
            )
            messages = [
                snapshot_service_pb2.ReconcileStreamRequest(header=header),
                snapshot_service_pb2.ReconcileStreamRequest(end=snapshot_service_pb2.ReconcileStreamEnd()),
            ]
            return stub.ReconcileStream(iter(messages), timeout=60)

        reconcile("s1", 0, _facts(4))
        before = _ns_counts(database, ns)
        assert before["open_facts"] == 4
        assert _refusal(_failure(lambda: reconcile("s2", 1, []))) == {"would_sweep": "4", "total": "4", "share": "0.5"}
        assert _ns_counts(database, ns) == before
        assert _refusal(_failure(lambda: stream("s2", 1, False)))["would_sweep"] == "4"
        assert _ns_counts(database, ns) == before
        closed = stream("s2", 1, True)
        assert closed.counts.facts_closed == 4
        assert _ns_counts(database, ns)["open_facts"] == 0


# ======================================================================================================
# Part 4: the MCP server
# ======================================================================================================


@pytest.fixture(scope="module")
def mcp_url(world: World) -> Iterator[str]:
    with world.ingest(world.m_scoped) as channel:
        document_service_pb2_grpc.DocumentServiceStub(channel).Retain(
            document_service_pb2.RetainRequest(
                namespace=world.m, natural_key="doc:mcp-hidden", scopes=["workspace:hr"],
                content="# Hidden\n\nOnly HR reads this.\n",
            ),
            timeout=120,
        )
    with world.ingest(world.m_writer) as channel:
        document_service_pb2_grpc.DocumentServiceStub(channel).Retain(
            document_service_pb2.RetainRequest(
                namespace=world.m, natural_key="doc:mcp-open", content="# Open\n\nThe billing month closes on day three.\n",
            ),
            timeout=120,
        )
    with mcp_over_http(world.ingest_addr, world.query_addr) as url:
        yield url


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _namespace_tools(ns: str) -> list[tuple[str, dict[str, Any]]]:
    return [
        ("record_observation", {"namespace": ns, "content": "intruder was here", "external_id": "atk-1"}),
        ("search", {"namespace": ns, "query": "billing"}),
        ("compile_context", {"namespace": ns, "task": "billing"}),
        ("list_facts", {"namespace": ns, "subject": "person:alice"}),
        ("read_source", {"namespace": ns, "natural_key": "doc:mcp-open"}),
    ]


@pytest.mark.parametrize("who", ["m_other", "m_reader_writes", "no_token", "garbage_header"])
def test_mcp_tools_honour_the_tokens_namespaces(world: World, mcp_url: str, database: Database, who: str) -> None:
    before = _ns_counts(database, world.m)
    if who == "m_other":
        headers, calls, code = _bearer(world.m_other), _namespace_tools(world.m), "PERMISSION_DENIED"
    elif who == "m_reader_writes":
        headers, calls, code = _bearer(world.m_reader), _namespace_tools(world.m)[:1], "PERMISSION_DENIED"
    elif who == "no_token":
        headers, calls, code = {}, _namespace_tools(world.m), "UNAUTHENTICATED"
    else:
        headers, calls, code = {"Authorization": f"Bearer {world.m_reader} {world.m_writer}"}, _namespace_tools(world.m)[:1], "UNAUTHENTICATED"
    results = http_tool_calls(mcp_url, headers, calls)
    wrong = [
        f"{name}: isError={r.is_error} {tool_text(r)[:300]}"
        for (name, _), r in zip(calls, results, strict=True)
        if not (r.is_error and code in tool_text(r))
    ]
    assert not wrong, "\n".join(wrong)
    assert _ns_counts(database, world.m) == before


def test_mcp_is_error_is_consistent_for_refused_items(world: World, mcp_url: str, database: Database) -> None:
    tag = uuid.uuid4().hex[:6]
    cases: list[tuple[str, str, dict[str, Any], bool]] = [
        # (label, tool, arguments, refused?)
        ("scope not held", "record_observation",
         {"namespace": world.m, "content": "x", "scopes": ["workspace:hr"], "external_id": f"s-{tag}"}, True),
        ("fact about a hidden node", "record_observation",
         {"namespace": world.m, "content": "The hidden doc is outdated.", "external_id": f"hid-{tag}",
          "facts": [{"subject": "doc:mcp-hidden", "predicate": "STATUS", "object": "state:outdated"}]}, True),
        ("U+0000 in content", "record_observation",
         {"namespace": world.m, "content": "a\u0000b", "external_id": f"nul-{tag}"}, True),
        ("bad predicate", "record_observation",
         {"namespace": world.m, "content": "x y", "external_id": f"pred-{tag}",
          "facts": [{"subject": "person:alice", "predicate": "works on", "object": "project:zeta"}]}, True),
        ("overflowing as_of", "compile_context",
         {"namespace": world.m, "task": "billing", "as_of": "0001-01-01T00:00:00+01:00"}, True),
        ("hidden source", "read_source", {"namespace": world.m, "natural_key": "doc:mcp-hidden"}, True),
        ("nothing found is not an error", "search", {"namespace": world.m, "query": "zzqx-nothing-" + tag}, False),
        ("a clean write", "record_observation",
         {"namespace": world.m, "content": "Billing closed on time.", "external_id": f"ok-{tag}"}, False),
    ]
    results = http_tool_calls(mcp_url, _bearer(world.m_writer), [(tool, args) for _, tool, args, _ in cases])
    wrong = []
    for (label, tool, _args, refused), result in zip(cases, results, strict=True):
        if bool(result.is_error) != refused:
            wrong.append(f"{label} ({tool}): isError={result.is_error}, expected {refused}: {tool_text(result)[:600]}")
        elif refused and "INTERNAL" in tool_text(result):
            wrong.append(f"{label} ({tool}): refused as INTERNAL: {tool_text(result)[:300]}")
        elif refused and "error: " not in tool_text(result):
            # (the SDK prefixes "Error executing tool NAME: "; what matters is the documented error line)
            wrong.append(f"{label} ({tool}): refused without an 'error: CODE: message' line: {tool_text(result)[:300]}")
    assert not wrong, "\n".join(wrong)


def test_mcp_memory_tools_project_and_batch(world: World, mcp_url: str, database: Database) -> None:
    before = _counts(database)["memories"]
    good, colon, empty_batch_bad = http_tool_calls(
        mcp_url,
        _bearer(world.m_user),
        [
            ("add_memories", {"memories": [{"text": "User likes tea.", "key": "tea"}], "project": "prj_8f3a"}),
            ("add_memories", {"memories": [{"text": "User likes coffee.", "key": "coffee"}], "project": "prj:8f3a"}),
            ("add_memories", {"memories": [{"text": "   "}, {"text": "a\u0000b"}]}),
        ],
    )
    assert not good.is_error, tool_text(good)
    assert colon.is_error and "x-project-id" in tool_text(colon), tool_text(colon)
    assert empty_batch_bad.is_error and "INTERNAL" not in tool_text(empty_batch_bad), tool_text(empty_batch_bad)
    assert _counts(database)["memories"] == before + 1
    # a namespace token without a memory scope may not touch memories
    (refused,) = http_tool_calls(mcp_url, _bearer(world.m_writer), [("recall_memories", {"query": "tea"})])
    assert refused.is_error and "PERMISSION_DENIED" in tool_text(refused), tool_text(refused)


def test_cb_mcp_http_never_lends_its_own_token(world: World, database: Database) -> None:
    """``cb mcp --transport http`` started with CB_TOKEN of an admin of every namespace: a request
    without a token (or with a bad one) must not borrow it."""
    port = free_port()
    cb = str(Path(sys.executable).with_name("cb"))
    env = {**os.environ, "CB_TOKEN": world.m_admin_all, "CB_INGEST_ADDR": world.ingest_addr, "CB_QUERY_ADDR": world.query_addr}
    process = subprocess.Popen(
        [cb, "mcp", "--transport", "http", "--port", str(port)], env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                time.sleep(0.2)
        before = _ns_counts(database, world.m)
        url = f"http://127.0.0.1:{port}/mcp"
        for headers in ({}, {"Authorization": "Bearer"}, {"Authorization": "Basic Zm9vOmJhcg=="}):
            search, record = http_tool_calls(url, headers, _namespace_tools(world.m)[1:2] + _namespace_tools(world.m)[:1])
            assert search.is_error and "UNAUTHENTICATED" in tool_text(search), (headers, tool_text(search))
            assert record.is_error and "UNAUTHENTICATED" in tool_text(record), (headers, tool_text(record))
        assert _ns_counts(database, world.m) == before
    finally:
        process.terminate()
        process.wait(10)


def test_cb_mcp_stdio_honours_the_process_tokens_namespaces(world: World) -> None:
    env = {**os.environ, "CB_TOKEN": world.m_other, "CB_INGEST_ADDR": world.ingest_addr, "CB_QUERY_ADDR": world.query_addr}
    cb = str(Path(sys.executable).with_name("cb"))

    async def run() -> list[Any]:
        async with Client(StdioServerParameters(command=cb, args=["mcp"], env=env), read_timeout_seconds=120) as client:
            return [await client.call_tool(n, a) for n, a in _namespace_tools(world.m)[:2]]

    for result in anyio.run(run):
        assert result.is_error and "PERMISSION_DENIED" in tool_text(result), tool_text(result)


def test_a_supersedes_naming_no_fact_is_a_pending_supersession(world: World, mcp_url: str, database: Database) -> None:
    """A supersedes naming a fact that does not exist (yet) is stored as a pending supersession and answered
    like any accepted fact (docs/explanation/knowledge-model.md: delivery order does not matter)."""
    # (changed from "not silently ignored": a supersession whose target has not arrived is legitimate by design)
    tag = uuid.uuid4().hex[:6]
    (result,) = http_tool_calls(
        mcp_url,
        _bearer(world.m_writer),
        [("record_observation", {
            "namespace": world.m, "content": "Alice moved to project Zeta.", "external_id": f"sup-{tag}",
            "facts": [{"subject": "person:alice", "predicate": "WORKS_ON", "object": "project:zeta",
                       "supersedes": "fact-" + "0" * 24}],
        })],
    )
    content = dict(result.structured_content or {})
    assert not result.is_error and content.get("status") == "processed", tool_text(result)
    assert not content.get("field_violations"), tool_text(result)
    with database.connection() as conn:
        row = conn.execute(
            "SELECT supersedes, valid_to FROM facts WHERE namespace = %s AND subject_key = %s"
            " AND object_key = %s", (world.m, "person:alice", "project:zeta"),
        ).fetchone()
    assert row is not None and row[0] == "fact-" + "0" * 24 and row[1] is None, row


def test_a_hostile_writer_cannot_supersede_a_hidden_fact(world: World, mcp_url: str, database: Database) -> None:
    """A fact scoped workspace:hr (written by the HR token) must stay open when a writer without that scope
    names it in ``supersedes``, and the answer must look like the one for a fact id that does not exist."""
    tag = uuid.uuid4().hex[:6]
    (hidden,) = http_tool_calls(
        mcp_url,
        _bearer(world.m_scoped),
        [("record_observation", {
            "namespace": world.m, "content": "Bob is on the layoff list.", "external_id": f"hr-{tag}",
            "scopes": ["workspace:hr"], "occurred_at": "2026-01-01T00:00:00Z",
            "facts": [{"subject": f"person:bob-{tag}", "predicate": "STATUS", "object": "state:leaving"}],
        })],
    )
    assert not hidden.is_error, tool_text(hidden)
    with database.connection() as conn:
        row = conn.execute(
            "SELECT fact_id FROM facts WHERE namespace = %s AND subject_key = %s", (world.m, f"person:bob-{tag}")
        ).fetchone()
    assert row is not None
    fact_id = str(row[0])
    answers = []
    for target in (fact_id, "fact-" + "1" * 24):
        (result,) = http_tool_calls(
            mcp_url,
            _bearer(world.m_writer),
            [("record_observation", {
                "namespace": world.m, "content": f"Bob stays ({target[-4:]}).", "external_id": f"sup-{tag}-{target[-4:]}",
                "occurred_at": "2026-02-01T00:00:00Z",
                "facts": [{"subject": f"person:bob-{tag}", "predicate": "STATUS", "object": "state:staying",
                           "supersedes": target}],
            })],
        )
        content = dict(result.structured_content or {})
        answers.append((result.is_error, content.get("status"), [v.replace(target, "<F>") for v in content.get("field_violations", [])]))
    with database.connection() as conn:
        still = conn.execute("SELECT valid_to, superseded_by FROM facts WHERE fact_id = %s", (fact_id,)).fetchone()
    assert still is not None and still[0] is None and still[1] is None, f"the hidden fact was closed: {still}"
    assert answers[0] == answers[1], f"a hidden fact answers unlike a missing one: {answers}"


def test_an_uncleared_admin_cannot_unmask_by_filtering(world: World) -> None:
    # the same refusal for a value that is stored and one that is not: nothing to tell them apart
    answers = []
    with world.query(world.a_masked_admin) as channel:
        for value in (EMAIL, "nobody-" + EMAIL):
            for fields in ({"principal": value}, {"node_key": f"contact:{value}"}):
                with pytest.raises(grpc.RpcError) as refused:
                    _all(channel, namespace=world.a, **fields)
                failure = rpc_failure(refused.value)
                metadata = {k: v for k, v in failure.metadata.items() if k != "request_id"}
                answers.append((failure.code, failure.reason, metadata))
    assert answers[:2] == answers[2:]
    assert [a[1:] for a in answers[:2]] == [
        ("PII_CLEARANCE_REQUIRED", {"field": "principal"}),
        ("PII_CLEARANCE_REQUIRED", {"field": "node_key"}),
    ]
    assert all(a[0] == grpc.StatusCode.PERMISSION_DENIED for a in answers)
    with world.query(world.a_admin) as channel:  # a cleared admin still filters by it
        assert _all(channel, namespace=world.a, principal=EMAIL)
