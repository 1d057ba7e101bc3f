"""Vault ingest, pure parts: links found in Markdown, their resolution, frontmatter relations, the
directory reader (.gitignore, hidden folders) and the stream `cb ingest` sends."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.domain.document_frontmatter import VAULT_FIELDS
from common.domain.document_frontmatter import FrontmatterError
from common.domain.document_frontmatter import document_fields
from common.domain.document_frontmatter import read_frontmatter
from common.kernel.errors import InvalidArgument
from ingest_service.vault.documents import VaultFile
from ingest_service.vault.documents import check_path
from ingest_service.vault.documents import file_fingerprint
from ingest_service.vault.documents import parse_file
from ingest_service.vault.links import LinkReference
from ingest_service.vault.links import VaultEntry
from ingest_service.vault.links import VaultIndex
from ingest_service.vault.links import body_links
from ingest_service.vault.links import body_outline
from ingest_service.vault.links import link_names
from memory_service_grpc_client.memory.v1 import vault_service_pb2
from memory_service_tools.cli.vault_commands import vault_messages
from memory_service_tools.vault_source import SourceDocument
from memory_service_tools.vault_source import VaultSource
from memory_service_tools.vault_source import directory_documents


def test_body_links_skip_code_and_images() -> None:
    body = (
        "See [a](a.md#x), ![img](pic.png), [[Wiki Page#Part|label]] and `[[in code]]`.\n\n"
        "```\n[[in a fence]] [b](b.md)\n```\n\n    [[indented code]]\n\n[[Split\nacross]] [[ok]]\n"
    )
    found = [(r.kind, r.target) for r in body_links(body)]
    assert found == [("markdown", "a.md#x"), ("wiki", "Wiki Page#Part"), ("wiki", "ok")]


def test_wiki_link_labels_are_display_text_only() -> None:
    """``[[target|display]]``: the display text never becomes part of the target, also in a table cell
    (where Obsidian writes the pipe ``\\|``) and for a natural key of a node outside the run."""
    body = "[[person:alice|Alice]] and [[Guide#Setup|the setup]]\n\n| who | link |\n|---|---|\n| a | [[ref/api\\|API]] |\n"
    assert [(r.kind, r.target) for r in body_links(body)] == [
        ("wiki", "person:alice"),
        ("wiki", "Guide#Setup"),
        ("wiki", "ref/api"),
    ]
    assert link_names(LinkReference("wiki", "person:alice#Bio")) == ("person:alice#Bio", "person:alice")
    assert link_names(LinkReference("frontmatter", "[[person:alice|Alice]]")) == (
        "[[person:alice|Alice]]",
        "person:alice",
    )
    assert link_names(LinkReference("markdown", "a.md#x")) == ("a.md#x",)
    assert (
        INDEX.resolve(API, LinkReference("relation", "[[Setup Guide|the guide]]", "PART_OF")) == "doc:guide"
    )


@pytest.mark.parametrize(
    ("body", "title"),
    [
        ("Intro.\n\n# The *First* `Title`\n\n# Second\n", "The First Title"),
        ("Setext Title\n============\n\ntext\n", "Setext Title"),
        ("## Only a level 2\n\n> # quoted\n\n```\n# in code\n```\n", ""),
    ],
)
def test_the_first_h1_is_the_outline_title(body: str, title: str) -> None:
    assert body_outline(body)[1] == title


def test_a_document_without_a_frontmatter_title_takes_its_first_h1() -> None:
    untitled = parse_file(
        "ns", VaultFile("a.md", "---\nscopes: [workspace:x]\n---\n# Release Plan\n\ntext\n"), 0
    )
    assert untitled.retain.title == "Release Plan" and untitled.entry.title == "Release Plan"
    titled = parse_file("ns", VaultFile("b.md", "---\ntitle: Given\n---\n# Heading\n"), 1)
    assert titled.retain.title == "Given" and titled.entry.title == "Given"
    bare = parse_file("ns", VaultFile("c.md", "no heading at all\n"), 2)
    assert bare.retain.title == "" and bare.entry.title == "doc:c"  # Retain's default: the key


INDEX = VaultIndex(
    [
        VaultEntry("doc:guide", "guide.md", "Setup Guide", ("setup",)),
        VaultEntry("doc:ref/api", "ref/api.md", "API"),
        VaultEntry("doc:ref/README", "ref/README.md", "Reference"),
        VaultEntry("doc:other/api", "other/api.md", "API"),
        VaultEntry("doc:Заметки/план", "Заметки/план.md", "План"),
    ]
)
GUIDE = INDEX.by_key["doc:guide"]
API = INDEX.by_key["doc:ref/api"]


@pytest.mark.parametrize(
    ("source", "reference", "expected"),
    [
        (GUIDE, LinkReference("markdown", "ref/api.md#calls"), "doc:ref/api"),
        (GUIDE, LinkReference("markdown", "ref/api"), "doc:ref/api"),  # .md left out
        (GUIDE, LinkReference("markdown", "ref/"), "doc:ref/README"),  # a folder's README
        (GUIDE, LinkReference("markdown", "./ref/api.md?plain=1"), "doc:ref/api"),
        (API, LinkReference("markdown", "../guide.md"), "doc:guide"),
        (API, LinkReference("markdown", "/guide.md"), "doc:guide"),  # from the root
        (API, LinkReference("markdown", "../../guide.md"), None),  # leaves the vault
        (
            GUIDE,
            LinkReference("markdown", "%D0%97%D0%B0%D0%BC%D0%B5%D1%82%D0%BA%D0%B8/план.md"),
            "doc:Заметки/план",
        ),
        (GUIDE, LinkReference("markdown", "https://example.org/guide.md"), None),
        (GUIDE, LinkReference("markdown", "doc:ref/api"), "doc:ref/api"),  # a natural key of the run
        (API, LinkReference("wiki", "setup"), "doc:guide"),  # alias
        (API, LinkReference("wiki", "SETUP GUIDE|the guide"), "doc:guide"),  # title, case-insensitive
        (GUIDE, LinkReference("wiki", "api#Calls"), "doc:ref/api"),  # two named api: the shortest path
        (
            VaultEntry("doc:other/x", "other/x.md", "X"),
            LinkReference("wiki", "api"),
            "doc:other/api",
        ),  # same folder
        (GUIDE, LinkReference("wiki", "ref/api"), "doc:ref/api"),  # by path
        (GUIDE, LinkReference("wiki", "План"), "doc:Заметки/план"),
        (GUIDE, LinkReference("wiki", "nowhere"), None),
        (GUIDE, LinkReference("relation", "ref/api.md", "SUPERSEDED_BY"), "doc:ref/api"),
    ],
)
def test_resolution(source: VaultEntry, reference: LinkReference, expected: str | None) -> None:
    assert INDEX.resolve(source, reference) == expected


def test_external_links_are_not_reported() -> None:
    assert VaultIndex.is_external(LinkReference("markdown", "mailto:someone@example.invalid"))
    assert VaultIndex.is_external(LinkReference("markdown", "#section"))
    assert not VaultIndex.is_external(LinkReference("markdown", "missing.md"))
    assert not VaultIndex.is_external(LinkReference("wiki", "https://x"))


def test_frontmatter_relations_aliases_and_meta() -> None:
    text = (
        "---\ntitle: T\naliases: [one, two]\nsuperseded_by: new.md\nrelations:\n  part_of_project: [a.md, b.md]\n"
        "project: project:x\n---\nbody\n"
    )
    vault = document_fields(read_frontmatter(text), consumed=VAULT_FIELDS)
    assert vault.aliases == ("one", "two")
    assert vault.relations == (
        ("superseded_by", "new.md"),
        ("part_of_project", "a.md"),
        ("part_of_project", "b.md"),
    )
    assert vault.meta == {"project": "project:x"}
    # cb retain (BASE_FIELDS) keeps the old mapping: those keys stay consumer meta.
    retain = document_fields(read_frontmatter(text))
    assert retain.relations == () and retain.meta["superseded_by"] == "new.md" and "relations" in retain.meta
    with pytest.raises(FrontmatterError):
        document_fields(read_frontmatter("---\nrelations: [x]\n---\n"), consumed=VAULT_FIELDS)


def test_parse_file_and_fingerprint() -> None:
    file = VaultFile("notes/a.md", "---\nscopes: [workspace:x]\n---\n# A\n\n[[b]]\n", {"commit_sha": "abc"})
    parsed = parse_file("ns", file, 0, indexed_at="2026-12-01T00:00:00Z")
    assert parsed.retain.natural_key == "doc:notes/a" and parsed.retain.scopes == ("workspace:x",)
    assert (
        parsed.retain.provenance["commit_sha"] == "abc" and parsed.retain.provenance["path"] == "notes/a.md"
    )
    assert parsed.references == (LinkReference("wiki", "b"),)
    assert parsed.fingerprint == file_fingerprint(file)  # indexed_at is not part of it
    assert file_fingerprint(VaultFile("notes/b.md", file.content, file.provenance)) != parsed.fingerprint
    assert file_fingerprint(VaultFile(file.path, file.content, {"commit_sha": "def"})) != parsed.fingerprint
    with pytest.raises(InvalidArgument) as bad:
        parse_file("ns", VaultFile("a.md", "---\nrelations: {bad-name: x.md}\n---\n"), 3)
    assert bad.value.violations[0].field == "documents[3].content"


@pytest.mark.parametrize("path", ["", "/abs.md", "../up.md", "a/../b.md", "a//b.md", "a\\b.md", "./a.md"])
def test_bad_paths(path: str) -> None:
    with pytest.raises(InvalidArgument) as bad:
        check_path(path, 2)
    assert bad.value.violations[0].field == "documents[2].path"


def test_directory_reader_honours_gitignore_and_hidden_folders(tmp_path: Path) -> None:
    for relative in (
        "a.md",
        "b.png",
        "drafts/x.md",
        "sub/keep.md",
        "sub/tmp.md",
        ".obsidian/c.md",
        "sub/deep/y.md",
    ):
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text(f"# {relative}\n", "utf-8")
    (tmp_path / ".gitignore").write_text("drafts/\n", "utf-8")
    (tmp_path / "sub" / ".gitignore").write_text("*.md\n!keep.md\n", "utf-8")
    (tmp_path / "cp1251.md").write_bytes("# Заметка\n".encode("cp1251"))  # read as the server reads text
    (tmp_path / "binary.md").write_bytes(b"PK\x03\x04\x00\x00")  # a zip under a Markdown name
    source = directory_documents(tmp_path)
    assert [d.path for d in source.documents] == ["a.md", "cp1251.md", "sub/keep.md"]
    assert source.documents[1].content == "# Заметка\n"
    assert [path for path, _ in source.skipped] == ["binary.md"]


def test_nested_gitignore_negation_matches_git(tmp_path: Path) -> None:
    """A nested .gitignore applies to its own subtree and its ``!`` re-includes what a file above ignored
    (and a deeper ignore beats a shallower ``!``): the reader keeps exactly the files Git itself keeps."""
    import shutil
    import subprocess

    if shutil.which("git") is None:
        pytest.skip("the git binary is the oracle of this test")
    ignores = {
        ".gitignore": "notes/*.md\n!notes/public.md\n/build/\n*.tmp.md\n",
        "notes/.gitignore": "!important.md\nprivate/\n",
        "notes/keep/.gitignore": "!*.md\nsecret.md\n",
        "docs/.gitignore": "*.md\n!/README.md\n!guide/\n",
        "docs/guide/.gitignore": "!*.tmp.md\n",
    }
    files = [
        "README.md",
        "a.tmp.md",
        "build/out.md",
        "notes/important.md",
        "notes/other.md",
        "notes/public.md",
        "notes/private/x.md",
        "notes/keep/one.md",
        "notes/keep/secret.md",
        "docs/README.md",
        "docs/intro.md",
        "docs/guide/step.md",
        "docs/guide/draft.tmp.md",
        "docs/sub/README.md",
    ]
    for relative, text in [*ignores.items(), *((f, f"# {f}\n") for f in files)]:
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text(text, "utf-8")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    listed = subprocess.run(
        ["git", "ls-files", "--others", "--exclude-standard", "--", "*.md"],
        cwd=tmp_path,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    kept = [d.path for d in directory_documents(tmp_path).documents]
    assert kept == sorted(listed)
    # The re-includes this test is about (Git keeps them, a reader that ignores nested `!` does not).
    assert {"notes/important.md", "notes/keep/one.md", "docs/guide/draft.tmp.md"} <= set(kept)
    assert not {"notes/other.md", "notes/keep/secret.md", "docs/intro.md", "a.tmp.md"} & set(kept)


def test_stream_of_cb_ingest() -> None:
    documents = [SourceDocument(f"d{i}.md", "x" * 10, {"k": i} if i == 0 else {}) for i in range(40)]
    messages = list(vault_messages(VaultSource(documents, source="/v", branch="main"), "ns", dry_run=True))
    assert messages[0].header == vault_service_pb2.IngestVaultHeader(
        namespace="ns", dry_run=True, source="/v", branch="main"
    )
    parts = [m.documents.documents for m in messages[1:-1]]
    assert [len(p) for p in parts] == [16, 16, 8]
    assert messages[-1].end.document_count == 40
    assert dict(parts[0][0].provenance) == {"k": 0.0} and not parts[0][1].HasField("provenance")
