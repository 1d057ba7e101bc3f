"""The database stops in the middle of a large batch and comes back ("Faults").

While it is down the service answers UNAVAILABLE and reports NOT_SERVING; it recovers by itself once the
database is back; the client retries the batch and the end state equals that of a run without the fault:
nothing lost, nothing doubled. Runs against the embedded database (it stops and starts it).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from typing import Any

import grpc
import psycopg
import pytest
from google.protobuf import json_format

from common.kernel.identifiers import fact_id
from common.kernel.identifiers import parse_instant
from common.storage.database import Database
from memory_service_grpc_client import health_status
from memory_service_grpc_client.memory.v1 import knowledge_pb2
from memory_service_grpc_client.memory.v1 import observation_service_pb2
from memory_service_grpc_client.memory.v1 import observation_service_pb2_grpc
from memory_service_tools.embedded_db import database_down
from memory_service_tools.embedded_db import database_status
from memory_service_tools.embedded_db import database_up
from tests.conftest import CORPORA
from tests.integration.test_fact_engine import portable_snapshot

pytestmark = pytest.mark.e2e

BATCH = 1000  # the largest batch RecordObservations takes


def corpus_in(namespace: str, count: int) -> list[knowledge_pb2.Observation]:
    """The first ``count`` debian uploads moved to ``namespace`` (supersedes recomputed,
    docs/explanation/knowledge-model.md)."""
    records = [
        json.loads(line)
        for line in (CORPORA / "debian-uploads" / "observations.jsonl")
        .read_text("utf-8")
        .splitlines()[:count]
    ]
    latest: dict[str, str] = {}
    for record in records:
        record["namespace"] = namespace
        for assertion in record["assertions"]:
            fact = assertion.get("fact")
            if not fact or fact["predicate"] != "HAS_VERSION":
                continue
            subject = f"{fact['subject']['type']}:{fact['subject']['id']}"
            if "supersedes" in fact:
                fact["supersedes"] = latest[subject]
            latest[subject] = fact_id(
                namespace,
                subject,
                "HAS_VERSION",
                f"{fact['object']['type']}:{fact['object']['id']}",
                parse_instant(fact["valid_from"]),
            )
    return [json_format.ParseDict(record, knowledge_pb2.Observation()) for record in records]


def record(stub: Any, observations: list[knowledge_pb2.Observation]) -> Any:
    return stub.RecordObservations(
        observation_service_pb2.RecordObservationsRequest(observations=observations), timeout=600
    )


def write_in_progress(database: Database, sender: threading.Thread, timeout: float = 120.0) -> bool:
    """Waits until another session holds the lock an INSERT into the observations table takes
    (RowExclusiveLock, held until its transaction ends): the batch's write transaction has begun and not
    yet ended. False when ``sender`` finished (or ``timeout`` passed) first. Nothing else writes
    observations meanwhile: the reference batch committed before, and the background embedder writes
    chunks only."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(database.settings.database_url, autocommit=True) as conn:
        while sender.is_alive() and time.monotonic() < deadline:
            held = conn.execute(
                "SELECT EXISTS (SELECT FROM pg_locks WHERE relation = to_regclass(%s)"
                " AND mode = 'RowExclusiveLock' AND granted AND pid <> pg_backend_pid())",
                (database.settings.observations_table,),
            ).fetchone()
            if held and held[0]:
                return True
            time.sleep(0.005)
    return False


def test_outage_mid_batch_loses_nothing_and_doubles_nothing(
    ingest_channel: grpc.Channel, ingest_host: Any, database: Database
) -> None:
    assert database_status().running, "this test stops and starts the embedded database"
    stub = observation_service_pb2_grpc.ObservationServiceStub(ingest_channel)
    reference_ns, faulty_ns = "ref-" + uuid.uuid4().hex[:8], "flt-" + uuid.uuid4().hex[:8]
    results = record(stub, corpus_in(reference_ns, BATCH)).results
    assert all(r.created for r in results)

    outcome: dict[str, Any] = {}

    def send() -> None:
        try:
            outcome["response"] = record(stub, corpus_in(faulty_ns, BATCH))
        except grpc.RpcError as error:
            outcome["error"] = error

    sender = threading.Thread(target=send)
    sender.start()
    # Mid-batch: the batch's one write transaction has inserted its observations and is projecting them.
    # Waiting a fixed time instead (2 s) stopped the database after the commit once ingest got faster.
    assert write_in_progress(database, sender), "the batch's write transaction was never seen"
    database_down()
    try:
        sender.join(120)
        assert "error" in outcome, "the batch should have failed while the database was down"
        assert outcome["error"].code() == grpc.StatusCode.UNAVAILABLE
        with pytest.raises(grpc.RpcError) as during:
            record(stub, corpus_in(faulty_ns, 1))
        assert during.value.code() == grpc.StatusCode.UNAVAILABLE
        address = f"127.0.0.1:{ingest_host.port}"
        deadline = time.monotonic() + 30
        while health_status(grpc.insecure_channel(address)) != "NOT_SERVING" and time.monotonic() < deadline:
            time.sleep(0.5)
        assert health_status(grpc.insecure_channel(address)) == "NOT_SERVING"
    finally:
        database_up()

    deadline = time.monotonic() + 60
    while True:  # the client's retry loop: the call is idempotent
        try:
            retried = record(stub, corpus_in(faulty_ns, BATCH)).results
            break
        except grpc.RpcError as error:
            assert error.code() == grpc.StatusCode.UNAVAILABLE and time.monotonic() < deadline
            time.sleep(1)
    assert len(retried) == BATCH and all(r.status == "processed" for r in retried)
    assert portable_snapshot(database, faulty_ns) == portable_snapshot(database, reference_ns)
    with database.connection() as conn:
        count = conn.execute(
            "SELECT count(*) FROM observations WHERE namespace = %s", (faulty_ns,)
        ).fetchone()
    assert count == (BATCH,)
