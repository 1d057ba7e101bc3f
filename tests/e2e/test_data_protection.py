"""Erasure of a memory user with summaries, erasure killed with SIGKILL mid-way, erasure while writers name
the subject, and the CLI's data protection commands: real servers, real database. Legal holds are in
``test_legal_holds.py``, retention in ``test_retention.py``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from datetime import UTC
from datetime import datetime
from typing import Any

import grpc
import psycopg
import pytest
from google.protobuf import json_format
from typer.testing import CliRunner

from common.kernel.config import Settings
from memory_service_grpc_client.memory.v1 import data_protection_service_pb2 as dp
from memory_service_grpc_client.memory.v1 import memory_service_pb2
from memory_service_grpc_client.memory.v1 import memory_service_pb2_grpc
from memory_service_tools.cli.app import app
from tests.e2e.data_protection_helpers import add_memories
from tests.e2e.data_protection_helpers import debian_slice
from tests.e2e.data_protection_helpers import memory_namespace
from tests.e2e.data_protection_helpers import observation_of
from tests.e2e.data_protection_helpers import record_all
from tests.e2e.data_protection_helpers import residue

pytestmark = pytest.mark.e2e


def test_erasing_a_memory_user_removes_memories_and_the_summaries_that_used_them(
    settings: Settings, ingest_channel: grpc.Channel, protection: Any
) -> None:
    user, other = "u-" + uuid.uuid4().hex[:10], "u-" + uuid.uuid4().hex[:10]
    name = "Dana Whitfield-" + uuid.uuid4().hex[:6]  # a name no other run wrote
    ids = add_memories(
        ingest_channel,
        user,
        [
            f"{name} prefers morning meetings before nine.",
            f"{name} works on the billing migration this quarter.",
            f"{name} asked for invoices in PDF.",
        ],
    )
    kept = add_memories(ingest_channel, other, ["The other user likes tea."])
    stub = memory_service_pb2_grpc.MemoryServiceStub(ingest_channel)
    summary = stub.SummarizeMemories(
        memory_service_pb2.SummarizeMemoriesRequest(memory_ids=ids[:2], user_id=user), timeout=120
    ).summary
    namespace = memory_namespace(settings, user)
    receipt = protection.EraseSubject(
        dp.EraseSubjectRequest(namespace=namespace, memory_user=user, confirm=True), timeout=300
    ).receipt
    assert receipt.counts["memories_deleted"] == 4  # three originals and their summary
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM memories WHERE user_id = %s", (user,)).fetchone()[0] == 0
        assert (
            conn.execute("SELECT count(*) FROM memories WHERE memory_id = %s", (kept[0],)).fetchone()[0] == 1
        )
        for value in (name, user, summary.memory_id, *ids):
            assert residue(conn, settings.graph_name, value) == {}, value


_KILLABLE = """
import sys
from common.kernel.config import Settings
from common.storage.database import Database
from ingest_service.data_protection.erasure import EraseInput, SubjectEraser
from ingest_service.documents.node_deletion import NodeDeleter
from ingest_service.observations.removal import ObservationRemover
import ingest_service.data_protection.erasure as erasure

database = Database(Settings())
original = erasure.SubjectEraser._delete_node
calls = []
def slow(self, conn, namespace, key, reason):
    calls.append(key)
    if len(calls) == 3:
        print("MIDWAY", flush=True)
        import time; time.sleep(600)
    return original(self, conn, namespace, key, reason)
erasure.SubjectEraser._delete_node = slow
eraser = SubjectEraser(database, ObservationRemover(database), NodeDeleter(database))
eraser.erase(EraseInput(namespace=sys.argv[1], node_key=sys.argv[2], confirm=True))
print("DONE", flush=True)
"""


def test_erasure_killed_midway_changes_nothing_and_a_retry_completes(
    settings: Settings, namespace: str, ingest_channel: grpc.Channel, protection: Any
) -> None:
    observations, subject_key, person = debian_slice(namespace, 200)
    record_all(ingest_channel, observations)
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        before = residue(conn, settings.graph_name, person)
    assert before
    child = subprocess.Popen(
        [sys.executable, "-c", _KILLABLE, namespace, subject_key],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "CB_DATABASE_URL": settings.database_url},
        cwd=os.getcwd(),
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()  # the transaction has redacted observations and deleted nodes
        assert line.strip() == "MIDWAY", line
        os.kill(child.pid, signal.SIGKILL)
        child.wait(30)
    finally:
        if child.poll() is None:
            child.kill()
    deadline = time.monotonic() + 30
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        while time.monotonic() < deadline:  # the server notices the dead client and rolls back
            if residue(conn, settings.graph_name, person) == before:
                break
            time.sleep(0.5)
        assert residue(conn, settings.graph_name, person) == before  # all or nothing: nothing
        assert (
            conn.execute(
                "SELECT count(*) FROM erasure_receipts WHERE namespace = %s", (namespace,)
            ).fetchone()[0]
            == 0
        )
    receipt = protection.EraseSubject(
        dp.EraseSubjectRequest(namespace=namespace, node_key=subject_key, confirm=True), timeout=600
    ).receipt
    assert receipt.counts["observations_redacted"] > 0
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        assert residue(conn, settings.graph_name, person) == {}


def test_erasure_while_writers_name_the_subject_ends_without_deadlock_or_residue(
    settings: Settings, namespace: str, ingest_channel: grpc.Channel, protection: Any
) -> None:
    observations, subject_key, person = debian_slice(namespace, 200)
    record_all(ingest_channel, observations)
    stop = threading.Event()
    errors: list[BaseException] = []
    written = [0]

    def writer(worker: int) -> None:
        n = 0
        while not stop.is_set():
            n += 1
            item = observation_of(
                namespace, 10_000 * worker + n, "note", datetime.now(UTC), f"{person} uploaded again"
            )
            item["actor"] = {"type": "person", "id": person}
            try:
                record_all(ingest_channel, [item])
                written[0] += 1
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
                return

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(3)]
    for thread in threads:
        thread.start()
    time.sleep(1.0)
    started = time.monotonic()
    try:
        first = protection.EraseSubject(
            dp.EraseSubjectRequest(namespace=namespace, node_key=subject_key, confirm=True), timeout=120
        ).receipt
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
    took = time.monotonic() - started
    assert not errors, errors[:1]
    assert not any(t.is_alive() for t in threads)
    assert first.counts["observations_redacted"] > 0 and took < 120
    # What the writers committed after the erasure is new data; a second erasure takes it, then none is left.
    protection.EraseSubject(
        dp.EraseSubjectRequest(namespace=namespace, node_key=subject_key, confirm=True), timeout=120
    )
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        assert residue(conn, settings.graph_name, person) == {}
    assert written[0] > 0


def test_the_cli_previews_erases_reads_the_receipt_holds_and_explains_retention(
    namespace: str, ingest_channel: grpc.Channel, ingest_host: Any, query_host: Any
) -> None:
    email = f"jo-{uuid.uuid4().hex[:6]}@example.net"
    record_all(ingest_channel, [observation_of(namespace, 1, "mail", datetime.now(UTC), f"mail from {email}")])
    base = ["--ingest-addr", f"127.0.0.1:{ingest_host.port}", "--query-addr", f"127.0.0.1:{query_host.port}"]
    runner = CliRunner()

    def cb(*args: str) -> str:
        result = runner.invoke(app, [*base, *args])
        assert result.exit_code == 0, result.output
        return result.output

    preview = cb("erase", "-n", namespace, "--value", email)
    assert "preview (nothing erased)" in preview and "observations_redacted" in preview
    assert "1" in preview.split("observations_redacted")[1].split("\n")[0]
    done = cb("erase", "-n", namespace, "--value", email, "--yes", "--json")
    receipt_id = json_format.Parse(done, dp.EraseSubjectResponse()).receipt.receipt_id
    assert email not in done
    assert receipt_id in cb("receipt", receipt_id, "-n", namespace)
    held = cb("hold", "set", "-n", namespace, "--reason", "case 7")
    hold_id = held.split()[0]
    assert hold_id in cb("hold", "list", "-n", namespace)
    cb("retention", "set", "observations", "--days", "30", "-n", namespace, "--selector", "mail")
    shown = cb("retention", "show", "-n", namespace)
    assert "observations/mail: kept 30 days" in shown and f"stopped by legal hold {hold_id}" in shown
    cb("hold", "lift", hold_id, "-n", namespace)
    assert "no retention rules" not in cb("retention", "show", "-n", namespace)
