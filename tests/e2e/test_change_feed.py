"""The change feed's delivery end to end (docs/how-to/change-feed.md): the outbox written by the real write
paths on the real database, ChangeFeedService.WatchChanges over a real channel.

* Exactly once by cursor: observations are loaded by two concurrent clients into an ingest service run as
  a process, which is killed with SIGKILL once mid-load and started again (the clients retry); a
  subscriber reconnects at random moments, each time resuming after the last cursor it received. It ends
  with every committed change once, in cursor order, equal to the outbox, and one
  ``observation.recorded`` per stored observation. ``CB_TEST_FEED_OBSERVATIONS`` sets the load (default
  5,000 observations in batches of 50: about 25 s on two shared cores).
* Cursors are numbered in commit order under concurrent writers.
* ``iter_changes`` resumes across a restart of the query service, and ``cb watch`` prints the changes.
* A stream on a read replica gets every change once, in order.

What is emitted (rollbacks, retention, filters, bad requests, each write path) is in
test_change_feed_emission.py.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import grpc
import psycopg
import pytest
from psycopg import sql

from common.kernel.config import Settings
from common.storage.database import Database
from memory_service_grpc_client import MemoryClient
from memory_service_grpc_client import wait_for_serving
from memory_service_grpc_client.memory.v1 import observation_service_pb2
from tests.e2e.change_feed_helpers import ReconnectingSubscriber
from tests.e2e.change_feed_helpers import feed_head
from tests.e2e.change_feed_helpers import insert_observation
from tests.e2e.change_feed_helpers import load_observation
from tests.e2e.change_feed_helpers import outbox_rows
from tests.e2e.change_feed_helpers import serve_ingest
from tests.e2e.mcp_http import free_port
from tests.e2e.test_replica_reads import replica_query  # noqa: F401 - the replica's fixture
from tests.e2e.test_replica_reads import replica_url  # noqa: F401 - the replica's fixture

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]


OBSERVATIONS = int(os.environ.get("CB_TEST_FEED_OBSERVATIONS", "5000"))


BATCH = 50


def test_every_committed_change_once_in_order_across_reconnects_and_a_sigkill(
    settings: Settings, query_channel: grpc.Channel, namespace: str
) -> None:
    address = f"127.0.0.1:{free_port()}"
    ingest = serve_ingest(settings, address)
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
                                observations=[load_observation(namespace, i) for i in batch]
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
        ingest = serve_ingest(settings, address)
        for loader in loaders:
            loader.join(timeout=600)
        assert not failures, failures
        assert written[0] == len(batches)
        target = subscriber.target = feed_head(settings, namespace)
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
    assert received == outbox_rows(settings, namespace), "the stream equals the outbox"
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


def test_cursor_numbering_is_commit_ordered_under_concurrent_writers(
    settings: Settings, database: Database, namespace: str
) -> None:
    """Two transactions of one namespace: the one that records first but commits last gets the higher
    cursors (numbered at commit), so a reader that saw the first commit's cursor never sees a smaller one."""
    early = psycopg.connect(settings.database_url)
    try:
        insert_observation(early, settings, namespace, f"{namespace}-recorded-first")
        with database.connection() as conn:
            insert_observation(conn, settings, namespace, f"{namespace}-committed-first")
        assert outbox_rows(settings, namespace) == [(1, "observation.recorded", f"{namespace}-committed-first")]
        early.commit()
    finally:
        early.close()
    assert outbox_rows(settings, namespace) == [
        (1, "observation.recorded", f"{namespace}-committed-first"),
        (2, "observation.recorded", f"{namespace}-recorded-first"),
    ]


def test_iter_changes_resumes_across_a_restart_of_the_query_service_and_cb_watch_prints_them(
    settings: Settings, database: Database, namespace: str
) -> None:
    from typer.testing import CliRunner

    from memory_service_tools.cli.app import app
    from query_service.main import create_query_host

    port = free_port()
    host = create_query_host(settings, address=f"127.0.0.1:{port}", metrics_port=0)
    host.start()
    received: list[int] = []
    resumed: list[tuple[int, str]] = []
    with database.connection() as conn:
        for index in range(3):
            insert_observation(conn, settings, namespace, f"{namespace}-a{index}")
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
                    insert_observation(conn, settings, namespace, f"{namespace}-b{index}")
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
                    insert_observation(conn, settings, namespace, f"{namespace}-{batch}-{index}")
        target = subscriber.target = feed_head(settings, namespace)
        subscriber.join(timeout=120)
        assert not subscriber.is_alive() and subscriber.error is None, subscriber.error
    assert [c for c, _, _ in subscriber.received] == list(range(1, target + 1))
