"""What the change feed tests share: an ingest service run as a process, observations to load, the outbox
and its head as the database holds them, a subscriber that reconnects at random moments, and a drain of
WatchChanges up to its first heartbeat."""

from __future__ import annotations

import random
import subprocess
import threading
from typing import Any

import grpc
import psycopg
from google.protobuf import json_format
from psycopg import sql

from common.kernel.config import Settings
from memory_service_grpc_client.memory.v1 import change_feed_service_pb2
from memory_service_grpc_client.memory.v1 import change_feed_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import knowledge_pb2
from tests.e2e.service_processes import cb_serve

WHEN = "2024-05-01T10:00:00Z"


def serve_ingest(settings: Settings, address: str) -> subprocess.Popen[bytes]:
    process: subprocess.Popen[bytes] = cb_serve(
        "ingest",
        settings,
        subprocess.DEVNULL,
        CB_INGEST_ADDR=address,
        CB_INGEST_METRICS_PORT="0",
        CB_SHUTDOWN_DRAIN_SECONDS="0",
        CB_SHUTDOWN_GRACE_SECONDS="2",
        CB_LOG_FORMAT="text",
    )
    return process


def load_observation(namespace: str, index: int) -> knowledge_pb2.Observation:
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


def feed_head(settings: Settings, namespace: str) -> int:
    with psycopg.connect(settings.database_url) as conn:
        row = conn.execute(
            "SELECT last_cursor FROM change_feed_heads WHERE namespace = %s", (namespace,)
        ).fetchone()
    return int(row[0]) if row else 0


def outbox_rows(settings: Settings, namespace: str) -> list[tuple[int, str, str]]:
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


def insert_observation(conn: psycopg.Connection[Any], settings: Settings, namespace: str, key: str) -> None:
    conn.execute(
        sql.SQL(
            "INSERT INTO {} (observation_id, namespace, source_system, source_stream, kind, occurred_at, status)"
            " VALUES (%s, %s, 'feed-test', 'raw', 'note', now(), 'processed')"
        ).format(sql.Identifier(settings.observations_table)),
        (key, namespace),
    )


def drain_changes(channel: grpc.Channel, namespace: str, after: int = 0, **filters: Any) -> list[Any]:
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
