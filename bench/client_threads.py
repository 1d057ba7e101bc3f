"""Running a benchmark's clients side by side: one thread each, started together, timed to the last."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


def run_in_threads(work: Callable[[int], object], count: int) -> float:
    """Runs ``work(0)`` .. ``work(count - 1)`` each in its own thread, all at once, and waits for them.

    Returns:
        The wall seconds from the first thread's start to the last one's end.
    """
    threads = [threading.Thread(target=work, args=(index,)) for index in range(count)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started
