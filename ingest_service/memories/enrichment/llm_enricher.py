"""The optional LLM enricher: any server with the OpenAI chat-completions API, over HTTP (off by default;
``CB_ENRICHMENT_ENRICHER=llm`` with ``CB_ENRICHMENT_LLM_URL`` and ``CB_ENRICHMENT_LLM_MODEL``).

``POST {url}/v1/chat/completions`` with ``{"model", "messages": [system `INSTRUCTIONS`, user: the text],
"temperature": 0, "response_format": {"type": "json_object"}}`` and ``Authorization: Bearer <key>`` when
a key is set. The answer's ``choices[0].message.content`` must be one JSON object (a Markdown code fence
around it is accepted) with the fields of `Enrichment` (`_Answer` checks them: memory_type one of the
seven, quality_score in [0, 1], entities as ``{"name", "kind"}`` with a kind of `ENTITY_KINDS`; lists
are cut to the rule enricher's limits).

Its output has evidence class ``inferred`` (docs/explanation/knowledge-model.md: a model's reading, not a rule
over the text). The domain packs' identifiers and the labelled ids of the id rule are added to the model's
entities (`ingest_service.memories.enrichment.entities.collect_entities`), so pack links do not depend on the model.

**Failure**: each request has a time-out (``CB_ENRICHMENT_LLM_TIMEOUT_SECONDS``); time-outs, refused or
broken connections, HTTP 5xx and 429 are retried with exponential back-off, ``CB_ENRICHMENT_LLM_ATTEMPTS``
tries in all. When every try failed, or the server answered something unusable (another HTTP error,
not JSON, fields out of range), the memory is enriched by the rule enricher instead (evidence
``extracted``), and a warning is logged: a memory is never left unenriched because the model is down.
"""

from __future__ import annotations

import json
import logging
from typing import Annotated

from pydantic import AfterValidator
from pydantic import BaseModel
from pydantic import Field
from pydantic import ValidationError

from common.text_models.openai_http import OpenAIServer
from common.text_models.openai_http import ServerGaveUp
from common.text_models.openai_http import ServerRejected
from common.text_models.openai_http import openai_endpoint
from ingest_service.memories.enrichment.entities import MAX_ENTITIES
from ingest_service.memories.enrichment.entities import collect_entities
from ingest_service.memories.enrichment.key_phrases import MAX_KEY_POINTS
from ingest_service.memories.enrichment.key_phrases import MAX_TOPICS
from ingest_service.memories.enrichment.language_models import RecognisedEntity
from ingest_service.memories.enrichment.language_models import language_of
from ingest_service.memories.enrichment.model import ENTITY_KINDS
from ingest_service.memories.enrichment.model import LLM_EVIDENCE
from ingest_service.memories.enrichment.model import MEMORY_TYPES
from ingest_service.memories.enrichment.model import Enricher
from ingest_service.memories.enrichment.model import Enrichment
from ingest_service.memories.enrichment.model import MemoryText
from ingest_service.memories.enrichment.rules import MAX_INSIGHTS

log = logging.getLogger(__name__)

INSTRUCTIONS = (
    "You extract the semantic fields of one memory record of an application (a support desk, a chat"
    " product). Answer with one JSON object and nothing else, with these keys:\n"
    '"key_points": concrete, atomic facts stated in the text (at most 3 short sentences);\n'
    '"insights": higher-order observations the text supports: causes, comparisons (at most 3);\n'
    '"entities": named entities as {"name": ..., "kind": ...}, kind one of person, organization,'
    " location, product, identifier (ids such as 'Customer 8821');\n"
    '"topics": at most 5 lower-case labels for filtering;\n'
    '"memory_type": one of fact, event, decision, insight, narrative, analysis, reference;\n'
    '"quality_score": a number from 0 to 1, how useful the memory is to recall later.\n'
    "Use only what the text says; keep the text's language."
)


class _Unusable(Exception):
    """An answer that retrying will not fix (other HTTP errors, not JSON, fields out of range)."""


def _one_of(field: str, choices: tuple[str, ...]) -> AfterValidator:
    """The check that a string field of the answer is one of ``choices``."""

    def check(value: str) -> str:
        if value not in choices:
            raise ValueError(f"{field} {value!r} is not one of {choices}")
        return value

    return AfterValidator(check)


class _AnswerEntity(BaseModel):
    name: str = Field(min_length=1, max_length=200)
    kind: Annotated[str, _one_of("kind", ENTITY_KINDS)]


class _Answer(BaseModel):
    key_points: list[str] = Field(default_factory=list)
    insights: list[str] = Field(default_factory=list)
    entities: list[_AnswerEntity] = Field(default_factory=list)
    topics: list[str] = Field(default_factory=list)
    memory_type: Annotated[str, _one_of("memory_type", MEMORY_TYPES)]
    quality_score: float = Field(ge=0.0, le=1.0)


class LlmEnricher:
    """`Enricher` through an OpenAI-compatible chat-completions server (see the module doc).

    Args:
        url: base URL of the server (``http://host:8000``); a trailing ``/v1`` is accepted too.
        model: model name sent to the server.
        api_key: bearer token, ``""`` for none.
        fallback: the enricher used when the server fails (the rule enricher).
        timeout_s: time-out of one request, seconds.
        attempts: tries per memory, ``>= 1``.
        backoff_s: first back-off wait, seconds (doubles per retry, at most 10 s).

    Raises:
        ValueError: ``url`` or ``model`` is empty or malformed, or ``attempts < 1``.
    """

    def __init__(
        self,
        url: str,
        model: str,
        api_key: str,
        fallback: Enricher,
        *,
        timeout_s: float = 20.0,
        attempts: int = 2,
        backoff_s: float = 0.5,
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"CB_ENRICHMENT_LLM_URL={url!r} must start with http:// or https://")
        if not model:
            raise ValueError("CB_ENRICHMENT_ENRICHER=llm needs CB_ENRICHMENT_LLM_MODEL")
        if attempts < 1:
            raise ValueError(f"attempts must be >= 1, got {attempts}")
        self.endpoint = openai_endpoint(url, "chat/completions")
        self.model = model
        self.name = f"llm:{model}"
        self.fallback = fallback
        self._server = OpenAIServer(
            self.endpoint, api_key, "LLM server", timeout_s, attempts, backoff_s, detail_chars=300
        )

    def enrich(self, item: MemoryText) -> Enrichment:
        """The model's fields for ``item``, or the fallback's when the server fails (module doc)."""
        if not item.text.strip():
            return self.fallback.enrich(item)
        try:
            answer = self._ask(item.text)
        except _Unusable as exc:
            log.warning("LLM enricher: unusable answer, enriched by rules instead: %s", exc)
            return self.fallback.enrich(item)
        recognised = [RecognisedEntity(" ".join(e.name.split()), e.kind) for e in answer.entities]
        return Enrichment(
            key_points=tuple(_clean(answer.key_points))[:MAX_KEY_POINTS],
            insights=tuple(_clean(answer.insights))[:MAX_INSIGHTS],
            entities=collect_entities(item.text, recognised, item.kinds, source="llm")[:MAX_ENTITIES],
            topics=tuple(dict.fromkeys(t.lower() for t in _clean(answer.topics)))[:MAX_TOPICS],
            memory_type=answer.memory_type,
            quality_score=round(answer.quality_score, 3),
            language=language_of(item.text),
            evidence=LLM_EVIDENCE,
            enricher=self.name,
        )

    def _ask(self, text: str) -> _Answer:
        body = json.dumps(
            {
                "model": self.model,
                "messages": [
                    {"role": "system", "content": INSTRUCTIONS},
                    {"role": "user", "content": text},
                ],
                "temperature": 0,
                "response_format": {"type": "json_object"},
            },
            ensure_ascii=False,
        ).encode("utf-8")
        try:
            payload = self._server.post_json(body)
        except (ServerRejected, ServerGaveUp) as exc:
            raise _Unusable(str(exc)) from exc
        try:
            content = payload["choices"][0]["message"]["content"]
            return _Answer.model_validate(json.loads(_strip_fence(content)))
        except (KeyError, IndexError, TypeError, ValueError, ValidationError) as exc:
            raise _Unusable(f"{self.endpoint}: {str(exc)[:300]}") from exc


def _strip_fence(content: str) -> str:
    text = content.strip()
    if text.startswith("```"):
        text = text.split("\n", 1)[1] if "\n" in text else ""
        text = text.rsplit("```", 1)[0]
    return text


def _clean(values: list[str]) -> list[str]:
    return [" ".join(value.split()) for value in values if value and value.strip()]
