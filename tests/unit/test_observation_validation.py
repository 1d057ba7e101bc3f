"""docs/explanation/knowledge-model.md limits of an observation, each rejected with a violation naming the
field."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from ingest_service.observations.validation import validate_observation
from tests.conftest import CORPORA

FIRST = json.loads((CORPORA / "debian-uploads" / "observations.jsonl").read_text("utf-8").splitlines()[0])


def violations_of(change: Any) -> list[str]:
    raw = copy.deepcopy(FIRST)
    change(raw)
    item, violations = validate_observation(raw, "observations[0]")
    assert item is None
    return [v.field for v in violations]


def test_a_corpus_line_is_valid_and_gets_the_documented_id() -> None:
    item, violations = validate_observation(copy.deepcopy(FIRST), "observations[0]")
    assert violations == [] and item is not None
    assert item.observation_id.startswith("obs-") and len(item.observation_id) == 28
    assert [f.predicate for f in item.facts] == ["HAS_VERSION", "UPLOADED_BY"]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda o: o.update(kind="Package Uploaded"), "observations[0].kind"),
        (lambda o: o.update(kind=""), "observations[0].kind"),
        (lambda o: o.update(namespace=""), "observations[0].namespace"),
        (lambda o: o["source"].update(system=""), "observations[0].source.system"),
        (lambda o: o.update(scopes=[f"task:{i}" for i in range(21)]), "observations[0].scopes"),
        (lambda o: o.update(scopes=["no-colon"]), "observations[0].scopes[0]"),
        (lambda o: o.update(content="x" * (1024 * 1024 + 1)), "observations[0].content"),
        (lambda o: o.update(data={"blob": "y" * (1024 * 1024)}), "observations[0].data"),
        (
            lambda o: o.update(assertions=[{"entity": {"key": f"k:{i}"}} for i in range(201)]),
            "observations[0].assertions",
        ),
        (lambda o: o.update(occurred_at="2026-01-01T00:00:00"), "observations[0].occurred_at"),
        (lambda o: o.update(occurred_at="not a time"), "observations[0].occurred_at"),
        # superseding live versions is AssertFacts' word, never an observation's
        (lambda o: o["assertions"][2]["fact"].update(supersede_live=True), "observations[0].assertions[2].fact.supersede_live"),
        (
            lambda o: o["assertions"][2]["fact"].update(valid_from="2026-13-01T00:00:00Z"),
            "observations[0].assertions[2].fact.valid_from",
        ),
        (
            lambda o: o["assertions"][2]["fact"].update(valid_to="1990-01-01T00:00:00Z"),
            "observations[0].assertions[2].fact.valid_to",
        ),
        (
            lambda o: o["assertions"][2]["fact"].update(predicate="HAS VERSION"),
            "observations[0].assertions[2].fact.predicate",
        ),
        (
            lambda o: o["assertions"][2]["fact"].update(confidence=1.5),
            "observations[0].assertions[2].fact.confidence",
        ),
        (
            lambda o: o["assertions"][2]["fact"].update(evidence="rumour"),
            "observations[0].assertions[2].fact.evidence",
        ),
        (
            lambda o: o["assertions"][3]["fact"].update(supersedes="fact-xyz"),
            "observations[0].assertions[3].fact.supersedes",
        ),
        (
            lambda o: o["assertions"][0]["entity"].update(key={"type": "package"}),
            "observations[0].assertions[0].entity.key.id",
        ),
        (lambda o: o["assertions"][0]["entity"].update(key=""), "observations[0].assertions[0].entity.key"),
        (
            lambda o: o["assertions"][0]["entity"].update(key=" padded"),
            "observations[0].assertions[0].entity.key",
        ),
        (
            lambda o: o["assertions"][1]["entity"].update(key={"type": "9 bad", "id": "x"}),
            "observations[0].assertions[1].entity.key.type",
        ),
        (lambda o: o["assertions"].append({"fact": {}, "entity": {}}), "observations[0].assertions[4]"),
        (
            lambda o: o["assertions"].append({"text": {"text": "  "}}),
            "observations[0].assertions[4].text.text",
        ),
    ],
)
def test_each_limit_names_its_field(change: Any, field: str) -> None:
    assert field in violations_of(change)


def test_offsets_are_normalised_to_utc() -> None:
    raw = copy.deepcopy(FIRST)
    raw["occurred_at"] = "1999-10-02T23:00:28+03:00"
    item, _ = validate_observation(raw, "o")
    assert item is not None and item.occurred_at.isoformat() == "1999-10-02T20:00:28+00:00"


def test_identity_without_external_id_ignores_key_order_and_offset_spelling() -> None:
    a = copy.deepcopy(FIRST)
    del a["source"]["external_id"]
    b = json.loads(json.dumps(a, sort_keys=True))
    b["occurred_at"] = "1999-10-02T23:00:28+03:00"
    first, _ = validate_observation(a, "o")
    second, _ = validate_observation(b, "o")
    assert first is not None and second is not None and first.observation_id == second.observation_id
    c = copy.deepcopy(a)
    c["content"] += "!"
    third, _ = validate_observation(c, "o")
    assert third is not None and third.observation_id != first.observation_id
