"""On the real docs vault (398 Markdown files of ../shared/corpora/docs-vault, copied to a
temporary folder so files can be deleted, renamed and edited): full run, unchanged re-run (nothing
re-chunked or re-embedded), a run after deleting, renaming and editing files, an interrupted run."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from common.storage.database import Database
from memory_service_grpc_client.memory.v1 import source_service_pb2
from memory_service_grpc_client.memory.v1 import source_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import vault_service_pb2
from memory_service_grpc_client.memory.v1 import vault_service_pb2_grpc
from memory_service_tools.cli.vault_commands import vault_messages
from memory_service_tools.vault_source import directory_documents
from tests.conftest import CORPORA
from tests.database_rows import fetch_rows
from tests.e2e.vault_helpers import cut_short
from tests.e2e.vault_helpers import ingest
from tests.e2e.vault_helpers import statuses

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(3600)]  # the first run embeds ~10k chunks

VAULT = CORPORA / "docs-vault"


@dataclass
class Loaded:
    root: Path
    namespace: str
    first: vault_service_pb2.IngestVaultResponse


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory, ingest_channel: grpc.Channel) -> Iterator[Loaded]:
    root = tmp_path_factory.mktemp("docs") / "docs-vault"
    shutil.copytree(VAULT, root)
    namespace = "vault-docs-" + uuid.uuid4().hex[:10]
    yield Loaded(root, namespace, ingest(ingest_channel, root, namespace))


def _chunk_runs(database: Database, namespace: str) -> dict[str, int]:
    """seen_run -> chunks written by that run (a chunk row rewritten by a run carries its id)."""
    query = "SELECT seen_run, count(*) FROM chunks WHERE namespace = %s GROUP BY seen_run"
    rows = fetch_rows(database, query, namespace)
    return {str(run): int(count) for run, count in rows}


def test_full_run(loaded: Loaded, database: Database) -> None:
    first = loaded.first
    paths = sorted(p.relative_to(VAULT).as_posix() for p in VAULT.rglob("*.md"))
    assert [d.path for d in first.documents] == paths and len(paths) == 398
    assert set(statuses(first).values()) == {"new"} and first.swept
    counts = first.counts
    # A text repeated inside one document is embedded once.
    assert counts.documents_new == 398 and counts.chunks_written >= counts.chunks_embedded > 9000
    assert _chunk_runs(database, loaded.namespace) == {first.run_id: counts.chunks_written}
    # Relative links between the files of one package resolve (e.g. npm's docs link to each other).
    assert counts.links_resolved > 100
    assert counts.links_unresolved == len(first.unresolved_links) > 0


def test_unchanged_rerun_embeds_nothing(
    loaded: Loaded, ingest_channel: grpc.Channel, database: Database
) -> None:
    again = ingest(ingest_channel, loaded.root, loaded.namespace)
    assert set(statuses(again).values()) == {"unchanged"} and again.swept and not again.swept_keys
    assert again.counts.chunks_embedded == 0 and again.counts.chunks_written == 0
    assert (
        again.counts.relations_written == 0
        and again.counts.links_resolved == loaded.first.counts.links_resolved
    )
    # No chunk row was rewritten: every chunk still carries the first run's id.
    assert set(_chunk_runs(database, loaded.namespace)) == {loaded.first.run_id}


def test_interrupted_then_delete_rename_edit(
    loaded: Loaded, ingest_channel: grpc.Channel, query_channel: grpc.Channel, database: Database
) -> None:
    root = loaded.root
    deleted = ["zstd/README.md", "ms/license.md"]
    renamed = ("semver/README.md", "semver/GUIDE.md")  # frontmatter natural_key: the same node, moved
    edited = "which/README.md"
    for path in deleted:
        (root / path).unlink()
    (root / renamed[0]).rename(root / renamed[1])
    text = (root / edited).read_text("utf-8")
    (root / edited).write_text(text + "\n## Added section\n\nA paragraph written by the test.\n", "utf-8")
    # Interrupted after the header and three messages: nothing swept.
    stub = vault_service_pb2_grpc.VaultServiceStub(ingest_channel)
    with pytest.raises(grpc.RpcError):
        stub.IngestVault(
            cut_short(vault_messages(directory_documents(root), loaded.namespace), 4), timeout=600
        )
    sources = source_service_pb2_grpc.SourceServiceStub(query_channel)
    for key in ("doc:zstd/README", "doc:ms/license"):
        sources.GetSource(
            source_service_pb2.GetSourceRequest(namespace=loaded.namespace, natural_key=key), timeout=60
        )
    # The complete run: exactly the edited and moved documents re-projected, the deleted ones swept.
    run = ingest(ingest_channel, root, loaded.namespace)
    changed = {path: status for path, status in statuses(run).items() if status != "unchanged"}
    assert changed == {edited: "changed", renamed[1]: "changed"}
    assert sorted(run.swept_keys) == ["doc:ms/license", "doc:zstd/README"] and run.swept
    for key in ("doc:zstd/README", "doc:ms/license"):
        with pytest.raises(grpc.RpcError) as gone:
            sources.GetSource(
                source_service_pb2.GetSourceRequest(namespace=loaded.namespace, natural_key=key), timeout=60
            )
        assert gone.value.code() == grpc.StatusCode.NOT_FOUND
    moved = sources.GetSource(
        source_service_pb2.GetSourceRequest(namespace=loaded.namespace, natural_key="doc:semver/README"),
        timeout=60,
    ).source
    assert moved.content == (root / renamed[1]).read_text("utf-8")
    # Only the edited document's new chunk texts were embedded (the moved one reused its vectors).
    runs = _chunk_runs(database, loaded.namespace)
    assert set(runs) <= {loaded.first.run_id, run.run_id}
    with database.connection() as conn:
        rewritten = {
            str(row[0])
            for row in conn.execute(
                "SELECT DISTINCT node_key FROM chunks WHERE namespace = %s AND seen_run = %s",
                (loaded.namespace, run.run_id),
            )
        }
    assert rewritten == {"doc:which/README", "doc:semver/README"}
    assert 0 < run.counts.chunks_embedded <= 3


def test_agent_data_kept(
    loaded: Loaded, ingest_channel: grpc.Channel, query_channel: grpc.Channel, database: Database
) -> None:
    """Agent data on the docs vault: a fact and a PutChunks chunk on a document that is then edited, and
    on one that is then deleted (kept on its placeholder), an agent's own document (never swept), and an
    agent's Retain of a vault-owned key (taken back by the next run: its chunks go)."""
    from google.protobuf import json_format

    from memory_service_grpc_client.memory.v1 import document_service_pb2
    from memory_service_grpc_client.memory.v1 import document_service_pb2_grpc
    from memory_service_grpc_client.memory.v1 import fact_service_pb2
    from memory_service_grpc_client.memory.v1 import fact_service_pb2_grpc
    from memory_service_grpc_client.memory.v1 import knowledge_pb2

    namespace, root = loaded.namespace, loaded.root
    edited, deleted, retained = "doc:git/README", "doc:diff/release-notes", "doc:zstd/TESTING"
    documents = document_service_pb2_grpc.DocumentServiceStub(ingest_channel)
    for key in (edited, deleted):
        fact_service_pb2_grpc.FactServiceStub(ingest_channel).AssertFacts(
            fact_service_pb2.AssertFactsRequest(
                namespace=namespace,
                facts=[
                    json_format.ParseDict(
                        {"subject": key, "predicate": "REVIEWED_BY", "object": "person:ann"},
                        knowledge_pb2.FactAssertion(),
                    )
                ],
            ),
            timeout=60,
        )
        documents.PutChunks(
            document_service_pb2.PutChunksRequest(
                namespace=namespace,
                natural_key=key,
                chunks=[document_service_pb2.ChunkInput(chunk_order=900, text=f"Agent note on {key}.")],
            ),
            timeout=60,
        )
    documents.Retain(
        document_service_pb2.RetainRequest(namespace=namespace, natural_key="note:agent", content="# Mine\n"),
        timeout=60,
    )
    documents.Retain(
        document_service_pb2.RetainRequest(
            namespace=namespace, natural_key=retained, content="# Agent's TESTING\n\nAgent-only text.\n"
        ),
        timeout=60,
    )
    readme = root / "git" / "README.md"
    readme.write_text(readme.read_text("utf-8") + "\n## Agent test\n\nEdited by the test.\n", "utf-8")
    (root / "diff" / "release-notes.md").unlink()
    run = ingest(ingest_channel, root, loaded.namespace)
    assert run.swept and deleted in run.swept_keys and "note:agent" not in run.swept_keys
    assert statuses(run)["zstd/TESTING.md"] == "changed"  # its node was rewritten through the API
    with database.connection() as conn:
        agent_chunks = {
            (str(key), int(order))
            for key, order in conn.execute(
                "SELECT node_key, chunk_order FROM chunks WHERE namespace = %s AND seen_run IS NULL",
                (namespace,),
            )
        }
        reviewed = {
            str(row[0])
            for row in conn.execute(
                "SELECT subject_key FROM facts WHERE namespace = %s AND predicate = 'REVIEWED_BY'",
                (namespace,),
            )
        }
        placeholder = conn.execute(
            "SELECT placeholder FROM graph_nodes WHERE namespace = %s AND natural_key = %s",
            (namespace, deleted),
        ).fetchone()
    assert agent_chunks == {(edited, 900), (deleted, 900), ("note:agent", 0)}
    assert reviewed == {edited, deleted} and placeholder == (True,)
    sources = source_service_pb2_grpc.SourceServiceStub(query_channel)
    taken_back = sources.GetSource(
        source_service_pb2.GetSourceRequest(namespace=namespace, natural_key=retained), timeout=60
    ).source
    assert taken_back.content == (root / "zstd" / "TESTING.md").read_text("utf-8")
