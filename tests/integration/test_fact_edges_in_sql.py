"""The fact edges a batch creates carry the property map the database builds from the facts rows
(`GraphEdges.create_fact_edges`, migration 0029): the same map, value for value and type for type, as
`FactRow.edge_properties`, which the edges were written with before; and the database's canonical instant
is `canonical_instant`'s text."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from psycopg import sql

from common.kernel.config import Settings
from common.kernel.identifiers import canonical_instant
from common.storage.database import Database
from common.storage.fact_store import FactStore
from common.storage.graph_store import GraphStore
from common.storage.tables import CANONICAL_INSTANT_FUNCTION
from ingest_service.observations import ObservationRecorder

pytestmark = pytest.mark.integration


@hypothesis_settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    instant=st.datetimes(
        min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)
    ),
    offset_minutes=st.integers(-14 * 60, 14 * 60),
    whole_second=st.booleans(),
)
def test_the_database_writes_the_canonical_instant_of_python(
    database: Database, instant: datetime, offset_minutes: int, whole_second: bool
) -> None:
    value = (instant.replace(microsecond=0) if whole_second else instant).astimezone(
        timezone(timedelta(minutes=offset_minutes))
    )
    with database.connection() as conn:
        row = conn.execute(
            sql.SQL("SELECT {}(%s::timestamptz)").format(sql.Identifier(CANONICAL_INSTANT_FUNCTION)), (value,)
        ).fetchone()
    assert row is not None and row[0] == canonical_instant(value)


def _typed(value: Any) -> Any:
    """``value`` with each number tagged by its type, so 1 and 1.0 compare unequal."""
    if isinstance(value, dict):
        return {key: _typed(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_typed(item) for item in value]
    if isinstance(value, int | float) and not isinstance(value, bool):
        return (type(value).__name__, value)
    return value


def test_fact_edges_carry_the_map_of_the_facts_row(
    database: Database, settings: Settings, namespace: str
) -> None:
    recorder = ObservationRecorder(database)
    attributes = {
        "role": "lead «ведущий»",
        "weight": 1.0,
        "share": 0.25,
        "nested": {"list": [1, 2.5, "$$'\\"]},
    }
    observations = [
        {
            "namespace": namespace,
            "source": {"system": "tracker", "stream": "people", "external_id": f"e{number}"},
            "kind": "work.assigned",
            "occurred_at": f"2026-0{number + 1}-01T10:00:00.{number}00{number}00Z",
            "content": f"event {number}",
            "assertions": [
                {
                    "fact": {
                        "subject": {"type": "person", "id": "alice"},
                        "predicate": "WORKS_ON",
                        "object": {"type": "project", "id": f"p{number}"},
                        "valid_from": f"0{number + 5}50-01-0{number + 1}T00:00:00Z",
                        "confidence": [1.0, 0.9, 0.5][number],
                        "attributes": attributes,
                        **({"valid_to": "2999-12-31T23:59:59.000001Z"} if number == 1 else {}),
                    }
                },
                {"fact": {"subject": f"team:t{number}", "predicate": "HAS_MEMBER", "object": "person:alice"}},
            ],
        }
        for number in range(3)
    ]
    results = recorder.record_batch(observations)
    assert [result.status for result in results] == ["processed"] * 3
    store = FactStore(GraphStore(database))
    with database.connection() as conn:
        ids = [
            str(row[0])
            for row in conn.execute("SELECT fact_id FROM facts WHERE namespace = %s", (namespace,))
        ]
        rows = {fact.fact_id: fact for fact in store.get_many(conn, namespace, ids)}
        edges = conn.execute(
            sql.SQL(
                "SELECT ag_catalog.agtype_out(properties)::text FROM {} WHERE"
                " (ag_catalog.agtype_out(properties)::text)::jsonb ->> 'namespace' = %s"
            ).format(sql.Identifier(settings.graph_name, "_ag_label_edge")),
            (namespace,),
        ).fetchall()
    # 3 WORKS_ON, 3 HAS_MEMBER, and the episodes' ACTOR/SUBJECT facts (none here: no actor, no subject)
    assert len(rows) == 6 and len(edges) == 6
    for (text,) in edges:
        stored = json.loads(text)
        expected = json.loads(json.dumps(rows[stored["fact_id"]].edge_properties(), ensure_ascii=False))
        assert _typed(stored) == _typed(expected), (stored, expected)
