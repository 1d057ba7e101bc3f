"""A vault run whose process died before it journaled its end (a crash, SIGKILL, a lost node) leaves its
journal row ``running`` and its namespace lock released (the lock ends with the process's session). The
next real run of that namespace journals it ``interrupted``; a dry run and runs of other namespaces
leave it alone.

The crashed run's state is written here with `VaultStore.start_run`, the statement such a run ran
before it died: a ``running`` row and no lock held.
"""

from __future__ import annotations

from datetime import UTC
from datetime import datetime
from pathlib import Path
from typing import Any

import grpc
import pytest

from common.kernel.config import Settings
from common.storage.database import Database
from common.storage.vault_store import VaultStore
from tests.e2e.vault_helpers import ingest
from tests.e2e.vault_helpers import write

pytestmark = pytest.mark.e2e


def _run(database: Database, run_id: str) -> dict[str, Any]:
    with database.connection() as conn:
        row = VaultStore(database.settings).get_run(conn, run_id)
    assert row is not None, run_id
    return row


def test_the_next_run_journals_a_crashed_run_interrupted(
    tmp_path: Path, ingest_channel: grpc.Channel, settings: Settings, database: Database, namespace: str
) -> None:
    store = VaultStore(settings)
    other_namespace = f"{namespace}-other"
    crashed, elsewhere = f"vault-crashed-{namespace}", f"vault-crashed-{other_namespace}"
    with database.connection() as conn:
        for run_id, run_namespace in ((crashed, namespace), (elsewhere, other_namespace)):
            store.start_run(
                conn,
                run_id=run_id,
                namespace=run_namespace,
                source="",
                branch="",
                commit_sha="",
                now=datetime.now(UTC),
            )
    try:
        write(tmp_path, "notes/a.md", "# A\n\nThe first note, see [[notes/b]].\n")
        write(tmp_path, "notes/b.md", "# B\n\nThe second note.\n")

        dry = ingest(ingest_channel, tmp_path, namespace, dry_run=True)
        assert dry.dry_run
        assert _run(database, crashed)["status"] == "running"  # a dry run writes nothing

        real = ingest(ingest_channel, tmp_path, namespace)
        closed = _run(database, crashed)
        assert closed["status"] == "interrupted"
        assert closed["finished_at"] is not None and closed["finished_at"] >= closed["started_at"]
        assert closed["report"] == {"abandoned": True, "closed_by_run": real.run_id}
        assert _run(database, real.run_id)["status"] == "completed"
        assert _run(database, elsewhere)["status"] == "running"  # another namespace's run: untouched

        again = ingest(ingest_channel, tmp_path, namespace)  # nothing left to close: the journal stays
        assert _run(database, crashed) == closed
        assert _run(database, real.run_id)["status"] == "completed"
        assert _run(database, again.run_id)["status"] == "completed"
    finally:
        with database.connection() as conn:
            conn.execute("DELETE FROM vault_runs WHERE namespace = %s", (other_namespace,))
