"""Group commit of the write lanes (`ingest_service.observations.write_lanes`): which requests share one write, and
that each request still gets its own results and its own failure.

The write function here records its calls and can be held, so the tests decide which requests are
waiting when a group is taken (no timing: the held write is released only once the others are queued).
"""

from __future__ import annotations

import threading

import pytest

from common.auth.principals import Principal
from common.auth.principals import principal_context
from common.kernel.errors import Unavailable
from ingest_service.observations.write_lanes import WriteLanes


class HeldWrite:
    """A write of string items whose first call waits for `release`; results ``item -> "written:item"``."""

    def __init__(self, failing: str = "", unavailable: bool = False) -> None:
        self.calls: list[list[str]] = []
        self.entered = threading.Event()
        self.released = threading.Event()
        self.failing = failing
        self.unavailable = unavailable

    def __call__(self, items: list[str]) -> dict[str, str]:
        self.calls.append(list(items))
        if len(self.calls) == 1:
            self.entered.set()
            assert self.released.wait(30)
        if self.unavailable and len(items) > 1:
            raise Unavailable("database down")
        if self.failing in items:
            raise ValueError(f"cannot write {self.failing}")
        return {item: f"written:{item}" for item in items}


def _submit(
    lanes: WriteLanes[str, str],
    lane: str,
    items: list[str],
    out: dict[str, object],
    principal: Principal | None = None,
) -> threading.Thread:
    def run() -> None:
        try:
            if principal is None:
                out[items[0]] = lanes.submit(lane, items, set(items))
            else:
                with principal_context(principal):
                    out[items[0]] = lanes.submit(lane, items, set(items))
        except Exception as error:  # noqa: BLE001 - the test inspects it
            out[items[0]] = error

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _queued(lanes: WriteLanes[str, str], lane: str, count: int) -> None:
    """Waits until ``count`` requests wait in ``lane`` (the leader's group already taken)."""
    for _ in range(3000):
        with lanes._lock:
            if len(lanes._waiting.get(lane, ())) == count:
                return
        threading.Event().wait(0.01)
    raise AssertionError(f"{count} requests never queued")


def _run(write: HeldWrite, later: list[list[str]], lane_of=lambda items: "ns") -> dict[str, object]:
    """Submits ``["a"]`` (held in its write), then ``later`` while it is held; returns results by first item."""
    lanes: WriteLanes[str, str] = WriteLanes(write)
    out: dict[str, object] = {}
    threads = [_submit(lanes, "ns", ["a"], out)]
    assert write.entered.wait(30)
    for items in later:
        threads.append(_submit(lanes, lane_of(items), items, out))
    _queued(lanes, "ns", sum(1 for items in later if lane_of(items) == "ns"))
    write.released.set()
    for thread in threads:
        thread.join(30)
    return out


def test_requests_waiting_in_a_lane_are_written_together_each_with_its_own_results() -> None:
    write = HeldWrite()
    out = _run(write, [["b1", "b2"], ["c"], ["d"]])
    assert write.calls == [["a"], ["b1", "b2", "c", "d"]]
    assert out == {
        "a": {"a": "written:a"},
        "b1": {"b1": "written:b1", "b2": "written:b2"},
        "c": {"c": "written:c"},
        "d": {"d": "written:d"},
    }


def test_requests_sharing_an_observation_id_are_never_in_one_group() -> None:
    write = HeldWrite()
    out = _run(write, [["b", "x"], ["x", "c"], ["d"]])
    assert write.calls == [["a"], ["b", "x", "d"], ["x", "c"]]
    assert out["b"] == {"b": "written:b", "x": "written:x"}
    assert out["x"] == {"x": "written:x", "c": "written:c"}


def test_a_failing_request_fails_alone_and_its_group_neighbours_are_written() -> None:
    write = HeldWrite(failing="bad")
    out = _run(write, [["b"], ["bad"], ["d"]])
    assert write.calls == [["a"], ["b", "bad", "d"], ["b"], ["bad"], ["d"]]
    assert out["b"] == {"b": "written:b"} and out["d"] == {"d": "written:d"}
    assert isinstance(out["bad"], ValueError)


def test_unavailable_fails_the_whole_group_without_writing_each_again() -> None:
    write = HeldWrite(unavailable=True)
    out = _run(write, [["b"], ["c"]])
    assert write.calls == [["a"], ["b", "c"]]
    assert isinstance(out["b"], Unavailable) and isinstance(out["c"], Unavailable)


def test_other_lanes_and_other_callers_are_not_grouped() -> None:
    write = HeldWrite()
    lanes: WriteLanes[str, str] = WriteLanes(write)
    out: dict[str, object] = {}
    first = _submit(lanes, "ns", ["a"], out)
    assert write.entered.wait(30)
    other_lane = _submit(lanes, "other", ["o"], out)  # written at once: its lane is idle
    other_lane.join(30)
    stranger = _submit(lanes, "ns", ["s"], out, Principal(name="someone-else"))
    mine = _submit(lanes, "ns", ["m"], out)
    _queued(lanes, "ns", 2)
    write.released.set()
    for thread in (first, stranger, mine):
        thread.join(30)
    assert write.calls[:2] == [["a"], ["o"]]
    assert sorted(write.calls[2:]) == [["m"], ["s"]]
    assert out["s"] == {"s": "written:s"} and out["m"] == {"m": "written:m"}


@pytest.mark.parametrize("size", [1, 3])
def test_a_group_holds_at_most_max_items(size: int) -> None:
    write = HeldWrite()
    lanes: WriteLanes[str, str] = WriteLanes(write, max_items=3)
    out: dict[str, object] = {}
    threads = [_submit(lanes, "ns", ["a"], out)]
    assert write.entered.wait(30)
    batches = [[f"{n}-{i}" for i in range(size)] for n in range(4)]
    for items in batches:
        threads.append(_submit(lanes, "ns", items, out))
    _queued(lanes, "ns", 4)
    write.released.set()
    for thread in threads:
        thread.join(30)
    assert all(len(call) <= 3 for call in write.calls)
    assert sorted(item for call in write.calls[1:] for item in call) == sorted(i for b in batches for i in b)
