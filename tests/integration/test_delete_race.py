"""DeleteNode racing a fact write on the same node (docs/explanation/architecture.md): the delete waits for the
writer's transaction (the writer's registry look-up holds FOR KEY SHARE, the delete FOR UPDATE), then
removes the fact the writer committed, so no fact row outlives its edge or its end node."""

from __future__ import annotations

import threading
from datetime import UTC
from datetime import datetime

import pytest

from common.kernel.identifiers import fact_id
from common.kernel.identifiers import graph_label
from common.storage.database import Database
from common.storage.fact_rows import FactRow
from common.storage.fact_store import FactStore
from common.storage.graph.store import GraphStore
from common.storage.graph.store import NodeWrite
from ingest_service.documents.node_deletion import DeleteNodeInput
from ingest_service.documents.node_deletion import NodeDeleter

pytestmark = pytest.mark.integration

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _fact(namespace: str) -> FactRow:
    return FactRow(
        fact_id=fact_id(namespace, "person:ana", "MEMBER_OF", "team:ops", NOW),
        namespace=namespace,
        subject_key="person:ana",
        predicate="MEMBER_OF",
        object_key="team:ops",
        valid_from=NOW,
        valid_to=None,
        observed_at=NOW,
        evidence="asserted",
        confidence=1.0,
        agent_asserted=True,
    )


def test_a_delete_waits_for_a_writer_of_the_node_and_then_removes_its_fact(
    database: Database, namespace: str
) -> None:
    graph = GraphStore(database)
    facts = FactStore(graph)
    with database.connection() as conn, conn.transaction():
        graph.upsert_node(
            conn, NodeWrite(namespace=namespace, natural_key="team:ops", node_type="team"), now=NOW
        )

    deleted: list[object] = []
    errors: list[BaseException] = []

    def delete() -> None:
        try:
            deleted.append(
                NodeDeleter(database).delete(DeleteNodeInput(namespace=namespace, natural_key="team:ops"))
            )
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    deleter = threading.Thread(target=delete)
    with database.connection() as conn, conn.transaction():
        graph.ensure_nodes(conn, namespace, ["person:ana", "team:ops"], now=NOW)  # the writer sees team:ops
        deleter.start()
        deleter.join(1.5)
        assert deleter.is_alive(), "the delete must wait for the writer that holds the node"
        facts.insert_or_strengthen_many(conn, [_fact(namespace)])
    deleter.join(30)
    assert not deleter.is_alive() and not errors, errors
    assert deleted and deleted[0].facts_deleted == 1  # type: ignore[attr-defined]
    with database.connection() as conn:
        rows = conn.execute("SELECT count(*) FROM facts WHERE namespace = %s", (namespace,)).fetchone()
        assert rows == (0,)
        assert graph.get_node(conn, namespace, "team:ops") is None
        assert graph.get_node(conn, namespace, "person:ana") is not None


def test_a_writer_after_a_delete_makes_a_placeholder(database: Database, namespace: str) -> None:
    graph = GraphStore(database)
    facts = FactStore(graph)
    with database.connection() as conn, conn.transaction():
        graph.upsert_node(
            conn,
            NodeWrite(namespace=namespace, natural_key="team:ops", node_type="team", title="Ops"),
            now=NOW,
        )
    NodeDeleter(database).delete(DeleteNodeInput(namespace=namespace, natural_key="team:ops"))
    with database.connection() as conn, conn.transaction():
        graph.ensure_nodes(conn, namespace, ["person:ana", "team:ops"], now=NOW)
        facts.insert_or_strengthen_many(conn, [_fact(namespace)])
    with database.connection() as conn:
        node = graph.get_node(conn, namespace, "team:ops")
        assert node is not None and node["placeholder"] is True and node["title"] == "team:ops"
        edges = graph.cypher(
            conn,
            f"MATCH (:{graph_label('node_type', 'person')} {{namespace: $namespace}})"
            f"-[r:{graph_label('predicate', 'MEMBER_OF')}]->(:{graph_label('node_type', 'team')} {{namespace: $namespace}})"
            " RETURN r.fact_id",
            {"namespace": namespace},
        )
        assert edges == [_fact(namespace).fact_id]
