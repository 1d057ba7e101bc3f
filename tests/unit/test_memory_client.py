"""`MemoryClient` against small in-process servicers behind the real server host (real channels)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import grpc
import pytest

from common.kernel.errors import FieldViolation
from common.kernel.errors import InvalidArgument
from common.kernel.errors import NotFound
from common.kernel.errors import Unavailable
from memory_service_grpc_client import ClientSecurity
from memory_service_grpc_client import MemoryClient
from memory_service_grpc_client import call_policy
from memory_service_grpc_client import errors as client_errors
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import knowledge_pb2
from memory_service_grpc_client.memory.v1 import source_service_pb2
from memory_service_grpc_client.memory.v1 import source_service_pb2_grpc
from tests.unit.servicer_host import Serve


class Sources(source_service_pb2_grpc.SourceServiceServicer):  # type: ignore[misc]
    """Down for ``outages`` calls, then: doc:bad -> INVALID_ARGUMENT, doc:missing -> NOT_FOUND, else a source.
    Records the authorization metadata of every call."""

    def __init__(self, outages: int = 0) -> None:
        self.outages = outages
        self.calls = 0
        self.authorization: list[str] = []
        self.lock = threading.Lock()

    def GetSource(
        self, request: source_service_pb2.GetSourceRequest, context: grpc.ServicerContext
    ) -> source_service_pb2.GetSourceResponse:
        with self.lock:
            self.calls += 1
            self.authorization.append(dict(context.invocation_metadata()).get("authorization", ""))
            if self.outages > 0:
                self.outages -= 1
                raise Unavailable("database unavailable")
        if request.natural_key == "doc:bad":
            raise InvalidArgument(
                [FieldViolation("natural_key", "bad key"), FieldViolation("namespace", "empty")]
            )
        if request.natural_key == "doc:missing":
            raise NotFound("no node doc:missing")
        return source_service_pb2.GetSourceResponse(
            source=source_service_pb2.Source(natural_key=request.natural_key, content="text")
        )


class Facts(fact_query_service_pb2_grpc.FactQueryServiceServicer):  # type: ignore[misc]
    """Five facts, pages of ``page_size`` with the offset as page token."""

    def ListFacts(
        self, request: fact_query_service_pb2.ListFactsRequest, context: grpc.ServicerContext
    ) -> fact_query_service_pb2.ListFactsResponse:
        start = int(request.page_token or 0)
        end = min(start + request.page_size, 5)
        return fact_query_service_pb2.ListFactsResponse(
            facts=[knowledge_pb2.Fact(fact_id=f"fact-{n}") for n in range(start, end)],
            next_page_token=str(end) if end < 5 else "",
        )


@pytest.fixture
def address(serve: Serve) -> Callable[[Sources], str]:
    def start(sources: Sources) -> str:
        def register(server: grpc.Server) -> list[str]:
            source_service_pb2_grpc.add_SourceServiceServicer_to_server(sources, server)
            fact_query_service_pb2_grpc.add_FactQueryServiceServicer_to_server(Facts(), server)
            return ["memory.v1.SourceService", "memory.v1.FactQueryService"]

        return serve(register)

    return start


def _request(key: str) -> source_service_pb2.GetSourceRequest:
    return source_service_pb2.GetSourceRequest(namespace="ns", natural_key=key)


def test_reads_are_retried_on_unavailable_with_backoff(
    address: Callable[[Sources], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(call_policy, "RETRY_INITIAL_WAIT", 0.01)
    sources = Sources(outages=2)
    where = address(sources)
    with MemoryClient(where, where) as client:
        assert client.get_source(_request("doc:x")).source.content == "text"
    assert sources.calls == 3


def test_without_read_retries_unavailable_is_raised_at_once(address: Callable[[Sources], str]) -> None:
    sources = Sources(outages=5)
    where = address(sources)
    with (
        MemoryClient(where, where, retry_reads=False) as client,
        pytest.raises(client_errors.Unavailable) as raised,
    ):
        client.get_source(_request("doc:x"))
    assert sources.calls == 1
    assert isinstance(raised.value.__cause__, grpc.RpcError)


def test_errors_are_domain_exceptions_with_field_violations(address: Callable[[Sources], str]) -> None:
    where = address(Sources())
    with MemoryClient(where, where) as client:
        with pytest.raises(client_errors.InvalidArgument) as invalid:
            client.get_source(_request("doc:bad"))
        assert [(v.field, v.description) for v in invalid.value.violations] == [
            ("natural_key", "bad key"),
            ("namespace", "empty"),
        ]
        with pytest.raises(client_errors.NotFound, match="no node doc:missing"):
            client.get_source(_request("doc:missing"))


def test_iter_facts_follows_page_tokens_and_stops_at_the_limit(address: Callable[[Sources], str]) -> None:
    where = address(Sources())
    request = fact_query_service_pb2.ListFactsRequest(namespace="ns", page_size=2)
    with MemoryClient(where, where) as client:
        assert [f.fact_id for f in client.iter_facts(request)] == [f"fact-{n}" for n in range(5)]
        assert [f.fact_id for f in client.iter_facts(request, limit=3)] == ["fact-0", "fact-1", "fact-2"]
        assert len(client.list_every_fact(request).facts) == 5
    assert request.page_token == ""  # the caller's request is not changed


def test_a_token_view_wins_over_the_clients_token(address: Callable[[Sources], str]) -> None:
    sources = Sources()
    where = address(sources)
    with MemoryClient(where, where, security=ClientSecurity(token="own")) as client:
        client.get_source(_request("doc:x"))
        client.with_token("caller").get_source(_request("doc:x"))
        client.with_token("").get_source(_request("doc:x"))
    assert sources.authorization == ["Bearer own", "Bearer caller", "Bearer own"]
    with MemoryClient(where, where) as client:
        client.with_token("").get_source(_request("doc:x"))
    assert sources.authorization[-1] == ""


def test_the_client_has_a_typed_method_for_every_rpc_of_the_contract() -> None:
    """One client for every RPC: a service or RPC added to protos/ without its
    MemoryClient method fails here."""
    import re
    from importlib import import_module
    from pathlib import Path

    from memory_service_grpc_client import MemoryClient

    missing = []
    for proto in sorted(Path(__file__).resolve().parents[2].joinpath("protos/memory/v1").glob("*.proto")):
        module = import_module(f"memory_service_grpc_client.memory.v1.{proto.stem}_pb2")
        for service in module.DESCRIPTOR.services_by_name.values():
            for method in service.methods:
                name = re.sub(r"(?<!^)(?=[A-Z])", "_", method.name).lower()
                if not callable(getattr(MemoryClient, name, None)):
                    missing.append(f"{service.name}.{method.name} -> {name}")
    assert missing == []
