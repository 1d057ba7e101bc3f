"""The ``openai-compatible`` embedding provider: any server with the OpenAI embeddings API, over HTTP."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from http.client import HTTPException
from typing import Any

from tenacity import RetryError, Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from common.kernel.errors import FailedPrecondition, Unavailable
from common.text_models.embeddings.provider import EmbeddingProvider

__all__ = ["OpenAICompatibleProvider"]


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
