"""The documents of a vault run, read on the client for ``cb ingest`` (VaultService.IngestVault).

Two sources, each yielding `SourceDocument`s sorted by path:

* `directory_documents`: the ``*.md`` files (and the formats the server converts: ``*.pdf``, ``*.docx``,
  ``*.html``, ...; docs/how-to/documents.md) under a folder, recursively; hidden folders (``.git``,
  ``.obsidian``, ...) skipped; ``.gitignore`` files honoured at every level, with Git's rules (pathspec's
  ``GitIgnoreSpec``: negation, anchoring, directory patterns; a nested ``.gitignore`` applies to its own
  subtree and its ``!`` patterns re-include what a file above ignored, as in Git).
* `git_documents`: the ``*.md`` blobs (and those formats) of a Git repository's commit (the tip of a branch, default the
  checked-out one), read with dulwich (never the working tree, never ``.git`` parsed by hand), each with
  the provenance docs/explanation/knowledge-model.md names for Git: repository, branch, commit_sha, path,
  author, committed_at of the last commit that changed the file (so an unchanged file keeps its provenance
  from commit to commit and the server finds it unchanged). A repository URL is cloned into a temporary folder
  first.
"""

from __future__ import annotations

import io
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from dataclasses import field
from datetime import UTC
from datetime import datetime
from pathlib import Path
from pathlib import PurePosixPath
from typing import Any

from ingest_service.documents.conversion.media_types import EXTENSIONS
from ingest_service.documents.conversion.media_types import MARKDOWN
from ingest_service.documents.conversion.text_encoding import NotText
from ingest_service.documents.conversion.text_encoding import markdown_text


class SourceError(ValueError):
    """A vault source that cannot be read (not a folder, not a Git repository, no such branch)."""


@dataclass(frozen=True)
class SourceDocument:
    """One document: ``path`` relative to the root (POSIX), the UTF-8 ``content``, its ``provenance``;
    a file that is not Markdown (PDF, DOCX, HTML, ...) has its bytes in ``original`` and no content."""

    path: str
    content: str
    provenance: dict[str, Any] = field(default_factory=dict)
    original: bytes = b""
    media_type: str = ""


@dataclass(frozen=True)
class VaultSource:
    """The documents of a run and where they come from (IngestVaultHeader's source, branch, commit)."""

    documents: list[SourceDocument]
    source: str
    branch: str = ""
    commit_sha: str = ""
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path, why) of unreadable files


def _is_markdown(name: str) -> bool:
    """A file sent to the vault: Markdown, or a format the server converts (media_types.EXTENSIONS)."""
    return PurePosixPath(name.lower()).suffix in EXTENSIONS


def _document(path: str, data: bytes, provenance: dict[str, Any] | None = None) -> SourceDocument:
    """The document of a file's bytes: Markdown as text (`markdown_text`: UTF-8, else cp1251), other
    formats as an original with its type.

    Raises:
        NotText: a Markdown file that holds NUL bytes.
    """
    media_type = EXTENSIONS[PurePosixPath(path.lower()).suffix]
    if media_type == MARKDOWN:
        return SourceDocument(path, markdown_text(data), provenance or {})
    return SourceDocument(path, "", provenance or {}, original=data, media_type=media_type)


def directory_documents(root: Path) -> VaultSource:
    """The documents under ``root`` (see the module doc); files that cannot be read, and Markdown files
    that are not text, are skipped and listed in ``skipped`` (the run then sweeps nothing).

    Raises:
        SourceError: ``root`` is not a folder.
    """
    import pathspec  # imported here to keep `cb --help` fast

    if not root.is_dir():
        raise SourceError(f"{root} is not a folder")
    documents: list[SourceDocument] = []
    skipped: list[tuple[str, str]] = []
    specs: list[tuple[str, Any]] = []  # (folder relative to root, its .gitignore) of the folders above
    for folder, dirs, files in os.walk(root):
        relative_folder = Path(folder).relative_to(root).as_posix()
        relative_folder = "" if relative_folder == "." else relative_folder
        specs = [(base, spec) for base, spec in specs if _within(relative_folder, base)]
        ignore_file = Path(folder) / ".gitignore"
        if ignore_file.is_file():
            lines = ignore_file.read_text("utf-8", errors="replace").splitlines()
            specs.append((relative_folder, pathspec.GitIgnoreSpec.from_lines(lines)))

        dirs[:] = sorted(
            d
            for d in dirs
            if not d.startswith(".") and not _ignored(specs, f"{relative_folder}/{d}".lstrip("/"), True)
        )
        for name in sorted(files):
            relative = f"{relative_folder}/{name}".lstrip("/")
            if not _is_markdown(name) or _ignored(specs, relative, False):
                continue
            try:
                document = _document(relative, (Path(folder) / name).read_bytes())
            except (OSError, NotText) as error:
                skipped.append((relative, str(error)))
                continue
            documents.append(document)
    documents.sort(key=lambda d: d.path)
    return VaultSource(documents, source=str(root.resolve()), skipped=skipped)


def _ignored(specs: list[tuple[str, Any]], relative: str, is_dir: bool) -> bool:
    """Whether the ``.gitignore`` files of the folders above ignore ``relative`` (a path from the root),
    as Git decides it: each file's patterns apply to its own folder's subtree, the files are read from the
    root down, and the last pattern that matches decides, so a deeper file's ``!pattern`` re-includes
    what a shallower one ignored (and a deeper ignore beats a shallower ``!``). ``specs`` are ordered
    from the root down."""
    ignored = False
    for base, spec in specs:
        inside = relative[len(base) + 1 :] if base else relative
        decision = spec.check_file(inside + ("/" if is_dir else "")).include
        if decision is not None:
            ignored = decision
    return ignored


def _within(folder: str, base: str) -> bool:
    return not base or folder == base or folder.startswith(base + "/")


def _is_url(location: str) -> bool:
    return "://" in location or (location.count(":") == 1 and "@" in location.split(":")[0])


@contextmanager
def opened_repository(location: str) -> Iterator[tuple[Any, str]]:
    """The dulwich ``Repo`` of a local path, or of a clone of a URL into a temporary folder (removed
    afterwards), and the repository's name for provenance (the URL, or the ``origin`` remote's URL, or
    the folder's absolute path).

    Raises:
        SourceError: not a Git repository, or the clone failed.
    """
    from dulwich import porcelain
    from dulwich.errors import NotGitRepository
    from dulwich.repo import Repo

    if _is_url(location):
        with tempfile.TemporaryDirectory(prefix="cb-ingest-") as folder:
            try:
                repo = porcelain.clone(location, folder, checkout=False, errstream=io.BytesIO())
            except Exception as error:  # dulwich raises many kinds for network and protocol failures
                raise SourceError(f"cannot clone {location}: {error}") from error
            try:
                yield repo, location
            finally:
                repo.close()
        return
    try:
        repo = Repo(location)
    except (NotGitRepository, FileNotFoundError) as error:
        raise SourceError(f"{location} is not a Git repository") from error
    try:
        name = str(Path(location).resolve())
        try:
            url = repo.get_config().get((b"remote", b"origin"), b"url")
            name = url.decode("utf-8", errors="replace") if url else name
        except KeyError:
            pass
        yield repo, name
    finally:
        repo.close()


def git_documents(location: str, branch: str = "") -> VaultSource:
    """The Markdown blobs of the tip of ``branch`` (default: the checked-out branch) of the repository at
    ``location`` (a path or URL), with Git provenance per file (see the module doc).

    Raises:
        SourceError: not a repository, no such branch, or an empty repository.
    """
    with opened_repository(location) as (repo, repository):
        refs = repo.get_refs()
        if not branch:
            head = repo.refs.read_ref(b"HEAD") or b""
            branch = (
                head.decode().removeprefix("ref: ").removeprefix("refs/heads/")
                if head.startswith(b"ref: ")
                else ""
            )
        candidates = (
            [f"refs/heads/{branch}".encode(), f"refs/remotes/origin/{branch}".encode()]
            if branch
            else [b"HEAD"]
        )
        tip = next((refs[name] for name in candidates if name in refs), None)
        if tip is None:
            raise SourceError(
                f"{location}: no branch {branch!r}" if branch else f"{location}: empty repository"
            )
        commit = repo[tip]
        blobs = _markdown_blobs(repo, commit.tree)
        last = _last_commits(repo, tip, set(blobs))
        documents, skipped = [], []
        for path in sorted(blobs):
            changed = last.get(path, commit)
            try:
                document = _document(
                    path,
                    repo[blobs[path]].data,
                    {
                        "repository": repository,
                        "branch": branch,
                        "commit_sha": changed.id.decode(),
                        "author": changed.author.decode("utf-8", errors="replace"),
                        "committed_at": _instant(changed.commit_time),
                    },
                )
            except NotText as error:
                skipped.append((path, str(error)))
                continue
            documents.append(document)
        return VaultSource(
            documents, source=repository, branch=branch, commit_sha=tip.decode(), skipped=skipped
        )


def _markdown_blobs(repo: Any, tree_id: bytes) -> dict[str, bytes]:
    """Path -> blob id of the ``*.md`` files of a tree, hidden folders skipped."""
    from dulwich.object_store import iter_tree_contents

    found: dict[str, bytes] = {}
    for entry in iter_tree_contents(repo.object_store, tree_id):
        path = entry.path.decode("utf-8", errors="replace")
        parts = path.split("/")
        if _is_markdown(parts[-1]) and not any(part.startswith(".") for part in parts[:-1]):
            found[path] = entry.sha
    return found


def _last_commits(repo: Any, tip: bytes, paths: set[str]) -> dict[str, Any]:
    """For each of ``paths``, the newest commit (walking back from ``tip``) that changed it: one walk of
    the history, stopped as soon as every path has its commit."""
    remaining = {path.encode() for path in paths}
    found: dict[str, Any] = {}
    for entry in repo.get_walker(include=[tip]):
        if not remaining:
            break
        changes = entry.changes()
        flat = (
            [c for group in changes for c in group] if changes and isinstance(changes[0], list) else changes
        )
        for change in flat:
            new_path = change.new.path if change.new is not None else None
            if new_path in remaining:
                remaining.discard(new_path)
                found[new_path.decode()] = entry.commit
    return found


def _instant(epoch_seconds: int) -> str:
    return datetime.fromtimestamp(epoch_seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


__all__ = ["SourceDocument", "SourceError", "VaultSource", "directory_documents", "git_documents"]
