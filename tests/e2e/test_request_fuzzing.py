"""Property: no request of any RPC of either service answers INTERNAL or UNKNOWN, and a refused request
writes nothing.

Requests are built from the proto descriptors (`tests/e2e/request_strategies.py`) and sent over real
channels to the real in-process servers (fixtures of tests/e2e/conftest.py), as typed messages and as
raw bytes carrying invalid UTF-8. Each RPC runs in a namespace of its own; the rows of that namespace in
every namespaced table are counted before and after each refused call and must not change. Error
details must stay small (`common.grpc.status_mapping` bounds them).

With ``CB_FUZZ_COLLECT=<file>`` the test does not fail: it appends one line per offending answer (RPC,
code, message) to the file, to count the distinct failures of a build.
"""

from __future__ import annotations

import importlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.descriptor import MethodDescriptor
from google.protobuf.message_factory import GetMessageClass
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
from psycopg import sql

from common.storage.database import Database
from common.storage.tables import table_identifiers
from memory_service_grpc_client.memory.v1 import audit_service_pb2
from memory_service_grpc_client.memory.v1 import change_feed_service_pb2
from memory_service_grpc_client.memory.v1 import context_service_pb2
from memory_service_grpc_client.memory.v1 import data_protection_service_pb2
from memory_service_grpc_client.memory.v1 import document_service_pb2
from memory_service_grpc_client.memory.v1 import domain_pack_service_pb2
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2
from memory_service_grpc_client.memory.v1 import fact_service_pb2
from memory_service_grpc_client.memory.v1 import memory_query_service_pb2
from memory_service_grpc_client.memory.v1 import memory_service_pb2
from memory_service_grpc_client.memory.v1 import namespace_service_pb2
from memory_service_grpc_client.memory.v1 import observation_query_service_pb2
from memory_service_grpc_client.memory.v1 import observation_service_pb2
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2
from memory_service_grpc_client.memory.v1 import snapshot_service_pb2
from memory_service_grpc_client.memory.v1 import source_service_pb2
from memory_service_grpc_client.memory.v1 import trace_service_pb2
from memory_service_grpc_client.memory.v1 import vault_service_pb2
from memory_service_grpc_client.memory.v1 import webhook_service_pb2
from tests.e2e.request_strategies import message_strategy
from tests.e2e.request_strategies import raw_request_strategy

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

INGEST_MODULES = (
    observation_service_pb2,
    fact_service_pb2,
    document_service_pb2,
    snapshot_service_pb2,
    domain_pack_service_pb2,
    audit_service_pb2,
    vault_service_pb2,
    memory_service_pb2,
    webhook_service_pb2,
    data_protection_service_pb2,
)
QUERY_MODULES = (
    retrieval_service_pb2,
    context_service_pb2,
    source_service_pb2,
    fact_query_service_pb2,
    observation_query_service_pb2,
    trace_service_pb2,
    memory_query_service_pb2,
    namespace_service_pb2,
    change_feed_service_pb2,
)
NAMESPACED_TABLES = (
    "observations",
    "graph_nodes",
    "facts",
    "chunks",
    "context_traces",
    "snapshots",
    "vault_documents",
)
# Not counted: vault_runs, the journal of vault runs. A stream refused after its header (a malformed later
# message) is journaled as a failed run, like an audit record; it projects and sweeps nothing, which
# vault_documents, graph_nodes, facts and chunks show.
MAX_DETAILS_BYTES = 6 * 1024  # a client refuses trailing metadata past 8 KiB in all
EXAMPLES = int(os.environ.get("CB_FUZZ_EXAMPLES", "60"))  # per RPC: about a minute for all of them


def _methods(modules: tuple[Any, ...], side: str) -> list[tuple[str, MethodDescriptor]]:
    return [
        (side, method)
        for module in modules
        for service in module.DESCRIPTOR.services_by_name.values()
        for method in service.methods
    ]


METHODS = _methods(INGEST_MODULES, "ingest") + _methods(QUERY_MODULES, "query")


def _row_counts(database: Database, namespace: str) -> dict[str, int]:
    tables = table_identifiers(database.settings)
    counts = {}
    with database.connection() as conn:
        for table in NAMESPACED_TABLES:
            query = sql.SQL("SELECT count(*) FROM {} WHERE namespace = %s").format(tables[table])
            counts[table] = conn.execute(query, (namespace,)).fetchone()[0]
    return counts


def _offence(error: grpc.RpcError) -> str | None:
    """Why an error answer breaks the property, or None when it is a proper refusal."""
    code = error.code()
    details = error.details() or ""
    if code in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN):
        return f"{code.name}: {details[:200]}"
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED and "larger than max" not in details:
        return f"{code.name}: {details[:200]}"
    trailing = dict(error.trailing_metadata() or ())
    size = len(trailing.get("grpc-status-details-bin", b"")) + len(details.encode())
    if size > MAX_DETAILS_BYTES:
        return f"{code.name}: error details of {size} bytes"
    return None


@pytest.fixture(scope="module")
def channels(ingest_channel: grpc.Channel, query_channel: grpc.Channel) -> dict[str, grpc.Channel]:
    return {"ingest": ingest_channel, "query": query_channel}


@pytest.fixture
def fuzz_namespace(database: Database) -> Iterator[str]:
    yield "fuzz-" + uuid.uuid4().hex[:12]


def _call(channel: grpc.Channel, method: MethodDescriptor, request: Any, raw: bool) -> None:
    path = f"/{method.containing_service.full_name}/{method.name}"
    serializer = (lambda b: b) if raw else (lambda m: m.SerializeToString())
    if method.client_streaming:
        call = channel.stream_unary(path, request_serializer=serializer, response_deserializer=None)
        call(iter(request), timeout=120)
    elif method.server_streaming:  # its first message or its refusal; a live feed is cut after 3 s
        stream = channel.unary_stream(path, request_serializer=serializer, response_deserializer=None)(
            request, timeout=3
        )
        try:
            next(stream, None)
        except grpc.RpcError as error:
            if error.code() != grpc.StatusCode.DEADLINE_EXCEEDED:
                raise
        finally:
            stream.cancel()
    else:
        channel.unary_unary(path, request_serializer=serializer, response_deserializer=None)(
            request, timeout=120
        )


def _check(
    database: Database,
    namespace: str,
    channel: grpc.Channel,
    method: MethodDescriptor,
    request: Any,
    raw: bool,
) -> None:
    before = _row_counts(database, namespace)
    offence = None
    try:
        _call(channel, method, request, raw)
        if raw:
            offence = "a request protobuf cannot parse was accepted"
    except grpc.RpcError as error:
        offence = _offence(error)
        if offence is None and raw:
            named = "UTF-8" in (error.details() or "") or "nested deeper" in (error.details() or "")
            if error.code() != grpc.StatusCode.INVALID_ARGUMENT or not named:
                offence = f"{error.code().name} without naming the parse problem: {error.details()}"
        after = _row_counts(database, namespace)
        if offence is None and after != before:
            offence = f"{error.code().name} but rows changed: {before} -> {after}"
    collect = os.environ.get("CB_FUZZ_COLLECT")
    line = f"{method.full_name}\traw={raw}\t{offence or 'fine'}"
    if collect:
        with open(collect, "a", encoding="utf-8") as out:
            out.write(" ".join(line.split()) + "\n")
    elif offence is not None:
        pytest.fail(line)


@pytest.mark.timeout(900)
@pytest.mark.parametrize(("side", "method"), METHODS, ids=[m.full_name for _, m in METHODS])
def test_no_request_answers_internal(
    side: str,
    method: MethodDescriptor,
    channels: dict[str, grpc.Channel],
    database: Database,
    fuzz_namespace: str,
) -> None:
    """Arbitrary typed requests of one RPC: never INTERNAL/UNKNOWN, refused ones write nothing."""
    channel = channels[side]
    if method.client_streaming:
        requests = st.lists(message_strategy(method.input_type, fuzz_namespace), min_size=1, max_size=3)
    else:
        requests = message_strategy(method.input_type, fuzz_namespace)

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(request=requests)
    def run(request: Any) -> None:
        _check(database, fuzz_namespace, channel, method, request, raw=False)

    run()


@pytest.mark.timeout(900)
@pytest.mark.parametrize(("side", "method"), METHODS, ids=[m.full_name for _, m in METHODS])
def test_unparsable_bytes_are_named(
    side: str,
    method: MethodDescriptor,
    channels: dict[str, grpc.Channel],
    database: Database,
    fuzz_namespace: str,
) -> None:
    """A request whose bytes hold invalid UTF-8 (or nest deeper than protobuf parses) is INVALID_ARGUMENT
    that names the problem, never INTERNAL."""
    channel = channels[side]
    requests = raw_request_strategy(method.input_type, fuzz_namespace)
    if method.client_streaming:
        requests = requests.map(lambda payload: [payload])

    @settings(max_examples=8, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(request=requests)
    def run(request: Any) -> None:
        _check(database, fuzz_namespace, channel, method, request, raw=True)

    run()


def test_every_rpc_is_fuzzed() -> None:
    """Both services' RPCs are all in the list (a new RPC is fuzzed without touching this file)."""
    names = {method.full_name for _, method in METHODS}
    contract = set()
    for proto in Path(__file__).resolve().parents[2].joinpath("protos/memory/v1").glob("*.proto"):
        module = importlib.import_module(f"memory_service_grpc_client.memory.v1.{proto.stem}_pb2")
        for service in module.DESCRIPTOR.services_by_name.values():
            contract.update(method.full_name for method in service.methods)
    assert names == contract
    assert len(names) >= 25
    assert GetMessageClass(METHODS[0][1].input_type)().DESCRIPTOR.full_name.startswith("memory.v1.")
