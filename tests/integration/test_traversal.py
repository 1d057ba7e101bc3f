"""The bounded recursive walk over the facts index (common.storage.graph.traversal) on the
real database: depth bound, cycles, as-of, relation and kind filters, hidden nodes, lost evidence,
fanout and row limits."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from datetime import UTC
from datetime import datetime

import pytest

from common.storage.database import Database
from common.storage.fact_store import FactStore
from common.storage.graph.store import GraphStore
from common.storage.graph.store import NodeWrite
from common.storage.graph.traversal import RelationRule
from common.storage.graph.traversal import TraversalStore
from common.storage.graph.traversal import Walk
from common.storage.graph.traversal import WalkQuery
from common.storage.visibility import EVERYTHING
from common.storage.visibility import Visibility
from ingest_service.facts.engine import FactEngine
from ingest_service.facts.engine import FactInput
from ingest_service.facts.engine import accepted

pytestmark = pytest.mark.integration

JAN = datetime(2025, 1, 1, tzinfo=UTC)
MAR = datetime(2025, 3, 1, tzinfo=UTC)
JUN = datetime(2025, 6, 1, tzinfo=UTC)
JUL = datetime(2025, 7, 1, tzinfo=UTC)
ANY = [RelationRule("R"), RelationRule("S")]


def _facts(
    database: Database,
    namespace: str,
    edges: Sequence[tuple[str, str, str]],
    *,
    valid_from: datetime = JAN,
    valid_to: datetime | None = None,
    confidence: float = 0.9,
    observation_id: str | None = None,
) -> list[str]:
    graph = GraphStore(database)
    engine = FactEngine(graph, FactStore(graph))

    def work(conn: object) -> list[str]:
        facts = [
            FactInput(
                field="test",
                namespace=namespace,
                subject=subject,
                predicate=predicate,
                object=object_,
                valid_from=valid_from,
                valid_to=valid_to,
                evidence="asserted",
                confidence=confidence,
                supersedes=None,
                scopes=[],
                attributes={},
                observation_id=observation_id,
                observed_at=valid_from,
            )
            for subject, predicate, object_ in edges
        ]
        return [
            accepted(engine.record(conn, [fact], now=datetime.now(UTC)))[0].fact_id  # type: ignore[arg-type]
            for fact in facts
        ]

    return database.run_transaction(work)


def _walk(
    database: Database,
    namespace: str,
    anchors: Sequence[str],
    depth: int,
    *,
    rules: Sequence[RelationRule] = ANY,
    as_of: datetime = MAR,
    visibility: Visibility = EVERYTHING,
    fanout: int = 50,
    row_limit: int = 2000,
) -> Walk:
    with database.connection() as conn:
        return TraversalStore().walk(
            conn, WalkQuery(namespace, anchors, as_of, depth, rules, visibility, fanout, row_limit)
        )


def _reached(walk: Walk) -> dict[str, int]:
    """Node -> smallest depth at which a step reached it."""
    out: dict[str, int] = {}
    for step in walk.steps:
        out[step.node_key] = min(out.get(step.node_key, 99), step.depth)
    return out


def test_depth_bounds_the_walk_and_paths_are_reported(database: Database, namespace: str) -> None:
    chain = ["x:a", "x:b", "x:c", "x:d", "x:e"]
    ids = _facts(database, namespace, [(s, "R", o) for s, o in itertools.pairwise(chain)])
    assert _reached(_walk(database, namespace, ["x:a"], 2)) == {"x:b": 1, "x:c": 2}
    deep = _walk(database, namespace, ["x:a"], 4)
    assert _reached(deep) == {"x:b": 1, "x:c": 2, "x:d": 3, "x:e": 4}
    last = deep.steps[-1]
    assert last.path_keys == tuple(chain) and last.path_facts == tuple(ids)
    assert last.path_directions == ("out",) * 4 and last.from_key == "x:d" and not deep.truncated
    backwards = _walk(database, namespace, ["x:e"], 2)  # both directions
    assert _reached(backwards) == {"x:d": 1, "x:c": 2}
    assert {step.direction for step in backwards.steps} == {"in"}
    assert _walk(database, namespace, ["x:a"], 0).steps == []


def test_cycles_end_and_each_fact_is_reported_once_at_its_smallest_depth(
    database: Database, namespace: str
) -> None:
    ids = _facts(database, namespace, [("x:a", "R", "x:b"), ("x:b", "R", "x:c"), ("x:c", "R", "x:a")])
    walk = _walk(database, namespace, ["x:a"], 4)
    assert sorted(step.fact.fact_id for step in walk.steps) == sorted(ids)
    depths = {step.fact.fact_id: step.depth for step in walk.steps}
    assert depths == {ids[0]: 1, ids[2]: 1, ids[1]: 2}
    assert all(len(set(step.path_keys)) == len(step.path_keys) for step in walk.steps)  # no revisits
    assert walk.rows == 4  # a->b, a->c, a->b->c, a->c->b; a path never returns to a


def test_as_of_selects_the_facts_valid_at_that_instant(database: Database, namespace: str) -> None:
    _facts(database, namespace, [("x:a", "R", "x:b")])  # open interval: current from JAN on
    _facts(database, namespace, [("x:b", "R", "x:old")], valid_to=JUN)  # JAN..JUN
    _facts(database, namespace, [("x:b", "R", "x:new")], valid_from=JUN)  # JUN..
    assert _reached(_walk(database, namespace, ["x:a"], 2, as_of=MAR)) == {"x:b": 1, "x:old": 2}
    assert _reached(_walk(database, namespace, ["x:a"], 2, as_of=JUN)) == {"x:b": 1, "x:new": 2}
    assert _reached(_walk(database, namespace, ["x:a"], 2, as_of=JUL)) == {"x:b": 1, "x:new": 2}
    before = datetime(2024, 12, 31, tzinfo=UTC)
    assert _walk(database, namespace, ["x:a"], 2, as_of=before).steps == []


def test_relation_filter_and_kinds_of_the_relation(database: Database, namespace: str) -> None:
    _facts(
        database,
        namespace,
        [
            ("team:core", "OWNS", "service:checkout"),
            ("person:ann", "OWNS", "service:checkout"),  # outside fromKinds [team]
            ("service:checkout", "DEPENDS_ON", "service:payments"),
            ("person:ann", "MEMBER_OF", "team:core"),
        ],
    )
    owns = RelationRule("OWNS", frozenset({"team"}), frozenset({"service"}))
    depends = RelationRule("DEPENDS_ON", frozenset({"service"}), frozenset({"service"}))
    member = RelationRule("MEMBER_OF", frozenset({"person"}), frozenset({"team"}))
    walk = _walk(database, namespace, ["service:checkout"], 2, rules=[owns, depends, member])
    assert _reached(walk) == {"team:core": 1, "service:payments": 1, "person:ann": 2}
    assert [s.path_relations for s in walk.steps if s.node_key == "person:ann"] == [("OWNS", "MEMBER_OF")]
    only = _walk(database, namespace, ["service:checkout"], 2, rules=[depends])
    assert _reached(only) == {"service:payments": 1}
    loose = _walk(database, namespace, ["service:checkout"], 1, rules=[RelationRule("OWNS")])
    assert _reached(loose) == {"team:core": 1, "person:ann": 1}


def test_hidden_nodes_are_never_reached_nor_crossed(database: Database, namespace: str) -> None:
    graph = GraphStore(database)
    with database.connection() as conn:
        graph.upsert_node(
            conn,
            NodeWrite(
                namespace, "doc:secret", "document", title="Secret plan", props={"scopes": ["workspace:x"]}
            ),
            now=datetime.now(UTC),
        )
    _facts(
        database,
        namespace,
        [("x:a", "R", "doc:secret"), ("doc:secret", "R", "x:behind"), ("x:a", "R", "x:b")],
    )
    outsider = Visibility.of_scopes(["workspace:y"])
    assert _reached(_walk(database, namespace, ["x:a"], 3, visibility=outsider)) == {"x:b": 1}
    insider = Visibility.of_scopes(["workspace:x"])
    assert _reached(_walk(database, namespace, ["x:a"], 3, visibility=insider)) == {
        "x:b": 1,
        "doc:secret": 1,
        "x:behind": 2,
    }


def test_facts_whose_evidence_was_lost_are_not_followed(database: Database, namespace: str) -> None:
    _facts(database, namespace, [("x:a", "R", "x:b")], observation_id="obs-gone")
    _facts(database, namespace, [("x:a", "S", "x:c")], observation_id="obs-kept")
    with database.connection() as conn:
        lost = FactStore(GraphStore(database)).strike_observation(conn, namespace, "obs-gone")
    assert [row.evidence_lost for row in lost] == [True]
    assert _reached(_walk(database, namespace, ["x:a"], 2)) == {"x:c": 1}


def test_fanout_and_row_limit_bound_the_walk(database: Database, namespace: str) -> None:
    spokes = [f"x:s{n:02d}" for n in range(30)]
    _facts(database, namespace, [("x:hub", "R", spoke) for spoke in spokes])
    _facts(database, namespace, [("x:s00", "R", "x:far")], confidence=1.0)
    assert len(_walk(database, namespace, ["x:hub"], 1, fanout=5).steps) == 5
    limited = _walk(database, namespace, ["x:hub"], 2, row_limit=10)
    assert limited.rows == 10 and limited.truncated and {s.depth for s in limited.steps} == {1}
    full = _walk(database, namespace, ["x:hub"], 2)
    assert full.rows == 31 and not full.truncated and _reached(full)["x:far"] == 2
