"""The read path of a search on the real database: read connections without a transaction,
the pool's checkout check, the exact vector ranking of one namespace among many, and node summaries
read by SQL instead of Cypher."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import psycopg
import pytest
from psycopg import sql
from psycopg.pq import TransactionStatus

from common.kernel.config import Settings
from common.kernel.errors import Unavailable
from common.storage import database as database_module
from common.storage.chunks.rows import ChunkFilter
from common.storage.chunks.store import ChunkStore
from common.storage.chunks.store import ChunkWrite
from common.storage.chunks.store import NodeRef
from common.storage.context_store import ContextStore
from common.storage.database import Database
from common.storage.graph.store import GraphStore
from common.storage.schema import migrations
from common.text_models.embeddings.provider import EmbeddingProvider
from ingest_service.documents.validation import RetainInput
from ingest_service.documents.writer import DocumentWriter

pytestmark = pytest.mark.integration

TRICKY = "$$ 'single' \"double\" \\backslash ёжик 🙂 $1 $name\nnewline"


@pytest.fixture
def small_pool(settings: Settings) -> Iterator[Database]:
    """A database object of its own with one pooled connection (so the test knows which one it gets)."""
    db = Database(settings.model_copy(update={"pool_min_size": 1, "pool_max_size": 1}), prepare=migrations.apply)
    yield db
    db.close()


def _terminate(settings: Settings, pid: int) -> None:
    with psycopg.connect(settings.database_url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))


def test_read_connection_runs_without_a_transaction_and_leaves_the_pool_transactional(
    small_pool: Database,
) -> None:
    with small_pool.read_connection() as conn:
        conn.execute("SELECT 1").fetchone()
        assert conn.info.transaction_status == TransactionStatus.IDLE  # no BEGIN was sent
        pid = conn.info.backend_pid
    with small_pool.connection() as conn:
        assert conn.info.backend_pid == pid  # the same pooled connection ...
        assert not conn.autocommit
        conn.execute("SELECT 1").fetchone()
        assert conn.info.transaction_status == TransactionStatus.INTRANS  # ... transactional again


def test_read_connection_maps_a_statement_timeout_to_unavailable(settings: Settings) -> None:
    db = Database(settings.model_copy(update={"statement_timeout_ms": 50, "pool_max_size": 1}), prepare=migrations.apply)
    try:
        with pytest.raises(Unavailable) as raised, db.read_connection() as conn:
            conn.execute("SELECT pg_sleep(2)")
        assert raised.value.reason == "DATABASE_TIMEOUT"
    finally:
        db.close()


def test_a_recently_returned_connection_is_not_checked_an_idle_one_is(
    small_pool: Database, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # "Recently" made long: the checkout hands out the connection unchecked, so a backend that died in
    # between shows as a retryable error, and the pool replaces the broken connection.
    monkeypatch.setattr(database_module, "RECENTLY_USED_SECONDS", 3600.0)
    with small_pool.read_connection() as conn:
        pid = conn.info.backend_pid
    _terminate(settings, pid)
    with pytest.raises(Unavailable), small_pool.read_connection() as conn:
        conn.execute("SELECT 1")
    with small_pool.read_connection() as conn:
        assert conn.info.backend_pid != pid
        pid = conn.info.backend_pid
    # "Recently" made zero: every checkout is checked, so the dead backend is noticed before use.
    monkeypatch.setattr(database_module, "RECENTLY_USED_SECONDS", 0.0)
    _terminate(settings, pid)
    with small_pool.read_connection() as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
        assert conn.info.backend_pid != pid


def test_vector_ranking_of_one_namespace_among_many_is_exact(
    database: Database, settings: Settings, namespace: str
) -> None:
    store = ChunkStore(settings)
    rng = np.random.default_rng(15)
    vectors: dict[str, np.ndarray] = {}
    other = namespace + "-other"
    with database.connection() as conn:
        for ns, count in ((namespace, 120), (other, 400)):
            for document in range(count // 20):
                writes = []
                for order in range(20):
                    vector = rng.standard_normal(settings.embedding_dim).astype(np.float32)
                    vector /= np.linalg.norm(vector)
                    writes.append(ChunkWrite(order, "", f"chunk {document}/{order}", vector, {}))
                    if ns == namespace:
                        vectors[f"doc:{document}#{order}"] = vector
                store.replace_chunks(conn, NodeRef(ns, f"doc:{document}", "document", "t"), writes)
    query = rng.standard_normal(settings.embedding_dim).astype(np.float32)
    query /= np.linalg.norm(query)
    exact = sorted(vectors, key=lambda key: (1.0 - float(vectors[key] @ query), key))[:50]
    try:
        with database.read_connection() as conn:
            found = store.vector_candidates(conn, ChunkFilter(namespace), query, 50)
            rows = store.ranked_chunks(conn, ChunkFilter(namespace), [c.chunk_id for c in found])
        assert [f"{c.node_key}#{c.chunk_order}" for c in found] == exact
        assert [c.rank for c in found] == list(range(1, 51))
        # the rows read back by the candidates' ids (what Search does after fusion)
        assert [f"{rows[c.chunk_id].node_key}#{rows[c.chunk_id].chunk_order}" for c in found] == exact
        document, order = found[0].node_key.removeprefix("doc:"), found[0].chunk_order
        assert rows[found[0].chunk_id].text == f"chunk {document}/{order}"
        assert rows[found[0].chunk_id].node_type == "document"
        np.testing.assert_allclose(
            [c.score for c in found], [1.0 - float(vectors[key] @ query) for key in exact], atol=1e-5
        )
    finally:
        with database.connection() as conn:
            for ns in (namespace, other):
                for document in range(20):
                    store.delete_chunks(conn, ns, f"doc:{document}")


def test_migration_0012_adds_the_covering_namespace_index(fresh_settings: Settings) -> None:
    settings = fresh_settings
    database = Database(settings, prepare=migrations.apply)
    migrations.apply(database)
    database.close()
    with psycopg.connect(settings.database_url) as conn:
        row = conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE tablename = %s AND indexname = %s",
            (settings.chunks_table, f"{settings.chunks_table}_namespace_vector_idx"),
        ).fetchone()
    assert row is not None
    assert "(namespace) INCLUDE (id, embedding)" in row[0]


def test_node_summaries_by_sql_and_for_keys_without_a_recorded_vertex_id(
    database: Database,
    provider: EmbeddingProvider,
    settings: Settings,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    writer = DocumentWriter(database, provider, settings)
    provenance = {"note": TRICKY, "nested": {"list": [TRICKY, 1, 2.5, True, None]}}
    for key in ("doc:a", "doc:b"):
        writer.retain(
            RetainInput(
                namespace=namespace,
                natural_key=key,
                content=f"# {key}\n\nText of {key}.",
                title=f"Title {TRICKY}",
                source_path=f"docs/{key}.md",
                provenance=provenance,
            )
        )
    # doc:b as a row written before migration 0006: no vertex id recorded, found by Cypher.
    with database.connection() as conn:
        conn.execute(
            sql.SQL("UPDATE graph_nodes SET vertex_id = NULL WHERE namespace = %s AND natural_key = %s"),
            (namespace, "doc:b"),
        )
    store = ContextStore(settings, GraphStore(database))
    with database.read_connection() as conn, monkeypatch.context() as no_cypher:
        no_cypher.setattr(store.graph, "cypher", lambda *_: pytest.fail("Cypher on the read path"))
        assert store.node_summaries(conn, namespace, ["doc:a"])["doc:a"].provenance == provenance
    with database.read_connection() as conn:
        summaries = store.node_summaries(conn, namespace, ["doc:a", "doc:b", "doc:missing", "doc:a"])
        assert store.node_summaries(conn, namespace + "-elsewhere", ["doc:a"]) == {}
    assert set(summaries) == {"doc:a", "doc:b"}
    for key, summary in summaries.items():
        assert summary.title == f"Title {TRICKY}"
        assert summary.source_path == f"docs/{key}.md"
        assert summary.provenance == provenance
        assert summary.node_type == "document"


def test_node_summaries_are_kept_by_row_version_and_read_again_when_the_node_changes(
    database: Database, provider: EmbeddingProvider, settings: Settings, namespace: str
) -> None:
    """A summary is read once per version of its vertex's row (`VertexSummaryCache`): a second search
    reads no properties, a re-retained document (a new row version) is read again, a kept summary serves
    only the namespace it was read for, and each caller gets objects of its own."""
    writer = DocumentWriter(database, provider, settings)

    def retain(provenance: dict[str, object]) -> None:
        writer.retain(
            RetainInput(
                namespace=namespace,
                natural_key="doc:kept",
                content="# Kept\n\nA document whose summary is kept.",
                title="Kept",
                source_path="docs/kept.md",
                provenance=provenance,
                pii=True,
                pii_categories=("email",),
            )
        )

    retain({"version": 1, "note": TRICKY})
    store = ContextStore(settings, GraphStore(database))
    reads: list[str] = []
    put = store.summary_cache.put
    store.summary_cache.put = lambda vertex_id, *rest: (reads.append(vertex_id), put(vertex_id, *rest))[1]  # type: ignore[method-assign]
    with database.read_connection() as conn:
        first = store.node_summaries(conn, namespace, ["doc:kept"])["doc:kept"]
        first.provenance["version"] = "changed by a caller"
        second = store.node_summaries(conn, namespace, ["doc:kept"])["doc:kept"]
        elsewhere = store.node_summaries(conn, namespace + "-elsewhere", ["doc:kept"])
    assert len(reads) == 1  # the second call read no properties
    assert second.provenance == {"version": 1, "note": TRICKY}
    assert (second.title, second.source_path, second.pii.pii, second.pii.categories) == (
        "Kept",
        "docs/kept.md",
        True,
        ("email",),
    )
    assert elsewhere == {}
    # A kept summary is only ever used for the namespace it was read for: an entry planted under another
    # namespace for this very vertex is not served, the vertex is read again.
    with database.read_connection() as conn:
        row = conn.execute(
            "SELECT vertex_id::text FROM graph_nodes WHERE namespace = %s AND natural_key = %s",
            (namespace, "doc:kept"),
        ).fetchone()
    assert row is not None
    vertex_id = str(row[0])
    version, _, fields = store.summary_cache.entries([vertex_id])[vertex_id]
    foreign = (fields[0], "Foreign", *fields[2:3], '{"version": "foreign"}', *fields[4:])
    put(vertex_id, version, namespace + "-other", foreign)  # not counted as a read
    with database.read_connection() as conn:
        again = store.node_summaries(conn, namespace, ["doc:kept"])["doc:kept"]
    assert (again.title, again.provenance) == ("Kept", {"version": 1, "note": TRICKY}) and len(reads) == 2
    retain({"version": 2})
    with database.read_connection() as conn:
        changed = store.node_summaries(conn, namespace, ["doc:kept"])["doc:kept"]
    assert changed.provenance == {"version": 2} and len(reads) == 3
