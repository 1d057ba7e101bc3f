"""How the client calls the services: deadlines of reads and writes, and retries of idempotent calls.

An idempotent call (every read; RecordObservations, Retain, Reconcile) is retried as is while the service
answers UNAVAILABLE, with exponential backoff: the n-th wait is ``RETRY_INITIAL_WAIT * 2**(n-1)`` seconds,
at most ``RETRY_MAX_WAIT``, and the call is given up once ``RETRY_MAX_SECONDS`` have passed since the first
attempt (a wait never runs past that). The functions read these module constants at call time (tests
shorten them). The loop is written out here rather than taken from a retry library so that the package
depends on grpcio and protobuf only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import grpc

from memory_service_grpc_client.errors import is_unavailable

__all__ = [
    "READ_TIMEOUT_SECONDS",
    "RETRY_INITIAL_WAIT",
    "RETRY_MAX_SECONDS",
    "RETRY_MAX_WAIT",
    "WRITE_TIMEOUT_SECONDS",
    "backoff_wait",
    "retry_while_unavailable",
]

RETRY_MAX_SECONDS = 120.0
RETRY_INITIAL_WAIT = 0.5
RETRY_MAX_WAIT = 10.0
WRITE_TIMEOUT_SECONDS = 600.0
READ_TIMEOUT_SECONDS = 120.0

T = TypeVar("T")


def backoff_wait(attempt: int) -> float:
    """Seconds to wait before retry number ``attempt`` (1-based): ``RETRY_INITIAL_WAIT * 2**(attempt-1)``,
    capped at ``RETRY_MAX_WAIT``."""
    return float(min(RETRY_MAX_WAIT, RETRY_INITIAL_WAIT * 2 ** max(0, attempt - 1)))


def retry_while_unavailable(
    call: Callable[[], T],
    *,
    on_retry: Callable[[str], None] | None = None,
    max_seconds: float | None = None,
) -> T:
    """Runs ``call``, retrying on UNAVAILABLE with exponential backoff for up to ``RETRY_MAX_SECONDS``.

    Args:
        call: the whole call, safe to repeat (an idempotent RPC with its request and deadline).
        on_retry: receives ``service unavailable, retrying in <s> s`` before each wait.
        max_seconds: give up after this many seconds instead of ``RETRY_MAX_SECONDS``; 0 tries once.

    Returns:
        What ``call`` returned.

    Raises:
        grpc.RpcError: the last failure (UNAVAILABLE once the retries are used up, any other code at once).
    """
    budget = RETRY_MAX_SECONDS if max_seconds is None else max_seconds
    deadline = time.monotonic() + budget
    attempt = 0
    while True:
        try:
            return call()
        except grpc.RpcError as exc:
            if not is_unavailable(exc):
                raise
            attempt += 1
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise
            wait = min(backoff_wait(attempt), remaining)
            if on_retry is not None:
                on_retry(f"service unavailable, retrying in {wait:.1f} s")
            time.sleep(wait)
