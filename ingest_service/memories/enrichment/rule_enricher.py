"""The default enricher: registry-shipped language models plus documented rules, deterministic and
offline (evidence class ``extracted``).

Sentences and named entities: `language_models`; ids: `entities`; topics and key points:
`key_phrases`; insights, memory_type and quality_score: `rules`.
"""

from __future__ import annotations

from collections.abc import Sequence

from ingest_service.memories.enrichment import key_phrases
from ingest_service.memories.enrichment import rules
from ingest_service.memories.enrichment.entities import collect_entities
from ingest_service.memories.enrichment.language_models import TextAnalysis
from ingest_service.memories.enrichment.language_models import analyse_many
from ingest_service.memories.enrichment.model import RULE_EVIDENCE
from ingest_service.memories.enrichment.model import Enrichment
from ingest_service.memories.enrichment.model import MemoryText


class RuleEnricher:
    """`Enricher` by rules (see the module doc); the models load on first use (`load_models` to preload)."""

    name = "rules"

    def enrich(self, item: MemoryText) -> Enrichment:
        """The semantic fields of ``item.text``; empty fields for an empty text."""
        return self.enrich_many([item])[0]

    def enrich_many(self, items: Sequence[MemoryText]) -> list[Enrichment]:
        """`enrich` of each item, in order, the language models called once for all of them."""
        analyses = analyse_many([item.text for item in items])
        return [self._fields(item, analysis) for item, analysis in zip(items, analyses, strict=True)]

    def _fields(self, item: MemoryText, analysis: TextAnalysis) -> Enrichment:
        entities = collect_entities(item.text, analysis.entities, item.kinds)
        found_insights = rules.insights(analysis.sentences)
        return Enrichment(
            key_points=key_phrases.key_points(analysis.sentences, analysis.language),
            insights=found_insights,
            entities=entities,
            topics=key_phrases.topics(item.text, analysis.language, analysis.nominal_words),
            memory_type=rules.memory_type(
                item.text, analysis.sentences, len(found_insights), item.event_type
            ),
            quality_score=rules.quality_score(item.text, analysis.sentences, len(entities)),
            language=analysis.language,
            evidence=RULE_EVIDENCE,
            enricher=self.name,
        )
