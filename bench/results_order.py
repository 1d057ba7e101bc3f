"""Keeps bench/RESULTS.md "newest last": its entries (``## `` headings) ordered by their time stamps.

`bench.service_results.append_entry` adds each entry in its place (a run appends when it ends, stamped
with when it started); branches that benchmark at the same time and are merged later interleave their
entries out of order.
``python -m bench.results_order`` puts them back in time order (stable: entries of one instant keep
their order; the text of each entry, its ``###`` readings included, moves with it), and
``tests/unit/test_results_order.py`` fails while the file is out of order.

Time stamps recognised in a heading: ``20261202T040808Z``, ``20261202T0125Z``, ``2026-11-30T01:35:19Z``
and a bare date ``20261130`` (its entry sorts at the start of that day).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
_STAMP = re.compile(r"(\d{4})-?(\d{2})-?(\d{2})(?:T(\d{2}):?(\d{2})?:?(\d{2})?)?")
_ENTRY = re.compile(r"(?m)^(?=## )")


def entry_time(heading: str) -> str:
    """The sortable time ``YYYYMMDDhhmmss`` of an entry's heading line.

    Raises:
        ValueError: the heading carries no time stamp.
    """
    match = _STAMP.search(heading)
    if match is None:
        raise ValueError(f"no time stamp in the heading {heading!r}")
    return "".join(part or "00" for part in match.groups())


def split_entries(text: str) -> tuple[str, list[str]]:
    """The file's preamble (before the first entry) and its entries, each from its ``## `` line on."""
    preamble, *entries = _ENTRY.split(text)
    return preamble, entries


def in_time_order(text: str) -> str:
    """``text`` with its entries ordered by `entry_time` (stable), each ending in one blank line."""
    preamble, entries = split_entries(text)
    ordered = sorted(entries, key=lambda entry: entry_time(entry.splitlines()[0]))
    return preamble + "\n".join(entry.rstrip("\n") + "\n" for entry in ordered)


def main() -> int:
    """Rewrites bench/RESULTS.md in time order; prints how many entries moved."""
    text = RESULTS.read_text()
    ordered = in_time_order(text)
    _, before = split_entries(text)
    _, after = split_entries(ordered)
    moved = sum(1 for old, new in zip(before, after, strict=True) if old.rstrip() != new.rstrip())
    RESULTS.write_text(ordered)
    print(f"{len(after)} entries, {moved} moved")
    return 0


if __name__ == "__main__":
    sys.exit(main())
