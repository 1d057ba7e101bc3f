"""bench/RESULTS.md says "newest last": its entries must be in time order (`bench.results_order`)."""

from __future__ import annotations

import pytest

from bench.results_order import RESULTS, entry_time, in_time_order, split_entries


def test_results_entries_are_in_time_order() -> None:
    _, entries = split_entries(RESULTS.read_text())
    times = [entry_time(entry.splitlines()[0]) for entry in entries]
    out_of_order = [entries[i + 1].splitlines()[0] for i in range(len(times) - 1) if times[i] > times[i + 1]]
    assert not out_of_order, f"run `python -m bench.results_order`; out of order: {out_of_order[:3]}"


def test_time_stamps_of_every_heading_form() -> None:
    assert entry_time("## 20261202T040808Z — 2 cores") == "20261202040808"
    assert entry_time("## 20261202T0125Z — summary") == "20261202012500"
    assert entry_time("## 2026-11-30T01:35:19Z — snapshot") == "20261130013519"
    assert entry_time("## Typed traversal — 20261130, 2 cores") == "20261130000000"
    with pytest.raises(ValueError, match="no time stamp"):
        entry_time("## a heading without a time")


def test_ordering_is_stable_and_keeps_each_entry_whole() -> None:
    text = (
        "# Benchmark results\n\n"
        "## 20261202T020000Z b\n\n### reading of b\n\n"
        "## 20261202T010000Z a\n\ntext a\n\n"
        "## 20261202T020000Z c\n\ntext c\n"
    )
    ordered = in_time_order(text)
    assert ordered.index("## 20261202T010000Z a") < ordered.index("## 20261202T020000Z b")
    assert ordered.index("## 20261202T020000Z b") < ordered.index("### reading of b")
    assert ordered.index("### reading of b") < ordered.index("## 20261202T020000Z c")
    assert in_time_order(ordered) == ordered
