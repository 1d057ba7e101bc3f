"""The auth interceptor over a real channel, and the authentication mode a server accepts.

A tiny SourceService runs in-process behind `build_server` (no database); the real services are
covered in tests/e2e/test_auth.py. The pieces are tested on their own in test_principals.py,
test_tokens_file.py, test_authentication.py and test_token_writer.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from common.auth.principals import current_principal
from common.grpc.security import ServerSetupError
from common.grpc.server import ServiceHost
from common.grpc.server import build_server
from common.kernel.config import Settings
from memory_service_grpc_client import ClientSecurity
from memory_service_grpc_client import make_channel
from memory_service_grpc_client.memory.v1 import source_service_pb2
from memory_service_grpc_client.memory.v1 import source_service_pb2_grpc
from tests.unit.tokens_file_samples import TOKEN_A
from tests.unit.tokens_file_samples import TOKEN_B
from tests.unit.tokens_file_samples import write_tokens_file


class _ReadinessOk:
    def ensure_ready(self) -> bool:
        return True

    def close(self) -> None:
        pass


class _WhoAmI(source_service_pb2_grpc.SourceServiceServicer):  # type: ignore[misc]
    def GetSource(
        self, request: source_service_pb2.GetSourceRequest, context: grpc.ServicerContext
    ) -> source_service_pb2.GetSourceResponse:
        principal = current_principal()
        assert principal is not None
        return source_service_pb2.GetSourceResponse(
            source=source_service_pb2.Source(natural_key=request.natural_key, title=principal.name)
        )


def _host(settings: Settings, address: str = "127.0.0.1:0") -> ServiceHost:
    def register(server: grpc.Server) -> list[str]:
        source_service_pb2_grpc.add_SourceServiceServicer_to_server(_WhoAmI(), server)
        return ["memory.v1.SourceService"]

    return build_server(
        settings,
        service_name="auth_test",
        address=address,
        metrics_port=0,
        database=_ReadinessOk(),
        register=register,
        readiness_interval=0.1,
    )


@pytest.fixture
def secured(tokens_file: Path) -> Iterator[ServiceHost]:
    host = _host(Settings(tokens_file=str(tokens_file)))
    host.start()
    yield host
    host.stop(0)


def _get(host: ServiceHost, namespace: str, token: str | None) -> str:
    with make_channel(f"127.0.0.1:{host.port}", security=ClientSecurity(token=token or "")) as channel:
        response = source_service_pb2_grpc.SourceServiceStub(channel).GetSource(
            source_service_pb2.GetSourceRequest(namespace=namespace, natural_key="doc:a"), timeout=5
        )
    return str(response.source.title)


def _code(host: ServiceHost, namespace: str, token: str | None) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as raised:
        _get(host, namespace, token)
    return raised.value.code()


def test_interceptor_exposes_the_principal_and_enforces_tokens(secured: ServiceHost) -> None:
    assert secured.authenticator.enabled
    assert _get(secured, "team-a", TOKEN_A) == "alice"
    assert _get(secured, "anything", TOKEN_B) == "bob"  # "*": read
    assert _code(secured, "team-a", None) == grpc.StatusCode.UNAUTHENTICATED
    assert _code(secured, "team-a", "cbt_wrong") == grpc.StatusCode.UNAUTHENTICATED
    assert _code(secured, "team-b", TOKEN_A) == grpc.StatusCode.PERMISSION_DENIED


def test_development_mode_has_a_development_principal() -> None:
    host = _host(Settings(auth_mode="auto", tokens_file=""))
    host.start()
    try:
        assert not host.authenticator.enabled
        assert _get(host, "any", None) == "development"
    finally:
        host.stop(0)


@pytest.mark.parametrize("address", ["0.0.0.0:0", "[::]:0", "192.0.2.10:0"])
def test_development_mode_refuses_non_loopback_binds(address: str) -> None:
    with pytest.raises(ServerSetupError, match="loopback"):
        _host(Settings(tokens_file=""), address)
    with pytest.raises(ServerSetupError, match="loopback"):
        _host(Settings(auth_mode="none", tokens_file=""), address)


def test_tokens_mode_needs_a_valid_tokens_file(tmp_path: Path) -> None:
    with pytest.raises(ServerSetupError, match="CB_TOKENS_FILE"):
        _host(Settings(auth_mode="tokens", tokens_file=""))
    broken = tmp_path / "broken.yaml"
    write_tokens_file(broken, "tokens: 3\n")
    with pytest.raises(ServerSetupError, match=f"tokens file {broken}: tokens: "):
        _host(Settings(tokens_file=str(broken)))


def test_tokens_mode_may_bind_any_address(tokens_file: Path) -> None:
    host = _host(Settings(tokens_file=str(tokens_file)), "0.0.0.0:0")
    host.stop(0)
