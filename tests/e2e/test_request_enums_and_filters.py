"""Bad input that used to get through, against the real services.

* Every enum field of every request (found by walking the descriptors of every RPC of memory.v1,
  nested messages, repeated fields, maps and the Struct values included) is refused with INVALID_ARGUMENT
  and a field violation naming its path when it holds a number its enum does not define (``tier: 99``
  used to be stored as hot).
* Every read filter of `READ_FILTER_LIMITS` is refused beyond the write side's limit, and every string
  field of every read request is either such a filter or known free text.
* A ListFacts or ListMemories page token holding U+0000 is INVALID_ARGUMENT, not INTERNAL.
* The documented project id format ``prj_8f3a`` is accepted in ``x-project-id`` and is its own namespace.
"""

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

import memory_service_grpc_client.memory.v1
from common.grpc.read_filter_limits import READ_FILTER_LIMITS
from common.kernel.memory_names import memory_namespace
from common.kernel.memory_names import memory_scope_of_namespace
from memory_service_grpc_client import rpc_failure
from memory_service_grpc_client.memory.v1 import memory_query_service_pb2
from memory_service_grpc_client.memory.v1 import memory_service_pb2
from query_service.main import SERVICE_NAMES as QUERY_SERVICES

pytestmark = pytest.mark.e2e

OUT_OF_RANGE = 99
MAX_DEPTH = 8  # deep enough for every request; recursive messages (Struct) stop at the first repeat


def _methods() -> Iterator[MethodDescriptor]:
    for module in pkgutil.iter_modules(memory_service_grpc_client.memory.v1.__path__):
        if module.name.endswith("_pb2"):
            file = importlib.import_module(f"memory_service_grpc_client.memory.v1.{module.name}").DESCRIPTOR
            for service in file.services_by_name.values():
                yield from service.methods


@dataclass(frozen=True)
class EnumSite:
    """One enum field reachable in a request: the steps to it and the violation path it gets."""

    steps: tuple[tuple[FieldDescriptor, bool], ...]  # (field, through a map entry's value)
    path: str


def _enum_sites(
    message: Descriptor,
    steps: tuple[tuple[FieldDescriptor, bool], ...] = (),
    path: str = "",
    seen: tuple[str, ...] = (),
) -> Iterator[EnumSite]:
    if len(steps) > MAX_DEPTH:
        return
    for field in message.fields:
        where = f"{path}.{field.name}" if path else field.name
        is_map = field.message_type is not None and field.message_type.GetOptions().map_entry
        if is_map:
            value = field.message_type.fields_by_name["value"]
            entry = f'{where}["k"]'
            if value.type == FieldDescriptor.TYPE_ENUM:
                yield EnumSite((*steps, (field, True)), entry)
            elif value.type == FieldDescriptor.TYPE_MESSAGE and value.message_type.full_name not in seen:
                yield from _enum_sites(
                    value.message_type, (*steps, (field, True)), entry, (*seen, message.full_name)
                )
        elif field.type == FieldDescriptor.TYPE_ENUM:
            yield EnumSite((*steps, (field, False)), f"{where}[0]" if field.is_repeated else where)
        elif field.type == FieldDescriptor.TYPE_MESSAGE and field.message_type.full_name not in seen:
            yield from _enum_sites(
                field.message_type,
                (*steps, (field, False)),
                f"{where}[0]" if field.is_repeated else where,
                (*seen, message.full_name),
            )


def _with_out_of_range(request_type: Descriptor, site: EnumSite) -> Message:
    """A request whose only content is ``OUT_OF_RANGE`` at ``site``."""
    request = GetMessageClass(request_type)()
    target: Any = request
    *inner, (last, last_in_map) = site.steps
    for field, in_map in inner:
        if in_map:
            target = getattr(target, field.name)["k"]
        elif field.is_repeated:
            target = getattr(target, field.name).add()
        else:
            target = getattr(target, field.name)
    if last_in_map:
        getattr(target, last.name)["k"] = OUT_OF_RANGE
    elif last.is_repeated:
        getattr(target, last.name).append(OUT_OF_RANGE)
    else:
        setattr(target, last.name, OUT_OF_RANGE)
    return request


CASES = [
    pytest.param(method, site, id=f"{method.containing_service.name}.{method.name}:{site.path}")
    for method in _methods()
    for site in _enum_sites(method.input_type)
]


def test_the_walk_finds_the_enum_fields_that_got_through() -> None:
    found = {(m.name, s.path) for m, s in ((c.values[0], c.values[1]) for c in CASES)}
    assert {("AddMemories", "memories[0].tier"), ("UpdateMemory", "memory.tier")} <= found
    assert ("ListMemories", "filter.tiers[0]") in found and len(CASES) > 30


def _call(channels: tuple[grpc.Channel, grpc.Channel], method: MethodDescriptor, request: Message) -> Any:
    service = method.containing_service.full_name
    channel = channels[1] if service in QUERY_SERVICES else channels[0]
    response_type = GetMessageClass(method.output_type)
    path = f"/{service}/{method.name}"
    serialize, deserialize = type(request).SerializeToString, response_type.FromString
    if method.client_streaming:
        call = channel.stream_unary(path, request_serializer=serialize, response_deserializer=deserialize)
        return call(iter([request]), timeout=60)
    if method.server_streaming:
        call = channel.unary_stream(path, request_serializer=serialize, response_deserializer=deserialize)
        return list(call(request, timeout=60))
    call = channel.unary_unary(path, request_serializer=serialize, response_deserializer=deserialize)
    return call(request, timeout=60)


@pytest.mark.parametrize(("method", "site"), CASES)
def test_every_rpc_refuses_an_undefined_enum_number_naming_the_field(
    ingest_channel: grpc.Channel, query_channel: grpc.Channel, method: MethodDescriptor, site: EnumSite
) -> None:
    request = _with_out_of_range(method.input_type, site)
    with pytest.raises(grpc.RpcError) as raised:
        _call((ingest_channel, query_channel), method, request)
    failure = rpc_failure(raised.value)
    expected = f"messages[0].{site.path}" if method.client_streaming else site.path
    assert failure.code == grpc.StatusCode.INVALID_ARGUMENT, failure
    assert expected in [v.field for v in failure.violations], failure


# -- read filters -------------------------------------------------------------------------------------

FREE_TEXT = {"query", "preset"}  # searched text and named presets, limited by their own checks
# Requests whose handler checks every string field against the write limits itself, so one answer names
# every bad field: ListAuditEvents (query_service.audit_reader), WatchChanges (common.domain.change_filters).
CHECKED_BY_THEIR_HANDLER = {"memory.v1.ListAuditEventsRequest", "memory.v1.WatchChangesRequest"}


def _read_methods() -> dict[str, MethodDescriptor]:
    # RecordAuditEvent is AuditService's write, served by ingest_service (the service is on both sides).
    return {
        m.input_type.full_name: m
        for m in _methods()
        if m.containing_service.full_name in QUERY_SERVICES
        and m.full_name != "memory.v1.AuditService.RecordAuditEvent"
    }


def _string_fields(message: Descriptor, prefix: str = "") -> Iterator[str]:
    for field in message.fields:
        name = f"{prefix}{field.name}"
        if field.type == FieldDescriptor.TYPE_STRING:
            yield name
        elif field.type == FieldDescriptor.TYPE_MESSAGE and field.message_type.full_name.startswith(
            "memory.v1."
        ):
            yield from _string_fields(field.message_type, f"{name}.")


def test_every_string_field_of_a_read_request_is_a_limited_filter_or_free_text() -> None:
    for name, method in _read_methods().items():
        if name in CHECKED_BY_THEIR_HANDLER:
            continue
        limited = set(READ_FILTER_LIMITS.get(name, {}))
        unlimited = {f for f in _string_fields(method.input_type) if f not in limited and f not in FREE_TEXT}
        assert not unlimited, f"{name}: {sorted(unlimited)} have no limit"


FILTER_CASES = [
    pytest.param(message, field, limit, id=f"{message.rsplit('.', 1)[1]}.{field}")
    for message, fields in READ_FILTER_LIMITS.items()
    for field, limit in fields.items()
]


@pytest.mark.parametrize(("message", "field", "limit"), FILTER_CASES)
def test_every_read_filter_refuses_what_no_write_accepts(
    ingest_channel: grpc.Channel, query_channel: grpc.Channel, message: str, field: str, limit: Any
) -> None:
    method = next(m for m in _methods() if m.input_type.full_name == message)
    request = GetMessageClass(method.input_type)()
    head, _, rest = field.partition(".")
    holder, name = (getattr(request, head), rest) if rest else (request, head)
    value = "k" * (limit.chars + 1)
    if limit.as_json:  # a Struct filter (Search meta): one value past its JSON size
        getattr(holder, name).update({"k": value})
        path = field
    elif isinstance(getattr(holder, name), str):
        setattr(holder, name, value)
        path = field
    else:
        getattr(holder, name).append(value)
        path = f"{field}[0]"
    with pytest.raises(grpc.RpcError) as raised:
        _call((ingest_channel, query_channel), method, request)
    failure = rpc_failure(raised.value)
    assert failure.code == grpc.StatusCode.INVALID_ARGUMENT, failure
    assert path in [v.field for v in failure.violations], failure


# -- page tokens ---------------------------------------------------------------------------------------


def _token(value: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode()


@pytest.mark.parametrize(
    "token",
    [
        _token(["person:a\u0000", "KNOWS", "2026-01-01T00:00:00Z", "fact-" + "0" * 24]),
        _token(["person:a", "KNOWS", "2026-01-01T00:00:00Z", "fact-\u0000"]),
        "\u0000",
    ],
    ids=["subject", "fact_id", "raw"],
)
def test_a_list_facts_page_token_with_u0000_is_invalid_argument(
    query_channel: grpc.Channel, token: str
) -> None:
    from memory_service_grpc_client.memory.v1 import fact_query_service_pb2
    from memory_service_grpc_client.memory.v1 import fact_query_service_pb2_grpc

    with pytest.raises(grpc.RpcError) as raised:
        fact_query_service_pb2_grpc.FactQueryServiceStub(query_channel).ListFacts(
            fact_query_service_pb2.ListFactsRequest(namespace="limits", subject="person:a", page_token=token),
            timeout=30,
        )
    failure = rpc_failure(raised.value)
    assert failure.code == grpc.StatusCode.INVALID_ARGUMENT, failure
    assert [v.field for v in failure.violations] == ["page_token"]


def test_a_list_memories_page_token_with_u0000_is_invalid_argument(query_channel: grpc.Channel) -> None:
    from memory_service_grpc_client.memory.v1 import memory_query_service_pb2_grpc

    with pytest.raises(grpc.RpcError) as raised:
        memory_query_service_pb2_grpc.MemoryQueryServiceStub(query_channel).ListMemories(
            memory_query_service_pb2.ListMemoriesRequest(
                user_id="u1", page_token=_token({"t": "2026-01-01T00:00:00Z", "id": "mem-\u0000"})
            ),
            timeout=30,
        )
    failure = rpc_failure(raised.value)
    assert failure.code == grpc.StatusCode.INVALID_ARGUMENT, failure
    assert [v.field for v in failure.violations] == ["page_token"]


# -- project ids ---------------------------------------------------------------------------------------


def test_the_seed_project_id_is_accepted_and_is_a_namespace_of_its_own(
    ingest_channel: grpc.Channel, query_channel: grpc.Channel
) -> None:
    from memory_service_grpc_client.memory.v1 import memory_query_service_pb2_grpc
    from memory_service_grpc_client.memory.v1 import memory_service_pb2_grpc

    user = "u-" + uuid.uuid4().hex[:10]
    suffix = uuid.uuid4().hex[:6]
    underscored, dashed = f"prj_{suffix}", f"prj-{suffix}"
    write = memory_service_pb2_grpc.MemoryServiceStub(ingest_channel)
    read = memory_query_service_pb2_grpc.MemoryQueryServiceStub(query_channel)
    ids = {}
    for project in (underscored, dashed):
        response = write.AddMemories(
            memory_service_pb2.AddMemoriesRequest(
                user_id=user,
                memories=[memory_service_pb2.NewMemory(text=f"Project {project} ships on Fridays.")],
            ),
            metadata=(("x-project-id", project),),
            timeout=120,
        )
        ids[project] = response.results[0].memory_id
    assert ids[underscored] != ids[dashed]
    for project in (underscored, dashed):
        got = read.GetMemory(
            memory_query_service_pb2.GetMemoryRequest(memory_id=ids[project], user_id=user),
            metadata=(("x-project-id", project),),
            timeout=30,
        ).memory
        assert got.scope.project_id == project
        listed = read.ListMemories(
            memory_query_service_pb2.ListMemoriesRequest(user_id=user),
            metadata=(("x-project-id", project),),
            timeout=30,
        )
        assert [m.memory_id for m in listed.memories] == [ids[project]]  # each project sees only its own
    with pytest.raises(grpc.RpcError) as raised:
        read.GetMemory(
            memory_query_service_pb2.GetMemoryRequest(memory_id=ids[underscored], user_id=user),
            metadata=(("x-project-id", dashed),),
            timeout=30,
        )
    assert rpc_failure(raised.value).code == grpc.StatusCode.NOT_FOUND


@pytest.mark.parametrize("project", ["prj_8f3a", "prj-8f3a", "prj.8f3a", "P_1", "a" * 40, ""])
def test_the_project_to_namespace_mapping_is_one_to_one(project: str) -> None:
    namespace = memory_namespace("acme", "production", project)
    assert memory_scope_of_namespace(namespace) == ("acme", "production", project)
    others = {memory_namespace("acme", "production", p) for p in ("prj_8f3a", "prj-8f3a", "prj.8f3a", "P_1")}
    assert len(others) == 4


@pytest.mark.parametrize("project", ["prj:8f3a", "_prj", "prj 8f3a", "a" * 41])
def test_a_project_id_outside_the_pattern_is_refused(query_channel: grpc.Channel, project: str) -> None:
    from memory_service_grpc_client.memory.v1 import memory_query_service_pb2_grpc

    with pytest.raises(grpc.RpcError) as raised:
        memory_query_service_pb2_grpc.MemoryQueryServiceStub(query_channel).ListMemories(
            memory_query_service_pb2.ListMemoriesRequest(user_id="u1"),
            metadata=(("x-project-id", project),),
            timeout=30,
        )
    failure = rpc_failure(raised.value)
    assert failure.code == grpc.StatusCode.INVALID_ARGUMENT
    assert [v.field for v in failure.violations] == ["x-project-id"]
