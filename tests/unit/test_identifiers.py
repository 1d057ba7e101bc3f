"""Identifier formulas of DESIGN §3, checked against values computed independently (the corpus)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from common.kernel.identifiers import (
    age_label,
    canonical_instant,
    content_identity,
    fact_id,
    observation_id,
    parse_instant,
)

CORPUS = (
    Path(__file__).resolve().parents[2].parent
    / "shared"
    / "corpora"
    / "debian-uploads"
    / "observations.jsonl"
)


def test_canonical_instant_drops_zero_microseconds_and_converts_to_utc() -> None:
    moscow = timezone(timedelta(hours=3))
    assert canonical_instant(datetime(2026, 8, 1, 3, 0, tzinfo=moscow)) == "2026-08-01T00:00:00Z"
    assert canonical_instant(datetime(2026, 8, 1, 0, 0, 0, 120, tzinfo=UTC)) == "2026-08-01T00:00:00.000120Z"


def test_naive_instants_are_refused() -> None:
    with pytest.raises(ValueError):
        canonical_instant(datetime(2026, 8, 1))
    with pytest.raises(ValueError):
        parse_instant("2026-08-01T00:00:00")
    with pytest.raises(ValueError):
        parse_instant("yesterday")


def test_parse_instant_accepts_offsets() -> None:
    assert canonical_instant(parse_instant("2026-08-01T05:30:00+05:30")) == "2026-08-01T00:00:00Z"
    assert canonical_instant(parse_instant("2026-08-01T00:00:00.5Z")) == "2026-08-01T00:00:00.500000Z"


def test_fact_ids_equal_the_corpus_supersedes_ids() -> None:
    """Each upload's HAS_VERSION supersedes the previous upload's fact: recompute them all."""
    previous: dict[str, str] = {}
    checked = 0
    for line in CORPUS.read_text("utf-8").splitlines():
        record = json.loads(line)
        for assertion in record["assertions"]:
            fact = assertion.get("fact")
            if not fact or fact["predicate"] != "HAS_VERSION":
                continue
            subject = f"{fact['subject']['type']}:{fact['subject']['id']}"
            computed = fact_id(
                record["namespace"],
                subject,
                "HAS_VERSION",
                f"{fact['object']['type']}:{fact['object']['id']}",
                parse_instant(fact["valid_from"]),
            )
            if "supersedes" in fact:
                assert fact["supersedes"] == previous[subject]
                checked += 1
            previous[subject] = computed
    assert checked == 5053


def test_observation_id_formula() -> None:
    import hashlib

    expected = "obs-" + hashlib.sha256(b"debian|debian|changelog/time|time/1.7-5").hexdigest()[:24]
    assert observation_id("debian", "debian", "changelog/time", "time/1.7-5") == expected


def test_content_identity_is_canonical_json_with_integral_numbers() -> None:
    a = content_identity({"kind": "k", "data": {"n": 1.0, "ключ": "значение"}, "assertions": []})
    b = content_identity({"assertions": [], "data": {"ключ": "значение", "n": 1}, "kind": "k"})
    assert a == b and a.startswith("sha256:")
    assert a != content_identity({"kind": "k", "data": {"n": 2}, "assertions": []})


@pytest.mark.parametrize(
    ("node_type", "label"),
    [("person", "person"), ("доку-мент", "_" * 9), ("9lives", "_9lives"), ("", "entity"), ("a.b-c", "a_b_c")],
)
def test_age_label(node_type: str, label: str) -> None:
    assert age_label(node_type) == label
