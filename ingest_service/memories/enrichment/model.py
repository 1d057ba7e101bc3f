"""What enrichment produces (docs/how-to/memory-records.md) and the one interface every enricher has.

An enricher is pure: text in, `Enrichment` out; no database, no gRPC. The worker
(`ingest_service.memories.enrichment.jobs`) writes the result into the memory and the graph.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from common.packs.kind_validation import NamespaceKinds

MEMORY_TYPES = ("fact", "event", "decision", "insight", "narrative", "analysis", "reference")
"""The memory types (docs/how-to/memory-records.md)."""

ENTITY_KINDS = ("person", "organization", "location", "product", "identifier")
"""Entity kinds: the node type of the entity's natural key (``person:Alice``), or a pack kind."""

RULE_EVIDENCE = "extracted"
"""Evidence class of the rule enricher's output (docs/explanation/knowledge-model.md: a deterministic rule
over the text)."""
LLM_EVIDENCE = "inferred"
"""Evidence class of the LLM enricher's output (docs/explanation/knowledge-model.md: a model's reading, not
the text itself)."""


@dataclass(frozen=True)
class Entity:
    """A named entity found in a memory's text.

    Attributes:
        name: the entity as written (normalised to its base form for Russian: "Москве" -> "Москва").
        kind: one of `ENTITY_KINDS`, or the pack kind of a domain-pack identifier (``issue``).
        natural_key: the graph node's key, ``<kind>:<name>`` (a pack identifier: the pack's natural key).
        source: what found it: ``ner`` (the language's recogniser), ``pattern`` (the id rule),
            ``pack`` (a domain pack's idPatterns), ``llm``.
    """

    name: str
    kind: str
    natural_key: str
    source: str


@dataclass(frozen=True)
class Enrichment:
    """The semantic fields of one memory (docs/how-to/memory-records.md), all derived from its text.

    Attributes:
        key_points: concrete, atomic statements of the text (key sentences), in text order.
        insights: higher-order observations: the causal and comparative statements of the text.
        entities: named entities (people, organisations, products, locations, ids), distinct keys.
        topics: semantic labels (keywords, lower case), most relevant first.
        memory_type: one of `MEMORY_TYPES`.
        quality_score: estimated usefulness in [0, 1].
        language: ``en`` or ``ru``: the language the text was analysed as.
        evidence: evidence class of the fields (`RULE_EVIDENCE` or `LLM_EVIDENCE`).
        enricher: name of the enricher that produced it (``rules``, ``llm:<model>``).
    """

    key_points: tuple[str, ...] = ()
    insights: tuple[str, ...] = ()
    entities: tuple[Entity, ...] = ()
    topics: tuple[str, ...] = ()
    memory_type: str = "fact"
    quality_score: float = 0.0
    language: str = "en"
    evidence: str = RULE_EVIDENCE
    enricher: str = "rules"

    def __post_init__(self) -> None:
        if self.memory_type not in MEMORY_TYPES:
            raise ValueError(f"memory_type {self.memory_type!r} is not one of {MEMORY_TYPES}")
        if not 0.0 <= self.quality_score <= 1.0:
            raise ValueError(f"quality_score {self.quality_score} is outside [0, 1]")


@dataclass(frozen=True)
class MemoryText:
    """What an enricher reads: the memory's text and the hints its record carries.

    Attributes:
        text: the memory's text.
        event_type: the caller's event_type (an incident, a purchase), "" when none: a hint for memory_type.
        tags: the caller's tags.
        kinds: the namespace's domain-pack kinds, whose idPatterns name entities too; None: no packs.
    """

    text: str
    event_type: str = ""
    tags: tuple[str, ...] = ()
    kinds: NamespaceKinds | None = None


class Enricher(Protocol):
    """Text -> semantic fields. Implementations: `RuleEnricher` (default), `LlmEnricher` (optional)."""

    name: str

    def enrich(self, item: MemoryText) -> Enrichment:
        """The semantic fields of ``item``; never raises for any text (an empty text gives empty fields)."""
        ...
