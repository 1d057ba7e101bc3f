"""Migration 0009: a graph written with the OLD label mapping (the sanitised name itself,
shared by every kind) moves to `graph_label`, and every node, fact, source, link and audit event reads
exactly as before.

The old graph is built in a fresh database of the same server (`fresh_settings` of tests/conftest.py;
the shared database is untouched) by the real write paths, with the label derivation of the stores set back
to the old rule and migrations stopped before 0009.
"""

from __future__ import annotations

import re
import uuid
from datetime import UTC
from datetime import datetime
from typing import Any

import psycopg
import pytest
from psycopg import sql

from common.domain.audit import AuditEventInput
from common.domain.audit import AuditTrail
from common.kernel.config import Settings
from common.kernel.identifiers import GRAPH_LABEL_PATTERN
from common.kernel.identifiers import graph_label
from common.packs.kind_validation import KindValidator
from common.storage import audit_store
from common.storage import fact_store
from common.storage.audit_store import AuditStore
from common.storage.database import Database
from common.storage.fact_rows import FactQuery
from common.storage.fact_store import FactStore
from common.storage.graph import age as age_graph
from common.storage.graph import edges as graph_edges
from common.storage.graph import store as graph_store
from common.storage.graph.age import AgeGraph
from common.storage.graph.store import GraphStore
from common.storage.schema import migrations
from common.storage.schema.label_migration import MIGRATION_NAME
from common.storage.schema.label_migration import migrate_labels
from common.storage.session import prepare_age_session
from common.text_models.embeddings.provider import EmbeddingProvider
from ingest_service.documents.validation import RetainInput
from ingest_service.documents.writer import DocumentWriter
from ingest_service.observations.recorder import ObservationRecorder
from query_service.readers.sources import SourceReader

pytestmark = pytest.mark.integration

NAMESPACE = "legacy-labels"
_INVALID = re.compile(r"[^A-Za-z0-9_]")


def old_age_label(name: str) -> str:
    """The label rule (docs/explanation/knowledge-model.md): sanitised name, leading digit gets "_", empty
    "entity"."""
    label = _INVALID.sub("_", name)
    if not label:
        return "entity"
    return "_" + label if label[0].isdigit() else label


def _use_old_mapping(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every label derivation of the stores back to the old rule, and migrations without 0009."""
    for module in (graph_store, fact_store):
        monkeypatch.setattr(module, "graph_label", lambda kind, name: old_age_label(name))
    monkeypatch.setattr(graph_edges, "LINKS_TO_LABEL", "LINKS_TO")
    monkeypatch.setattr(audit_store, "AUDIT_EVENT_LABEL", "audit_event")
    monkeypatch.setattr(audit_store, "TRACE_LABEL", "pc_trace")
    monkeypatch.setattr(audit_store, "TRACE_EDGE_LABEL", "IN_TRACE")
    monkeypatch.setattr(age_graph, "BASE_VERTEX_LABELS", ("episode", "entity", "document", "text"))
    monkeypatch.setattr(age_graph, "BASE_EDGE_LABELS", ("LINKS_TO", "MENTIONS"))
    monkeypatch.setattr(
        migrations, "MIGRATIONS", tuple(m for m in migrations.MIGRATIONS if m != MIGRATION_NAME)
    )


def _observation(assertions: list[dict[str, Any]], content: str = "") -> dict[str, Any]:
    return {
        "namespace": NAMESPACE,
        "source": {"system": "legacy", "stream": "s", "external_id": uuid.uuid4().hex},
        "kind": "legacy.written",
        "occurred_at": "2026-03-01T09:00:00Z",
        "content": content,
        "assertions": assertions,
    }


def _entity(type_: str, id_: str) -> dict[str, Any]:
    return {
        "entity": {"key": {"type": type_, "id": id_}, "title": f"{type_} {id_}", "attributes": {"t": type_}}
    }


def _fact(subject: str, predicate: str, object_: str) -> dict[str, Any]:
    return {"fact": {"subject": subject, "predicate": predicate, "object": object_}}


def _write_legacy_graph(database: Database, provider: EmbeddingProvider, settings: Settings) -> None:
    recorder = ObservationRecorder(database, encoder=provider, kinds=KindValidator(database))
    writer = DocumentWriter(database, provider, settings, kinds=KindValidator(database))
    # Types that sanitise alike ("a-b", "a.b", "a_b" share the old label a_b), a type whose old label is
    # the new label of a predicate ("p_x" vs predicate "x"), a non-Latin type (a vertex type MENTIONS
    # could not be written at all before: the bug).
    batch = [
        _observation(
            [
                _entity("a-b", "1"),
                _entity("a.b", "1"),
                _entity("a_b", "1"),
                _entity("p_x", "1"),
                _fact("a-b:1", "x", "p_x:1"),
                _fact("a.b:1", "depends_on", "ключ:9"),  # placeholder of type ключ (old label ____)
                _fact("a_b:1", "LINKS_TO", "9lives:cat"),  # a fact predicate named like the links
            ],
            content="legacy episode text",
        ),
        _observation([_fact("p_x:1", "x", "a_b:1")]),
    ]
    assert [r.status for r in recorder.record_batch(batch)] == ["processed", "processed"]
    writer.retain(RetainInput(namespace=NAMESPACE, natural_key="doc:target", content="the target"))
    writer.retain(
        RetainInput(
            namespace=NAMESPACE, natural_key="doc:main", content="see [[doc:target]]", links=("doc:target",)
        )
    )
    AuditTrail(database).record(AuditEventInput(namespace=NAMESPACE, action="export", trace_id="trace-1"))


def _reads(database: Database) -> dict[str, Any]:
    """Everything a client can read of the namespace through the stores (labels left out)."""
    graph = GraphStore(database)
    reader = SourceReader(database)
    with database.connection() as conn:
        registry = conn.execute(
            "SELECT natural_key, node_type, placeholder, origin, scopes FROM graph_nodes"
            " WHERE namespace = %s ORDER BY natural_key",
            (NAMESPACE,),
        ).fetchall()
        keys = [str(row[0]) for row in registry]
        nodes = {key: graph.get_node(conn, NAMESPACE, key) for key in keys}
        facts = FactStore(graph).list(
            conn, FactQuery(namespace=NAMESPACE, include_history=True, page_size=1000), datetime.now(UTC)
        )
        graph_name = sql.Identifier(database.settings.graph_name)
        edges = conn.execute(
            sql.SQL(
                "SELECT ag_catalog.agtype_out(s.properties)::text, ag_catalog.agtype_out(t.properties)::text,"
                " ag_catalog.agtype_out(e.properties)::text FROM {g}._ag_label_edge e"
                " JOIN {g}._ag_label_vertex s ON s.id = e.start_id JOIN {g}._ag_label_vertex t ON t.id = e.end_id"
                " ORDER BY 1, 2, 3"
            ).format(g=graph_name)
        ).fetchall()
        links = graph.edge_counts(
            conn, NAMESPACE, "doc:main", graph.node_labels(conn, NAMESPACE, ["doc:main"])["doc:main"]
        )
    sources = {
        key: reader.get_source(NAMESPACE, key) for key in ("doc:main", "doc:target", "a-b:1", "ключ:9")
    }
    return {
        "registry": registry,
        "nodes": nodes,
        "facts": facts,
        "edges": edges,
        "links": links,
        "sources": sources,
    }


def _labels(database: Database) -> dict[str, str]:
    with database.connection() as conn:
        rows = conn.execute(
            "SELECT l.name, l.kind FROM ag_catalog.ag_label l JOIN ag_catalog.ag_graph g ON g.graphid = l.graph"
            " WHERE g.name = %s",
            (database.settings.graph_name,),
        ).fetchall()
    return {str(name): str(kind) for name, kind in rows}


def test_the_migration_moves_an_old_graph_to_the_new_labels_and_every_read_stays_the_same(
    fresh_settings: Settings, provider: EmbeddingProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    database = Database(fresh_settings, prepare=migrations.apply)
    try:
        with monkeypatch.context() as old:
            _use_old_mapping(old)
            migrations.apply(database)
            _write_legacy_graph(database, provider, fresh_settings)
            before = _reads(database)
            legacy = _labels(database)
        assert {"a_b", "p_x", "x", "____", "MENTIONS", "LINKS_TO", "episode", "audit_event"} <= set(legacy)
        assert legacy["p_x"] == "v" and legacy["x"] == "e" and legacy["LINKS_TO"] == "e"

        assert MIGRATION_NAME in migrations.apply(database)  # the new mapping from here on
        after = _reads(database)
        assert after == before
        assert after["links"] == {"LINKS_TO": 1}  # the document link, by name, not by label
        assert len(before["facts"]) == 4 and len(before["edges"]) == 6  # 4 facts, 1 link, 1 IN_TRACE

        labels = _labels(database)
        data_labels = {name for name in labels if not name.startswith("_ag_label_")}
        assert all(GRAPH_LABEL_PATTERN.match(name) for name in data_labels), data_labels
        assert labels[graph_label("predicate", "x")] == "e" and labels[graph_label("node_type", "p_x")] == "v"
        with database.connection() as conn:
            rows = conn.execute(
                "SELECT g.node_type, g.label, ag_catalog._extract_label_id(g.vertex_id)::int = l.id"
                " FROM graph_nodes g JOIN ag_catalog.ag_label l ON l.name = g.label"
                " JOIN ag_catalog.ag_graph ag ON ag.graphid = l.graph AND ag.name = %s",
                (fresh_settings.graph_name,),
            ).fetchall()
            assert rows and all(label == graph_label("node_type", t) and same for t, label, same in rows)
            events = AuditStore(GraphStore(database)).events_of_trace(conn, NAMESPACE, "trace-1")
        assert [event["action"] for event in events] == ["export"]

        # Idempotent: a second run moves nothing and drops nothing.
        with psycopg.connect(fresh_settings.database_url, autocommit=True) as conn:
            prepare_age_session(conn)
            with conn.transaction():
                migrate_labels(database, conn)
        assert _labels(database) == labels and _reads(database) == before
        assert migrations.apply(database) == []

        # The new mapping writes on: the same names again, now without any clash.
        recorder = ObservationRecorder(database, encoder=provider, kinds=KindValidator(database))
        [result] = recorder.record_batch([_observation([_entity("x", "1"), _fact("x:1", "p_x", "p_x:1")])])
        assert result.status == "processed"
    finally:
        database.close()
        AgeGraph._known_labels.clear()
        AgeGraph._label_sequences.clear()
