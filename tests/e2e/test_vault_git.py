"""VaultService.IngestVault of a Git repository (a local clone and a URL): each document's provenance names
its commit, and a rerun after a new commit sends only what changed."""

from __future__ import annotations

import subprocess
from pathlib import Path

import grpc
import pytest
from google.protobuf import json_format

from memory_service_tools.vault_source import git_documents
from tests.e2e.vault_helpers import API
from tests.e2e.vault_helpers import ingest
from tests.e2e.vault_helpers import small_vault
from tests.e2e.vault_helpers import source_or_none
from tests.e2e.vault_helpers import statuses
from tests.e2e.vault_helpers import write

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]


def test_git_repository_provenance_and_incremental(
    tmp_path: Path, ingest_channel: grpc.Channel, query_channel: grpc.Channel, namespace: str
) -> None:
    repo = small_vault(tmp_path / "repo")

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-c", "user.name=Ann", "-c", "user.email=ann@example.invalid", *args],
            cwd=repo,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()

    git("init", "-q", "-b", "main")
    git("add", "-A")
    git("commit", "-qm", "first")
    first = git("rev-parse", "HEAD")
    response = ingest(ingest_channel, git_documents(str(repo)), namespace)
    assert response.counts.documents_new == 6
    write(repo, "ref/api.md", API + "\nChanged in the second commit.\n")
    git("rm", "-q", "notes/Glossary.md")
    git("commit", "-qam", "second")
    second = git("rev-parse", "HEAD")
    rerun = ingest(ingest_channel, git_documents(str(repo)), namespace)
    assert statuses(rerun)["ref/api.md"] == "changed"
    assert {status for path, status in statuses(rerun).items() if path != "ref/api.md"} == {"unchanged"}
    assert list(rerun.swept_keys) == ["doc:glossary"]
    meta = {
        key: json_format.MessageToDict(source_or_none(query_channel, namespace, key).provenance)["metadata"]  # type: ignore[union-attr]
        for key in ("doc:guide", "doc:ref/api")
    }
    assert meta["doc:guide"]["commit_sha"] == first and meta["doc:ref/api"]["commit_sha"] == second
    for value in meta.values():
        assert value["branch"] == "main" and value["repository"] == str(repo.resolve())
        assert value["author"] == "Ann <ann@example.invalid>" and value["committed_at"].endswith("Z")
        assert {"path", "content_hash", "indexed_at"} <= set(value)


def test_git_repository_by_url(tmp_path: Path) -> None:
    """A repository URL is cloned (here a file:// URL) and read like the local path, named by its URL."""
    repo = small_vault(tmp_path / "repo")
    for args in (["init", "-q", "-b", "trunk"], ["add", "-A"], ["commit", "-qm", "only"]):
        subprocess.run(
            ["git", "-c", "user.name=Ann", "-c", "user.email=ann@example.invalid", *args],
            cwd=repo,
            check=True,
        )
    local, cloned = git_documents(str(repo)), git_documents(f"file://{repo}")
    assert cloned.branch == local.branch == "trunk" and cloned.commit_sha == local.commit_sha
    assert [(d.path, d.content, d.provenance["commit_sha"]) for d in cloned.documents] == [
        (d.path, d.content, d.provenance["commit_sha"]) for d in local.documents
    ]
    assert {d.provenance["repository"] for d in cloned.documents} == {f"file://{repo}"}
