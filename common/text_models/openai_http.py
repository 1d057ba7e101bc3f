"""One JSON POST to a server with an OpenAI-compatible API, retried on transient failures.

Shared by the ``openai-compatible`` embedding provider and the LLM enricher: each maps the two
failures below to its own errors. Server errors 5xx and 429, refused or broken connections and
time-outs are retried with exponential back-off (tenacity); other HTTP errors and an answer that is
not JSON are not.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from http.client import HTTPException
from typing import Any

from tenacity import RetryError
from tenacity import Retrying
from tenacity import retry_if_exception
from tenacity import stop_after_attempt
from tenacity import wait_exponential

__all__ = ["OpenAIServer", "ServerAnswerNotJson", "ServerGaveUp", "ServerRejected", "openai_endpoint"]


class _Transient(Exception):
    """A failure worth retrying (5xx, 429, connection refused or reset, time-out)."""


class ServerRejected(Exception):
    """An answer that retrying will not fix: an HTTP error other than 5xx/429; the message names the
    server and what it said."""


class ServerAnswerNotJson(ServerRejected):
    """The server answered with a body that is not JSON."""


class ServerGaveUp(Exception):
    """Every try failed transiently; the message is the last failure and the number of tries."""


def openai_endpoint(url: str, path: str) -> str:
    """``{url}/v1/{path}``, or ``{url}/{path}`` when ``url`` already ends in ``/v1`` (a trailing ``/``
    is dropped first)."""
    base = url.rstrip("/")
    return f"{base}/{path}" if base.endswith("/v1") else f"{base}/v1/{path}"


@dataclass(frozen=True)
class OpenAIServer:
    """Where and how to post: the endpoint, the bearer token (``""``: none), the time-out of one
    request (seconds), the tries in all (``>= 1``) and the first back-off wait (seconds, doubling per
    retry, at most 10 s). ``label`` names the server in messages (``embedding server``) and
    ``detail_chars`` bounds how much of an HTTP error's body they quote."""

    endpoint: str
    api_key: str
    label: str
    timeout_s: float
    attempts: int
    backoff_s: float
    detail_chars: int

    def post_json(self, body: bytes) -> Any:
        """POSTs ``body`` (JSON, UTF-8) and returns the decoded JSON answer.

        Raises:
            ServerRejected: an HTTP error other than 5xx/429; `ServerAnswerNotJson`: an answer that is not
                JSON.
            ServerGaveUp: all ``attempts`` tries failed transiently.
        """
        retrying = Retrying(
            stop=stop_after_attempt(self.attempts),
            wait=wait_exponential(multiplier=self.backoff_s, max=10),
            retry=retry_if_exception(lambda exc: isinstance(exc, _Transient)),
        )
        try:
            return retrying(self._post_once, body)
        except RetryError as exc:
            last = exc.last_attempt.exception()
            raise ServerGaveUp(f"{last} (gave up after {self.attempts} attempts)") from last

    def _post_once(self, body: bytes) -> Any:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(self.endpoint, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read()[: self.detail_chars].decode("utf-8", errors="replace")
            exc.close()
            message = f"{self.label} {self.endpoint} answered HTTP {exc.code}: {detail}"
            if exc.code >= 500 or exc.code == 429:
                raise _Transient(message) from exc
            raise ServerRejected(message) from exc
        except (urllib.error.URLError, TimeoutError, ConnectionError, HTTPException) as exc:
            reason = getattr(exc, "reason", exc)
            raise _Transient(f"{self.label} {self.endpoint} unreachable: {reason}") from exc
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise ServerAnswerNotJson(f"{self.label} {self.endpoint} answered invalid JSON: {raw[:200]!r}") from exc
