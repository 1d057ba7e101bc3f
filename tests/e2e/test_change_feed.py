"""The change feed end to end (docs/how-to/change-feed.md): the outbox written by the real write paths on
the real database, ChangeFeedService.WatchChanges over a real channel.

* Exactly once by cursor: observations are loaded by two concurrent clients into an ingest service run as
  a process, which is killed with SIGKILL once mid-load and started again (the clients retry); a
  subscriber reconnects at random moments, each time resuming after the last cursor it received. It ends
  with every committed change once, in cursor order, equal to the outbox, and one
  ``observation.recorded`` per stored observation. ``CB_TEST_FEED_OBSERVATIONS`` sets the load (default
  5,000 observations in batches of 50: about 25 s on two shared cores).
* Rolled-back writes emit nothing: a transaction rolled back, and a savepoint rolled back inside a
  committed transaction, leave no event and no gap in the cursors.
* A resume older than the retention answers FAILED_PRECONDITION with the oldest cursor kept.
* Filters (event types, predicates, key prefixes) and the superseded-fact reaction of the how-to.
* Bad requests answer INVALID_ARGUMENT with field violations.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import psycopg
import pytest
from google.protobuf import json_format
from memory_service_grpc_client import MemoryClient, rpc_failure, wait_for_serving
from memory_service_grpc_client.memory.v1 import (
    change_feed_service_pb2,
    change_feed_service_pb2_grpc,
    fact_service_pb2,
    fact_service_pb2_grpc,
    knowledge_pb2,
    observation_service_pb2,
)
from psycopg import sql

from common.kernel.config import Settings
from common.storage.change_feed.outbox import ChangeOutbox
from common.storage.database import Database
from tests.e2e.test_replica_reads import replica_query, replica_url  # noqa: F401 - the replica's fixture

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]
ROOT = Path(__file__).resolve().parents[2]
OBSERVATIONS = int(os.environ.get("CB_TEST_FEED_OBSERVATIONS", "5000"))
BATCH = 50
WHEN = "2024-05-01T10:00:00Z"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _serve_ingest(settings: Settings, address: str) -> subprocess.Popen[bytes]:
    environment = {
        **os.environ,
        "CB_DATABASE_URL": settings.database_url,
        "CB_INGEST_ADDR": address,
        "CB_INGEST_METRICS_PORT": "0",
        "CB_SHUTDOWN_DRAIN_SECONDS": "0",
        "CB_SHUTDOWN_GRACE_SECONDS": "2",
        "CB_LOG_FORMAT": "text",
    }
    return subprocess.Popen(
        [sys.executable, "-m", "memory_service_tools.cli", "serve", "ingest"],
        cwd=ROOT,
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _observation(namespace: str, index: int) -> knowledge_pb2.Observation:
    return json_format.ParseDict(
        {
            "namespace": namespace,
            "source": {"system": "feed-test", "stream": "load", "external_id": f"o{index}"},
            "kind": "note",
            "occurred_at": WHEN,
            "content": f"note {index}",
            "assertions": [
                {
                    "fact": {
                        "subject": f"service:s{index % 40}",
                        "predicate": "DEPENDS_ON",
                        "object": f"service:t{index}",
                        "valid_from": WHEN,
                    }
                }
            ],
        },
        knowledge_pb2.Observation(),
    )


def _head(settings: Settings, namespace: str) -> int:
    with psycopg.connect(settings.database_url) as conn:
        row = conn.execute(
            "SELECT last_cursor FROM change_feed_heads WHERE namespace = %s", (namespace,)
        ).fetchone()
    return int(row[0]) if row else 0


def _outbox(settings: Settings, namespace: str) -> list[tuple[int, str, str]]:
    with psycopg.connect(settings.database_url) as conn:
        rows = conn.execute(
            "SELECT cursor, event_type, item_key FROM change_events WHERE namespace = %s ORDER BY cursor",
            (namespace,),
        ).fetchall()
    return [(int(c), str(t), str(k)) for c, t, k in rows]


class ReconnectingSubscriber(threading.Thread):
    """Reads WatchChanges in sessions of a random number of messages, each resumed after the last cursor
    received (of a change or a heartbeat), until told the head to reach and it got there."""

    def __init__(self, channel: grpc.Channel, namespace: str, seed: int) -> None:
        super().__init__(daemon=True)
        self.stub = change_feed_service_pb2_grpc.ChangeFeedServiceStub(channel)
        self.namespace = namespace
        self.random = random.Random(seed)
        self.received: list[tuple[int, str, str]] = []
        self.cursor = 0
        self.sessions = 0
        self.target: int | None = None
        self.error: BaseException | None = None

    def done(self) -> bool:
        return self.target is not None and self.cursor >= self.target

    def run(self) -> None:
        try:
            while not self.done():
                self.session()
        except BaseException as error:  # noqa: BLE001 - reported by the test
            self.error = error

    def session(self) -> None:
        self.sessions += 1
        budget = self.random.randint(1, 300)
        stream = self.stub.WatchChanges(
            change_feed_service_pb2.WatchChangesRequest(
                namespace=self.namespace, resume_after=self.cursor, heartbeat_seconds=1
            ),
            timeout=60,
        )
        try:
            for response in stream:
                if response.HasField("change"):
                    change = response.change
                    self.received.append((change.cursor, change.event_type, change.item_key))
                    self.cursor = change.cursor
                else:
                    self.cursor = max(self.cursor, response.heartbeat.cursor)
                budget -= 1
                if budget <= 0 or self.done():
                    break
        except grpc.RpcError as error:
            if error.code() not in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE):
                raise
        finally:
            stream.cancel()


def test_every_committed_change_once_in_order_across_reconnects_and_a_sigkill(
    settings: Settings, query_channel: grpc.Channel, namespace: str
) -> None:
    address = f"127.0.0.1:{_free_port()}"
    ingest = _serve_ingest(settings, address)
    subscriber = ReconnectingSubscriber(query_channel, namespace, seed=OBSERVATIONS)
    try:
        assert wait_for_serving(address, timeout=300), "ingest_service did not become SERVING"
        subscriber.start()
        batches = [
            list(range(start, min(start + BATCH, OBSERVATIONS))) for start in range(0, OBSERVATIONS, BATCH)
        ]
        pending = iter(batches)
        lock = threading.Lock()
        written = [0]
        failures: list[BaseException] = []

        def load() -> None:
            with MemoryClient(ingest_addr=address, retry_seconds=300) as client:
                while True:
                    with lock:
                        batch = next(pending, None)
                    if batch is None:
                        return
                    try:
                        response = client.record_observations(
                            observation_service_pb2.RecordObservationsRequest(
                                observations=[_observation(namespace, i) for i in batch]
                            )
                        )
                    except BaseException as error:  # noqa: BLE001 - reported below
                        failures.append(error)
                        return
                    assert all(r.status in ("processed", "duplicate") for r in response.results), response
                    with lock:
                        written[0] += 1

        loaders = [threading.Thread(target=load, daemon=True) for _ in range(2)]
        for loader in loaders:
            loader.start()
        while written[0] < len(batches) // 3 and not failures:  # the kill lands mid-load
            time.sleep(0.05)
        restarted = written[0] < len(batches)
        ingest.send_signal(signal.SIGKILL)
        ingest.wait(timeout=60)
        ingest = _serve_ingest(settings, address)
        for loader in loaders:
            loader.join(timeout=600)
        assert not failures, failures
        assert written[0] == len(batches)
        target = subscriber.target = _head(settings, namespace)
        subscriber.join(timeout=300)
        assert not subscriber.is_alive(), (
            f"the subscriber is stuck at {subscriber.cursor} of {subscriber.target}"
        )
        assert subscriber.error is None, subscriber.error
    finally:
        if ingest.poll() is None:
            ingest.kill()
        ingest.wait(timeout=60)
        subscriber.target = 0  # ends the subscriber if the test failed before it finished

    received = subscriber.received
    cursors = [cursor for cursor, _, _ in received]
    assert cursors == list(range(1, target + 1)), "every cursor once, in order, no gap"
    assert received == _outbox(settings, namespace), "the stream equals the outbox"
    assert subscriber.sessions > 3, "the subscriber reconnected several times"
    assert restarted, "the ingest service was killed and started again mid-load"
    with psycopg.connect(settings.database_url) as conn:
        stored = {
            str(row[0])
            for row in conn.execute(
                sql.SQL("SELECT observation_id FROM {} WHERE namespace = %s").format(
                    sql.Identifier(settings.observations_table)
                ),
                (namespace,),
            )
        }
        facts = {
            str(row[0])
            for row in conn.execute("SELECT fact_id FROM facts WHERE namespace = %s", (namespace,))
        }
    recorded = [key for _, kind, key in received if kind == "observation.recorded"]
    assert len(stored) == OBSERVATIONS
    assert sorted(recorded) == sorted(stored), "one observation.recorded per stored observation"
    created = [key for _, kind, key in received if kind == "fact.created"]
    assert sorted(created) == sorted(facts), "one fact.created per stored fact"


def _insert_observation(conn: psycopg.Connection[Any], settings: Settings, namespace: str, key: str) -> None:
    conn.execute(
        sql.SQL(
            "INSERT INTO {} (observation_id, namespace, source_system, source_stream, kind, occurred_at, status)"
            " VALUES (%s, %s, 'feed-test', 'raw', 'note', now(), 'processed')"
        ).format(sql.Identifier(settings.observations_table)),
        (key, namespace),
    )


def _drain(channel: grpc.Channel, namespace: str, after: int = 0, **filters: Any) -> list[Any]:
    """The changes after ``after`` up to the first heartbeat (every committed one is replayed before it)."""
    stub = change_feed_service_pb2_grpc.ChangeFeedServiceStub(channel)
    changes = []
    stream = stub.WatchChanges(
        change_feed_service_pb2.WatchChangesRequest(
            namespace=namespace, resume_after=after, **{"heartbeat_seconds": 1, **filters}
        ),
        timeout=60,
    )
    for response in stream:
        if response.HasField("heartbeat"):
            stream.cancel()
            break
        changes.append(response.change)
    return changes


def test_rolled_back_writes_emit_nothing(
    settings: Settings, database: Database, query_channel: grpc.Channel, namespace: str
) -> None:
    with database.connection() as conn:
        _insert_observation(conn, settings, namespace, f"{namespace}-committed")
    with pytest.raises(RuntimeError), database.connection() as conn:
        _insert_observation(conn, settings, namespace, f"{namespace}-rolled-back")
        raise RuntimeError("the write fails after its statement")
    with database.connection() as conn:
        _insert_observation(conn, settings, namespace, f"{namespace}-outer")
        with pytest.raises(RuntimeError), conn.transaction():
            _insert_observation(conn, settings, namespace, f"{namespace}-savepoint")
            raise RuntimeError("the savepoint rolls back")
        _insert_observation(conn, settings, namespace, f"{namespace}-after-savepoint")
    changes = _drain(query_channel, namespace)
    assert [(c.cursor, c.event_type, c.item_key) for c in changes] == [
        (1, "observation.recorded", f"{namespace}-committed"),
        (2, "observation.recorded", f"{namespace}-outer"),
        (3, "observation.recorded", f"{namespace}-after-savepoint"),
    ]
    with database.connection() as conn:
        pending = conn.execute("SELECT count(*) FROM change_feed_pending").fetchone()
    assert pending == (0,), "no transaction left a numbering behind"


def test_a_resume_older_than_the_retention_fails_with_the_oldest_cursor_kept(
    settings: Settings, database: Database, query_channel: grpc.Channel, namespace: str
) -> None:
    with database.connection() as conn:
        for index in range(5):
            _insert_observation(conn, settings, namespace, f"{namespace}-{index}")
    pruned = ChangeOutbox(database).prune(
        before=datetime(2000, 1, 1, tzinfo=UTC), max_events=2, namespace=namespace
    )
    assert pruned == 3
    with pytest.raises(grpc.RpcError) as raised:
        _drain(query_channel, namespace, after=1)
    failure = rpc_failure(raised.value)
    assert failure.code == grpc.StatusCode.FAILED_PRECONDITION
    assert failure.reason == "CURSOR_EXPIRED"
    assert failure.metadata["oldest_cursor"] == "4"
    assert [c.cursor for c in _drain(query_channel, namespace, after=3)] == [4, 5]
    assert [c.cursor for c in _drain(query_channel, namespace, after=0)] == [4, 5], (
        "0 starts at the oldest kept"
    )


def test_a_service_reacts_to_a_superseded_fact_through_the_filters(
    ingest_channel: grpc.Channel, query_channel: grpc.Channel, namespace: str
) -> None:
    facts = fact_service_pb2_grpc.FactServiceStub(ingest_channel)

    def assert_fact(owner: str, start: str, supersedes: str = "") -> str:
        request = json_format.ParseDict(
            {
                "namespace": namespace,
                "facts": [
                    {
                        "subject": "customer:acme",
                        "predicate": "ACCOUNT_MANAGER",
                        "object": f"person:{owner}",
                        "valid_from": start,
                        "supersedes": supersedes,
                    }
                ],
            },
            fact_service_pb2.AssertFactsRequest(),
        )
        return str(facts.AssertFacts(request, timeout=60).results[0].fact_id)

    first = assert_fact("anna", "2024-01-01T00:00:00Z")
    second = assert_fact("boris", "2024-06-01T00:00:00Z", supersedes=first)
    assert_fact("other", "2024-01-01T00:00:00Z")  # created and in conflict, not superseded: filtered out
    superseded = _drain(
        query_channel, namespace, event_types=["fact.superseded"], predicates=["ACCOUNT_MANAGER"]
    )
    assert [(c.event_type, c.item_key) for c in superseded] == [("fact.superseded", first)]
    payload = json_format.MessageToDict(superseded[0].payload)
    assert payload["superseded_by"] == second
    assert payload["object"] == "person:anna" and payload["subject"] == "customer:acme"
    assert payload["valid_to"].startswith("2024-06-01")
    assert superseded[0].consistency_token.startswith("ct1-")
    families = _drain(query_channel, namespace, event_types=["fact.*"])
    assert {c.event_type for c in families} == {"fact.created", "fact.superseded", "fact.conflict_flagged"}
    by_prefix = _drain(query_channel, namespace, key_prefixes=["person:bo"])
    assert {c.item_key for c in by_prefix} == {"person:boris"}


def test_bad_requests_answer_invalid_argument_with_field_violations(query_channel: grpc.Channel) -> None:
    with pytest.raises(grpc.RpcError) as raised:
        _drain(query_channel, "", after=-1, event_types=["fact superseded"], heartbeat_seconds=301)
    failure = rpc_failure(raised.value)
    assert failure.code == grpc.StatusCode.INVALID_ARGUMENT
    assert {v.field for v in failure.violations} == {
        "namespace",
        "resume_after",
        "event_types[0]",
        "heartbeat_seconds",
    }


def test_cursor_numbering_is_commit_ordered_under_concurrent_writers(
    settings: Settings, database: Database, namespace: str
) -> None:
    """Two transactions of one namespace: the one that records first but commits last gets the higher
    cursors (numbered at commit), so a reader that saw the first commit's cursor never sees a smaller one."""
    early = psycopg.connect(settings.database_url)
    try:
        _insert_observation(early, settings, namespace, f"{namespace}-recorded-first")
        with database.connection() as conn:
            _insert_observation(conn, settings, namespace, f"{namespace}-committed-first")
        assert _outbox(settings, namespace) == [(1, "observation.recorded", f"{namespace}-committed-first")]
        early.commit()
    finally:
        early.close()
    assert _outbox(settings, namespace) == [
        (1, "observation.recorded", f"{namespace}-committed-first"),
        (2, "observation.recorded", f"{namespace}-recorded-first"),
    ]


def test_iter_changes_resumes_across_a_restart_of_the_query_service_and_cb_watch_prints_them(
    settings: Settings, database: Database, namespace: str
) -> None:
    from typer.testing import CliRunner

    from memory_service_tools.cli.app import app
    from query_service.main import create_query_host

    port = _free_port()
    host = create_query_host(settings, address=f"127.0.0.1:{port}", metrics_port=0)
    host.start()
    received: list[int] = []
    resumed: list[tuple[int, str]] = []
    with database.connection() as conn:
        for index in range(3):
            _insert_observation(conn, settings, namespace, f"{namespace}-a{index}")
    try:
        assert wait_for_serving(f"127.0.0.1:{port}", timeout=120)
        with MemoryClient(query_addr=f"127.0.0.1:{port}") as client:
            changes = client.iter_changes(
                namespace, heartbeat_seconds=1, on_resume=lambda cursor, code: resumed.append((cursor, code))
            )
            received += [next(changes).cursor for _ in range(3)]
            host.stop(0)
            with database.connection() as conn:
                for index in range(3):
                    _insert_observation(conn, settings, namespace, f"{namespace}-b{index}")
            host = create_query_host(settings, address=f"127.0.0.1:{port}", metrics_port=0)
            host.start()
            received += [next(changes).cursor for _ in range(3)]
            changes.close()
    finally:
        host.stop(0)
    assert received == [1, 2, 3, 4, 5, 6], "every change once across the restart"
    assert resumed and resumed[0][0] == 3, "resumed after the last cursor received"

    query = create_query_host(settings, address="127.0.0.1:0", metrics_port=0)
    query.start()
    try:
        assert wait_for_serving(f"127.0.0.1:{query.port}", timeout=120)
        result = CliRunner().invoke(
            app,
            [
                "--query-addr",
                f"127.0.0.1:{query.port}",
                "watch",
                "-n",
                namespace,
                "--resume-after",
                "4",
                "--limit",
                "2",
                "--json",
            ],
        )
    finally:
        query.stop(0)
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert [(line["cursor"], line["itemKey"]) for line in lines] == [
        ("5", f"{namespace}-b1"),
        ("6", f"{namespace}-b2"),
    ]


def test_redaction_purge_close_retain_and_delete_emit_their_events(
    ingest_channel: grpc.Channel, query_channel: grpc.Channel, namespace: str
) -> None:
    """The write paths beyond recording: each change arrives as its event type, with what it changed."""
    from google.protobuf import timestamp_pb2
    from memory_service_grpc_client.memory.v1 import (
        document_service_pb2,
        document_service_pb2_grpc,
        observation_service_pb2_grpc,
    )

    observations = observation_service_pb2_grpc.ObservationServiceStub(ingest_channel)
    results = observations.RecordObservations(
        observation_service_pb2.RecordObservationsRequest(
            observations=[_observation(namespace, i) for i in range(2)]
        ),
        timeout=60,
    ).results
    first, second = results[0].observation_id, results[1].observation_id
    observations.RedactObservation(
        observation_service_pb2.RedactObservationRequest(
            namespace=namespace, observation_id=first, reason="gdpr"
        ),
        timeout=60,
    )
    observations.PurgeObservation(
        observation_service_pb2.PurgeObservationRequest(
            namespace=namespace, observation_id=second, reason="gdpr"
        ),
        timeout=60,
    )
    facts = fact_service_pb2_grpc.FactServiceStub(ingest_channel)
    asserted = facts.AssertFacts(
        json_format.ParseDict(
            {
                "namespace": namespace,
                "facts": [
                    {"subject": "service:x", "predicate": "OWNED_BY", "object": "team:y", "valid_from": WHEN}
                ],
            },
            fact_service_pb2.AssertFactsRequest(),
        ),
        timeout=60,
    ).results[0]
    facts.CloseFact(
        fact_service_pb2.CloseFactRequest(
            namespace=namespace,
            fact_id=asserted.fact_id,
            valid_to=timestamp_pb2.Timestamp(seconds=1735689600),
        ),
        timeout=60,
    )
    documents = document_service_pb2_grpc.DocumentServiceStub(ingest_channel)
    documents.Retain(
        document_service_pb2.RetainRequest(
            namespace=namespace, natural_key="doc:runbook", content="# Runbook\n\nSteps."
        ),
        timeout=120,
    )
    documents.DeleteNode(
        document_service_pb2.DeleteNodeRequest(
            namespace=namespace, natural_key="doc:runbook", reason="obsolete"
        ),
        timeout=60,
    )
    changes = _drain(query_channel, namespace)
    seen = [(c.event_type, c.item_key) for c in changes]
    assert [c.cursor for c in changes] == list(range(1, len(changes) + 1))
    for expected in [
        ("observation.recorded", first),
        ("observation.redacted", first),
        ("observation.purged", second),
        ("fact.evidence_lost", _fact_of(changes, "service:s1")),
        ("fact.created", asserted.fact_id),
        ("fact.closed", asserted.fact_id),
        ("document.retained", "doc:runbook"),
        ("node.deleted", "doc:runbook"),
    ]:
        assert expected in seen, (expected, seen)
    assert seen.index(("observation.recorded", first)) < seen.index(("observation.redacted", first))
    closed = next(c for c in changes if c.event_type == "fact.closed")
    assert json_format.MessageToDict(closed.payload)["valid_to"].startswith("2025-01-01")
    redacted = next(c for c in changes if c.event_type == "observation.redacted")
    assert json_format.MessageToDict(redacted.payload)["reason"] == "gdpr"


def _fact_of(changes: list[Any], subject: str) -> str:
    """The fact_id of the first fact created about ``subject``."""
    return next(c.item_key for c in changes if c.event_type == "fact.created" and c.subject_key == subject)


def test_a_stream_on_a_read_replica_gets_every_change_once_in_order(
    settings: Settings, database: Database, namespace: str, replica_url: str  # noqa: F811 - the fixture
) -> None:
    """NOTIFY reaches the primary only and may come before the replica replayed the commit: the stream's
    poll finds the changes anyway, in order."""
    with replica_query(settings, replica_url) as channel:
        subscriber = ReconnectingSubscriber(channel, namespace, seed=7)
        subscriber.start()
        for batch in range(5):
            with database.connection() as conn:
                for index in range(20):
                    _insert_observation(conn, settings, namespace, f"{namespace}-{batch}-{index}")
        target = subscriber.target = _head(settings, namespace)
        subscriber.join(timeout=120)
        assert not subscriber.is_alive() and subscriber.error is None, subscriber.error
    assert [c for c, _, _ in subscriber.received] == list(range(1, target + 1))
