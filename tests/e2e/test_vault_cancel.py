"""A vault run the client cancels (a real cancelled stream; `cb ingest` interrupted by Ctrl-C)
ends as CANCELLED on the server, journaled ``interrupted``, and sweeps nothing."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.message import Message

from common.storage.database import Database
from memory_service_grpc_client.memory.v1 import vault_service_pb2_grpc
from memory_service_tools.cli.vault_commands import vault_messages
from memory_service_tools.vault_source import directory_documents
from tests.database_rows import fetch_rows
from tests.e2e.vault_helpers import ingest
from tests.e2e.vault_helpers import write
from tests.waiting import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]


def _runs(database: Database, namespace: str) -> list[tuple[str, str]]:
    """(run_id, status) of the namespace's vault runs, oldest first."""
    with database.connection() as conn:
        rows = conn.execute(
            "SELECT run_id, status FROM vault_runs WHERE namespace = %s ORDER BY started_at", (namespace,)
        ).fetchall()
    return [(str(run), str(status)) for run, status in rows]


def _keys(database: Database, namespace: str) -> dict[str, str]:
    """natural key -> seen_run of the namespace's vault documents."""
    query = "SELECT natural_key, seen_run FROM vault_documents WHERE namespace = %s"
    rows = fetch_rows(database, query, namespace)
    return {str(key): str(run) for key, run in rows}


def _cancelled_logged(caplog: pytest.LogCaptureFixture) -> bool:
    return any(
        r.name == "memory.rpc" and "IngestVault" in r.getMessage() and "code=CANCELLED" in r.getMessage()
        for r in caplog.records
    )


def test_a_cancelled_stream_ends_cancelled_and_sweeps_nothing(
    tmp_path: Path,
    ingest_channel: grpc.Channel,
    database: Database,
    namespace: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="memory.rpc")
    for name in ("a.md", "b.md", "c.md"):
        write(tmp_path, name, f"# {name}\n\nFirst text.\n")
    ingest(ingest_channel, tmp_path, namespace)
    (tmp_path / "c.md").unlink()  # a complete run would sweep doc:c
    write(tmp_path, "a.md", "# a.md\n\nEdited text.\n")  # projected as soon as it arrives
    messages = list(vault_messages(directory_documents(tmp_path), namespace))
    release = threading.Event()

    def held_open() -> Iterator[Message]:
        yield from messages[:2]  # the header and the documents; the end message never comes
        release.wait(300)

    stub = vault_service_pb2_grpc.VaultServiceStub(ingest_channel)
    call = stub.IngestVault.future(held_open(), timeout=600)
    try:
        running = eventually(
            lambda: next((run for run, status in _runs(database, namespace) if status == "running"), None),
            "the second run started",
        )
        eventually(lambda: _keys(database, namespace).get("doc:a") == running, "a.md projected")
        assert call.cancel()
    finally:
        release.set()
    eventually(lambda: dict(_runs(database, namespace))[running] != "running", "the run ended")
    assert dict(_runs(database, namespace))[running] == "interrupted"
    assert "doc:c" in _keys(database, namespace)  # nothing swept
    eventually(lambda: _cancelled_logged(caplog), "the server logged IngestVault code=CANCELLED")
    assert not any(
        "IngestVault" in r.getMessage() and "code=UNAVAILABLE" in r.getMessage() for r in caplog.records
    )


def test_ctrl_c_cancels_cb_ingest(
    tmp_path: Path,
    ingest_host: Any,
    database: Database,
    namespace: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """`cb ingest` of a vault of many small files, interrupted by SIGINT once the server projected one:
    exit 130 with a message saying the run was cancelled and nothing swept; the server saw a cancelled
    call and stopped at the next document."""
    caplog.set_level(logging.INFO, logger="memory.rpc")
    root = tmp_path / "vault"
    for number in range(300):
        write(root, f"notes/{number:03}.md", f"# Note {number}\n\nA short note, number {number}.\n")
    cb = Path(sys.executable).with_name("cb")
    process = subprocess.Popen(
        [
            str(cb),
            "--ingest-addr",
            f"127.0.0.1:{ingest_host.port}",
            "ingest",
            str(root),
            "--namespace",
            namespace,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    try:
        eventually(lambda: _keys(database, namespace), "the first document projected")
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130, stderr
    assert "interrupted: the run was cancelled and nothing was swept" in " ".join(stderr.split())
    (run,) = _runs(database, namespace)
    eventually(
        lambda: _runs(database, namespace) == [(run[0], "interrupted")], "the run journaled interrupted"
    )
    eventually(lambda: _cancelled_logged(caplog), "the server logged IngestVault code=CANCELLED")
