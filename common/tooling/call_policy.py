"""How the tooling calls the services: deadlines of reads and writes, and retries of idempotent writes.

A write (RecordObservations, Retain) is retried as is while the service answers UNAVAILABLE, with
exponential backoff from ``RETRY_INITIAL_WAIT`` up to ``RETRY_MAX_WAIT`` seconds between attempts, and
given up after ``RETRY_MAX_SECONDS``; the functions read these module constants at call time (tests
shorten them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import tenacity

from common.tooling.client import is_unavailable

RETRY_MAX_SECONDS = 120.0
RETRY_INITIAL_WAIT = 0.5
RETRY_MAX_WAIT = 10.0
WRITE_TIMEOUT_SECONDS = 600.0
READ_TIMEOUT_SECONDS = 120.0

T = TypeVar("T")


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

    def before_sleep(retry_state: tenacity.RetryCallState) -> None:
        if on_retry is not None and retry_state.next_action is not None:
            on_retry(f"service unavailable, retrying in {retry_state.next_action.sleep:.1f} s")

    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception(is_unavailable),
        wait=tenacity.wait_exponential(multiplier=RETRY_INITIAL_WAIT, max=RETRY_MAX_WAIT),
        stop=tenacity.stop_after_delay(RETRY_MAX_SECONDS if max_seconds is None else max_seconds),
        before_sleep=before_sleep,
        reraise=True,
    )
    return retrying(call)
