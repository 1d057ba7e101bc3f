"""Fact semantics of docs/explanation/knowledge-model.md on the real database."""

from __future__ import annotations

import itertools
import threading
from datetime import UTC
from datetime import datetime
from typing import Any

import pytest

from common.kernel.errors import InvalidArgument
from common.kernel.identifiers import fact_id
from common.kernel.identifiers import graph_label
from common.storage.database import Database
from common.storage.fact_rows import FactQuery
from common.storage.fact_store import FactStore
from common.storage.graph.store import GraphStore
from ingest_service.observations.recorder import ObservationRecorder
from tests.work_observations import work_assigned

pytestmark = pytest.mark.integration


def observation(
    namespace: str, external_id: str, occurred_at: str, assertions: list[dict[str, Any]]
) -> dict[str, Any]:
    return work_assigned(namespace, external_id, occurred_at, assertions)


def works_on(
    project: str, valid_from: str, supersedes: str | None = None, confidence: float = 0.9
) -> dict[str, Any]:
    fact: dict[str, Any] = {
        "subject": {"type": "person", "id": "alice"},
        "predicate": "WORKS_ON",
        "object": {"type": "project", "id": project},
        "valid_from": valid_from,
        "confidence": confidence,
    }
    if supersedes:
        fact["supersedes"] = supersedes
    return {"fact": fact}


def at(text: str) -> datetime:
    return datetime.fromisoformat(text)


def snapshot(database: Database, namespace: str) -> list[tuple[Any, ...]]:
    with database.connection() as conn:
        facts = conn.execute(
            "SELECT fact_id, subject_key, predicate, object_key, valid_from, valid_to, observation_ids,"
            " supersedes, superseded_by, confidence FROM facts WHERE namespace = %s ORDER BY fact_id",
            (namespace,),
        ).fetchall()
        nodes = conn.execute(
            "SELECT natural_key, node_type, placeholder FROM graph_nodes WHERE namespace = %s ORDER BY 1",
            (namespace,),
        ).fetchall()
    return [*facts, *nodes]


def portable_snapshot(database: Database, namespace: str) -> list[tuple[Any, ...]]:
    """`snapshot` with ids (which embed the namespace) replaced by what they stand for."""
    with database.connection() as conn:
        external = dict(
            conn.execute(
                "SELECT observation_id, source_external_id FROM observations WHERE namespace = %s",
                (namespace,),
            ).fetchall()
        )
    rows = snapshot(database, namespace)

    def key(natural_key: Any) -> Any:
        # An episode's key embeds its observation id (which embeds the namespace): name it by the event.
        text = str(natural_key)
        return (
            "episode:" + external[text[len("episode:") :]] if text.startswith("episode:obs-") else natural_key
        )

    meaning = {
        row[0]: f"{key(row[1])}|{row[2]}|{key(row[3])}|{row[4]}"
        for row in rows
        if str(row[0]).startswith("fact-")
    }
    portable = []
    for row in rows:
        if str(row[0]).startswith("fact-"):
            (
                fid,
                _subject,
                _predicate,
                _obj,
                _valid_from,
                valid_to,
                observation_ids,
                supersedes,
                superseded_by,
                confidence,
            ) = row
            portable.append(
                (
                    meaning[fid],
                    valid_to,
                    sorted(external[o] for o in observation_ids),
                    meaning.get(supersedes, supersedes),
                    meaning.get(superseded_by, superseded_by),
                    confidence,
                )
            )
        elif str(row[0]).startswith("episode:obs-"):
            portable.append(("episode:" + external[str(row[0])[len("episode:") :]], *row[1:]))
        else:
            with database.connection() as conn:
                vertex = GraphStore(database).get_node(conn, namespace, str(row[0])) or {}
            props = vertex.get("props") or {}
            portable.append(
                (*row, vertex.get("title"), repr(sorted((props.get("attributes") or {}).items())))
            )
    return sorted(portable, key=repr)


def history(namespace: str) -> list[dict[str, Any]]:
    alpha = fact_id(namespace, "person:alice", "WORKS_ON", "project:alpha", at("2026-01-01T00:00:00Z"))
    beta = fact_id(namespace, "person:alice", "WORKS_ON", "project:beta", at("2026-03-01T00:00:00Z"))
    return [
        observation(
            namespace,
            "1",
            "2026-01-01T00:00:00Z",
            [
                {"entity": {"key": {"type": "person", "id": "alice"}, "title": "Alice"}},
                works_on("alpha", "2026-01-01T00:00:00Z"),
            ],
        ),
        observation(
            namespace, "2", "2026-03-01T00:00:00Z", [works_on("beta", "2026-03-01T00:00:00Z", alpha)]
        ),
        observation(
            namespace, "3", "2026-05-01T00:00:00Z", [works_on("gamma", "2026-05-01T00:00:00Z", beta)]
        ),
        # the same assertion as observation 2 from another source: strengthens, does not duplicate
        observation(
            namespace,
            "4",
            "2026-03-02T00:00:00Z",
            [
                works_on("beta", "2026-03-01T00:00:00Z", alpha, confidence=0.95),
            ],
        ),
        observation(
            namespace,
            "5",
            "2026-01-02T00:00:00Z",
            [
                {"entity": {"key": "project:alpha", "title": "Project Alpha", "attributes": {"budget": 10}}},
            ],
        ),
    ]


def test_supersession_strengthening_and_as_of(database: Database, namespace: str) -> None:
    recorder = ObservationRecorder(database)
    results = recorder.record_batch(history(namespace))
    assert [r.status for r in results] == ["processed"] * 5
    assert results[3].facts_strengthened == 1 and results[3].facts_created == 0
    store = FactStore(GraphStore(database))
    with database.connection() as conn:
        current = store.list(
            conn, FactQuery(namespace=namespace, subject="person:alice"), now=at("2026-06-01T00:00:00Z")
        )
        in_april = store.list(
            conn,
            FactQuery(namespace=namespace, subject="person:alice", as_of=at("2026-04-01T00:00:00Z")),
            now=at("2026-06-01T00:00:00Z"),
        )
        on_boundary = store.list(
            conn,
            FactQuery(namespace=namespace, subject="person:alice", as_of=at("2026-03-01T00:00:00Z")),
            now=at("2026-06-01T00:00:00Z"),
        )
        everything = store.list(
            conn,
            FactQuery(namespace=namespace, subject="person:alice", include_history=True),
            now=at("2026-06-01T00:00:00Z"),
        )
    assert [f.object_key for f in current] == ["project:gamma"]
    assert [f.object_key for f in in_april] == ["project:beta"]
    assert [f.object_key for f in on_boundary] == ["project:beta"]  # valid_from <= t < valid_to
    assert len(everything) == 3
    beta = next(f for f in everything if f.object_key == "project:beta")
    assert len(beta.observation_ids) == 2 and beta.confidence == 0.95
    alpha = next(f for f in everything if f.object_key == "project:alpha")
    assert alpha.valid_to == at("2026-03-01T00:00:00Z") and alpha.superseded_by == beta.fact_id


def test_delivery_order_does_not_change_the_result(database: Database) -> None:
    recorder = ObservationRecorder(database)
    states = []
    for order in list(itertools.permutations(range(5)))[::17]:
        namespace = "perm-" + "".join(map(str, order)) + "-" + datetime.now(UTC).strftime("%H%M%S%f")
        items = history(namespace)
        recorder.record_batch([items[i] for i in order])
        states.append(portable_snapshot(database, namespace))
    assert all(state == states[0] for state in states[1:])


def test_repeated_batch_changes_nothing(database: Database, namespace: str) -> None:
    recorder = ObservationRecorder(database)
    first = recorder.record_batch(history(namespace))
    before = snapshot(database, namespace)
    again = recorder.record_batch(history(namespace))
    assert [r.created for r in again] == [False] * 5
    assert [r.observation_id for r in again] == [r.observation_id for r in first]
    assert snapshot(database, namespace) == before


def test_supersession_of_another_subjects_fact_is_rejected(database: Database, namespace: str) -> None:
    recorder = ObservationRecorder(database)
    recorder.record_batch(history(namespace)[:1])
    alpha = fact_id(namespace, "person:alice", "WORKS_ON", "project:alpha", at("2026-01-01T00:00:00Z"))
    bad = observation(
        namespace,
        "x",
        "2026-02-01T00:00:00Z",
        [
            {
                "fact": {
                    "subject": "person:bob",
                    "predicate": "WORKS_ON",
                    "object": "project:beta",
                    "valid_from": "2026-02-01T00:00:00Z",
                    "supersedes": alpha,
                }
            },
        ],
    )
    before = snapshot(database, namespace)
    [result] = recorder.record_batch([bad])
    assert result.status == "partially_processed"
    assert result.field_violations[0].startswith("assertions[0].fact.supersedes")
    after = snapshot(database, namespace)
    assert [row for row in after if row[0].startswith("fact-")] == [
        row for row in before if row[0].startswith("fact-")
    ]


def test_invalid_items_fail_alone_and_an_all_invalid_batch_is_rejected(
    database: Database, namespace: str
) -> None:
    recorder = ObservationRecorder(database)
    good = history(namespace)[0]
    bad = dict(good, kind="Bad Kind", source={"system": "tracker", "stream": "people", "external_id": "bad"})
    results = recorder.record_batch([bad, good])
    assert results[0].status == "failed" and results[0].field_violations == [
        "observations[0].kind: required, pattern [a-z0-9][a-z0-9._-]{0,127}"
    ]
    assert results[1].status == "processed"
    with pytest.raises(InvalidArgument) as caught:
        recorder.record_batch([bad])
    assert [v.field for v in caught.value.violations] == ["observations[0].kind"]


def test_concurrent_writers_leave_one_node_per_key_and_one_edge_per_fact(
    database: Database, namespace: str
) -> None:
    """16 threads record overlapping observations (same entities, same facts) at once."""
    recorder = ObservationRecorder(database)
    errors: list[BaseException] = []

    def writer(worker: int) -> None:
        items = []
        for n in range(6):
            items.append(
                observation(
                    namespace,
                    f"w{worker}-{n}",
                    "2026-01-01T00:00:00Z",
                    [
                        {"entity": {"key": {"type": "person", "id": "alice"}, "title": "Alice"}},
                        works_on(f"p{n % 3}", "2026-01-01T00:00:00Z"),
                        {
                            "fact": {
                                "subject": "project:p0",
                                "predicate": "OWNED_BY",
                                "object": f"team:t{n % 2}",
                                "valid_from": "2026-01-01T00:00:00Z",
                            }
                        },
                    ],
                )
            )
        try:
            recorder.record_batch(items)
        except BaseException as error:  # noqa: BLE001 - collected and asserted below
            errors.append(error)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    with database.connection() as conn:
        nodes = conn.execute(
            "SELECT natural_key, count(*) FROM graph_nodes WHERE namespace = %s GROUP BY 1", (namespace,)
        ).fetchall()
        facts = conn.execute(
            "SELECT fact_id, cardinality(observation_ids) FROM facts WHERE namespace = %s", (namespace,)
        ).fetchall()
        graph = GraphStore(database)
        vertices = graph.cypher(
            conn,
            f"MATCH (n:{graph_label('node_type', 'person')} {{namespace: $namespace, natural_key: 'person:alice'}})"
            " RETURN count(n)",
            {"namespace": namespace},
        )
        edges = graph.cypher(
            conn,
            f"MATCH ()-[e:{graph_label('predicate', 'WORKS_ON')} {{namespace: $namespace}}]->() RETURN count(e)",
            {"namespace": namespace},
        )
    assert vertices == [1]
    assert edges == [3]
    assert len(facts) == 5  # WORKS_ON p0..p2, OWNED_BY t0, t1
    assert all(count == 1 for _, count in nodes)
    works = {fid: n for fid, n in facts}
    assert sum(works.values()) == 16 * 6 * 2  # every observation's evidence is kept, none twice


def test_a_supersession_waiting_for_its_target_follows_the_rules_of_a_direct_one(
    database: Database, namespace: str
) -> None:
    """A fact id can be computed in advance: a supersession recorded before its target arrives closes the
    target only if it could have closed it directly (same subject and predicate, scopes no narrower)."""
    recorder = ObservationRecorder(database)
    future_hidden = fact_id(
        namespace, "person:alice", "WORKS_ON", "project:secret", at("2026-05-01T00:00:00Z")
    )
    future_other = fact_id(namespace, "person:alice", "WORKS_ON", "project:gamma", at("2026-05-01T00:00:00Z"))
    # Written first: a scoped successor naming a fact that does not exist yet, and one of another subject.
    recorder.record_batch(
        [
            observation(
                namespace,
                "early-1",
                "2026-06-01T00:00:00Z",
                [
                    {
                        "fact": {
                            **works_on("delta", "2026-06-01T00:00:00Z", supersedes=future_hidden)["fact"],
                            "scopes": ["workspace:narrow"],
                        }
                    }
                ],
            ),
            observation(
                namespace,
                "early-2",
                "2026-06-01T00:00:00Z",
                [
                    {
                        "fact": {
                            "subject": "person:bob",
                            "predicate": "WORKS_ON",
                            "object": "project:omega",
                            "valid_from": "2026-06-01T00:00:00Z",
                            "supersedes": future_other,
                        }
                    }
                ],
            ),
        ]
    )
    # Then the targets arrive, visible to everyone.
    recorder.record_batch(
        [
            observation(
                namespace, "late-1", "2026-05-01T00:00:00Z", [works_on("secret", "2026-05-01T00:00:00Z")]
            ),
            observation(
                namespace, "late-2", "2026-05-01T00:00:00Z", [works_on("gamma", "2026-05-01T00:00:00Z")]
            ),
        ]
    )
    with database.connection() as conn:
        rows = dict(
            conn.execute(
                "SELECT fact_id, valid_to FROM facts WHERE namespace = %s AND fact_id = ANY(%s)",
                (namespace, [future_hidden, future_other]),
            ).fetchall()
        )
    assert rows == {future_hidden: None, future_other: None}  # both stay open

    # A successor that could have closed it directly still does, whatever the order.
    later = fact_id(namespace, "person:carol", "WORKS_ON", "project:one", at("2026-07-01T00:00:00Z"))
    recorder.record_batch(
        [
            observation(
                namespace,
                "early-3",
                "2026-08-01T00:00:00Z",
                [
                    {
                        "fact": {
                            "subject": "person:carol",
                            "predicate": "WORKS_ON",
                            "object": "project:two",
                            "valid_from": "2026-08-01T00:00:00Z",
                            "supersedes": later,
                        }
                    }
                ],
            )
        ]
    )
    recorder.record_batch(
        [
            observation(
                namespace,
                "late-3",
                "2026-07-01T00:00:00Z",
                [
                    {
                        "fact": {
                            "subject": "person:carol",
                            "predicate": "WORKS_ON",
                            "object": "project:one",
                            "valid_from": "2026-07-01T00:00:00Z",
                        }
                    }
                ],
            )
        ]
    )
    with database.connection() as conn:
        (valid_to,) = conn.execute(
            "SELECT valid_to FROM facts WHERE namespace = %s AND fact_id = %s", (namespace, later)
        ).fetchone()
    assert valid_to == at("2026-08-01T00:00:00Z")
