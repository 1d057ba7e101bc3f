"""NamespaceService over real gRPC with tokens: a token lists only its namespaces, and every count holds
only what its scopes reach, so a reader without a scope learns nothing about how many scoped items exist;
GetNamespaceStats needs the read right on the namespace."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.protobuf import json_format

from common.auth.principals import Right
from common.kernel.config import Settings
from memory_service_grpc_client import ClientSecurity
from memory_service_grpc_client import make_channel
from memory_service_grpc_client import rpc_failure
from memory_service_grpc_client.memory.v1 import document_service_pb2
from memory_service_grpc_client.memory.v1 import document_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import fact_service_pb2
from memory_service_grpc_client.memory.v1 import fact_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import namespace_service_pb2
from memory_service_grpc_client.memory.v1 import namespace_service_pb2_grpc
from memory_service_tools.token_writer import add_token
from tests.e2e.conftest import token_secured_services

pytestmark = pytest.mark.e2e


class World:
    def __init__(self, tokens_file: Path) -> None:
        self.ns = "nsl-" + uuid.uuid4().hex[:10]
        self.other = "nsl-" + uuid.uuid4().hex[:10]
        self.hidden = "nsl-" + uuid.uuid4().hex[:10]  # holds only scoped items
        self.writer, _ = add_token(
            tokens_file,
            principal="nsl-writer",
            namespaces={self.ns: [Right.WRITE], self.other: [Right.WRITE], self.hidden: [Right.WRITE]},
            scopes=["workspace:alpha"],
        )
        grant = {self.ns: [Right.READ], self.hidden: [Right.READ]}
        self.outsider, _ = add_token(tokens_file, principal="nsl-outsider", namespaces=grant)
        self.insider, _ = add_token(
            tokens_file, principal="nsl-insider", namespaces=grant, scopes=["workspace:alpha"]
        )
        self.ingest_addr = self.query_addr = ""

    def stub(self, token: str) -> namespace_service_pb2_grpc.NamespaceServiceStub:
        return namespace_service_pb2_grpc.NamespaceServiceStub(
            make_channel(self.query_addr, security=ClientSecurity(token=token))
        )


def _load(world: World) -> None:
    channel = make_channel(world.ingest_addr, security=ClientSecurity(token=world.writer))
    documents = document_service_pb2_grpc.DocumentServiceStub(channel)
    for namespace, key, scopes in (
        (world.ns, "doc:public", []),
        (world.ns, "doc:secret-1", ["workspace:alpha"]),
        (world.ns, "doc:secret-2", ["workspace:alpha"]),
        (world.other, "doc:elsewhere", []),
        (world.hidden, "doc:secret-3", ["workspace:alpha"]),
    ):
        documents.Retain(
            document_service_pb2.RetainRequest(
                namespace=namespace,
                natural_key=key,
                title=key,
                content=f"# {key}\n\nsome text",
                scopes=scopes,
            ),
            timeout=120,
        )
    facts = fact_service_pb2_grpc.FactServiceStub(channel)
    request = json_format.ParseDict(
        {
            "namespace": world.ns,
            "facts": [
                {
                    "subject": "doc:public",
                    "predicate": "CITES",
                    "object": "doc:public-2",
                    "valid_from": "2026-01-01T00:00:00Z",
                },
                {
                    "subject": "doc:secret-1",
                    "predicate": "CITES",
                    "object": "doc:secret-2",
                    "valid_from": "2026-01-01T00:00:00Z",
                    "scopes": ["workspace:alpha"],
                },
            ],
        },
        fact_service_pb2.AssertFactsRequest(),
    )
    facts.AssertFacts(request, timeout=60)


@pytest.fixture(scope="module")
def world(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tokens_file = tmp_path_factory.mktemp("namespaces") / "tokens.yaml"
    world = World(tokens_file)
    with token_secured_services(settings, tokens_file) as (world.ingest_addr, world.query_addr):
        _load(world)
        yield world


def _listed(world: World, token: str) -> dict[str, namespace_service_pb2.NamespaceSummary]:
    response = world.stub(token).ListNamespaces(namespace_service_pb2.ListNamespacesRequest(), timeout=60)
    return {item.namespace: item for item in response.namespaces}


def test_a_token_lists_only_its_namespaces_and_counts_only_what_it_sees(world: World) -> None:
    outsider = _listed(world, world.outsider)
    insider = _listed(world, world.insider)
    assert set(outsider) == {world.ns}  # never world.other, never another test's namespace, nor hidden
    assert set(insider) == {world.ns, world.hidden}
    seen, all_of_it = outsider[world.ns], insider[world.ns]
    # the outsider: doc:public and the placeholder doc:public-2, their fact and doc:public's chunk
    assert (seen.node_count, seen.fact_count, seen.chunk_count) == (2, 1, 1)
    assert (all_of_it.node_count, all_of_it.fact_count, all_of_it.chunk_count) == (4, 2, 3)
    writer = _listed(world, world.writer)
    assert {world.ns, world.other, world.hidden} == set(writer)
    prefixed = world.stub(world.writer).ListNamespaces(
        namespace_service_pb2.ListNamespacesRequest(prefix=world.other[:-2]), timeout=60
    )
    assert [item.namespace for item in prefixed.namespaces] == [world.other]


def test_stats_are_scope_filtered_and_need_the_read_right(world: World) -> None:
    request = namespace_service_pb2.GetNamespaceStatsRequest(namespace=world.ns)
    outsider = world.stub(world.outsider).GetNamespaceStats(request, timeout=60)
    insider = world.stub(world.insider).GetNamespaceStats(request, timeout=60)
    # a fact's missing end is a placeholder node typed by its key's prefix ("doc")
    assert dict(outsider.nodes_by_type) == {"doc": 1, "document": 1}
    assert dict(insider.nodes_by_type) == {"doc": 1, "document": 3}
    assert (outsider.live_fact_count, outsider.closed_fact_count, outsider.chunk_count) == (1, 0, 1)
    assert (insider.live_fact_count, insider.chunk_count) == (2, 3)
    with pytest.raises(grpc.RpcError) as refused:
        world.stub(world.outsider).GetNamespaceStats(
            namespace_service_pb2.GetNamespaceStatsRequest(namespace=world.other), timeout=60
        )
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED


def _pages(world: World, token: str, request: namespace_service_pb2.ListNamespacesRequest) -> list[list[str]]:
    pages = []
    while True:
        page = world.stub(token).ListNamespaces(request, timeout=60)
        pages.append([item.namespace for item in page.namespaces])
        if not page.next_page_token:
            return pages
        request.page_token = page.next_page_token


def test_the_list_comes_a_page_at_a_time_and_every_page_follows_from_the_last(world: World) -> None:
    pages = _pages(world, world.writer, namespace_service_pb2.ListNamespacesRequest(page_size=1))
    assert len(pages) == 3 and all(len(page) == 1 for page in pages)
    assert [name for page in pages for name in page] == sorted(
        [world.ns, world.other, world.hidden]
    )  # each once, by name


def test_a_namespace_holding_only_what_the_caller_cannot_see_is_left_out_and_the_pages_go_on(
    world: World,
) -> None:
    pages = _pages(world, world.outsider, namespace_service_pb2.ListNamespacesRequest(page_size=1))
    # two readable names, one page each: the hidden one's page is empty but still leads on
    assert len(pages) == 2 and [name for page in pages for name in page] == [world.ns]
    assert _pages(world, world.insider, namespace_service_pb2.ListNamespacesRequest(page_size=1)) == [
        [name] for name in sorted([world.ns, world.hidden])
    ]


@pytest.mark.parametrize(
    ("request_fields", "field"),
    [
        ({"page_size": 1001}, "page_size"),
        ({"page_size": -1}, "page_size"),
        ({"page_token": "not a token"}, "page_token"),
    ],
    ids=["page_size_over", "page_size_negative", "page_token_garbage"],
)
def test_a_bad_page_request_names_its_field(
    world: World, request_fields: dict[str, object], field: str
) -> None:
    with pytest.raises(grpc.RpcError) as refused:
        world.stub(world.writer).ListNamespaces(
            namespace_service_pb2.ListNamespacesRequest(**request_fields),  # type: ignore[arg-type]
            timeout=60,
        )
    failure = rpc_failure(refused.value)
    assert failure.code == grpc.StatusCode.INVALID_ARGUMENT
    assert [v.field for v in failure.violations] == [field]


def test_a_page_token_of_another_prefix_is_refused(world: World) -> None:
    stub = world.stub(world.writer)
    first = stub.ListNamespaces(
        namespace_service_pb2.ListNamespacesRequest(prefix="nsl-", page_size=1), timeout=60
    )
    assert first.next_page_token
    with pytest.raises(grpc.RpcError) as refused:
        stub.ListNamespaces(
            namespace_service_pb2.ListNamespacesRequest(
                prefix="nsl", page_size=1, page_token=first.next_page_token
            ),
            timeout=60,
        )
    failure = rpc_failure(refused.value)
    assert failure.code == grpc.StatusCode.INVALID_ARGUMENT
    assert [v.field for v in failure.violations] == ["page_token"]
