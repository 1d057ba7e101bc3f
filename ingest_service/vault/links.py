"""Links of vault documents: found in the Markdown (markdown-it-py) and resolved against the run's documents.

What counts as a link of a document (docs/explanation/knowledge-model.md: vault links become LINKS_TO edges):

* Markdown links ``[text](href)`` of the body whose ``href`` has no URL scheme (``https:``, ``mailto:``
  are external and ignored) or is the natural key of a document of the run (``doc:apt/README``);
  images are not links. The ``#anchor`` and ``?query`` are dropped and ``%xx`` escapes decoded; a path is
  relative to the linking document's folder (``/`` at the start: to the vault's root) and may leave out
  ``.md`` or name a folder holding ``README.md`` or ``index.md``. A link that only has an anchor is a link
  to the document itself and ignored.
* ``[[wiki links]]`` in the text of the body (not inside code spans or code blocks), with an optional
  ``#heading`` and ``|label`` (the label is display text: dropped when the link is read, so it never
  becomes part of the target; in a table cell the ``|`` is written ``\\|``, as in Obsidian):
  ``[[Target]]`` names a document by natural key, by path (with or without
  ``.md``, from the vault's root or the document's folder), or by name, compared case-insensitively: the
  file name without ``.md``, the document's title, or one of its frontmatter ``aliases``. When a name
  fits several documents, the one in the linking document's folder wins, then the shortest path, then
  the first path in sort order (Obsidian's "nearest" rule, made deterministic).
* Frontmatter ``links``: natural keys (as in DocumentService.Retain), or paths and names like wiki links
  (also written as a wiki link, ``"[[Target|label]]"``, the way Obsidian writes links in properties).
* Frontmatter relations (`common.domain.document_frontmatter.RELATION_KEYS`, ``relations:``): targets
  resolved like wiki links; the predicate is the relation in upper case (``superseded_by`` ->
  ``SUPERSEDED_BY``).

A target none of this resolves may still name an existing node of the namespace by natural key (checked
by the caller, `ingest_service.vault.link_writer`, with `link_names`); otherwise it is reported as
unresolved, by name.

The first level-1 heading of the body is the document's title when its frontmatter has none
(`body_outline`).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import unquote

from markdown_it import MarkdownIt
from markdown_it.token import Token

from ingest_service.documents.chunking import plain_text

LINKS_TO = "LINKS_TO"
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_WIKI_LINK = re.compile(r"\[\[([^\[\]\n]+?)\]\]")
PREDICATE_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


@dataclass(frozen=True)
class LinkReference:
    """A link as written in a document: ``kind`` is ``"markdown"``, ``"wiki"``, ``"frontmatter"`` or
    ``"relation"``; ``relation`` is ``LINKS_TO`` or the relation's predicate (upper case)."""

    kind: str
    target: str
    relation: str = LINKS_TO


@lru_cache(maxsize=1)
def _parser() -> MarkdownIt:
    return MarkdownIt("commonmark").enable("table")


def _inline_links(children: Sequence[Token]) -> Iterable[LinkReference]:
    text: list[str] = []

    def flush() -> Iterable[LinkReference]:
        joined = "".join(text)
        text.clear()
        for match in _WIKI_LINK.finditer(joined):
            target = match.group(1).split("|", 1)[0].strip()
            if target:
                yield LinkReference("wiki", target)

    for child in children:
        if child.type == "text":
            text.append(child.content)
            continue
        yield from flush()
        if child.type == "link_open":
            href = str(child.attrGet("href") or "").strip()
            if href:
                yield LinkReference("markdown", href)
    yield from flush()


def body_outline(body: str) -> tuple[list[LinkReference], str]:
    """The Markdown links and wiki links of a document body (frontmatter already stripped), in order,
    and the plain text of its first level-1 heading (ATX ``#`` or setext ``===``, not inside a block
    quote or list; ``""`` when there is none), from one parse."""
    found: list[LinkReference] = []
    title = ""
    tokens = _parser().parse(body)
    for position, token in enumerate(tokens):
        if token.type == "inline" and token.children:
            found.extend(_inline_links(token.children))
        elif not title and token.type == "heading_open" and token.tag == "h1" and token.level == 0:
            title = plain_text(tokens[position + 1])
    return found, title


def body_links(body: str) -> list[LinkReference]:
    """The Markdown links and wiki links of a document body (frontmatter already stripped), in order."""
    return body_outline(body)[0]


def link_names(reference: LinkReference) -> tuple[str, ...]:
    """The natural keys an unresolved ``reference`` may name among the namespace's existing nodes: the
    target as written and, for a wiki, frontmatter or relation target, the name without ``[[ ]]``,
    ``|label`` and ``#heading`` (``"[[person:alice#Bio|Alice]]"`` -> ``person:alice``)."""
    target = reference.target.strip()
    if reference.kind == "markdown":
        return (target,)
    return tuple(dict.fromkeys(name for name in (target, _wiki_name(target)) if name))


def _wiki_name(target: str) -> str:
    """A wiki-style target without its brackets, label and heading."""
    target = target.strip()
    if target.startswith("[[") and target.endswith("]]"):
        target = target[2:-2]
    return target.split("|", 1)[0].split("#", 1)[0].strip()


@dataclass(frozen=True)
class VaultEntry:
    """What the resolver knows of one document of the run."""

    natural_key: str
    path: str
    title: str
    aliases: tuple[str, ...] = ()


class VaultIndex:
    """Documents of one run by key, path and name; resolves `LinkReference`s (see the module doc)."""

    def __init__(self, entries: Iterable[VaultEntry]) -> None:
        self.by_key: dict[str, VaultEntry] = {}
        self.by_path: dict[str, str] = {}
        self.by_name: dict[str, list[VaultEntry]] = {}
        for entry in sorted(entries, key=lambda e: e.path):
            self.by_key[entry.natural_key] = entry
            self.by_path[entry.path] = entry.natural_key
            stem = posixpath.basename(entry.path)
            stem = stem[:-3] if stem.lower().endswith(".md") else stem
            for name in {stem, entry.title, *entry.aliases}:
                if name.strip():
                    self.by_name.setdefault(name.strip().casefold(), []).append(entry)

    def _path(self, path: str) -> str | None:
        for candidate in (path, f"{path}.md", f"{path}/README.md", f"{path}/index.md"):
            key = self.by_path.get(candidate.strip("/"))
            if key is not None:
                return key
        return None

    def _relative(self, folder: str, target: str) -> str | None:
        """``target`` joined to ``folder`` (root-relative when it starts with ``/``), normalised; None when
        it leaves the vault."""
        joined = posixpath.normpath(
            target.lstrip("/") if target.startswith("/") else posixpath.join(folder, target)
        )
        if joined == "." or joined.startswith("../") or joined == "..":
            return None
        return joined

    def _named(self, folder: str, name: str) -> str | None:
        entries = self.by_name.get(name.casefold())
        if not entries:
            return None
        best = min(entries, key=lambda e: (posixpath.dirname(e.path) != folder, len(e.path), e.path))
        return best.natural_key

    def resolve(self, source: VaultEntry, reference: LinkReference) -> str | None:
        """The natural key of the run's document ``reference`` names, or None."""
        target = reference.target.strip()
        folder = posixpath.dirname(source.path)
        if target in self.by_key:
            return target
        if reference.kind == "markdown":
            if _SCHEME.match(target) or target.startswith("//"):
                return None
            path = unquote(target.split("#", 1)[0].split("?", 1)[0]).strip()
            if not path:
                return None
            joined = self._relative(folder, path)
            return self._path(joined) if joined is not None else None
        name = _wiki_name(target)
        if not name:
            return None
        if name in self.by_key:
            return name
        for candidate in (self._relative(folder, name), name.strip("/")):
            key = self._path(candidate) if candidate else None
            if key is not None:
                return key
        return self._named(folder, name)

    @staticmethod
    def is_external(reference: LinkReference) -> bool:
        """A Markdown link to a URL (not a vault link at all) or to an anchor of the document itself."""
        target = reference.target.strip()
        if reference.kind != "markdown":
            return False
        return target.startswith("#") or (bool(_SCHEME.match(target)) or target.startswith("//"))


__all__ = [
    "LINKS_TO",
    "PREDICATE_PATTERN",
    "LinkReference",
    "VaultEntry",
    "VaultIndex",
    "body_links",
    "body_outline",
    "link_names",
]
