"""A vault run whose database connections die mid-run (the shared database stays up: only the backends
of this test's own ingest service, found by their ``application_name``, are terminated) answers
UNAVAILABLE, retryable, never INTERNAL; running it again projects every document, nothing is lost."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import psycopg
import pytest
from google.protobuf.message import Message

from common.kernel.config import Settings
from common.storage.database import Database
from ingest_service.main import create_ingest_host
from memory_service_grpc_client import rpc_failure
from memory_service_grpc_client import wait_for_serving
from memory_service_grpc_client.memory.v1 import vault_service_pb2_grpc
from memory_service_tools.cli.vault_commands import vault_messages
from memory_service_tools.vault_source import directory_documents
from tests.e2e.vault_helpers import ingest
from tests.e2e.vault_helpers import statuses
from tests.e2e.vault_helpers import write
from tests.waiting import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]


def _running_run(database: Database, namespace: str) -> str | None:
    with database.connection() as conn:
        row = conn.execute(
            "SELECT run_id FROM vault_runs WHERE namespace = %s AND status = 'running'", (namespace,)
        ).fetchone()
    return str(row[0]) if row else None


def _projected_by(database: Database, namespace: str, run_id: str) -> int:
    with database.connection() as conn:
        row = conn.execute(
            "SELECT count(*) FROM vault_documents WHERE namespace = %s AND seen_run = %s", (namespace, run_id)
        ).fetchone()
    return int(row[0]) if row else 0


def _terminate(database: Database, application_name: str) -> int:
    """Terminates the backends of ``application_name`` (this test's service only); returns how many."""
    with database.connection() as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE application_name = %s AND pid <> pg_backend_pid()",
            (application_name,),
        ).fetchall()
    return len(rows)


def test_killed_connections_mid_run_answer_unavailable_and_lose_nothing(
    tmp_path: Path, settings: Settings, database: Database, namespace: str
) -> None:
    application_name = f"vault-outage-{uuid.uuid4().hex[:12]}"
    own = settings.model_copy(
        update={
            "database_url": psycopg.conninfo.make_conninfo(
                settings.database_url, application_name=application_name
            )
        }
    )
    paths = [f"notes/{number:02}.md" for number in range(6)]
    for number, path in enumerate(paths):
        write(tmp_path, path, f"# Note {number}\n\nText of note {number}, see [[notes/00]].\n")
    messages = list(vault_messages(directory_documents(tmp_path), namespace))
    release = threading.Event()

    def held_until_killed() -> Iterator[Message]:
        yield from messages[:-1]  # the header and the documents
        release.wait(300)
        yield messages[-1]  # the end message, after the service lost its connections

    host = create_ingest_host(own, address="127.0.0.1:0", metrics_port=0)
    host.start()
    try:
        address = f"127.0.0.1:{host.port}"
        assert wait_for_serving(address, timeout=120)
        with grpc.insecure_channel(address) as channel:
            stub = vault_service_pb2_grpc.VaultServiceStub(channel)
            call = stub.IngestVault.future(held_until_killed(), timeout=600)
            try:
                run_id = eventually(lambda: _running_run(database, namespace), "the run started")
                eventually(
                    lambda: _projected_by(database, namespace, run_id) == len(paths),
                    "the documents projected",
                )
                assert _terminate(database, application_name) >= 2  # the run's lock and the pool
            finally:
                release.set()
            with pytest.raises(grpc.RpcError) as broken:
                call.result(timeout=300)
            assert broken.value.code() == grpc.StatusCode.UNAVAILABLE, broken.value.details()
            assert rpc_failure(broken.value).reason in {"DATABASE_UNAVAILABLE", "VAULT_LOCK_LOST"}
            # The same service recovers (the pool replaces the dead connections); the run again finds
            # every document, as the broken run left it or anew: nothing lost.
            for _attempt in range(5):
                try:
                    again = ingest(channel, tmp_path, namespace)
                    break
                except grpc.RpcError as error:
                    if error.code() != grpc.StatusCode.UNAVAILABLE:
                        raise
            else:
                pytest.fail("the service never recovered from its killed connections")
    finally:
        host.stop(5)
    assert sorted(statuses(again)) == paths and set(statuses(again).values()) <= {"unchanged", "new"}
    assert again.swept and not again.unresolved_links
    with database.connection() as conn:
        keys = conn.execute(
            "SELECT natural_key FROM vault_documents WHERE namespace = %s ORDER BY natural_key", (namespace,)
        ).fetchall()
        chunks = conn.execute(
            "SELECT count(DISTINCT node_key) FROM chunks WHERE namespace = %s", (namespace,)
        ).fetchone()
    assert [str(k) for (k,) in keys] == [f"doc:{p[:-3]}" for p in paths]
    assert chunks is not None and chunks[0] == len(paths)
