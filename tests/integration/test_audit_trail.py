"""AuditTrail on the real database: audit_event vertices linked to a pc_trace anchor
(docs/explanation/knowledge-model.md)."""

from __future__ import annotations

import pytest

from common.domain.audit import AuditEventInput
from common.domain.audit import AuditTrail
from common.kernel.errors import InvalidArgument
from common.storage.audit_store import AUDIT_EVENT_LABEL
from common.storage.audit_store import TRACE_EDGE_LABEL
from common.storage.audit_store import TRACE_LABEL
from common.storage.audit_store import AuditReadAccess
from common.storage.audit_store import AuditStore
from common.storage.audit_store import trace_key
from common.storage.database import Database
from common.storage.graph.store import GraphStore
from common.storage.visibility import Visibility


def test_record_links_event_to_trace_anchor(database: Database, namespace: str) -> None:
    trail = AuditTrail(database)
    first = trail.record(
        AuditEventInput(namespace, "export", trace_id="run-1", target_key="doc:a", details={"n": 1})
    )
    second = trail.record(AuditEventInput(namespace, "pii_access", trace_id="run-1", principal="analyst"))
    assert first.created and second.created and first.event_id != second.event_id
    assert first.principal == "in-process" and second.principal == "analyst"
    graph = GraphStore(database)
    with database.connection() as conn:
        rows = conn.execute(
            "SELECT natural_key, node_type FROM graph_nodes WHERE namespace = %s ORDER BY node_type, natural_key",
            (namespace,),
        ).fetchall()
        events = AuditStore(graph).events_of_trace(conn, namespace, "run-1")
        edges = graph.cypher(
            conn,
            f"MATCH (e:{AUDIT_EVENT_LABEL})-[r:{TRACE_EDGE_LABEL}]->(t:{TRACE_LABEL} {{namespace: $ns}})"
            " RETURN [e.natural_key, t.natural_key]",
            {"ns": namespace},
        )
    assert [node_type for _, node_type in rows] == ["audit_event", "audit_event", "pc_trace"]
    assert (trace_key("run-1"), "pc_trace") in [(str(k), str(t)) for k, t in rows]
    assert sorted(e["event_id"] for e in events) == sorted([first.event_id, second.event_id])
    assert sorted(edges) == sorted(
        [[first.natural_key, "pc_trace:run-1"], [second.natural_key, "pc_trace:run-1"]]
    )


def test_record_in_rolls_back_with_the_callers_transaction(database: Database, namespace: str) -> None:
    trail = AuditTrail(database)

    class Boom(Exception):
        pass

    with pytest.raises(Boom), database.connection() as conn:
        trail.record_in(conn, AuditEventInput(namespace, "delete", trace_id="t-rollback"))
        raise Boom
    with database.connection() as conn:
        count = conn.execute("SELECT count(*) FROM graph_nodes WHERE namespace = %s", (namespace,)).fetchone()
    assert count == (0,)


def test_client_event_id_makes_retries_idempotent(database: Database, namespace: str) -> None:
    trail = AuditTrail(database)
    event = AuditEventInput(namespace, "export", trace_id="t", details={"rows": 3}, client_event_id="job-7")
    first = trail.record(event)
    again = trail.record(event)
    assert first.created and not again.created
    assert again.event_id == first.event_id and again.details == {"rows": 3}
    with database.connection() as conn:
        events = AuditStore(GraphStore(database)).events_of_trace(conn, namespace, "t")
    assert len(events) == 1


def test_scoped_events_are_hidden_from_other_scopes(database: Database, namespace: str) -> None:
    trail = AuditTrail(database)
    trail.record(AuditEventInput(namespace, "export", trace_id="t", scopes=("workspace:hr",)))
    trail.record(AuditEventInput(namespace, "export", trace_id="t"))
    store = AuditStore(GraphStore(database))
    with database.connection() as conn:
        outsider = store.events_of_trace(
            conn, namespace, "t", access=AuditReadAccess(Visibility.of_scopes(["workspace:ops"]))
        )
        insider = store.events_of_trace(
            conn, namespace, "t", access=AuditReadAccess(Visibility.of_scopes(["workspace:hr"]))
        )
    assert len(outsider) == 1 and len(insider) == 2


def test_bad_input_names_every_field_and_writes_nothing(database: Database, namespace: str) -> None:
    trail = AuditTrail(database)
    with pytest.raises(InvalidArgument) as caught:
        trail.record(
            AuditEventInput(
                namespace,
                "Delete Everything",
                trace_id="x" * 300,
                target_key="a\nb",
                scopes=("nocolon",),
                details={"blob": "y" * 70_000},
            )
        )
    fields = {v.field for v in caught.value.violations}
    assert fields == {"action", "trace_id", "target_key", "scopes[0]", "details"}
    with database.connection() as conn:
        count = conn.execute("SELECT count(*) FROM graph_nodes WHERE namespace = %s", (namespace,)).fetchone()
    assert count == (0,)


def test_the_event_index_holds_every_event_and_migration_0031_backfills_it(
    database: Database, namespace: str
) -> None:
    """Each recorded event has its row in ``audit_events`` (what ListAuditEvents reads); events recorded
    before the table existed are copied from their vertices by the migration."""
    from importlib import resources

    from psycopg import sql

    from common.storage.audit_store import ALL_AUDIT_EVENTS
    from common.storage.audit_store import AuditEventQuery
    from common.storage.tables import query_placeholders

    trail = AuditTrail(database)
    recorded = [
        trail.record(AuditEventInput(namespace, "export", trace_id="t", target_key=f"doc:{n}", scopes=scopes))
        for n, scopes in enumerate([(), ("workspace:hr",), ()])
    ]
    store = AuditStore(GraphStore(database))

    def listed() -> list[dict[str, object]]:
        with database.connection() as conn:
            return store.list_events(conn, AuditEventQuery(namespace=namespace), access=ALL_AUDIT_EVENTS)

    before = listed()
    assert [props["event_id"] for props in before] == [e.event_id for e in reversed(recorded)]
    script = (
        resources.files("common.storage").joinpath("sql", "0031_audit_event_index.sql").read_text("utf-8")
    )
    with database.connection() as conn:
        conn.execute("DELETE FROM audit_events WHERE namespace = %s", (namespace,))
        assert store.list_events(conn, AuditEventQuery(namespace=namespace), access=ALL_AUDIT_EVENTS) == []
        conn.execute(sql.SQL(script).format(**query_placeholders(database.settings)))  # type: ignore[arg-type]
        scopes = conn.execute(
            "SELECT event_id, scopes FROM audit_events WHERE namespace = %s ORDER BY event_id", (namespace,)
        ).fetchall()
    assert listed() == before
    assert dict(scopes)[recorded[1].event_id] == ["workspace:hr"]
