"""`--dry-run` on real files of the docs vault (a few of its packages, copied to a temporary
folder): a dry run reports what the real run then does (documents new / changed / unchanged / swept, the
chunks they produce and the texts the model would embed, links) and writes nothing."""

from __future__ import annotations

import shutil
from pathlib import Path

import grpc
import pytest

from common.storage.database import Database
from memory_service_grpc_client.memory.v1 import vault_service_pb2
from tests.conftest import CORPORA
from tests.e2e.vault_helpers import ingest
from tests.e2e.vault_helpers import statuses

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1200)]

PACKAGES = ("git", "ms", "pyenv-virtualenv", "semver", "which")


def _state(database: Database, namespace: str) -> tuple[int, int, int]:
    """Chunks, vault documents journaled and vault runs of the namespace: what a dry run must not touch."""
    with database.connection() as conn:
        return tuple(  # type: ignore[return-value]
            int(conn.execute(statement, (namespace,)).fetchone()[0])
            for statement in (
                "SELECT count(*) FROM chunks WHERE namespace = %s",
                "SELECT count(*) FROM vault_documents WHERE namespace = %s",
                "SELECT count(*) FROM vault_runs WHERE namespace = %s",
            )
        )


def _report(response: vault_service_pb2.IngestVaultResponse) -> tuple[object, ...]:
    counts = response.counts
    return (
        statuses(response),
        {d.path: d.chunk_count for d in response.documents},
        list(response.swept_keys),
        counts.documents_new,
        counts.documents_changed,
        counts.documents_unchanged,
        counts.documents_swept,
        counts.chunks_written,
        counts.chunks_embedded,
        counts.links_resolved,
        counts.links_unresolved,
    )


def test_dry_run_reports_what_the_run_writes(
    tmp_path: Path, ingest_channel: grpc.Channel, database: Database, namespace: str
) -> None:
    root = tmp_path / "vault"
    for package in PACKAGES:
        shutil.copytree(CORPORA / "docs-vault" / package, root / package)
    dry = ingest(ingest_channel, root, namespace, dry_run=True)
    assert _state(database, namespace) == (0, 0, 0)
    assert dry.dry_run and not dry.swept and dry.counts.chunks_written > 20
    assert dry.counts.chunks_embedded > 0 and all(d.chunk_count > 0 for d in dry.documents)
    real = ingest(ingest_channel, root, namespace)
    assert _report(dry) == _report(real)
    # After an edit and a deletion: the dry run names the changed document, its new chunk texts, the
    # swept one, and still writes nothing.
    edited = root / "which" / "README.md"
    edited.write_text(edited.read_text("utf-8") + "\n## Added\n\nA paragraph written by the test.\n", "utf-8")
    (root / "ms" / "license.md").unlink()
    before = _state(database, namespace)
    dry = ingest(ingest_channel, root, namespace, dry_run=True)
    assert _state(database, namespace) == before
    assert statuses(dry)["which/README.md"] == "changed" and list(dry.swept_keys) == ["doc:ms/license"]
    assert 0 < dry.counts.chunks_embedded < dry.counts.chunks_written
    real = ingest(ingest_channel, root, namespace)
    assert _report(dry) == _report(real)
