"""Bearer tokens on the real services over real channels (docs/how-to/tokens-and-scopes.md).

Both services run in-process on 127.0.0.1:0 with a tokens file (auth on), the real database and the
real embedder. Tokens are made with `memory_service_tools.token_writer.add_token` (what ``cb token create`` calls), and
each test module run uses namespaces of its own.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2
from grpc_health.v1 import health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2
from grpc_reflection.v1alpha import reflection_pb2_grpc
from typer.testing import CliRunner

from common.auth.principals import Right
from common.grpc.security import ServerSetupError
from common.kernel.config import Settings
from ingest_service.main import create_ingest_host
from memory_service_grpc_client import ClientSecurity
from memory_service_grpc_client import make_channel
from memory_service_grpc_client import rpc_failure
from memory_service_grpc_client.memory.v1 import document_service_pb2
from memory_service_grpc_client.memory.v1 import document_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import knowledge_pb2
from memory_service_grpc_client.memory.v1 import observation_service_pb2
from memory_service_grpc_client.memory.v1 import observation_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import source_service_pb2
from memory_service_grpc_client.memory.v1 import source_service_pb2_grpc
from memory_service_tools.cli import app
from memory_service_tools.token_writer import add_token
from query_service.main import create_query_host
from tests.e2e.conftest import token_secured_services
from tests.e2e.note_observations import asserted_fact
from tests.e2e.note_observations import note

pytestmark = pytest.mark.e2e


class World:
    """Secured hosts, the tokens file, and namespaces of this module (tokens made before the start)."""

    def __init__(self, tokens_file: Path) -> None:
        self.tokens_file = tokens_file
        self.ns_a = "auth-a-" + uuid.uuid4().hex[:10]
        self.ns_b = "auth-b-" + uuid.uuid4().hex[:10]
        self.writer, _ = add_token(tokens_file, principal="writer", namespaces={self.ns_a: [Right.WRITE]})
        self.reader, _ = add_token(tokens_file, principal="reader", namespaces={self.ns_a: [Right.READ]})
        self.other, _ = add_token(tokens_file, principal="other", namespaces={self.ns_b: [Right.ADMIN]})
        self.ingest_addr = self.query_addr = ""


@pytest.fixture(scope="module")
def world(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    world = World(tmp_path_factory.mktemp("auth") / "tokens.yaml")
    with token_secured_services(settings, world.tokens_file) as (world.ingest_addr, world.query_addr):
        yield world


def _channel(address: str, token: str | None) -> grpc.Channel:
    return make_channel(address, security=ClientSecurity(token=token or ""))


def _code(call: Callable[[], Any]) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as raised:
        call()
    failure = rpc_failure(raised.value)
    return failure.code, failure.reason


def _observation(namespace: str, external_id: str) -> knowledge_pb2.Observation:
    openssl = {"type": "package", "id": "openssl"}
    assertions = [asserted_fact("package:openssl", "HAS_VERSION", "version:openssl@3.0.11")]
    content = "openssl 3.0.11 uploaded"
    return note(namespace, "auth-test", external_id, content, "s", subject=openssl, assertions=assertions)


def _record(channel: grpc.Channel, *observations: knowledge_pb2.Observation) -> Any:
    stub = observation_service_pb2_grpc.ObservationServiceStub(channel)
    return stub.RecordObservations(
        observation_service_pb2.RecordObservationsRequest(observations=list(observations)), timeout=120
    )


def _list_facts(channel: grpc.Channel, namespace: str) -> Any:
    stub = fact_query_service_pb2_grpc.FactQueryServiceStub(channel)
    return stub.ListFacts(
        fact_query_service_pb2.ListFactsRequest(namespace=namespace, subject="package:openssl"), timeout=60
    )


def test_no_token_and_bad_token_are_unauthenticated(world: World) -> None:
    for token in (None, "cbt_not-a-real-token"):
        with _channel(world.query_addr, token) as channel:
            code, reason = _code(lambda: _list_facts(channel, world.ns_a))
        assert code == grpc.StatusCode.UNAUTHENTICATED
        assert reason == ("TOKEN_MISSING" if token is None else "TOKEN_INVALID")
        with _channel(world.ingest_addr, token) as channel:
            code, _ = _code(lambda: _record(channel, _observation(world.ns_a, "x")))
        assert code == grpc.StatusCode.UNAUTHENTICATED
    with make_channel(world.query_addr) as channel:  # not the Bearer scheme
        stub = fact_query_service_pb2_grpc.FactQueryServiceStub(channel)
        code, _ = _code(
            lambda: stub.ListFacts(
                fact_query_service_pb2.ListFactsRequest(namespace=world.ns_a),
                metadata=(("authorization", "Basic d3JpdGVyOnNlY3JldA=="),),
                timeout=10,
            )
        )
    assert code == grpc.StatusCode.UNAUTHENTICATED


def test_writer_writes_reader_reads_and_cannot_write(world: World) -> None:
    with _channel(world.ingest_addr, world.writer) as channel:
        results = list(_record(channel, _observation(world.ns_a, "w1")).results)
    assert [r.status for r in results] == ["processed"], [r.error for r in results]
    with _channel(world.query_addr, world.reader) as channel:
        facts = list(_list_facts(channel, world.ns_a).facts)
    assert [f.object for f in facts] == ["version:openssl@3.0.11"]
    with _channel(world.query_addr, world.writer) as channel:  # write implies read
        assert len(_list_facts(channel, world.ns_a).facts) == 1
    with _channel(world.ingest_addr, world.reader) as channel:
        code, reason = _code(lambda: _record(channel, _observation(world.ns_a, "r1")))
        assert (code, reason) == (grpc.StatusCode.PERMISSION_DENIED, "NAMESPACE_NOT_GRANTED")
        stub = document_service_pb2_grpc.DocumentServiceStub(channel)
        code, _ = _code(
            lambda: stub.Retain(
                document_service_pb2.RetainRequest(namespace=world.ns_a, natural_key="doc:x", content="x"),
                timeout=60,
            )
        )
        assert code == grpc.StatusCode.PERMISSION_DENIED
    with _channel(world.query_addr, world.writer) as channel:  # nothing of the refused write landed
        assert len(_list_facts(channel, world.ns_a).facts) == 1


def test_namespace_not_granted_is_permission_denied(world: World) -> None:
    with _channel(world.query_addr, world.other) as channel:
        code, reason = _code(lambda: _list_facts(channel, world.ns_a))
        assert (code, reason) == (grpc.StatusCode.PERMISSION_DENIED, "NAMESPACE_NOT_GRANTED")
        stub = source_service_pb2_grpc.SourceServiceStub(channel)
        code, _ = _code(
            lambda: stub.GetSource(
                source_service_pb2.GetSourceRequest(namespace=world.ns_a, natural_key="doc:x"), timeout=30
            )
        )
        assert code == grpc.StatusCode.PERMISSION_DENIED
        # Its own namespace answers (empty, nothing written there).
        assert list(_list_facts(channel, world.ns_b).facts) == []
    with _channel(world.ingest_addr, world.writer) as channel:
        # A batch is refused whole when one observation names a namespace that is not granted.
        code, _ = _code(
            lambda: _record(channel, _observation(world.ns_a, "mixed-1"), _observation(world.ns_b, "mixed-2"))
        )
        assert code == grpc.StatusCode.PERMISSION_DENIED
    with _channel(world.query_addr, world.other) as channel:
        assert list(_list_facts(channel, world.ns_b).facts) == []


def test_health_and_reflection_are_open_without_a_token(world: World) -> None:
    for address in (world.ingest_addr, world.query_addr):
        with make_channel(address) as channel:
            health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
            assert health.status == health_pb2.HealthCheckResponse.SERVING
            responses = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(
                iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=10
            )
            names = {s.name for r in responses for s in r.list_services_response.service}
        assert "grpc.health.v1.Health" in names
        assert {"memory.v1.FactQueryService", "memory.v1.ObservationService"} & names


def test_a_token_added_to_the_file_works_without_restart(world: World) -> None:
    token, _ = add_token(world.tokens_file, principal="late", namespaces={world.ns_a: [Right.READ]})
    deadline = time.monotonic() + 10
    with _channel(world.query_addr, token) as channel:
        while True:
            try:
                _list_facts(channel, world.ns_a)
                break
            except grpc.RpcError as exc:
                assert exc.code() == grpc.StatusCode.UNAUTHENTICATED
                assert time.monotonic() < deadline, "the new token was not picked up within 10 s"
                time.sleep(0.2)


def test_cli_sends_the_token(world: World) -> None:
    runner = CliRunner()
    base = [
        "--query-addr",
        world.query_addr,
        "facts",
        "-n",
        world.ns_a,
        "--subject",
        "package:openssl",
        "--json",
    ]
    denied = runner.invoke(app, base, env={"CB_TOKEN": ""})
    assert denied.exit_code == 1 and "UNAUTHENTICATED" in denied.output
    by_env = runner.invoke(app, base, env={"CB_TOKEN": world.reader})
    assert by_env.exit_code == 0, by_env.output
    by_option = runner.invoke(app, ["--token", world.reader, *base], env={"CB_TOKEN": ""})
    assert by_option.exit_code == 0, by_option.output
    other = runner.invoke(app, ["--token", world.other, *base], env={"CB_TOKEN": ""})
    assert other.exit_code == 1 and "PERMISSION_DENIED" in other.output


@pytest.mark.parametrize("address", ["0.0.0.0:0", "[::]:0"])
def test_development_mode_refuses_a_non_loopback_bind(settings: Settings, address: str) -> None:
    development = settings.model_copy(update={"tokens_file": "", "auth_mode": "auto"})
    with pytest.raises(ServerSetupError, match="loopback"):
        create_query_host(development, address=address, metrics_port=0)
    with pytest.raises(ServerSetupError, match="loopback"):
        create_ingest_host(
            development.model_copy(update={"auth_mode": "none"}), address=address, metrics_port=0
        )
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:  # `cb serve` configures logging for the process: undo it for the tests that follow
        result = CliRunner().invoke(
            app,
            ["--ingest-addr", address, "serve", "ingest"],
            env={"CB_TOKENS_FILE": "", "CB_AUTH_MODE": "auto"},
        )
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    assert result.exit_code == 1
    assert "refusing to listen" in result.output and "loopback" in result.output
