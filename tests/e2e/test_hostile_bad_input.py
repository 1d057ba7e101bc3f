"""Bad input on every RPC of the real services (in-process, development mode, real database and embedder):
undefined enum numbers, U+0000 in every string field, 1 MB read filters (Search ``meta`` included), negative
and huge sizes, crafted page tokens of every listing (overflowing instants, deep JSON, U+0000, wrong shapes),
``x-project-id``. Each is INVALID_ARGUMENT naming its field, never INTERNAL, and writes nothing
(docs/reference/errors.md)."""

from __future__ import annotations

import base64
import importlib
import json
import pkgutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from google.protobuf.descriptor import Descriptor
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.descriptor import MethodDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass

import memory_service_grpc_client.memory.v1 as memory_v1
from common.storage.database import Database
from memory_service_grpc_client import rpc_failure
from memory_service_grpc_client.memory.v1 import domain_pack_service_pb2
from memory_service_grpc_client.memory.v1 import domain_pack_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import memory_query_service_pb2
from memory_service_grpc_client.memory.v1 import memory_query_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import memory_service_pb2
from memory_service_grpc_client.memory.v1 import memory_service_pb2_grpc
from query_service.main import SERVICE_NAMES as QUERY_SERVICES
from tests.e2e.hostile_tenant_world import DEEP
from tests.e2e.hostile_tenant_world import describe
from tests.e2e.hostile_tenant_world import failure_of
from tests.e2e.hostile_tenant_world import table_counts
from tests.e2e.hostile_tenant_world import violated_fields

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]


NEVER = {grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN}


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
    return table_counts(database)


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
    assert failure.code not in NEVER, describe(failure)
    assert failure.code == grpc.StatusCode.INVALID_ARGUMENT, describe(failure)
    named = [f for f in violated_fields(failure) if names(f)]
    assert named, f"no field violation names {expected}: {describe(failure)}"


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
    before = table_counts(database)["memories"]
    response = memory_service_pb2_grpc.MemoryServiceStub(dev_channels[0]).AddMemories(
        memory_service_pb2.AddMemoriesRequest(memories=[memory_service_pb2.NewMemory(text="a\u0000b")]),
        timeout=60,
    )
    assert [r.status for r in response.results] == ["failed"], response
    assert response.results[0].error_code == "INVALID_ARGUMENT", response
    assert any(v.startswith("memories[0].text") for v in response.results[0].field_violations), response
    assert table_counts(database)["memories"] == before


@pytest.mark.parametrize(("method", "site"), SIZE_SITES)
@pytest.mark.parametrize("value", [-1, -(2**31), 2**31 - 1], ids=["minus1", "int_min", "int_max"])
def test_negative_and_huge_sizes_are_invalid_argument(
    dev_channels: Any, method: MethodDescriptor, site: Site, value: int
) -> None:
    _expect_invalid(dev_channels, method, _with_value(method, site, value), site.path, prefix_match=False)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode()


LISTING_TOKENS = {
    "overflowing_instant_list": _b64(json.dumps(["s:a", "P", "0001-01-01T00:00:00+01:00", "fact-x"]).encode()),
    "overflowing_instant_obj": _b64(json.dumps({"t": "9999-12-31T23:59:59-01:00", "id": "x"}).encode()),
    "deep_json": _b64(DEEP),
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
    failure = failure_of(calls[listing])
    assert failure.code == grpc.StatusCode.INVALID_ARGUMENT, describe(failure)
    assert "page_token" in violated_fields(failure), describe(failure)


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
    before = table_counts(database)["memories"]
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
        failure = failure_of(call)
        assert failure.code == grpc.StatusCode.INVALID_ARGUMENT, describe(failure)
        assert violated_fields(failure) == ["x-project-id"], describe(failure)
    assert table_counts(database)["memories"] == before


def test_bad_input_wrote_nothing(before_bad_input: dict[str, int], database: Database) -> None:
    # the memories the x-project-id checks stored (prj_8f3a, and any id accepted by mistake) are left out
    assert table_counts(database, ACCEPTED_MEMORIES) == before_bad_input
