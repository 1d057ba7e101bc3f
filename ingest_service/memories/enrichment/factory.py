"""The enricher the settings choose (``CB_ENRICHMENT_ENRICHER``)."""

from __future__ import annotations

from common.kernel.config import Settings
from ingest_service.memories.enrichment.llm_enricher import LlmEnricher
from ingest_service.memories.enrichment.model import Enricher
from ingest_service.memories.enrichment.rule_enricher import RuleEnricher


def build_enricher(settings: Settings) -> Enricher:
    """`RuleEnricher` (``rules``, the default), or `LlmEnricher` falling back to it (``llm``).

    Raises:
        ValueError: ``llm`` without a valid ``CB_ENRICHMENT_LLM_URL`` / ``CB_ENRICHMENT_LLM_MODEL``.
    """
    rules = RuleEnricher()
    if settings.enrichment_enricher == "rules":
        return rules
    return LlmEnricher(
        settings.enrichment_llm_url,
        settings.enrichment_llm_model,
        settings.enrichment_llm_api_key.get_secret_value(),
        rules,
        timeout_s=settings.enrichment_llm_timeout_seconds,
        attempts=settings.enrichment_llm_attempts,
    )
