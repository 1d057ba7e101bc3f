"""A replica that dies under load costs no read more than the routing policy's wait (docs/how-to/read-replicas.md).

A streaming replica of its own (``python -m memory_service_tools.embedded_db up --replica --port 55441``, so
the shared one on 55433 keeps serving other tests) serves a query_service while reader threads call
ListFacts with and without a consistency token; the replica is stopped mid-load (``pg_ctl stop -m
fast``). Every read, before, during and after the stop, answers within the wait + 1 s, for both fallback
policies; with fallback ``primary`` every read after the stop is answered.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import grpc
import psycopg
import pytest
from google.protobuf import json_format

from common.kernel.config import Settings
from common.kernel.consistency import CONSISTENCY_TOKEN_METADATA
from common.storage.replicas.read_routing import replica_wait_seconds
from memory_service_grpc_client import rpc_failure
from memory_service_grpc_client import wait_for_serving
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import fact_service_pb2
from memory_service_grpc_client.memory.v1 import fact_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import knowledge_pb2
from memory_service_tools.embedded_db.replica import replica_down
from memory_service_tools.embedded_db.replica import replica_paths
from memory_service_tools.embedded_db.replica import replica_up
from query_service.main import create_query_host

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

OWN_REPLICA_PORT = 55441
READERS = 6
WAIT_MS = 1000  # the policy's wait under test (the default is 2000)


def _streaming(url: str) -> bool:
    try:
        with psycopg.connect(url, connect_timeout=5) as conn:
            row = conn.execute("SELECT status FROM pg_stat_wal_receiver").fetchone()
    except psycopg.OperationalError:
        return False
    return row is not None and row[0] == "streaming"


def _own_replica(settings: Settings) -> str:
    """Starts this test's replica, streaming (copied again when it does not: a busy primary recycles
    the WAL a stopped replica missed); its DSN for our database."""
    url = psycopg.conninfo.make_conninfo(settings.database_url, port=str(OWN_REPLICA_PORT))
    replica_up(port=OWN_REPLICA_PORT)
    for rebuild in range(4):
        if rebuild:
            replica_up(rebuild=True, port=OWN_REPLICA_PORT)
        for _attempt in range(20):
            if _streaming(url):
                return url
            time.sleep(1)
    pytest.fail(f"{replica_paths(OWN_REPLICA_PORT).dsn} does not stream from the primary")


@pytest.fixture(scope="module")
def as_root() -> Iterator[None]:
    """The test needs root (the embedded replica runs in a chroot); stops its replica at the end."""
    if os.geteuid() != 0:
        pytest.fail("the embedded replica runs in a chroot: the test needs root")
    yield
    replica_down(OWN_REPLICA_PORT)


@dataclass
class Read:
    started: float
    seconds: float
    token: bool
    code: grpc.StatusCode


def _assert_fact(channel: grpc.Channel, namespace: str, subject: str) -> str:
    assertion = json_format.ParseDict(
        {"subject": subject, "predicate": "MEMBER_OF", "object": "team:failover"},
        knowledge_pb2.FactAssertion(),
    )
    response = fact_service_pb2_grpc.FactServiceStub(channel).AssertFacts(
        fact_service_pb2.AssertFactsRequest(namespace=namespace, facts=[assertion]), timeout=60
    )
    return str(response.consistency_token)


def _load(address: str, namespace: str, token: str, stop: threading.Event, reads: list[Read]) -> None:
    """Reads ListFacts until ``stop``, every other call with the token; records each read."""
    with grpc.insecure_channel(address) as channel:
        stub = fact_query_service_pb2_grpc.FactQueryServiceStub(channel)
        with_token = False
        while not stop.is_set():
            with_token = not with_token
            metadata = ((CONSISTENCY_TOKEN_METADATA, token),) if with_token else ()
            started = time.monotonic()
            try:
                stub.ListFacts(
                    fact_query_service_pb2.ListFactsRequest(namespace=namespace, subject="person:load"),
                    metadata=metadata,
                    timeout=30,
                )
                code = grpc.StatusCode.OK
            except grpc.RpcError as error:
                code = rpc_failure(error).code
            reads.append(Read(started, time.monotonic() - started, with_token, code))


@pytest.mark.parametrize("fallback", ["primary", "unavailable"])
def test_a_replica_stopped_mid_load_costs_no_read_more_than_the_wait(
    settings: Settings, as_root: None, ingest_channel: grpc.Channel, fallback: str
) -> None:
    own_replica = _own_replica(settings)
    namespace = f"failover-{fallback}-{os.getpid()}"
    token = _assert_fact(ingest_channel, namespace, "person:load")
    host = create_query_host(
        settings.model_copy(
            update={
                "read_database_url": own_replica,
                "consistency_fallback": fallback,
                "consistency_wait_ms": WAIT_MS,
            }
        ),
        address="127.0.0.1:0",
        metrics_port=0,
    )
    host.start()
    reads: list[Read] = []
    stop = threading.Event()
    try:
        address = f"127.0.0.1:{host.port}"
        assert wait_for_serving(address, timeout=120)
        readers = [
            threading.Thread(target=_load, args=(address, namespace, token, stop, reads))
            for _ in range(READERS)
        ]
        for reader in readers:
            reader.start()
        time.sleep(3)  # the pools are warm, reads are on the replica
        stopped_at = time.monotonic()
        replica_down(OWN_REPLICA_PORT)
        time.sleep(6)  # past several readiness checks (every 2 s)
        stop.set()
        for reader in readers:
            reader.join(timeout=60)
    finally:
        stop.set()
        host.stop(5)
    limit = replica_wait_seconds(settings.model_copy(update={"consistency_wait_ms": WAIT_MS})) + 1.0
    before = [r for r in reads if r.started < stopped_at]
    after = [r for r in reads if r.started >= stopped_at]
    assert len(before) > READERS and len(after) > READERS, (len(before), len(after))
    slowest = max(reads, key=lambda r: r.seconds)
    assert slowest.seconds <= limit, (slowest, sorted(r.seconds for r in reads)[-10:])
    codes = {r.code for r in after}
    assert codes <= {grpc.StatusCode.OK, grpc.StatusCode.UNAVAILABLE}, codes
    # A read in flight on the replica when it stopped may fail (retryable); the ones that follow don't,
    # except token reads under fallback "unavailable", which say so at once.
    settled = [r for r in after if r.started >= stopped_at + limit]
    answered = settled if fallback == "primary" else [r for r in settled if not r.token]
    assert answered and {r.code for r in answered} == {grpc.StatusCode.OK}, codes
