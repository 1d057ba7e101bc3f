"""VaultService.IngestVault on small vaults made here (links, relations, mixed origins, broken runs, dry runs,
hostile readers, the CLI); Git repositories are in test_vault_git.py, the real docs vault in test_vault_docs.py."""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format

from common.storage.database import Database
from memory_service_grpc_client import rpc_failure
from memory_service_grpc_client.memory.v1 import document_service_pb2
from memory_service_grpc_client.memory.v1 import document_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import fact_service_pb2
from memory_service_grpc_client.memory.v1 import fact_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import knowledge_pb2
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import trace_service_pb2
from memory_service_grpc_client.memory.v1 import trace_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import vault_service_pb2
from memory_service_grpc_client.memory.v1 import vault_service_pb2_grpc
from memory_service_tools.cli.vault_commands import vault_messages
from memory_service_tools.vault_source import directory_documents
from tests.e2e.vault_helpers import API
from tests.e2e.vault_helpers import GUIDE
from tests.e2e.vault_helpers import cut_short
from tests.e2e.vault_helpers import ingest
from tests.e2e.vault_helpers import small_vault
from tests.e2e.vault_helpers import source_or_none
from tests.e2e.vault_helpers import statuses
from tests.e2e.vault_helpers import write

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]


def _facts(query: grpc.Channel, namespace: str, **filters: str) -> list[knowledge_pb2.Fact]:
    stub = fact_query_service_pb2_grpc.FactQueryServiceStub(query)
    request = fact_query_service_pb2.ListFactsRequest(namespace=namespace, include_history=True, **filters)
    return list(stub.ListFacts(request, timeout=60).facts)


def _links(database: Database, namespace: str, key: str) -> set[str]:
    """Targets of the LINKS_TO edges out of ``key`` (straight from the graph)."""
    graph = database.settings.graph_name
    with database.connection() as conn:
        rows = conn.execute(
            f'SELECT t.natural_key FROM {graph}."i_LINKS_TO" e'
            " JOIN graph_nodes s ON s.vertex_id = e.start_id JOIN graph_nodes t ON t.vertex_id = e.end_id"
            " WHERE s.namespace = %s AND s.natural_key = %s",
            (namespace, key),
        ).fetchall()
    return {str(row[0]) for row in rows}


def _origin(database: Database, namespace: str, key: str) -> tuple[str, bool] | None:
    with database.connection() as conn:
        row = conn.execute(
            "SELECT origin, placeholder FROM graph_nodes WHERE namespace = %s AND natural_key = %s",
            (namespace, key),
        ).fetchone()
    return (str(row[0]), bool(row[1])) if row else None


def test_first_run_projects_links_and_relations(
    tmp_path: Path,
    ingest_channel: grpc.Channel,
    query_channel: grpc.Channel,
    database: Database,
    namespace: str,
) -> None:
    response = ingest(ingest_channel, small_vault(tmp_path), namespace)
    assert set(statuses(response).values()) == {"new"} and len(response.documents) == 6
    assert response.swept and response.counts.documents_new == 6
    # Relative path with anchor, wiki link by file name, wiki link by alias, relative ".." link.
    assert _links(database, namespace, "doc:guide") == {"doc:ref/api", "doc:glossary"}
    assert _links(database, namespace, "doc:guide-v2") == {"doc:guide"}
    assert _links(database, namespace, "doc:ref/api") == {"doc:guide"}
    unresolved = {(u.path, u.target, u.relation) for u in response.unresolved_links}
    assert unresolved == {("guide.md", "Nowhere Page", "LINKS_TO")}  # code and URLs are not links
    # The frontmatter relation is a vault fact with the document's provenance.
    (fact,) = _facts(query_channel, namespace, subject="doc:guide", predicate="SUPERSEDED_BY")
    assert fact.object == "doc:guide-v2" and fact.origin == "vault" and not fact.HasField("valid_to")
    source = source_or_none(query_channel, namespace, "doc:guide")
    assert source is not None and source.content == GUIDE and source.content_source == "original"
    provenance = json_format.MessageToDict(source.provenance)["metadata"]
    assert provenance["path"] == "guide.md" and len(provenance["content_hash"]) == 64
    assert _origin(database, namespace, "doc:guide") == ("vault", False)


def test_labelled_wiki_links_and_h1_titles(
    tmp_path: Path,
    ingest_channel: grpc.Channel,
    query_channel: grpc.Channel,
    database: Database,
    namespace: str,
) -> None:
    """``[[target|display]]`` resolves to the target (a document of the run, or an existing node outside
    it; the display text is never part of the target), and a document without a frontmatter title is
    titled by its first H1."""
    documents = document_service_pb2_grpc.DocumentServiceStub(ingest_channel)
    documents.Retain(
        document_service_pb2.RetainRequest(namespace=namespace, natural_key="person:alice", content="Alice."),
        timeout=60,
    )
    write(
        tmp_path, "plan.md", "# Release Plan\n\nOwned by [[person:alice|Alice]]; see [[notes|the notes]].\n"
    )
    write(tmp_path, "notes.md", '---\nsuperseded_by: "[[plan|the plan]]"\n---\nNo heading. [[Gone|x]]\n')
    response = ingest(ingest_channel, tmp_path, namespace)
    assert set(statuses(response).values()) == {"new"}
    assert _links(database, namespace, "doc:plan") == {"person:alice", "doc:notes"}
    (fact,) = _facts(query_channel, namespace, subject="doc:notes", predicate="SUPERSEDED_BY")
    assert fact.object == "doc:plan"
    assert [(u.path, u.target) for u in response.unresolved_links] == [("notes.md", "Gone")]
    plan = source_or_none(query_channel, namespace, "doc:plan")
    notes = source_or_none(query_channel, namespace, "doc:notes")
    assert plan is not None and plan.title == "Release Plan"
    assert notes is not None and notes.title == "doc:notes"  # no H1 either: the key, as in Retain


def test_rerun_edit_rename_delete(
    tmp_path: Path,
    ingest_channel: grpc.Channel,
    query_channel: grpc.Channel,
    database: Database,
    namespace: str,
) -> None:
    root = small_vault(tmp_path)
    ingest(ingest_channel, root, namespace)
    again = ingest(ingest_channel, root, namespace)
    assert set(statuses(again).values()) == {"unchanged"}
    assert again.counts.chunks_embedded == 0 and again.counts.chunks_written == 0
    assert again.counts.relations_written == 0 and again.swept and not again.swept_keys
    # Edit one, move one with a frontmatter key (same node), rename one with the default key (a new node,
    # the old one swept), delete one, drop the relation.
    write(root, "ref/api.md", API + "\n## More\n\nAnother call: `widget.stop()`.\n")
    (root / "terms").mkdir()
    (root / "notes" / "Glossary.md").rename(root / "terms" / "Glossary.md")
    (root / "todo.md").rename(root / "done.md")
    (root / "old" / "obsolete.md").unlink()
    write(root, "guide.md", GUIDE.replace("superseded_by: guide-v2.md\n", ""))
    third = ingest(ingest_channel, root, namespace)
    assert statuses(third) == {
        "done.md": "new",
        "guide-v2.md": "unchanged",
        "guide.md": "changed",
        "ref/api.md": "changed",
        "terms/Glossary.md": "changed",
    }
    assert list(third.swept_keys) == ["doc:old/obsolete", "doc:todo"]
    assert source_or_none(query_channel, namespace, "doc:todo") is None
    assert source_or_none(query_channel, namespace, "doc:old/obsolete") is None
    assert source_or_none(query_channel, namespace, "doc:done") is not None
    moved = source_or_none(query_channel, namespace, "doc:glossary")
    assert (
        moved is not None
        and json_format.MessageToDict(moved.provenance)["metadata"]["path"] == "terms/Glossary.md"
    )
    assert _links(database, namespace, "doc:guide") == {"doc:ref/api", "doc:glossary"}
    assert _links(database, namespace, "doc:done") == {"doc:guide"}
    # Only the changed documents were re-chunked, and only the new chunk texts embedded.
    assert third.counts.chunks_embedded < third.counts.chunks_written
    # The relation is closed, not forgotten (facts keep their history).
    (fact,) = _facts(query_channel, namespace, subject="doc:guide", predicate="SUPERSEDED_BY")
    assert fact.HasField("valid_to") and third.counts.relations_closed == 1
    # Each sweep deletion is audited like DeleteNode, on the run's trace.
    trace = trace_service_pb2_grpc.TraceServiceStub(query_channel).GetTrace(
        trace_service_pb2.GetTraceRequest(namespace=namespace, trace_id=third.trace_id), timeout=60
    )
    events = [e.audit_event for e in trace.trace.entries if e.HasField("audit_event")]
    assert sorted(e.target_key for e in events if e.action == "delete") == ["doc:old/obsolete", "doc:todo"]
    assert sorted(e.event_id for e in events) == sorted(third.audit_event_ids)


def test_broken_runs_and_rejected_documents_sweep_nothing(
    tmp_path: Path, ingest_channel: grpc.Channel, query_channel: grpc.Channel, namespace: str
) -> None:
    root = small_vault(tmp_path)
    ingest(ingest_channel, root, namespace)
    (root / "notes" / "Glossary.md").unlink()
    write(root, "new.md", "# New\n\nA new page.\n")
    stub = vault_service_pb2_grpc.VaultServiceStub(ingest_channel)
    source = directory_documents(root)
    # The client dies after the header and one message of documents: nothing swept.
    with pytest.raises(grpc.RpcError):
        stub.IngestVault(cut_short(vault_messages(source, namespace), 2), timeout=120)
    assert source_or_none(query_channel, namespace, "doc:glossary") is not None
    # A stream closed without its end message: INVALID_ARGUMENT, nothing swept.
    messages = list(vault_messages(source, namespace))[:-1]
    with pytest.raises(grpc.RpcError) as closed:
        stub.IngestVault(iter(messages), timeout=120)
    assert closed.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "end" in {v.field for v in rpc_failure(closed.value).violations}
    assert source_or_none(query_channel, namespace, "doc:glossary") is not None
    # A rejected document (bad frontmatter): the run answers, lists it, and sweeps nothing.
    write(root, "broken.md", "---\ntitle: [unclosed\n---\n# Broken\n")
    response = ingest(ingest_channel, root, namespace)
    assert statuses(response)["broken.md"] == "rejected" and not response.swept
    assert "frontmatter" in next(d.detail for d in response.documents if d.path == "broken.md")
    assert source_or_none(query_channel, namespace, "doc:glossary") is not None
    # Fixed: the next run completes the work.
    (root / "broken.md").unlink()
    final = ingest(ingest_channel, root, namespace)
    assert final.swept and list(final.swept_keys) == ["doc:glossary"]
    assert statuses(final)["new.md"] == "unchanged"  # projected by the first broken run already


def test_dry_run_writes_nothing(
    tmp_path: Path, ingest_channel: grpc.Channel, query_channel: grpc.Channel, namespace: str
) -> None:
    root = small_vault(tmp_path)
    dry = ingest(ingest_channel, root, namespace, dry_run=True)
    assert dry.dry_run and set(statuses(dry).values()) == {"new"} and not dry.swept
    assert source_or_none(query_channel, namespace, "doc:guide") is None
    ingest(ingest_channel, root, namespace)
    (root / "ref" / "api.md").unlink()
    dry = ingest(ingest_channel, root, namespace, dry_run=True)
    assert list(dry.swept_keys) == ["doc:ref/api"] and dry.counts.documents_swept == 1
    assert source_or_none(query_channel, namespace, "doc:ref/api") is not None


def _agent_chunk_found(query: grpc.Channel, namespace: str) -> bool:
    hits = (
        retrieval_service_pb2_grpc.RetrievalServiceStub(query)
        .Search(
            retrieval_service_pb2.SearchRequest(namespace=namespace, query="zebra-unicorn-42", top_k=5),
            timeout=60,
        )
        .hits
    )
    return any(hit.node_key == "doc:ref/api" and hit.chunk_order == 500 for hit in hits)


def test_agent_data_survives_reingest_and_sweep(
    tmp_path: Path,
    ingest_channel: grpc.Channel,
    query_channel: grpc.Channel,
    database: Database,
    namespace: str,
) -> None:
    root = small_vault(tmp_path)
    ingest(ingest_channel, root, namespace)
    facts = fact_service_pb2_grpc.FactServiceStub(ingest_channel)
    facts.AssertFacts(
        fact_service_pb2.AssertFactsRequest(
            namespace=namespace,
            facts=[
                json_format.ParseDict(
                    {
                        "subject": "doc:ref/api",
                        "predicate": "REVIEWED_BY",
                        "object": "person:alice",
                        "valid_from": "2026-01-01T00:00:00Z",
                    },
                    knowledge_pb2.FactAssertion(),
                )
            ],
        ),
        timeout=60,
    )
    documents = document_service_pb2_grpc.DocumentServiceStub(ingest_channel)
    documents.PutChunks(  # an agent's chunk on the vault's node
        document_service_pb2.PutChunksRequest(
            namespace=namespace,
            natural_key="doc:ref/api",
            chunks=[
                document_service_pb2.ChunkInput(chunk_order=500, text="Agent annotation: zebra-unicorn-42.")
            ],
        ),
        timeout=60,
    )
    documents.Retain(  # an agent's own document: the vault must never sweep it
        document_service_pb2.RetainRequest(
            namespace=namespace, natural_key="note:agent", content="# Agent note\n"
        ),
        timeout=60,
    )
    # An agent's document under a key the vault also has: the creator (the agent) keeps it.
    documents.Retain(
        document_service_pb2.RetainRequest(namespace=namespace, natural_key="doc:mine", content="agent text"),
        timeout=60,
    )
    write(root, "mine.md", "# Vault text\n")
    write(root, "ref/api.md", API + "\nEdited.\n")
    dry = ingest(ingest_channel, root, namespace, dry_run=True)
    assert statuses(dry)["mine.md"] == "conflict" and statuses(dry)["ref/api.md"] == "changed"
    response = ingest(ingest_channel, root, namespace)
    assert statuses(response)["mine.md"] == "conflict" and statuses(response)["ref/api.md"] == "changed"
    assert source_or_none(query_channel, namespace, "doc:mine").content == "agent text"  # type: ignore[union-attr]
    assert [f.object for f in _facts(query_channel, namespace, subject="doc:ref/api")] == ["person:alice"]
    assert source_or_none(query_channel, namespace, "doc:ref/api").content == API + "\nEdited.\n"  # type: ignore[union-attr]
    assert _agent_chunk_found(query_channel, namespace)
    # The vault document goes: its node stays as a placeholder holding the agent's fact.
    (root / "ref" / "api.md").unlink()
    (root / "mine.md").unlink()
    swept = ingest(ingest_channel, root, namespace)
    assert list(swept.swept_keys) == ["doc:ref/api"]
    assert [f.object for f in _facts(query_channel, namespace, subject="doc:ref/api")] == ["person:alice"]
    assert _origin(database, namespace, "doc:ref/api") == ("vault", True)
    assert source_or_none(query_channel, namespace, "note:agent") is not None
    assert source_or_none(query_channel, namespace, "doc:mine").content == "agent text"  # type: ignore[union-attr]
    search = retrieval_service_pb2_grpc.RetrievalServiceStub(query_channel).Search(
        retrieval_service_pb2.SearchRequest(namespace=namespace, query="widget.start", top_k=10), timeout=60
    )
    assert all("widget.start()" not in hit.text for hit in search.hits)  # its vault text is gone
    assert _agent_chunk_found(query_channel, namespace)  # the agent's chunk is not
    # Back in the vault: the placeholder is completed, the agent's fact still hangs on it.
    write(root, "ref/api.md", API)
    back = ingest(ingest_channel, root, namespace)
    assert statuses(back)["ref/api.md"] == "new"
    assert _origin(database, namespace, "doc:ref/api") == ("vault", False)
    assert [f.object for f in _facts(query_channel, namespace, subject="doc:ref/api")] == ["person:alice"]


def test_runs_of_one_namespace_are_serialised(
    tmp_path: Path, ingest_channel: grpc.Channel, namespace: str
) -> None:
    root = small_vault(tmp_path)
    results: list[vault_service_pb2.IngestVaultResponse] = []
    threads = [
        threading.Thread(target=lambda: results.append(ingest(ingest_channel, root, namespace)))
        for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Had the runs overlapped, both would have seen an empty vault and projected every document.
    kinds = sorted(tuple(sorted(set(statuses(r).values()))) for r in results)
    assert kinds == [("new",), ("unchanged",)]


def test_cli_ingest(tmp_path: Path, ingest_host: Any, query_channel: grpc.Channel, namespace: str) -> None:
    from typer.testing import CliRunner

    from memory_service_tools.cli import app

    root = small_vault(tmp_path / "vault")
    runner = CliRunner()

    def run(*args: str, expect: int = 0, stdout: bool = False) -> str:
        result = runner.invoke(app, ["--ingest-addr", f"127.0.0.1:{ingest_host.port}", "ingest", *args])
        assert result.exit_code == expect, result.output
        return result.stdout if stdout else " ".join(result.output.split())  # rich wraps lines

    dry = json.loads(run(str(root), "--namespace", namespace, "--dry-run", "--json", stdout=True))
    assert dry["dryRun"] and dry["counts"]["documentsNew"] == 6
    assert source_or_none(query_channel, namespace, "doc:guide") is None
    report = run(str(root), "--namespace", namespace)
    assert "the server handled 6 documents: 6 new, 0 changed, 0 unchanged, 0 swept" in report
    assert "all documents sent; waiting for the server's report" in report  # the bar says what it counts
    assert "unresolved LINKS_TO: guide.md -> Nowhere Page" in report
    (root / "todo.md").unlink()
    write(root, "broken.md", "---\ntitle: [x\n---\n")
    refused = run(str(root), "--namespace", namespace, expect=1)
    assert "broken.md: rejected" in refused and "not swept" in refused
    (root / "broken.md").unlink()
    swept = json.loads(run(str(root), "--namespace", namespace, "--json", stdout=True))
    assert swept["sweptKeys"] == ["doc:todo"] and swept["counts"]["documentsUnchanged"] == 5
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    assert "no branch" in run(str(repo), "--git", "--namespace", namespace, "--branch", "nope", expect=1)
    assert "not a Git repository" in run(str(root), "--git", "--namespace", namespace, expect=1)


def test_cli_ingest_of_a_folder_without_documents_warns(
    tmp_path: Path,
    ingest_host: Any,
    ingest_channel: grpc.Channel,
    query_channel: grpc.Channel,
    namespace: str,
) -> None:
    """A folder with no Markdown, into a namespace whose documents came from Retain: the run changes
    nothing and exits 0 as before, and stderr says the folder holds no document the vault reads."""
    from typer.testing import CliRunner

    from memory_service_tools.cli import app

    document_service_pb2_grpc.DocumentServiceStub(ingest_channel).Retain(
        document_service_pb2.RetainRequest(
            namespace=namespace, natural_key="doc:retained", title="Retained", content="Kept by Retain."
        ),
        timeout=60,
    )
    empty = tmp_path / "papers"
    write(empty, "notes.orig", "a file of no format the vault reads\n")
    write(empty, ".hidden/inside.md", "# Hidden\n")
    runner = CliRunner()
    base = ["--ingest-addr", f"127.0.0.1:{ingest_host.port}", "ingest", str(empty), "--namespace", namespace]
    warning = f"warning: {empty} holds no document the vault reads"
    report = runner.invoke(app, base)
    assert report.exit_code == 0, report.output
    assert "the server handled 0 documents" in " ".join(report.stdout.split())
    assert warning in " ".join(report.stderr.split()) and warning not in report.stdout
    as_json = runner.invoke(app, [*base, "--json"])
    assert as_json.exit_code == 0, as_json.output
    parsed = json.loads(as_json.stdout)  # stdout holds the response alone, as without the warning
    assert parsed.get("documents", []) == [] and parsed.get("counts", {}).get("documentsSwept", 0) == 0
    assert warning in " ".join(as_json.stderr.split())
    source = source_or_none(query_channel, namespace, "doc:retained")
    assert source is not None and source.title == "Retained", "the retained document stays"
    # A folder that holds a document gets no warning.
    write(empty, "paper.md", "# Paper\n\nNow there is Markdown.\n")
    with_document = runner.invoke(app, base)
    assert with_document.exit_code == 0, with_document.output
    assert "warning:" not in with_document.stderr
    assert "the server handled 1 documents: 1 new" in " ".join(with_document.stdout.split())
