"""Hostile tenants on the change feed: every write path of the scope inheritance suite
(`tests.e2e.scoped_writes`: observations with entities, facts, placeholders and text, AssertFacts,
Reconcile, Retain, PutChunks) writes data scoped ``workspace:x``; WatchChanges must give a reader of the
namespace without that scope (``outsider``, ``other`` holding ``workspace:y``) no event that names any of
it (keys, fact_ids, observation_ids, the marker in titles and texts), in any event type, while the
``insider`` holding the scope gets events about each path's items. A token of another namespace is
refused the namespace and finds nothing of it in its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf import json_format

from common.auth.principals import Right
from common.kernel.config import Settings
from memory_service_grpc_client import ClientSecurity
from memory_service_grpc_client import make_channel
from memory_service_grpc_client import rpc_failure
from memory_service_grpc_client.memory.v1 import change_feed_service_pb2
from memory_service_tools.token_writer import add_token
from tests.e2e.change_feed_helpers import drain_changes
from tests.e2e.conftest import token_secured_services
from tests.e2e.scoped_writes import WRITE_PATHS
from tests.e2e.scoped_writes import World
from tests.e2e.scoped_writes import fact
from tests.e2e.scoped_writes import observation
from tests.e2e.scoped_writes import record

pytestmark = pytest.mark.e2e


class FeedWorld(World):
    """The suite's world plus a token of another namespace."""

    def __init__(self, tokens_file: Any) -> None:
        super().__init__(tokens_file)
        self.foreign_ns = self.ns + "-foreign"
        self.foreign, _ = add_token(
            tokens_file,
            principal="feed-foreign",
            namespaces={self.foreign_ns: [Right.READ]},
            scopes=["workspace:x"],
        )


@pytest.fixture(scope="module")
def world(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FeedWorld]:
    tokens_file = tmp_path_factory.mktemp("feed-isolation") / "tokens.yaml"
    world = FeedWorld(tokens_file)
    with token_secured_services(settings, tokens_file) as (world.ingest_addr, world.query_addr):
        with make_channel(world.ingest_addr, security=ClientSecurity(token=world.writer)) as channel:
            public = [
                {"entity": {"key": world.public_a, "title": "Public A"}},
                {"entity": {"key": world.public_b, "title": "Public B"}},
                {"fact": fact(world.public_a, "DEPENDS_ON", world.public_b)},
            ]
            record(channel, observation(world.ns, f"public-{world.tag}", [], "public note", public))
            world.written = [write(world, channel) for write in WRITE_PATHS]
        yield world


def _events(world: World, token: str, namespace: str) -> list[change_feed_service_pb2.ChangeEvent]:
    """Every change of ``namespace`` the token gets, up to the first heartbeat (the replay comes first)."""
    with make_channel(world.query_addr, security=ClientSecurity(token=token)) as channel:
        return drain_changes(channel, namespace)


@pytest.mark.parametrize("reader", ["outsider", "other"])
def test_a_reader_without_the_scope_gets_no_event_about_hidden_items(world: World, reader: str) -> None:
    events = _events(world, world.tokens[reader], world.ns)
    leaks = [
        (written.path, event.event_type, event.item_key, secret)
        for event in events
        for written in world.written
        for secret in written.secrets
        if secret in json_format.MessageToJson(event)
    ]
    assert leaks == []
    assert {e.item_key for e in events} >= {world.public_a, world.public_b}, "the public changes arrive"


def test_the_insider_gets_the_events_of_every_write_path(world: World) -> None:
    events = _events(world, world.tokens["insider"], world.ns)
    text = "\n".join(json_format.MessageToJson(event) for event in events)
    missing = [w.path for w in world.written if not any(secret in text for secret in w.secrets)]
    assert missing == []
    types = {event.event_type for event in events}
    assert {"observation.recorded", "node.upserted", "fact.created", "document.retained"} <= types
    assert {"snapshot.reconciled", "fact.closed"} & types, "Reconcile's second snapshot dropped a fact"


def test_a_token_of_another_namespace_is_refused_and_its_own_feed_holds_nothing_of_it(
    world: FeedWorld,
) -> None:
    with pytest.raises(grpc.RpcError) as raised:
        _events(world, world.foreign, world.ns)
    assert rpc_failure(raised.value).code == grpc.StatusCode.PERMISSION_DENIED
    assert _events(world, world.foreign, world.foreign_ns) == []


def test_personal_data_is_masked_unless_the_token_is_cleared(
    settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> None:
    tokens_file = tmp_path_factory.mktemp("feed-pii") / "tokens.yaml"
    world = World(tokens_file)
    grant = {world.ns: [Right.READ]}
    plain, _ = add_token(tokens_file, principal="feed-plain", namespaces=grant)
    cleared, _ = add_token(tokens_file, principal="feed-cleared", namespaces=grant, pii_clearance=True)
    email = f"anna.{world.tag}@example.com"
    with token_secured_services(settings, tokens_file, pii_protection=True) as (
        world.ingest_addr,
        world.query_addr,
    ):
        with make_channel(world.ingest_addr, security=ClientSecurity(token=world.writer)) as channel:
            record(channel, observation(world.ns, f"pii-{world.tag}", [], f"write to {email}", []))
        masked = [e for e in _events(world, plain, world.ns) if e.event_type == "observation.recorded"]
        shown = [e for e in _events(world, cleared, world.ns) if e.event_type == "observation.recorded"]
    assert len(masked) == len(shown) == 1
    assert email not in json_format.MessageToJson(masked[0])
    assert "[email]" in str(masked[0].payload["content"])
    assert shown[0].payload["content"] == f"write to {email}"
