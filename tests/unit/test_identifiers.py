"""Identifier formulas of docs/explanation/knowledge-model.md, checked against values computed independently
(the corpus)."""

from __future__ import annotations

import hashlib
import json
import re
from datetime import UTC
from datetime import datetime
from datetime import timedelta
from datetime import timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from common.kernel.identifiers import GRAPH_LABEL_PATTERN
from common.kernel.identifiers import MAX_LABEL_LENGTH
from common.kernel.identifiers import LabelKind
from common.kernel.identifiers import canonical_instant
from common.kernel.identifiers import content_identity
from common.kernel.identifiers import fact_id
from common.kernel.identifiers import graph_label
from common.kernel.identifiers import observation_id
from common.kernel.identifiers import parse_instant

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


def test_canonical_instant_is_the_strftime_text_for_every_year() -> None:
    """The fast isoformat path writes exactly what the strftime formats wrote (fact ids hash this text)."""
    samples = [
        datetime(year, month, 28, hour, 59, 7, micro, tzinfo=timezone(timedelta(minutes=offset)))
        for year in (1, 999, 1000, 1999, 2026, 9999)
        for month, hour, micro, offset in ((1, 0, 0, 0), (12, 23, 1, -90), (6, 12, 999999, 330))
        if not (year == 9999 and offset < 0) and not (year == 1 and offset > 0)
    ]
    for value in samples:
        utc = value.astimezone(UTC)
        expected = utc.strftime("%Y-%m-%dT%H:%M:%S.%fZ" if utc.microsecond else "%Y-%m-%dT%H:%M:%SZ")
        assert canonical_instant(value) == expected


def test_canonical_instant_tells_apart_the_repeated_hour_of_a_zone() -> None:
    # 02:30 in Berlin happens twice on 2024-10-27 (fold 0: 00:30Z, fold 1: 01:30Z); the two datetimes
    # compare equal and hash alike, so a memo keyed by them would give both the same text.
    berlin = ZoneInfo("Europe/Berlin")
    first = datetime(2024, 10, 27, 2, 30, tzinfo=berlin, fold=0)
    second = datetime(2024, 10, 27, 2, 30, tzinfo=berlin, fold=1)
    assert first == second and hash(first) == hash(second)
    assert canonical_instant(first) == "2024-10-27T00:30:00Z"
    assert canonical_instant(second) == "2024-10-27T01:30:00Z"
    assert canonical_instant(first) == "2024-10-27T00:30:00Z"


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
    ("kind", "name", "label"),
    [
        ("node_type", "person", "n_person"),
        ("predicate", "depends_on", "p_depends_on"),
        ("predicate", "9lives", "p_9lives"),
        ("internal_edge", "LINKS_TO", "i_LINKS_TO"),
        ("node_type", "_ag_label_edge", "n__ag_label_edge"),
    ],
)
def test_graph_label_spells_out_plain_names(kind: LabelKind, name: str, label: str) -> None:
    assert graph_label(kind, name) == label


def test_graph_label_hashes_names_that_sanitising_or_length_would_change() -> None:
    alike = ["a-b", "a.b", "a_b", "a\u00b7b", "доку-мент", "", "x" * 46, "x" * 47, "x" * 128, "x" * 129]
    labels = {graph_label(kind, name) for kind in ("node_type", "predicate") for name in alike}
    assert len(labels) == 2 * len(alike)  # never two names, nor two kinds, on one label
    hashed = graph_label("node_type", "доку-мент")
    assert re.fullmatch(r"nx_[A-Za-z0-9_]{1,24}_[0-9a-f]{20}", hashed) and hashed.startswith("nx_____")
    assert graph_label("predicate", "depends-on").startswith("px_depends_on_")
    assert graph_label("node_type", "") == "nx__" + hashlib.sha256(b"").hexdigest()[:20]
    for name in alike:
        for kind in ("node_type", "predicate"):
            label = graph_label(kind, name)  # type: ignore[arg-type]
            assert len(label) <= MAX_LABEL_LENGTH and re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", label)
            assert GRAPH_LABEL_PATTERN.match(label)
            assert graph_label(kind, name) == label  # deterministic  # type: ignore[arg-type]


def test_graph_label_refuses_unknown_kinds_and_internal_names() -> None:
    with pytest.raises(ValueError, match="not an internal edge"):
        graph_label("internal_edge", "MENTIONS")
    with pytest.raises(ValueError, match="unknown label kind"):
        graph_label("vertex", "person")  # type: ignore[arg-type]


def test_the_audit_cypher_names_the_labels_of_the_audit_types() -> None:
    from common.storage.audit_store import AUDIT_EVENT_LABEL
    from common.storage.audit_store import TRACE_EDGE_LABEL
    from common.storage.audit_store import TRACE_LABEL
    from common.storage.named_queries import load_query_file

    cypher = load_query_file("audit.sql")["audit_events_of_trace"].text
    assert f"(e:{AUDIT_EVENT_LABEL})-[:{TRACE_EDGE_LABEL}]->(t:{TRACE_LABEL} " in cypher
    assert (AUDIT_EVENT_LABEL, TRACE_LABEL) == (
        graph_label("node_type", "audit_event"),
        graph_label("node_type", "pc_trace"),
    )
    assert (
        TRACE_EDGE_LABEL == graph_label("internal_edge", "IN_TRACE") != graph_label("predicate", "IN_TRACE")
    )
