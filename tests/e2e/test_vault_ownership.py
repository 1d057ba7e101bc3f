"""Who owns a key: two files of a vault naming one natural key (the journaled file keeps it,
else the smallest path; the loser's text is never written), and an agent's Retain of a vault-owned key
through `cb retain` (the next run takes the key back: the Retain's chunks go, the agent's PutChunks
chunks and facts stay). Small real vaults built here, real services."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
import pytest

from common.storage.database import Database
from memory_service_grpc_client import rpc_failure
from memory_service_grpc_client.memory.v1 import document_service_pb2
from memory_service_grpc_client.memory.v1 import document_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import source_service_pb2
from memory_service_grpc_client.memory.v1 import source_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import vault_service_pb2
from memory_service_grpc_client.memory.v1 import vault_service_pb2_grpc
from tests.database_rows import fetch_rows
from tests.e2e.query_service_data import assert_facts
from tests.e2e.vault_helpers import ingest
from tests.e2e.vault_helpers import statuses
from tests.e2e.vault_helpers import write

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

LEGIT = "---\nnatural_key: doc:runbook\n---\n# Runbook\n\nRestart the legit service.\n"


def _chunks(database: Database, namespace: str, key: str) -> list[tuple[int, bool, str]]:
    """(chunk_order, written through the API, text) of a node's chunks, in order."""
    query = "SELECT chunk_order, seen_run IS NULL, text FROM chunks WHERE namespace = %s AND node_key = %s"
    rows = fetch_rows(database, query + " ORDER BY chunk_order", namespace, key)
    return [(int(order), bool(api), str(text)) for order, api, text in rows]


def _content(query: grpc.Channel, namespace: str, key: str) -> str:
    stub = source_service_pb2_grpc.SourceServiceStub(query)
    request = source_service_pb2.GetSourceRequest(namespace=namespace, natural_key=key)
    return str(stub.GetSource(request, timeout=60).source.content)


def _details(response: vault_service_pb2.IngestVaultResponse) -> dict[str, str]:
    return {d.path: d.detail for d in response.documents}


def test_a_second_file_never_takes_a_key_over(
    tmp_path: Path,
    ingest_channel: grpc.Channel,
    query_channel: grpc.Channel,
    database: Database,
    namespace: str,
) -> None:
    """The file the key was projected from keeps it whether the newcomer's path sorts before or after it;
    the newcomers are conflicts naming both paths, their text is written nowhere, and the run sweeps."""
    write(tmp_path, "m/runbook.md", LEGIT)
    write(tmp_path, "m/gone.md", "# Gone soon\n")
    first = ingest(ingest_channel, tmp_path, namespace)
    assert set(statuses(first).values()) == {"new"}
    intruder = "---\nnatural_key: doc:runbook\n---\n# Intruder\n\nINTRUDER {} text.\n"
    write(tmp_path, "a/copy.md", intruder.format("early"))  # sorts before the legitimate file
    write(tmp_path, "z/copy.md", intruder.format("late"))  # and after it
    (tmp_path / "m" / "gone.md").unlink()
    second = ingest(ingest_channel, tmp_path, namespace)
    assert statuses(second) == {"a/copy.md": "conflict", "m/runbook.md": "unchanged", "z/copy.md": "conflict"}
    for path in ("a/copy.md", "z/copy.md"):
        assert "'m/runbook.md'" in _details(second)[path] and repr(path) in _details(second)[path]
    assert second.counts.documents_conflicting == 2 and second.counts.chunks_written == 0
    assert _content(query_channel, namespace, "doc:runbook") == LEGIT
    with database.connection() as conn:
        (written,) = conn.execute(
            "SELECT count(*) FROM chunks WHERE namespace = %s AND text LIKE '%%INTRUDER%%'", (namespace,)
        ).fetchone()
    assert written == 0
    assert second.swept and list(second.swept_keys) == ["doc:m/gone"]  # a conflict does not stop the sweep
    # The legitimate file edited: it is still the one projected.
    write(tmp_path, "m/runbook.md", LEGIT + "\nEdited.\n")
    third = ingest(ingest_channel, tmp_path, namespace)
    assert statuses(third)["m/runbook.md"] == "changed" and statuses(third)["a/copy.md"] == "conflict"
    assert _content(query_channel, namespace, "doc:runbook") == LEGIT + "\nEdited.\n"


def test_new_claimants_smallest_path_wins(
    tmp_path: Path, ingest_channel: grpc.Channel, query_channel: grpc.Channel, namespace: str
) -> None:
    """A key no file holds yet goes to the smallest path; when its file goes, the smallest remaining one
    takes it over."""
    page = "---\nnatural_key: doc:shared\n---\n# From {}\n"
    for path in ("q/two.md", "p/one.md", "r/three.md"):
        write(tmp_path, path, page.format(path))
    first = ingest(ingest_channel, tmp_path, namespace)
    assert statuses(first) == {"p/one.md": "new", "q/two.md": "conflict", "r/three.md": "conflict"}
    assert "'p/one.md'" in _details(first)["r/three.md"]
    assert _content(query_channel, namespace, "doc:shared") == page.format("p/one.md")
    (tmp_path / "p" / "one.md").unlink()
    second = ingest(ingest_channel, tmp_path, namespace)
    assert statuses(second) == {"q/two.md": "changed", "r/three.md": "conflict"}
    assert second.swept and not second.swept_keys
    assert _content(query_channel, namespace, "doc:shared") == page.format("q/two.md")


def test_documents_out_of_path_order_are_refused(
    tmp_path: Path, ingest_channel: grpc.Channel, namespace: str
) -> None:
    """The rule is decided as the stream goes, so the run takes documents in ascending path order only."""
    stub = vault_service_pb2_grpc.VaultServiceStub(ingest_channel)
    documents = [vault_service_pb2.VaultDocument(path=p, content=f"# {p}\n") for p in ("b.md", "a.md")]
    messages = [
        vault_service_pb2.IngestVaultRequest(header=vault_service_pb2.IngestVaultHeader(namespace=namespace)),
        vault_service_pb2.IngestVaultRequest(
            documents=vault_service_pb2.IngestVaultDocuments(documents=documents)
        ),
        vault_service_pb2.IngestVaultRequest(end=vault_service_pb2.IngestVaultEnd(document_count=2)),
    ]
    with pytest.raises(grpc.RpcError) as refused:
        stub.IngestVault(iter(messages), timeout=120)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert [v.field for v in rpc_failure(refused.value).violations] == ["documents[1].path"]


def test_vault_takes_back_a_key_an_agent_retained_with_cb_retain(
    tmp_path: Path,
    ingest_host: Any,
    ingest_channel: grpc.Channel,
    query_channel: grpc.Channel,
    database: Database,
    namespace: str,
) -> None:
    """`cb retain` of a Markdown file whose frontmatter names a vault document's key replaces its text and
    chunks; the next vault run takes the key back (the creator owns it): the vault's text and chunks
    only, no chunk of the agent's Retain left, while the agent's PutChunks chunk and fact stay."""
    from typer.testing import CliRunner

    from memory_service_tools.cli import app

    vault = tmp_path / "vault"
    write(vault, "page.md", "---\nnatural_key: doc:page\n---\n# Page\n\nVault text.\n")
    ingest(ingest_channel, vault, namespace)
    agent = tmp_path / "agent"
    write(
        agent,
        "notes.md",
        "---\nnatural_key: doc:page\ntitle: Agent page\n---\n# Agent\n\nAgent text.\n\n## More\n\nSecond part.\n",
    )
    result = CliRunner().invoke(
        app,
        ["--ingest-addr", f"127.0.0.1:{ingest_host.port}", "retain", str(agent), "--namespace", namespace],
    )
    assert result.exit_code == 0, result.output
    assert [text for _, _, text in _chunks(database, namespace, "doc:page")] == [
        "# Agent\n\nAgent text.",
        "## More\n\nSecond part.",
    ]
    documents = document_service_pb2_grpc.DocumentServiceStub(ingest_channel)
    documents.PutChunks(
        document_service_pb2.PutChunksRequest(
            namespace=namespace,
            natural_key="doc:page",
            chunks=[document_service_pb2.ChunkInput(chunk_order=500, text="Agent annotation.")],
        ),
        timeout=60,
    )
    review = {"subject": "doc:page", "predicate": "REVIEWED_BY", "object": "person:ann"}
    assert_facts(ingest_channel, namespace, [review])
    back = ingest(ingest_channel, vault, namespace)
    assert statuses(back) == {"page.md": "changed"}
    assert _chunks(database, namespace, "doc:page") == [
        (0, False, "# Page\n\nVault text."),
        (500, True, "Agent annotation."),
    ]
    assert _content(query_channel, namespace, "doc:page").endswith("Vault text.\n")
    with database.connection() as conn:
        (facts,) = conn.execute(
            "SELECT count(*) FROM facts WHERE namespace = %s AND subject_key = 'doc:page'"
            " AND predicate = 'REVIEWED_BY'",
            (namespace,),
        ).fetchone()
    assert facts == 1
    # Unchanged from now on: the next run only marks it seen.
    assert statuses(ingest(ingest_channel, vault, namespace)) == {"page.md": "unchanged"}
