"""Bounded waits of the tests for work done in another thread or process: waits, not timing assertions."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest


def wait_for(
    condition: Callable[[], bool], what: str, limit_s: float = 90.0, interval_s: float = 0.1
) -> None:
    """Polls ``condition`` every ``interval_s`` until it is true; fails naming ``what`` after ``limit_s``."""
    deadline = time.monotonic() + limit_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached within {limit_s} s: {what}")
        time.sleep(interval_s)


def eventually(condition: Callable[[], Any], what: str, attempts: int = 600) -> Any:
    """Polls ``condition`` (every 0.2 s, bounded) until it returns something true; fails naming ``what``."""
    for _ in range(attempts):
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    pytest.fail(f"never happened: {what}")


def drained(worker: Any, namespace: str, limit_s: float = 60.0) -> None:
    """Runs ``worker.drain()`` until ``worker.backlog(namespace)`` holds nothing pending. ``drain`` stops when
    nothing is left to claim, while another worker on the same database may still hold claims: wait for it."""

    def empty() -> bool:
        worker.drain()
        return bool(worker.backlog(namespace).pending == 0)

    wait_for(empty, f"the backlog of {namespace} drained", limit_s)
