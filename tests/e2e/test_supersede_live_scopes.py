"""AssertFacts with ``supersede_live`` against hostile tenants, over real gRPC with tokens: a writer closes
only the live versions it can see; a version restricted to a workspace it does not hold stays live, and
the answer says nothing about it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format

from common.auth.principals import Right
from common.kernel.config import Settings
from memory_service_grpc_client import ClientSecurity
from memory_service_grpc_client import make_channel
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import fact_service_pb2
from memory_service_grpc_client.memory.v1 import fact_service_pb2_grpc
from memory_service_tools.token_writer import add_token
from tests.e2e.conftest import token_secured_services
from tests.work_observations import works_on

pytestmark = pytest.mark.e2e


class World:
    def __init__(self, tokens_file: Path) -> None:
        self.ns = "sl-" + uuid.uuid4().hex[:10]
        rights = {self.ns: [Right.WRITE]}
        self.insider, _ = add_token(
            tokens_file, principal="sl-insider", namespaces=rights, scopes=["workspace:alpha"]
        )
        self.outsider, _ = add_token(tokens_file, principal="sl-outsider", namespaces=rights)
        self.ingest_addr = self.query_addr = ""

    def assert_facts(self, token: str, facts: list[dict[str, Any]]) -> fact_service_pb2.AssertFactsResponse:
        stub = fact_service_pb2_grpc.FactServiceStub(
            make_channel(self.ingest_addr, security=ClientSecurity(token=token))
        )
        request = json_format.ParseDict(
            {"namespace": self.ns, "facts": facts}, fact_service_pb2.AssertFactsRequest()
        )
        return stub.AssertFacts(request, timeout=60)

    def live(self, token: str) -> list[str]:
        stub = fact_query_service_pb2_grpc.FactQueryServiceStub(
            make_channel(self.query_addr, security=ClientSecurity(token=token))
        )
        response = stub.ListFacts(
            fact_query_service_pb2.ListFactsRequest(
                namespace=self.ns, subject="person:alice", predicate="WORKS_ON"
            ),
            timeout=60,
        )
        return sorted(fact.object for fact in response.facts)


@pytest.fixture(scope="module")
def world(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tokens_file = tmp_path_factory.mktemp("supersede-live") / "tokens.yaml"
    world = World(tokens_file)
    with token_secured_services(settings, tokens_file) as (world.ingest_addr, world.query_addr):
        yield world


def test_a_writer_supersedes_only_the_live_versions_it_can_see(world: World) -> None:
    world.assert_facts(world.outsider, [works_on("project:public", "2026-01-01T00:00:00Z")])
    world.assert_facts(
        world.insider, [works_on("project:secret", "2026-02-01T00:00:00Z", scopes=["workspace:alpha"])]
    )
    assert world.live(world.insider) == ["project:public", "project:secret"]
    assert world.live(world.outsider) == ["project:public"]

    [result] = world.assert_facts(
        world.outsider, [works_on("project:next", "2026-03-01T00:00:00Z", supersede_live=True)]
    ).results
    assert result.created and not result.error

    assert world.live(world.outsider) == ["project:next"]
    # the version the outsider cannot see is left live: it is the insider's to close
    assert world.live(world.insider) == ["project:next", "project:secret"]
