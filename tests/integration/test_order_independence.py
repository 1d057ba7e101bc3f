"""Any permutation of delivery of the same observations yields the same nodes, facts,
intervals and observation_ids (property-based, on generated histories)."""

from __future__ import annotations

import uuid
from datetime import UTC
from datetime import datetime
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from common.kernel.identifiers import canonical_instant
from common.kernel.identifiers import fact_id
from common.storage.database import Database
from ingest_service.observations.recorder import ObservationRecorder
from tests.integration.test_fact_engine import portable_snapshot

pytestmark = pytest.mark.integration

START = datetime(2026, 1, 1, tzinfo=UTC)
PEOPLE = ["alice", "bob", "чебурашка"]
PROJECTS = ["alpha", "beta", "gamma", "delta"]


@st.composite
def histories(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[int]]:
    """Observations with supersession chains, repeated assertions, entities asserted after their facts
    (placeholders), and a delivery order; built with a placeholder namespace filled in later."""
    observations: list[dict[str, Any]] = []
    for person in draw(st.lists(st.sampled_from(PEOPLE), min_size=1, max_size=3, unique=True)):
        chain = draw(st.lists(st.sampled_from(PROJECTS), min_size=1, max_size=4))
        previous: tuple[str, datetime] | None = None
        for step, project in enumerate(chain):
            when = START + timedelta(days=30 * step + draw(st.integers(0, 20)))
            fact: dict[str, Any] = {
                "subject": {"type": "person", "id": person},
                "predicate": "WORKS_ON",
                "object": f"project:{project}",
                "valid_from": canonical_instant(when),
                "confidence": draw(st.sampled_from([0.5, 0.8, 1.0])),
            }
            if previous is not None:
                fact["supersedes"] = ("PREVIOUS", person, previous[0], previous[1])
            copies = draw(st.integers(1, 2))  # the same assertion from one or two sources
            for copy in range(copies):
                observations.append(
                    {
                        "source": {
                            "system": "tracker",
                            "stream": person,
                            "external_id": f"{person}-{step}-{copy}",
                        },
                        "kind": "work.assigned",
                        "occurred_at": canonical_instant(when + timedelta(hours=copy)),
                        "assertions": [{"fact": dict(fact)}],
                    }
                )
            previous = (f"project:{project}", when)
        if draw(st.booleans()):
            observations.append(
                {
                    "source": {"system": "hr", "stream": "people", "external_id": person},
                    "kind": "person.updated",
                    "occurred_at": canonical_instant(START + timedelta(days=draw(st.integers(0, 200)))),
                    "assertions": [
                        {
                            "entity": {
                                "key": {"type": "person", "id": person},
                                "title": person.title(),
                                "attributes": {"team": draw(st.sampled_from(["core", "infra"]))},
                            }
                        }
                    ],
                }
            )
    order = draw(st.permutations(list(range(len(observations)))))
    return observations, list(order)


def materialise(template: list[dict[str, Any]], namespace: str) -> list[dict[str, Any]]:
    result = []
    for item in template:
        copy = {**item, "namespace": namespace, "assertions": []}
        for assertion in item["assertions"]:
            if "fact" in assertion:
                fact = dict(assertion["fact"])
                marker = fact.get("supersedes")
                if isinstance(marker, tuple):
                    _, person, obj, when = marker
                    fact["supersedes"] = fact_id(namespace, f"person:{person}", "WORKS_ON", obj, when)
                copy["assertions"].append({"fact": fact})
            else:
                copy["assertions"].append(assertion)
        result.append(copy)
    return result


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(histories())
def test_any_delivery_order_gives_the_same_graph(
    database: Database, history: tuple[list[dict[str, Any]], list[int]]
) -> None:
    template, order = history
    recorder = ObservationRecorder(database)
    in_order_ns, shuffled_ns = "ord-" + uuid.uuid4().hex[:10], "shf-" + uuid.uuid4().hex[:10]
    in_order = materialise(template, in_order_ns)
    shuffled = materialise(template, shuffled_ns)
    recorder.record_batch(in_order)
    for index in order:  # one observation per call: each delivery its own transaction
        recorder.record_batch([shuffled[index]])
    assert portable_snapshot(database, shuffled_ns) == portable_snapshot(database, in_order_ns)
