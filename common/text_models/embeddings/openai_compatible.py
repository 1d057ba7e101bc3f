"""The ``openai-compatible`` embedding provider: any server with the OpenAI embeddings API, over HTTP."""

from __future__ import annotations

import json
from typing import Any

from common.kernel.errors import FailedPrecondition
from common.kernel.errors import Unavailable
from common.text_models.embeddings.provider import EmbeddingProvider
from common.text_models.openai_http import OpenAIServer
from common.text_models.openai_http import ServerAnswerNotJson
from common.text_models.openai_http import ServerGaveUp
from common.text_models.openai_http import ServerRejected
from common.text_models.openai_http import openai_endpoint

__all__ = ["OpenAICompatibleProvider"]


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

    NAME = "openai-compatible"

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
            raise ValueError(f"CB_EMBEDDING_PROVIDER={self.NAME} needs CB_EMBEDDING_URL")
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"CB_EMBEDDING_URL={url!r} must start with http:// or https://")
        if not model:
            raise ValueError(f"CB_EMBEDDING_PROVIDER={self.NAME} needs CB_EMBEDDING_MODEL")
        if attempts < 1:
            raise ValueError(f"attempts must be >= 1, got {attempts}")
        super().__init__(model, dimension, batch_size)
        self.endpoint = openai_endpoint(url, "embeddings")
        self._server = OpenAIServer(
            self.endpoint, api_key, "embedding server", timeout_s, attempts, backoff_s, detail_chars=500
        )

    def _encode(self, texts: list[str], *, query: bool) -> Any:
        body = json.dumps({"model": self.model_id, "input": texts}, ensure_ascii=False).encode("utf-8")
        try:
            payload = self._server.post_json(body)
        except ServerAnswerNotJson as exc:
            raise FailedPrecondition(str(exc), reason="EMBEDDING_FAILED") from exc
        except ServerRejected as exc:
            raise FailedPrecondition(str(exc), reason="EMBEDDING_REJECTED") from exc
        except ServerGaveUp as exc:
            raise Unavailable(str(exc), reason="EMBEDDING_UNAVAILABLE") from exc.__cause__
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
