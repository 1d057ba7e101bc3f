"""Which file of a vault run gets a natural key that several files name (docs/how-to/vault-ingest.md,
"One key, one file"). Used by `ingest_service.vault.ingest`.

The rule, whatever order the files were listed in:

1. the file the namespace's vault journal (``vault_documents``) has the key from keeps it, when it is in
   the run and still names the key (a file added later with the same key never takes it over);
2. otherwise (a new key, or its file is gone, renamed or now names another key) the claimant with the
   smallest relative path (Unicode code point order) gets it.

Every other claimant is a conflict naming the path that keeps the key; its text is never written.

A run receives its documents in ascending path order (the run refuses any other order, see
`KeyClaims.arrive`), so the rule is decided as the stream goes and nothing but the waiting claimants is
held in memory: a claimant of a key whose journaled file has a larger path waits until the stream
reaches that path (or ends); every other claimant is decided when it arrives.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from common.kernel.errors import InvalidArgument

TAKE, WAIT, LOSE = "take", "wait", "lose"


@dataclass(frozen=True)
class Claimant:
    """A parsed document that names a key: its position in the stream, its path, what was parsed."""

    index: int
    path: str
    parsed: Any  # ingest_service.vault.documents.ParsedDocument
    indexed_at: datetime  # when it was read (its provenance's indexed_at)


class KeyClaims:
    """The key claims of one run (see the module doc).

    Args:
        holders: natural key -> the path the journal has it from (the namespace's vault documents).
    """

    def __init__(self, holders: Mapping[str, str]) -> None:
        self._holders = dict(holders)
        self._keys_of_path: dict[str, list[str]] = {}
        for key, path in self._holders.items():
            self._keys_of_path.setdefault(path, []).append(key)
        self.owners: dict[str, str] = {}  # key -> the path that got it in this run
        self._waiting: dict[str, list[Claimant]] = {}
        self._last_path: str | None = None

    def arrive(self, path: str, index: int) -> list[tuple[str, list[Claimant]]]:
        """Records that the ``index``-th document, at ``path``, arrived; returns the waiting claims the
        stream has now passed the journaled file of (that file is absent or names another key): (key,
        its claimants in path order), the first of which gets the key.

        Raises:
            InvalidArgument: ``documents[index].path`` does not follow the previous path in ascending
                order (or repeats it).
        """
        if self._last_path is not None and path <= self._last_path:
            what = "is sent twice" if path == self._last_path else f"comes after {self._last_path!r}"
            raise InvalidArgument.single(
                f"documents[{index}].path",
                f"{path!r} {what}: documents are sent in ascending path order (Unicode code points), "
                "each path once",
            )
        self._last_path = path
        passed = [key for key in self._waiting if self._holders[key] < path]
        return [(key, self._waiting.pop(key)) for key in sorted(passed)]

    def decide(self, key: str, path: str) -> str:
        """`TAKE` (``path`` gets ``key`` now), `WAIT` (the key's journaled file is still to come) or
        `LOSE` (another path has it: `owner`)."""
        if key in self.owners:
            return LOSE
        holder = self._holders.get(key)
        return WAIT if holder is not None and holder > path else TAKE

    def wait(self, key: str, claimant: Claimant) -> None:
        """Keeps ``claimant`` of ``key`` until the stream passes the key's journaled file."""
        self._waiting.setdefault(key, []).append(claimant)

    def take(self, key: str, path: str) -> list[Claimant]:
        """``path`` gets ``key``; returns the claimants that waited for it (they lose)."""
        self.owners[key] = path
        return self._waiting.pop(key, [])

    def reserve(self, path: str) -> list[tuple[str, list[Claimant]]]:
        """The file at ``path`` could not be read (rejected): the keys the journal has from it stay its
        own in this run (nothing else takes them over while it is broken); returns each such key with the
        claimants that waited for it (they lose)."""
        lost = []
        for key in self._keys_of_path.get(path, ()):
            if key not in self.owners:
                lost.append((key, self.take(key, path)))
        return lost

    def owner(self, key: str) -> str | None:
        """The path that got ``key`` in this run, if any."""
        return self.owners.get(key)

    def rest(self) -> list[tuple[str, list[Claimant]]]:
        """At the end of the stream: every claim still waiting (its journaled file never came)."""
        rest = sorted(self._waiting.items())
        self._waiting.clear()
        return rest


def conflict_detail(key: str, path: str, owner: str) -> str:
    """The reason reported for a claimant that lost ``key`` to ``owner``."""
    return (
        f"natural key {key!r} is also named by {owner!r}, which keeps it (the file the key was projected "
        f"from keeps it, else the smallest path): {path!r} was not written"
    )


__all__ = ["LOSE", "TAKE", "WAIT", "Claimant", "KeyClaims", "conflict_detail"]
