"""Read replicas and consistency tokens with a real streaming replica.

Writes go through ingest_service to the primary; reads go through a query_service whose
``CB_READ_DATABASE_URL`` is the embedded database's streaming replica (``python -m
memory_service_tools.embedded_db up --replica``, started by ``make db``; or ``CB_TEST_READ_DATABASE_URL``).
With the token of its write a read sees that write every time; without one it is as fresh as the
replica (measured, not asserted); with the replica stopped each fallback policy does what it says.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import grpc
import psycopg
import pytest
from google.protobuf import json_format
from grpc_health.v1 import health_pb2
from grpc_health.v1 import health_pb2_grpc
from prometheus_client import REGISTRY
from typer.testing import CliRunner

from common.kernel.config import Settings
from common.kernel.consistency import CONSISTENCY_TOKEN_METADATA
from memory_service_grpc_client import rpc_failure
from memory_service_grpc_client import wait_for_serving
from memory_service_grpc_client.consistency_tokens import ConsistencyTokens
from memory_service_grpc_client.memory.v1 import document_service_pb2
from memory_service_grpc_client.memory.v1 import document_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import fact_service_pb2
from memory_service_grpc_client.memory.v1 import fact_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import knowledge_pb2
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2_grpc
from memory_service_tools.cli import app
from memory_service_tools.embedded_db.replica import REPLICA_PORT
from memory_service_tools.embedded_db.replica import replica_down
from memory_service_tools.embedded_db.replica import replica_up
from query_service.main import create_query_host

pytestmark = pytest.mark.e2e

PAIRS_WITH_TOKEN = 1000
PAIRS_WITHOUT_TOKEN = 300


def _streaming(url: str) -> bool:
    """Whether the standby at ``url`` receives WAL from its primary right now."""
    try:
        with psycopg.connect(url, connect_timeout=5) as conn:
            row = conn.execute("SELECT status FROM pg_stat_wal_receiver").fetchone()
    except psycopg.OperationalError:
        return False
    return row is not None and row[0] == "streaming"


@pytest.fixture(scope="module")
def replica_url(settings: Settings) -> str:
    """The streaming replica's DSN. The embedded one is started if it is down and copied again if it no
    longer streams (e.g. the primary recycled WAL it missed while the primary was restarted)."""
    explicit = os.environ.get("CB_TEST_READ_DATABASE_URL")
    url = explicit or psycopg.conninfo.make_conninfo(settings.database_url, port=str(REPLICA_PORT))
    if not explicit and os.geteuid() == 0:
        replica_up()
        for _attempt in range(30):
            if _streaming(url):
                break
            time.sleep(1)
        else:
            replica_up(rebuild=True)
    try:
        with psycopg.connect(url, connect_timeout=5) as conn:
            row = conn.execute("SELECT pg_is_in_recovery()").fetchone()
    except psycopg.OperationalError as error:
        pytest.fail(
            f"no streaming replica ({error}): run `python -m memory_service_tools.embedded_db up --replica`"
        )
    assert row is not None and row[0], f"{url} is not a standby"
    return url


@contextmanager
def replica_query_address(settings: Settings, replica_url: str, **overrides: Any) -> Iterator[str]:
    """A query_service reading from the replica (settings ``overrides`` applied), SERVING at the address."""
    host = create_query_host(
        settings.model_copy(update={"read_database_url": replica_url, **overrides}),
        address="127.0.0.1:0",
        metrics_port=0,
    )
    host.start()
    try:
        address = f"127.0.0.1:{host.port}"
        assert wait_for_serving(address, timeout=120), "query_service did not become SERVING"
        yield address
    finally:
        host.stop(5)


@contextmanager
def replica_query(settings: Settings, replica_url: str, **overrides: Any) -> Iterator[grpc.Channel]:
    """A channel to a query_service reading from the replica (see `replica_query_address`)."""
    with (
        replica_query_address(settings, replica_url, **overrides) as address,
        grpc.insecure_channel(address) as channel,
    ):
        yield channel


@pytest.fixture(scope="module")
def strict_query_address(settings: Settings, replica_url: str) -> Iterator[str]:
    """Token reads wait up to 5 s for the replica, then answer UNAVAILABLE (never the primary)."""
    with replica_query_address(
        settings, replica_url, consistency_fallback="unavailable", consistency_wait_ms=5000
    ) as address:
        yield address


@pytest.fixture(scope="module")
def strict_query(strict_query_address: str) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(strict_query_address) as channel:
        yield channel


def _assert_fact(channel: grpc.Channel, namespace: str, subject: str) -> Any:
    assertion = json_format.ParseDict(
        {"subject": subject, "predicate": "MEMBER_OF", "object": "team:replicas"},
        knowledge_pb2.FactAssertion(),
    )
    return fact_service_pb2_grpc.FactServiceStub(channel).AssertFacts.with_call(
        fact_service_pb2.AssertFactsRequest(namespace=namespace, facts=[assertion]), timeout=60
    )


def _sees(channel: grpc.Channel, namespace: str, subject: str, token: str | None) -> bool:
    metadata = ((CONSISTENCY_TOKEN_METADATA, token),) if token else ()
    response = fact_query_service_pb2_grpc.FactQueryServiceStub(channel).ListFacts(
        fact_query_service_pb2.ListFactsRequest(namespace=namespace, subject=subject),
        metadata=metadata,
        timeout=60,
    )
    return any(fact.predicate == "MEMBER_OF" for fact in response.facts)


def _count(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_every_write_answers_a_token_in_the_response_and_the_trailing_metadata(
    ingest_channel: grpc.Channel, namespace: str
) -> None:
    response, call = _assert_fact(ingest_channel, namespace, "person:first")
    trailing = dict(call.trailing_metadata() or ())
    assert response.consistency_token.startswith("ct1-")
    assert trailing[CONSISTENCY_TOKEN_METADATA] == response.consistency_token
    later, _ = _assert_fact(ingest_channel, namespace, "person:second")
    assert later.consistency_token > response.consistency_token, "tokens follow the WAL"


def test_a_read_with_the_token_of_its_write_sees_it_every_time(
    ingest_channel: grpc.Channel, strict_query: grpc.Channel, namespace: str
) -> None:
    served_before = _count("memory_consistent_reads_total", outcome="replica") + _count(
        "memory_consistent_reads_total", outcome="replica_waited"
    )
    fallbacks_before = _count("memory_consistent_reads_total", outcome="primary_fallback")
    stale = []
    for index in range(PAIRS_WITH_TOKEN):
        subject = f"person:p{index}"
        response, _ = _assert_fact(ingest_channel, namespace, subject)
        if not _sees(strict_query, namespace, subject, response.consistency_token):
            stale.append(index)
    assert stale == []
    served = (
        _count("memory_consistent_reads_total", outcome="replica")
        + _count("memory_consistent_reads_total", outcome="replica_waited")
        - served_before
    )
    assert served >= PAIRS_WITH_TOKEN, "every read was answered by the replica"
    assert _count("memory_consistent_reads_total", outcome="primary_fallback") == fallbacks_before


def test_replica_lag_is_exported_and_its_health_reported(strict_query: grpc.Channel) -> None:
    health = health_pb2_grpc.HealthStub(strict_query)
    status = health.Check(health_pb2.HealthCheckRequest(service="read-replica-0"), timeout=10).status
    assert status == health_pb2.HealthCheckResponse.SERVING
    assert (
        REGISTRY.get_sample_value(
            "memory_read_replica_up", {"service": "query_service", "replica": "replica-0"}
        )
        == 1.0
    )
    lag = REGISTRY.get_sample_value(
        "memory_read_replica_lag_bytes", {"service": "query_service", "replica": "replica-0"}
    )
    assert lag is not None and lag >= 0


def test_without_a_token_reads_are_as_fresh_as_the_replica(
    ingest_channel: grpc.Channel, strict_query: grpc.Channel, namespace: str
) -> None:
    replica_reads_before = _count("memory_replica_reads_total", target="replica")
    stale = 0
    for index in range(PAIRS_WITHOUT_TOKEN):
        subject = f"person:q{index}"
        _assert_fact(ingest_channel, namespace, subject)
        stale += not _sees(strict_query, namespace, subject, None)
    print(f"\nreads right after their write without a token: {stale} of {PAIRS_WITHOUT_TOKEN} stale")
    assert (
        _count("memory_replica_reads_total", target="replica") - replica_reads_before >= PAIRS_WITHOUT_TOKEN
    )
    # Every write is there once the replica caught up (a token read waits for the last one).
    last, _ = _assert_fact(ingest_channel, namespace, "person:last")
    assert _sees(strict_query, namespace, "person:last", last.consistency_token)
    assert all(
        _sees(strict_query, namespace, f"person:q{index}", None) for index in range(PAIRS_WITHOUT_TOKEN)
    )


def test_the_python_client_hook_carries_the_token_from_write_to_read(
    ingest_channel: grpc.Channel, strict_query: grpc.Channel, namespace: str
) -> None:
    tokens = ConsistencyTokens()
    ingest = grpc.intercept_channel(ingest_channel, tokens)
    query = grpc.intercept_channel(strict_query, tokens)
    for index in range(50):
        subject = f"person:hook{index}"
        response, _ = _assert_fact(ingest, namespace, subject)
        assert tokens.token == response.consistency_token
        assert _sees(query, namespace, subject, None), "the hook sent the token"


def test_a_malformed_token_is_invalid_argument(strict_query: grpc.Channel, namespace: str) -> None:
    with pytest.raises(grpc.RpcError) as raised:
        _sees(strict_query, namespace, "person:x", "not-a-token")
    failure = rpc_failure(raised.value)
    assert failure.code == grpc.StatusCode.INVALID_ARGUMENT
    assert [v.field for v in failure.violations] == [CONSISTENCY_TOKEN_METADATA]


def test_with_the_replica_stopped_each_policy_holds(
    settings: Settings,
    replica_url: str,
    ingest_channel: grpc.Channel,
    strict_query: grpc.Channel,
    namespace: str,
) -> None:
    if os.geteuid() != 0:
        pytest.fail("stopping the embedded replica needs root (it runs in a chroot)")
    with replica_query(
        settings, replica_url, consistency_fallback="primary", consistency_wait_ms=500
    ) as lenient:
        before, _ = _assert_fact(ingest_channel, namespace, "person:before")
        assert _sees(strict_query, namespace, "person:before", before.consistency_token)
        replica_down()
        try:
            response, _ = _assert_fact(ingest_channel, namespace, "person:during")
            token = response.consistency_token
            # fallback "primary": the read is answered, from the primary, and sees the write.
            assert _sees(lenient, namespace, "person:during", token)
            # fallback "unavailable": a retryable refusal that says why; nothing stale is answered.
            with pytest.raises(grpc.RpcError) as raised:
                _sees(strict_query, namespace, "person:during", token)
            failure = rpc_failure(raised.value)
            assert failure.code == grpc.StatusCode.UNAVAILABLE
            assert failure.reason == "REPLICA_UNAVAILABLE", failure
            # Without a token both answer from the primary.
            assert _sees(strict_query, namespace, "person:during", None)
            assert _sees(lenient, namespace, "person:during", None)
        finally:
            replica_up()
    # Back: the strict service reads from the replica again once a readiness check reached it.
    after, _ = _assert_fact(ingest_channel, namespace, "person:after")
    for _attempt in range(120):
        try:
            assert _sees(strict_query, namespace, "person:after", after.consistency_token)
            break
        except grpc.RpcError as error:
            assert rpc_failure(error).reason == "REPLICA_UNAVAILABLE"
            time.sleep(0.5)  # until a readiness check (every 2 s) found the replica again
    else:
        pytest.fail("the replica did not come back into use")


def test_cb_consistent_reads_the_write_of_the_previous_cb_command(
    ingest_host: Any,
    strict_query_address: str,
    namespace: str,
    tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CB_CONSISTENCY_TOKEN_FILE", str(tmp_path / "token"))
    runner = CliRunner()
    addresses = ["--ingest-addr", f"127.0.0.1:{ingest_host.port}", "--query-addr", strict_query_address]
    outcomes = ("replica", "replica_waited", "primary_fallback")
    token_reads_before = sum(_count("memory_consistent_reads_total", outcome=o) for o in outcomes)
    for index in range(30):
        subject = {"type": "person", "id": f"cli{index}"}
        observation = {
            "namespace": namespace,
            "source": {"system": "tests", "stream": "replica", "external_id": f"cli-{index}"},
            "kind": "membership",
            "occurred_at": "2026-08-01T09:00:00Z",
            "subject": subject,
            "content": f"cli{index} joins the replicas team.",
            "assertions": [
                {"fact": {"subject": subject, "predicate": "MEMBER_OF", "object": "team:replicas"}}
            ],
        }
        path = tmp_path / "observation.jsonl"
        path.write_text(json.dumps(observation) + "\n", encoding="utf-8")
        written = runner.invoke(app, [*addresses, "observe", "--file", str(path)])
        assert written.exit_code == 0, written.output
        read = runner.invoke(
            app,
            [
                *addresses,
                "--consistent",
                "facts",
                "--namespace",
                namespace,
                "--subject",
                f"person:cli{index}",
                "--json",
            ],
        )
        assert read.exit_code == 0, read.output
        assert [fact["predicate"] for fact in json.loads(read.output)["facts"]] == ["MEMBER_OF"], index
    # Each --consistent read sent the token of the observe before it (the replica is often fast enough
    # that the write would be seen anyway, so the fresh answers alone prove nothing).
    token_reads = (
        sum(_count("memory_consistent_reads_total", outcome=o) for o in outcomes) - token_reads_before
    )
    assert token_reads >= 30
    assert (tmp_path / "token").read_text(encoding="ascii").startswith("ct1-")


def test_search_rankings_read_the_replica_and_honour_the_token(
    ingest_channel: grpc.Channel, strict_query: grpc.Channel, namespace: str
) -> None:
    """Search reads through autocommit connections (`Database.read_connection`): they too go to the
    replica and wait for the token's position, so a document is found right after its Retain."""
    searches = 20
    replica_reads_before = _count("memory_replica_reads_total", target="replica")
    primary_reads_before = _count("memory_replica_reads_total", target="primary")
    missed = []
    for index in range(searches):
        word = f"zqreplica{index}x"
        retained = document_service_pb2_grpc.DocumentServiceStub(ingest_channel).Retain(
            document_service_pb2.RetainRequest(
                namespace=namespace,
                natural_key=f"doc:replica-{index}",
                type="document",
                content=f"# Replica {index}\n\nThe marker {word} is written once.",
            ),
            timeout=60,
        )
        hits = retrieval_service_pb2_grpc.RetrievalServiceStub(strict_query).Search(
            retrieval_service_pb2.SearchRequest(namespace=namespace, query=word, top_k=3),
            metadata=((CONSISTENCY_TOKEN_METADATA, retained.consistency_token),),
            timeout=60,
        )
        if not any(hit.node_key == f"doc:replica-{index}" for hit in hits.hits):
            missed.append(index)
    assert missed == []
    assert _count("memory_replica_reads_total", target="replica") - replica_reads_before >= searches
    assert _count("memory_replica_reads_total", target="primary") == primary_reads_before


def test_cb_health_shows_each_read_replica_with_its_lag(
    ingest_host: Any,
    strict_query_address: str,
    settings: Settings,
    replica_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CB_DATABASE_URL", settings.database_url)
    monkeypatch.setenv("CB_READ_DATABASE_URL", json.dumps([replica_url, settings.database_url]))
    addresses = ["--ingest-addr", f"127.0.0.1:{ingest_host.port}", "--query-addr", strict_query_address]
    result = CliRunner().invoke(app, [*addresses, "health", "--json"])
    report = json.loads(result.output)
    replicas = [row for row in report["components"] if row["component"] == "read replica"]
    assert [row["state"] for row in replicas] == ["streaming", "not a standby"]
    assert int(replicas[0]["lag_bytes"]) >= 0 and "lag" in replicas[0]["detail"]
    # A "replica" that is the primary itself is reported, and the whole state is degraded for it.
    assert report["state"] == "degraded" and result.exit_code == 1
    monkeypatch.setenv("CB_READ_DATABASE_URL", replica_url)
    healthy = CliRunner().invoke(app, [*addresses, "health", "--json"])
    assert healthy.exit_code == 0, healthy.output
