"""The mass-deletion guard on the real docs vault (../shared/corpora/docs-vault), on snapshots and on the
memory expiry sweep: a bulk deletion of everything, or of more than ``CB_MASS_SWEEP_SHARE``, is refused
with FAILED_PRECONDITION (MASS_SWEEP_REFUSED, the counts in ErrorInfo metadata) and changes nothing, unless
the caller says so; an ordinary partial change still sweeps what it removed."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from google.protobuf import timestamp_pb2
from typer.testing import CliRunner

from common.storage.database import Database
from common.storage.vault_store import VaultStore
from ingest_service.validation.mass_deletion import MASS_SWEEP_REFUSED
from ingest_service.validation.mass_deletion import MassDeletionGuard
from memory_service_grpc_client import rpc_failure
from memory_service_grpc_client.memory.v1 import knowledge_pb2
from memory_service_grpc_client.memory.v1 import snapshot_service_pb2
from memory_service_grpc_client.memory.v1 import snapshot_service_pb2_grpc
from memory_service_tools.cli import app
from tests.conftest import CORPORA
from tests.e2e.vault_helpers import ingest

pytestmark = pytest.mark.e2e

VAULT = CORPORA / "docs-vault"
PACKAGES = 8  # one-file packages of the docs vault: real documents, a run embeds in seconds


def _docs_vault(root: Path) -> list[str]:
    """Copies the first `PACKAGES` one-file packages of the docs vault into ``root``; their paths."""
    packages = [p for p in sorted(VAULT.iterdir()) if p.is_dir() and len(list(p.rglob("*.md"))) == 1]
    assert len(packages) >= PACKAGES, "the docs vault has fewer one-file packages than the test needs"
    for package in packages[:PACKAGES]:
        shutil.copytree(package, root / package.name)
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*.md"))


def _state(database: Database, namespace: str) -> tuple[int, int, int]:
    """(vault documents journaled, chunks, audit events) of ``namespace``."""
    with database.connection() as conn:
        documents = len(VaultStore(database.settings).documents(conn, namespace))
        chunks = conn.execute("SELECT count(*) FROM chunks WHERE namespace = %s", (namespace,)).fetchone()
        deletes = conn.execute(
            "SELECT count(*) FROM graph_nodes WHERE namespace = %s AND node_type = 'audit_event'",
            (namespace,),
        ).fetchone()
    assert chunks is not None and deletes is not None
    return documents, int(chunks[0]), int(deletes[0])


def _refusal(error: grpc.RpcError) -> dict[str, str]:
    failure = rpc_failure(error)
    assert failure.code == grpc.StatusCode.FAILED_PRECONDITION, failure
    assert failure.reason == MASS_SWEEP_REFUSED
    return dict(failure.metadata)


def test_the_guard_judges_all_or_more_than_the_share() -> None:
    guard = MassDeletionGuard(0.5)
    assert guard.is_mass(4, 4) and guard.is_mass(1, 1) and guard.is_mass(3, 5)
    assert not guard.is_mass(2, 4) and not guard.is_mass(0, 4) and not guard.is_mass(1, 3)
    assert not MassDeletionGuard(0.5, floor=10).is_mass(5, 5) and MassDeletionGuard(0.5, floor=10).is_mass(
        10, 12
    )


def test_a_typo_folder_is_refused_the_flag_sweeps_a_partial_change_sweeps(
    tmp_path: Path, ingest_channel: grpc.Channel, ingest_host: Any, database: Database
) -> None:
    root = tmp_path / "docs-vault"
    paths = _docs_vault(root)
    namespace = "mass-sweep-" + uuid.uuid4().hex[:10]
    first = ingest(ingest_channel, root, namespace)
    assert first.counts.documents_new == PACKAGES and first.swept
    loaded = _state(database, namespace)
    assert loaded[0] == PACKAGES and loaded[1] > 0 and loaded[2] == 0

    # The typo: an empty folder would sweep every document. Refused, everything stays.
    empty = tmp_path / "typo"
    empty.mkdir()
    with pytest.raises(grpc.RpcError) as raised:
        ingest(ingest_channel, empty, namespace)
    assert _refusal(raised.value) == {
        "would_sweep": str(PACKAGES),
        "total": str(PACKAGES),
        "share": "0.5",
        "request_id": rpc_failure(raised.value).metadata["request_id"],
    }
    assert _state(database, namespace) == loaded
    # The dry run shows the same count and that it would be refused.
    dry = ingest(ingest_channel, empty, namespace, dry_run=True)
    assert dry.counts.documents_swept == PACKAGES and dry.sweep_refused and not dry.swept
    assert _state(database, namespace) == loaded

    # `cb ingest` on the typo: exit 1, the count, the flag named; the dry run says it would be refused.
    runner = CliRunner()
    address = ["--ingest-addr", f"127.0.0.1:{ingest_host.port}"]
    result = runner.invoke(app, [*address, "ingest", str(empty), "-n", namespace])
    said = " ".join(result.output.split())
    assert result.exit_code == 1 and f"would remove {PACKAGES} of {PACKAGES}" in said, said
    assert "--allow-mass-sweep" in said
    result = runner.invoke(app, [*address, "ingest", str(empty), "-n", namespace, "--dry-run"])
    said = " ".join(result.output.split())
    assert result.exit_code == 0 and f"{PACKAGES} swept" in said and "would be refused" in said, said
    assert _state(database, namespace) == loaded

    # A normal partial change (2 of 8 files removed) still sweeps them.
    for gone in paths[:2]:
        (root / gone).unlink()
    partial = ingest(ingest_channel, root, namespace)
    assert partial.swept and partial.counts.documents_swept == 2 and partial.counts.documents_unchanged == 6
    assert _state(database, namespace)[0] == PACKAGES - 2

    # More than half of what is left (4 of 6): refused; then allowed explicitly.
    for gone in paths[2:6]:
        (root / gone).unlink()
    before = _state(database, namespace)
    with pytest.raises(grpc.RpcError) as raised:
        ingest(ingest_channel, root, namespace)
    assert _refusal(raised.value)["would_sweep"] == "4" and _state(database, namespace) == before
    allowed = ingest(ingest_channel, root, namespace, allow_mass_sweep=True)
    assert allowed.swept and allowed.counts.documents_swept == 4
    assert _state(database, namespace)[0] == 2

    # The explicit flag on the empty folder sweeps everything (each deletion audited).
    result = runner.invoke(app, [*address, "ingest", str(empty), "-n", namespace, "--allow-mass-sweep"])
    assert result.exit_code == 0, result.output
    documents, chunks, deletes = _state(database, namespace)
    assert (documents, chunks, deletes) == (0, 0, PACKAGES)


def _facts(count: int, offset: int = 0) -> list[knowledge_pb2.FactAssertion]:
    return [
        json_format.ParseDict(
            {"subject": f"package:p{i}", "predicate": "DEPENDS_ON", "object": "package:libc6"},
            knowledge_pb2.FactAssertion(),
        )
        for i in range(offset, offset + count)
    ]


def _reconcile(
    channel: grpc.Channel, namespace: str, snapshot_id: str, day: int, facts: list[Any], **extra: Any
) -> Any:
    stub = snapshot_service_pb2_grpc.SnapshotServiceStub(channel)
    return stub.Reconcile(
        snapshot_service_pb2.ReconcileRequest(
            namespace=namespace,
            source="debian-archive",
            scope="suite:bookworm",
            snapshot_id=snapshot_id,
            snapshot_time=timestamp_pb2.Timestamp(seconds=1_767_225_600 + day * 86_400),
            facts=facts,
            **extra,
        ),
        timeout=60,
    )


def _open_facts(database: Database, namespace: str) -> int:
    with database.connection() as conn:
        row = conn.execute(
            "SELECT count(*) FROM facts WHERE namespace = %s AND valid_to IS NULL", (namespace,)
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_a_snapshot_closing_everything_of_its_scope_is_refused(
    ingest_channel: grpc.Channel, database: Database
) -> None:
    namespace = "mass-snap-" + uuid.uuid4().hex[:10]
    _reconcile(ingest_channel, namespace, "s1", 0, _facts(6))
    assert _open_facts(database, namespace) == 6
    # A partial drop (2 of 6) closes them.
    assert _reconcile(ingest_channel, namespace, "s2", 1, _facts(4)).counts.facts_closed == 2
    # A replacement of every fact by new ones leaves the scope as large: not a mass closing.
    assert _reconcile(ingest_channel, namespace, "s3", 2, _facts(4, offset=10)).counts.facts_closed == 4
    assert _open_facts(database, namespace) == 4
    # An empty snapshot (a broken export) would close everything: refused, nothing written or journaled.
    with pytest.raises(grpc.RpcError) as raised:
        _reconcile(ingest_channel, namespace, "s4", 3, [])
    assert _refusal(raised.value)["would_sweep"] == "4"
    assert _open_facts(database, namespace) == 4
    with pytest.raises(grpc.RpcError):  # more than half (3 of 4): refused as well
        _reconcile(ingest_channel, namespace, "s4", 3, _facts(1, offset=10))
    assert _open_facts(database, namespace) == 4
    closed = _reconcile(ingest_channel, namespace, "s4", 3, [], allow_mass_sweep=True)
    assert closed.counts.facts_closed == 4 and _open_facts(database, namespace) == 0
