"""The rule enricher on real texts (docs/how-to/memory-records.md and its two worked
examples, debian changelog entries of the corpus, a Russian text) and the documented rules themselves."""

from __future__ import annotations

import json

import pytest

from ingest_service.memories.enrichment import rules
from ingest_service.memories.enrichment.entities import labelled_ids
from ingest_service.memories.enrichment.language_models import analyse
from ingest_service.memories.enrichment.language_models import language_of
from ingest_service.memories.enrichment.model import MEMORY_TYPES
from ingest_service.memories.enrichment.model import Enrichment
from ingest_service.memories.enrichment.model import MemoryText
from ingest_service.memories.enrichment.rule_enricher import RuleEnricher
from tests.conftest import CORPORA
from tests.unit.test_domain_packs import delivery_pack
from tests.unit.test_identifier_patterns import _kinds

SEED_FACT = "User Alice prefers concise replies and uses dark mode."
SEED_EVENT = "Customer 8821 reported login failures after MFA reset…"
RUSSIAN = (
    "Мы решили перенести релиз платёжного сервиса на понедельник, потому что Сбербанк не успел обновить"
    " API. Алиса Петрова сообщила об этом на встрече в Москве."
)


@pytest.fixture(scope="module")
def enricher() -> RuleEnricher:
    return RuleEnricher()


def keys(enrichment: Enrichment) -> list[str]:
    return [entity.natural_key for entity in enrichment.entities]


def test_seed_fact(enricher: RuleEnricher) -> None:
    result = enricher.enrich(MemoryText(SEED_FACT, tags=("preference", "ui")))
    assert result.memory_type == "fact"  # the documented example's label (docs/how-to/memory-records.md)
    assert keys(result) == ["person:Alice"]
    assert result.key_points == (SEED_FACT,)
    assert "dark mode" in result.topics and "concise replies" in result.topics
    assert result.insights == ()
    assert 0.7 <= result.quality_score <= 1.0
    assert (result.language, result.evidence, result.enricher) == ("en", "extracted", "rules")


def test_seed_event(enricher: RuleEnricher) -> None:
    result = enricher.enrich(MemoryText(SEED_EVENT, event_type="incident_resolved"))
    assert result.memory_type == "event"
    # the documented example's entities: ["Customer 8821", "MFA"]
    assert [entity.name for entity in result.entities] == ["Customer 8821", "MFA"]
    assert result.entities[0].natural_key == "identifier:customer 8821"
    assert result.entities[0].source == "pattern"
    assert "login failures" in result.topics
    # without the event_type hint the cue "reported" still makes it an event
    assert enricher.enrich(MemoryText(SEED_EVENT)).memory_type == "event"


def test_russian_text(enricher: RuleEnricher) -> None:
    result = enricher.enrich(MemoryText(RUSSIAN))
    assert result.language == "ru"
    assert keys(result) == ["organization:Сбербанк", "person:Алиса Петрова", "location:Москва"]  # base form
    assert result.memory_type == "decision"  # "решили"
    assert result.insights == (analyse(RUSSIAN).sentences[0],)  # "потому что"
    assert len(result.key_points) == 2
    assert "сбербанк" in result.topics


def _debian(external_id: str) -> str:
    with (CORPORA / "debian-uploads" / "observations.jsonl").open(encoding="utf-8") as lines:
        for line in lines:
            row = json.loads(line)
            if row["source"]["external_id"] == external_id:
                return str(row["content"])
    raise AssertionError(f"{external_id} is not in the corpus")


def test_debian_changelog_entries(enricher: RuleEnricher) -> None:
    with (CORPORA / "debian-uploads" / "observations.jsonl").open(encoding="utf-8") as lines:
        rows = [json.loads(line) for _, line in zip(range(300), lines, strict=False)]
    results = [enricher.enrich(MemoryText(row["content"])) for row in rows]
    assert all(r.memory_type in MEMORY_TYPES and 0.0 <= r.quality_score <= 1.0 for r in results)
    # list items become key points without their markers
    assert all(not point.startswith(("*", "-")) for r in results for point in r.key_points)
    assert sum(1 for r in results if r.topics) >= 290
    entry = next(row["content"] for row in rows if "Closes: #" in row["content"])
    assert enricher.enrich(MemoryText(entry)).key_points


def test_pack_identifiers_are_entities_with_the_packs_keys(enricher: RuleEnricher) -> None:
    kinds = _kinds(delivery_pack())
    result = enricher.enrich(MemoryText("Alice fixed PROJ-12 in the checkout flow.", kinds=kinds))
    assert keys(result)[0] == "issue:PROJ-12" and result.entities[0].source == "pack"
    assert "issue:PROJ-12" not in keys(enricher.enrich(MemoryText("Alice fixed PROJ-12.")))


def test_labelled_ids() -> None:
    found = labelled_ids("Order #55012 for Customer 8821; Заказ №4411; Room 12 is no id")
    assert [entity.natural_key for entity in found] == [
        "identifier:order 55012",
        "identifier:customer 8821",
        "identifier:заказ 4411",
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("See https://wiki.example.org/mfa for the reset procedure.", "reference"),
        ("The documentation of the MFA reset is in the support runbook.", "reference"),
        ("We decided to move the billing jobs to the new cluster.", "decision"),
        ("Errors dropped by 40 % after the cache change.", "analysis"),
        ("Postgres is faster than MySQL here. Reads are slower because of the index.", "analysis"),
        ("Postgres is faster than MySQL for our workload.", "insight"),
        ("The payment service crashed yesterday at noon.", "event"),
        (
            "Anna joined in May. She set up the desk. Tom took the calls. Then the team grew to ten.",
            "narrative",
        ),
        ("The office opens at nine and closes at six.", "fact"),
    ],
)
def test_memory_type_rules(enricher: RuleEnricher, text: str, expected: str) -> None:
    assert enricher.enrich(MemoryText(text)).memory_type == expected


def test_quality_rules(enricher: RuleEnricher) -> None:
    def quality(text: str) -> float:
        return enricher.enrich(MemoryText(text)).quality_score

    assert quality("ok thanks") < 0.1  # filler
    assert quality("") == 0.0
    assert quality("Alice from Acme Corp renewed contract 4471 for 12 months.") > quality(
        "someone renewed some contract for a while."
    )  # specificity
    assert quality("Maybe the office opens at nine, I think.") < quality(
        "The office opens at nine on weekdays."
    )
    assert quality("login login login login login login login login") < quality(
        "login fails after the MFA reset on mobile"
    )  # diversity


def test_insights_are_causal_or_comparative_sentences() -> None:
    sentences = ["The build broke because the cache was stale.", "It is cheaper than the old one.", "Hi."]
    assert rules.insights(sentences) == tuple(sentences[:2])
    assert rules.insights(["Thanks, ok."]) == ()  # "thanks" is not "than"


def test_language_rule_and_empty_text(enricher: RuleEnricher) -> None:
    assert language_of("Привет, Alice") == "ru" and language_of("Alice, привет!!! hello there") == "en"
    empty = enricher.enrich(MemoryText("   "))
    assert (empty.key_points, empty.entities, empty.topics, empty.quality_score) == ((), (), (), 0.0)
