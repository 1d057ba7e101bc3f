"""Set-based graph writes on the real database (docs/explanation/architecture.md): `FactEngine.record_many`,
`GraphStore.upsert_nodes` / `ensure_nodes` / `create_edges` keep one vertex per (namespace, natural_key)
and one edge per fact_id under concurrent writers, write the same rows as the one-by-one path, and read
the vertex ids they join on from graph_nodes (also for rows written before migration 0006)."""

from __future__ import annotations

import json
import threading
import uuid
from datetime import UTC
from datetime import datetime
from typing import Any

import psycopg
import pytest

from common.kernel.identifiers import fact_id
from common.storage.database import Database
from common.storage.fact_store import FactStore
from common.storage.graph.store import GraphStore
from common.storage.graph.store import NodeWrite
from ingest_service.facts.engine import FactEngine
from ingest_service.facts.engine import FactInput
from ingest_service.facts.engine import accepted

pytestmark = pytest.mark.integration

T0 = datetime(2026, 1, 1, tzinfo=UTC)
NOW = datetime(2026, 6, 1, tzinfo=UTC)


def write(namespace: str, subject: str, object_: str, **extra: Any) -> FactInput:
    values: dict[str, Any] = {
        "field": "facts[0]",
        "namespace": namespace,
        "subject": subject,
        "predicate": "BULK_DEPENDS_ON",
        "object": object_,
        "valid_from": T0,
        "valid_to": None,
        "evidence": "asserted",
        "confidence": 0.5,
        "supersedes": None,
        "scopes": [],
        "attributes": {"note": 'ключ "$$" \\ x'},
        "observation_id": None,
        "observed_at": NOW,
    }
    values.update(extra)
    return FactInput(**values)


def graph_counts(database: Database, namespace: str) -> tuple[dict[str, int], dict[str, int]]:
    """(vertices per natural_key, edges per fact_id) of ``namespace``, read from AGE's tables."""
    graph = database.settings.graph_name
    with psycopg.connect(database.settings.database_url) as conn:
        conn.execute("LOAD 'age'")
        conn.execute('SET search_path = "$user", public, ag_catalog')
        selector = json.dumps({"namespace": namespace})
        vertices = conn.execute(
            f'SELECT properties ->> \'"natural_key"\'::agtype, count(*) FROM "{graph}"._ag_label_vertex'
            " WHERE properties @> %s::agtype GROUP BY 1",
            (selector,),
        ).fetchall()
        edges = conn.execute(
            f'SELECT properties ->> \'"fact_id"\'::agtype, count(*) FROM "{graph}"._ag_label_edge'
            " WHERE properties @> %s::agtype GROUP BY 1",
            (selector,),
        ).fetchall()
    return {str(k): int(n) for k, n in vertices}, {str(k): int(n) for k, n in edges}


def test_two_bulk_writers_with_overlapping_facts_leave_one_edge_per_fact(
    database: Database, namespace: str
) -> None:
    graph = GraphStore(database)
    engine = FactEngine(graph, FactStore(graph))
    shared = [write(namespace, f"service:s{i}", f"service:t{i % 7}") for i in range(120)]
    own = {
        name: [write(namespace, f"service:{name}{i}", f"service:t{i % 7}") for i in range(40)]
        for name in ("a", "b")
    }
    barrier = threading.Barrier(2)
    outcomes: dict[str, list[Any]] = {}
    errors: list[BaseException] = []

    def writer(name: str, writes: list[FactInput]) -> None:
        def work(conn: psycopg.Connection[Any]) -> list[Any]:
            barrier.wait(timeout=30)
            return accepted(engine.record(conn, writes, now=NOW))

        try:
            outcomes[name] = database.run_transaction(work)
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    # Opposite orders of the shared facts: rows are locked in fact_id order, so no deadlock either way.
    threads = [
        threading.Thread(target=writer, args=("a", shared + own["a"])),
        threading.Thread(target=writer, args=("b", own["b"] + shared[::-1])),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    shared_ids = {fact_id(namespace, w.subject, w.predicate, w.object, w.valid_from) for w in shared}
    created = {o.fact_id for name in outcomes for o in outcomes[name] if o.created}
    assert shared_ids <= created  # each shared fact created by exactly one of them ...
    for fid in shared_ids:
        assert sum(o.fact_id == fid and o.created for name in outcomes for o in outcomes[name]) == 1
    vertices, edges = graph_counts(database, namespace)
    assert len(edges) == 120 + 80 and set(edges.values()) == {1}  # ... and one edge per fact_id
    expected_keys = {k for w in shared + own["a"] + own["b"] for k in (w.subject, w.object)}
    assert set(vertices) == expected_keys and set(vertices.values()) == {1}


def test_bulk_and_one_by_one_writers_race_on_the_same_facts(database: Database, namespace: str) -> None:
    """`record` of one batch (snapshots) and of one fact at a time (AssertFacts) on the same keys at once."""
    graph = GraphStore(database)
    engine = FactEngine(graph, FactStore(graph))
    writes = [write(namespace, f"team:x{i % 5}", f"service:y{i}") for i in range(60)]
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def start_together() -> None:
        if not barrier.broken and barrier.n_waiting < 2:
            try:
                barrier.wait(timeout=10)  # a retried attempt (after a deadlock) does not wait again
            except threading.BrokenBarrierError:
                pass

    def bulk() -> None:
        def work(conn: psycopg.Connection[Any]) -> None:
            start_together()
            accepted(engine.record(conn, writes, now=NOW))

        try:
            database.run_transaction(work)
        except BaseException as error:  # noqa: BLE001
            errors.append(error)

    def one_by_one() -> None:
        def work(conn: psycopg.Connection[Any]) -> None:
            start_together()
            for item in reversed(writes):
                accepted(engine.record(conn, [item], now=NOW))

        try:
            database.run_transaction(work)
        except BaseException as error:  # noqa: BLE001
            errors.append(error)

    threads = [threading.Thread(target=bulk), threading.Thread(target=one_by_one)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors  # a deadlock between the two is retried by run_transaction
    vertices, edges = graph_counts(database, namespace)
    assert len(edges) == 60 and set(edges.values()) == {1}
    assert set(vertices.values()) == {1} and len(vertices) == 5 + 60


def test_bulk_writes_equal_one_by_one_writes(database: Database) -> None:
    graph = GraphStore(database)
    store = FactStore(graph)
    engine = FactEngine(graph, store)
    spaces = {"bulk": "bulk-many-" + uuid.uuid4().hex[:10], "single": "bulk-one-" + uuid.uuid4().hex[:10]}
    rows: dict[str, list[tuple[Any, ...]]] = {}
    for mode, namespace in spaces.items():
        writes = [
            write(namespace, f"person:p{i}", f"project:q{i % 3}", scopes=["workspace:w"]) for i in range(12)
        ]
        writes.append(write(namespace, "person:p0", "project:q0"))  # the same fact again: strengthened
        entity = NodeWrite(
            namespace=namespace,
            natural_key="person:p1",
            node_type="person",
            title="P1",
            props={"attributes": {"a": 1}},
        )

        def work(
            conn: psycopg.Connection[Any],
            mode: str = mode,
            writes: list[FactInput] = writes,
            entity: NodeWrite = entity,
        ) -> list[Any]:
            if mode == "bulk":
                outcomes = accepted(engine.record(conn, writes, now=NOW))
                result = graph.upsert_nodes(conn, [entity], now=NOW)[0]
            else:
                outcomes = [o for w in writes for o in accepted(engine.record(conn, [w], now=NOW))]
                result = graph.upsert_node(conn, entity, now=NOW)
            assert result.completed_placeholder and result.updated and not result.created
            return outcomes

        outcomes = database.run_transaction(work)
        assert [o.created for o in outcomes] == [True] * 12 + [False]
        with database.connection() as conn:
            rows[mode] = [
                (r[0].replace(namespace, "NS"), *r[1:])
                for r in conn.execute(
                    "SELECT subject_key, object_key, valid_from, valid_to, evidence, confidence, scopes, attributes,"
                    " observation_ids FROM facts WHERE namespace = %s ORDER BY subject_key, object_key",
                    (namespace,),
                ).fetchall()
            ]
            placeholders = conn.execute(
                "SELECT count(*) FILTER (WHERE placeholder), count(*) FILTER (WHERE vertex_id IS NULL)"
                " FROM graph_nodes WHERE namespace = %s",
                (namespace,),
            ).fetchone()
        assert placeholders == (12 + 3 - 1, 0)
        vertices, edges = graph_counts(database, namespace)
        assert len(edges) == 12 and set(edges.values()) == {1} and set(vertices.values()) == {1}
    assert rows["bulk"] == rows["single"]


def test_rows_without_a_vertex_id_get_it_on_first_use(database: Database, namespace: str) -> None:
    """Rows written before migration 0006 have no vertex_id: an edge to them is still created."""
    graph = GraphStore(database)
    engine = FactEngine(graph, FactStore(graph))
    with database.connection() as conn:
        graph.ensure_nodes(conn, namespace, ["service:old", "service:older"], now=NOW)
        conn.execute("UPDATE graph_nodes SET vertex_id = NULL WHERE namespace = %s", (namespace,))
    database.run_transaction(
        lambda conn: accepted(
            engine.record(conn, [write(namespace, "service:old", "service:older")], now=NOW)
        )
    )
    with database.connection() as conn:
        missing = conn.execute(
            "SELECT count(*) FROM graph_nodes WHERE namespace = %s AND vertex_id IS NULL", (namespace,)
        ).fetchone()
    assert missing == (0,)
    vertices, edges = graph_counts(database, namespace)
    assert len(edges) == 1 and vertices == {"service:old": 1, "service:older": 1}


def test_vertex_ids_come_from_each_labels_own_sequence(database: Database, namespace: str) -> None:
    """Labels that need quoting (upper case) and several labels in one batch: every vertex gets the id
    AGE's column default would give (its label's id), and edges join on them."""
    graph = GraphStore(database)
    engine = FactEngine(graph, FactStore(graph))
    writes = [write(namespace, f"BulkMixedCase:m{i}", f"bulk_lower:l{i}") for i in range(5)]
    database.run_transaction(lambda conn: accepted(engine.record(conn, writes, now=NOW)))
    with database.connection() as conn:
        rows = conn.execute(
            "SELECT g.label, ag_catalog._extract_label_id(g.vertex_id)::int = l.id FROM graph_nodes g"
            " JOIN ag_catalog.ag_label l ON l.name = g.label"
            " JOIN ag_catalog.ag_graph ag ON ag.graphid = l.graph AND ag.name = %s WHERE g.namespace = %s",
            (database.settings.graph_name, namespace),
        ).fetchall()
    assert sorted({label for label, _ in rows}) == ["n_BulkMixedCase", "n_bulk_lower"]  # one label per namespace
    assert len(rows) == 10 and all(same for _, same in rows)
    vertices, edges = graph_counts(database, namespace)
    assert len(vertices) == 10 and len(edges) == 5 and set(edges.values()) == {1}


@pytest.mark.parametrize("vertex_ids", ["recorded", "unrecorded"])
def test_look_ups_of_one_keys_vertex_touch_that_namespaces_vertex_only(
    database: Database, vertex_ids: str
) -> None:
    """The writes that find one key's vertex (`replace_links`, the rewrite of a changed node, `edge_counts`,
    `delete_nodes`) act on the vertex of that namespace's key, by the id graph_nodes recorded or, for a row
    written before migration 0006 (``unrecorded``), by its properties; another namespace holding the same
    keys in the same label tables keeps its vertex, properties and edges."""
    graph = GraphStore(database)
    ours, theirs = f"vertex-a-{uuid.uuid4().hex[:8]}", f"vertex-b-{uuid.uuid4().hex[:8]}"
    keys = ["doc:x", "doc:y", "doc:z"]
    with database.connection() as conn:
        for namespace in (ours, theirs):
            for key in keys:
                graph.upsert_node(
                    conn, NodeWrite(namespace, key, "document", props={"content": key}), now=NOW
                )
        labels = graph.node_labels(conn, ours, keys)
        graph.replace_links(
            conn, theirs, "doc:x", labels["doc:x"], {"doc:y": labels["doc:y"], "doc:z": labels["doc:z"]}
        )
        graph.replace_links(conn, ours, "doc:x", labels["doc:x"], {"doc:y": labels["doc:y"]})
        if vertex_ids == "unrecorded":
            conn.execute("UPDATE graph_nodes SET vertex_id = NULL WHERE namespace = %s", (ours,))
        graph.replace_links(conn, ours, "doc:x", labels["doc:x"], {"doc:z": labels["doc:z"]})
        assert graph.edge_counts(conn, ours, "doc:x", labels["doc:x"]) == {"LINKS_TO": 1}
        assert graph.edge_counts(conn, ours, "doc:z", labels["doc:z"]) == {"LINKS_TO": 1}
        assert graph.edge_counts(conn, ours, "doc:y", labels["doc:y"]) == {}
        assert graph.edge_counts(conn, theirs, "doc:x", labels["doc:x"]) == {"LINKS_TO": 2}

        graph.upsert_node(conn, NodeWrite(ours, "doc:x", "document", props={"content": "changed"}), now=NOW)
        ours_node, theirs_node = graph.get_node(conn, ours, "doc:x"), graph.get_node(conn, theirs, "doc:x")
        assert ours_node is not None and ours_node["props"]["content"] == "changed"
        assert theirs_node is not None and theirs_node["props"]["content"] == "doc:x"

        assert graph.delete_nodes(conn, ours, ["doc:x"]) == ["doc:x"]
        assert graph.get_node(conn, ours, "doc:x") is None
        assert graph.edge_counts(conn, ours, "doc:z", labels["doc:z"]) == {}
        assert graph.edge_counts(conn, theirs, "doc:x", labels["doc:x"]) == {"LINKS_TO": 2}
    vertices, _ = graph_counts(database, ours)
    assert vertices == {"doc:y": 1, "doc:z": 1}
    vertices, _ = graph_counts(database, theirs)
    assert vertices == {"doc:x": 1, "doc:y": 1, "doc:z": 1}
