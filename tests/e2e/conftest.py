"""Real servers in-process on 127.0.0.1:0 with the real database and embedder, reached over real channels."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest

from common.grpc.server import ServiceHost
from common.kernel.config import Settings
from common.storage.database import Database
from common.storage.schema import migrations
from common.text_models.embeddings.factory import build_embedding_provider
from ingest_service.main import create_ingest_host
from ingest_service.memories.maintenance import MemoryMaintenance
from ingest_service.memories.writer import MemoryWriter
from memory_service_grpc_client import ClientSecurity
from memory_service_grpc_client import make_channel
from memory_service_grpc_client import wait_for_serving
from memory_service_grpc_client.memory.v1 import data_protection_service_pb2_grpc
from query_service.main import create_query_host


@contextmanager
def _running(host: ServiceHost) -> Iterator[ServiceHost]:
    host.start()
    yield host
    host.stop(5)


@contextmanager
def _serving_channel(host: ServiceHost, service: str) -> Iterator[grpc.Channel]:
    address = f"127.0.0.1:{host.port}"
    assert wait_for_serving(address, timeout=60), f"{service} did not become SERVING"
    channel = grpc.insecure_channel(address)
    yield channel
    channel.close()


@pytest.fixture(scope="session")
def ingest_host(settings: Settings) -> Iterator[ServiceHost]:
    with _running(create_ingest_host(settings, address="127.0.0.1:0", metrics_port=0)) as host:
        yield host


@pytest.fixture(scope="session")
def query_host(settings: Settings) -> Iterator[ServiceHost]:
    with _running(create_query_host(settings, address="127.0.0.1:0", metrics_port=0)) as host:
        yield host


@pytest.fixture(scope="session")
def ingest_channel(ingest_host: ServiceHost) -> Iterator[grpc.Channel]:
    with _serving_channel(ingest_host, "ingest_service") as channel:
        yield channel


@pytest.fixture(scope="session")
def query_channel(query_host: ServiceHost) -> Iterator[grpc.Channel]:
    with _serving_channel(query_host, "query_service") as channel:
        yield channel


@pytest.fixture(scope="session")
def cli_addresses(ingest_host: ServiceHost, query_host: ServiceHost) -> list[str]:
    """``cb``'s options naming the session's two services."""
    return ["--ingest-addr", f"127.0.0.1:{ingest_host.port}", "--query-addr", f"127.0.0.1:{query_host.port}"]


@contextmanager
def token_secured_services(
    settings: Settings, tokens_file: Path, **overrides: Any
) -> Iterator[tuple[str, str]]:
    """Both services in-process with bearer tokens from ``tokens_file`` (and further settings
    ``overrides``), started on free ports and SERVING; yields (ingest address, query address)."""
    secured = settings.model_copy(
        update={"tokens_file": str(tokens_file), "auth_mode": "tokens", **overrides}
    )
    ingest = create_ingest_host(secured, address="127.0.0.1:0", metrics_port=0)
    query = create_query_host(secured, address="127.0.0.1:0", metrics_port=0)
    ingest.start()
    query.start()
    try:
        assert ingest.authenticator.enabled and query.authenticator.enabled
        addresses = f"127.0.0.1:{ingest.port}", f"127.0.0.1:{query.port}"
        for address in addresses:
            assert wait_for_serving(address, timeout=120), f"{address} did not become SERVING"
        yield addresses
    finally:
        ingest.stop(5)
        query.stop(5)


@pytest.fixture(scope="module")
def maintenance(settings: Settings) -> MemoryMaintenance:
    """MemoryMaintenance on the real database with the real embedder, one for the test module."""
    provider = build_embedding_provider(settings)
    database = Database(settings, embedding_model=provider.model_id, prepare=migrations.apply)
    return MemoryMaintenance(database, MemoryWriter(database, provider), settings)


@pytest.fixture
def protection(ingest_channel: grpc.Channel) -> data_protection_service_pb2_grpc.DataProtectionServiceStub:
    """DataProtectionService of the session's ingest service."""
    return data_protection_service_pb2_grpc.DataProtectionServiceStub(ingest_channel)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Debian's Chromium (``CB_CHROMIUM``), headless, driven by Playwright, which downloads no browser."""
    from playwright import sync_api

    chromium = Path(os.environ.get("CB_CHROMIUM", "/usr/bin/chromium"))
    if not chromium.is_file():
        pytest.fail(f"{chromium} is missing: apt-get install chromium")
    os.environ["PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD"] = "1"
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=str(chromium), headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        yield launched
        launched.close()


class TokenChannels:
    """The addresses of services started by `token_secured_services`, and channels to them that carry a
    bearer token."""

    ingest_addr = ""
    query_addr = ""

    def ingest(self, token: str) -> grpc.Channel:
        return make_channel(self.ingest_addr, security=ClientSecurity(token=token))

    def query(self, token: str) -> grpc.Channel:
        return make_channel(self.query_addr, security=ClientSecurity(token=token))
