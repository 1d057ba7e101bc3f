"""AssertFacts with ``supersede_live``: a writer replaces the live version(s) of a subject and predicate
without computing any fact_id; without the flag a second object stays a conflict (flagged, never
resolved), on the real database."""

from __future__ import annotations

import pytest

from common.domain.write_access import WriteAccess
from common.kernel.errors import InvalidArgument
from common.storage.database import Database
from common.storage.fact_store import FactStore
from common.storage.graph.store import GraphStore
from ingest_service.facts.assertions import FactAsserter
from tests.work_observations import works_on


def open_objects(database: Database, namespace: str) -> dict[str, str | None]:
    facts = FactStore(GraphStore(database))
    with database.connection() as conn:
        rows = facts.touching(conn, namespace, "person:alice")
    return {row.object_key: (row.valid_to.isoformat() if row.valid_to else None) for row in rows}


def test_supersede_live_closes_every_live_version_at_the_new_valid_from(
    database: Database, namespace: str
) -> None:
    asserter = FactAsserter(database)
    asserter.assert_facts(namespace, [works_on("project:a", "2026-01-01T00:00:00Z")])
    asserter.assert_facts(namespace, [works_on("project:b", "2026-02-01T00:00:00Z")])
    # without the flag both stay live: a conflict, not resolved
    assert open_objects(database, namespace) == {"project:a": None, "project:b": None}

    [result] = asserter.assert_facts(
        namespace, [works_on("project:c", "2026-03-01T00:00:00Z", supersede_live=True)]
    )

    assert result.created
    assert open_objects(database, namespace) == {
        "project:a": "2026-03-01T00:00:00+00:00",
        "project:b": "2026-03-01T00:00:00+00:00",
        "project:c": None,
    }
    facts = FactStore(GraphStore(database))
    with database.connection() as conn:
        [newest] = facts.get_many(conn, namespace, [result.fact_id])
        closed = [row for row in facts.touching(conn, namespace, "person:alice") if row.valid_to]
    assert newest.supersedes in {row.fact_id for row in closed}  # the latest live version
    assert {row.superseded_by for row in closed} == {result.fact_id}


def test_supersede_live_leaves_later_and_same_object_facts_alone(database: Database, namespace: str) -> None:
    asserter = FactAsserter(database)
    asserter.assert_facts(namespace, [works_on("project:later", "2026-05-01T00:00:00Z")])
    asserter.assert_facts(namespace, [works_on("project:c", "2026-03-01T00:00:00Z", supersede_live=True)])
    assert open_objects(database, namespace) == {"project:later": None, "project:c": None}


def test_supersede_live_is_refused_beside_supersedes_and_outside_assert_facts(
    database: Database, namespace: str
) -> None:
    asserter = FactAsserter(database)
    with pytest.raises(InvalidArgument) as refused:
        asserter.assert_facts(
            namespace,
            [
                works_on(
                    "project:c", "2026-03-01T00:00:00Z", supersede_live=True, supersedes="fact-" + "0" * 24
                )
            ],
        )
    assert [v.field for v in refused.value.violations] == ["facts[0].supersede_live"]
    assert open_objects(database, namespace) == {}
    assert WriteAccess.of_caller().unrestricted  # in-process caller: development mode


def test_a_narrower_fact_leaves_a_wider_live_version_alone(database: Database, namespace: str) -> None:
    """A fact restricted to a workspace does not close a version every reader sees (scope inheritance)."""
    asserter = FactAsserter(database)
    asserter.assert_facts(namespace, [works_on("project:a", "2026-01-01T00:00:00Z")])
    asserter.assert_facts(
        namespace,
        [works_on("project:b", "2026-02-01T00:00:00Z", supersede_live=True, scopes=["workspace:alpha"])],
    )
    assert open_objects(database, namespace) == {"project:a": None, "project:b": None}
