"""``memory_embedding_batch_seconds{model, input}``: how long one batch takes to embed (Prometheus).

Observed by `EmbeddingProvider` around every call of a model (``input`` is ``passage`` for
``encode_passages`` batches, ``query`` for ``encode_query``); served with the RPC metrics
(`common.grpc.metrics`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

from prometheus_client import Histogram

__all__ = ["EMBEDDING_BATCH_SECONDS", "timed_batch"]

EMBEDDING_BATCH_SECONDS = Histogram(
    "memory_embedding_batch_seconds",
    "Seconds to embed one batch, by model id and input kind (passage or query).",
    ("model", "input"),
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)


@contextlib.contextmanager
def timed_batch(model: str, *, query: bool) -> Iterator[None]:
    """Observes the seconds the ``with`` block takes in `EMBEDDING_BATCH_SECONDS` (also when it raises)."""
    started = time.perf_counter()
    try:
        yield
    finally:
        EMBEDDING_BATCH_SECONDS.labels(model, "query" if query else "passage").observe(
            time.perf_counter() - started
        )
