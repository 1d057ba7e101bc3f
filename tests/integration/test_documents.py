"""DocumentWriter (Retain, PutChunks) with SourceReader and HybridSearcher on the real database and embedder."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import UTC
from datetime import datetime
from typing import Any

import numpy as np
import pytest
from psycopg import sql

from common.kernel.config import Settings
from common.kernel.errors import FailedPrecondition
from common.kernel.errors import InvalidArgument
from common.kernel.errors import NotFound
from common.kernel.identifiers import graph_label
from common.storage.chunks.rows import ChunkFilter
from common.storage.chunks.store import ChunkStore
from common.storage.chunks.store import ChunkWrite
from common.storage.chunks.store import NodeRef
from common.storage.database import Database
from common.storage.graph.edges import LINKS_TO_LABEL
from common.storage.graph.store import GraphStore
from common.storage.graph.store import NodeWrite
from common.text_models.embeddings.provider import EmbeddingProvider
from ingest_service.documents.chunking import bounded_chunks
from ingest_service.documents.front_matter import strip_front_matter
from ingest_service.documents.validation import ChunkInput
from ingest_service.documents.validation import PutChunksInput
from ingest_service.documents.validation import RetainInput
from ingest_service.documents.writer import DocumentWriter
from ingest_service.validation.limits import MAX_DOCUMENT_CONTENT_BYTES
from query_service.readers.sources import SourceReader
from query_service.retrieval.hybrid_search import HybridSearcher
from query_service.retrieval.hybrid_search import SearchQuery

pytestmark = pytest.mark.integration

ARTICLE = """---
title: "Upgrading libc6"
natural_key: "doc:libc6/upgrade"
---
# Upgrading libc6

Bookworm ships libc6 2.36-9+deb12u4. Run `apt full-upgrade` and reboot.

## Rollback

Pin the previous version 2.36-9+deb12u3 with apt preferences.
"""


@pytest.fixture(scope="module")
def writer(database: Database, provider: EmbeddingProvider, settings: Settings) -> DocumentWriter:
    return DocumentWriter(database, provider, settings)


@pytest.fixture(scope="module")
def reader(database: Database) -> SourceReader:
    return SourceReader(database)


def _chunk_rows(database: Database, settings: Settings, namespace: str, key: str) -> list[tuple[Any, ...]]:
    with database.connection() as conn:
        return conn.execute(
            sql.SQL(
                "SELECT chunk_order, xmin::text, id, heading, text, meta FROM {} WHERE namespace = %s AND node_key = %s"
                " ORDER BY chunk_order"
            ).format(sql.Identifier(settings.chunks_table)),
            (namespace, key),
        ).fetchall()


def _registry(database: Database, namespace: str, key: str) -> tuple[Any, ...]:
    with database.connection() as conn:
        row = conn.execute(
            "SELECT props_hash, last_seen, created_at, xmin::text FROM graph_nodes WHERE namespace = %s AND natural_key = %s",
            (namespace, key),
        ).fetchone()
    assert row is not None
    return tuple(row)


def _links(
    database: Database, namespace: str, key: str, node_type: str = "document"
) -> list[tuple[Any, str]]:
    graph = GraphStore(database)
    label = graph_label("node_type", node_type)
    with database.connection() as conn:
        rows = graph.cypher(
            conn,
            f"MATCH (a:{label} {{namespace: $namespace, natural_key: $key}})-[r:{LINKS_TO_LABEL}]->(b)"
            " RETURN [id(r), b.natural_key]",
            {"namespace": namespace, "key": key},
        )
    return sorted((row[0], row[1]) for row in rows)


def _vertex(database: Database, namespace: str, key: str) -> dict[str, Any]:
    with database.connection() as conn:
        node = GraphStore(database).get_node(conn, namespace, key)
    assert node is not None
    return node


def test_retain_twice_changes_nothing_but_last_seen(
    writer: DocumentWriter, database: Database, settings: Settings, namespace: str
) -> None:
    target = writer.retain(
        RetainInput(namespace=namespace, natural_key="doc:target", content="# Target\n\nText.")
    )
    assert target.created
    request = RetainInput(
        namespace=namespace,
        natural_key="doc:libc6/upgrade",
        content=ARTICLE,
        title="Upgrading libc6",
        links=("doc:target",),
        provenance={"repository": "docs", "commit_sha": "abc123"},
        scopes=("task:PROJ-1",),
        meta={"collection": "faq"},
        trace_id="trace-1",
    )
    first = writer.retain(request)
    assert (first.created, first.chunk_count, first.linked, first.missing_links) == (
        True,
        2,
        ("doc:target",),
        (),
    )
    chunks_before = _chunk_rows(database, settings, namespace, request.natural_key)
    registry_before = _registry(database, namespace, request.natural_key)
    vertex_before = _vertex(database, namespace, request.natural_key)
    links_before = _links(database, namespace, request.natural_key)
    assert [link for _, link in links_before] == ["doc:target"]

    time.sleep(0.01)
    second = writer.retain(request)
    assert (second.created, second.updated, second.chunks_written, second.chunks_deleted) == (
        False,
        False,
        0,
        0,
    )
    assert (second.chunk_count, second.linked) == (first.chunk_count, first.linked)
    assert _chunk_rows(database, settings, namespace, request.natural_key) == chunks_before
    assert _links(database, namespace, request.natural_key) == links_before  # same edge ids: not rewritten
    vertex_after = _vertex(database, namespace, request.natural_key)
    assert {k: v for k, v in vertex_after.items() if k != "last_seen"} == {
        k: v for k, v in vertex_before.items() if k != "last_seen"
    }
    registry_after = _registry(database, namespace, request.natural_key)
    assert registry_after[0] == registry_before[0] and registry_after[2] == registry_before[2]
    assert registry_after[1] > registry_before[1]  # last_seen moved

    # A real change rewrites the node and only the chunks that changed.
    edited = RetainInput(**{**request.__dict__, "content": ARTICLE.replace("and reboot", "then reboot")})
    third = writer.retain(edited)
    assert (third.created, third.updated, third.chunks_written) == (False, True, 1)
    after_edit = _chunk_rows(database, settings, namespace, request.natural_key)
    assert after_edit[1] == chunks_before[1] and after_edit[0][1] != chunks_before[0][1]


def test_front_matter_is_stripped_from_chunks_but_kept_in_the_source(
    writer: DocumentWriter, reader: SourceReader, database: Database, settings: Settings, namespace: str
) -> None:
    writer.retain(
        RetainInput(
            namespace=namespace,
            natural_key="doc:libc6/upgrade",
            content=ARTICLE,
            provenance={"repository": "docs", "path": "libc6/upgrade.md"},
            source_path="libc6/upgrade.md",
        )
    )
    rows = _chunk_rows(database, settings, namespace, "doc:libc6/upgrade")
    texts = [row[4] for row in rows]
    assert texts[0].startswith("# Upgrading libc6")
    assert all("natural_key:" not in text and "---" not in text for text in texts)
    assert [row[3] for row in rows] == ["Upgrading libc6", "Upgrading libc6 / Rollback"]
    source = reader.get_source(namespace, "doc:libc6/upgrade")
    assert source.content == ARTICLE and source.content_source == "original"
    assert source.provenance == {"repository": "docs", "path": "libc6/upgrade.md"}
    assert (source.source_path, source.chunk_count, source.node_type) == ("libc6/upgrade.md", 2, "document")
    with pytest.raises(NotFound):
        reader.get_source(namespace, "doc:nope")


def test_missing_links_are_skipped_and_linked_once_the_target_exists(
    writer: DocumentWriter, database: Database, namespace: str
) -> None:
    writer.retain(RetainInput(namespace=namespace, natural_key="doc:a", content="A"))
    request = RetainInput(
        namespace=namespace, natural_key="doc:main", content="Main", links=("doc:a", "doc:b")
    )
    result = writer.retain(request)
    assert (result.linked, result.missing_links) == (("doc:a",), ("doc:b",))
    assert [key for _, key in _links(database, namespace, "doc:main")] == ["doc:a"]
    writer.retain(RetainInput(namespace=namespace, natural_key="doc:b", content="B"))
    again = writer.retain(request)
    assert (again.linked, again.missing_links, again.updated) == (("doc:a", "doc:b"), (), True)
    assert [key for _, key in _links(database, namespace, "doc:main")] == ["doc:a", "doc:b"]
    # Links are namespaced: the same key in another namespace does not count.
    other = writer.retain(
        RetainInput(namespace=namespace + "-x", natural_key="doc:main", content="Main", links=("doc:a",))
    )
    assert other.missing_links == ("doc:a",)


TRICKY = (
    "$$ 'single' \"double\" \\backslash \\n not-a-newline\nreal newline\r\nCRLF\tTAB ёжик Ключ 🙂 $1 $name"
)


def test_tricky_values_round_trip(
    writer: DocumentWriter, reader: SourceReader, database: Database, namespace: str
) -> None:
    key = "doc:$$'\"\\ключ"
    content = f"---\ntitle: '{TRICKY[:10]}'\n---\n# Заголовок $$\n\n{TRICKY}\n"
    writer.retain(
        RetainInput(
            namespace=namespace,
            natural_key=key,
            content=content,
            title=TRICKY.replace("\r\n", " "),
            provenance={"note": TRICKY, "nested": {"list": [TRICKY, 1, 2.5, True, None]}},
            meta={"collection": "$$'\"\\"},
        )
    )
    source = reader.get_source(namespace, key)
    assert source.content == content
    assert source.title == TRICKY.replace("\r\n", " ")
    assert source.provenance == {"note": TRICKY, "nested": {"list": [TRICKY, 1, 2.5, True, None]}}
    chunks = ChunkStore(database.settings)
    with database.connection() as conn:
        stored = chunks.list_chunks(conn, namespace, key)
        by_meta = chunks.text_candidates(
            conn, ChunkFilter(namespace, meta={"collection": "$$'\"\\"}), "ёжик", 5
        )
    assert TRICKY.replace("\r\n", "\n") in stored[0].text  # the chunker reads \r\n as \n; the source keeps it
    assert [c.node_key for c in by_meta] == [key]


def test_put_chunks_then_source_is_reassembled(
    writer: DocumentWriter, reader: SourceReader, namespace: str
) -> None:
    result = writer.put_chunks(
        PutChunksInput(
            namespace=namespace,
            natural_key="doc:pre",
            title="Pre-cut",
            chunks=(ChunkInput(1, "second", "B"), ChunkInput(0, "first", "A", {"observation_id": "obs-1"})),
            meta={"collection": "faq"},
        )
    )
    assert (result.created, result.chunk_count) == (True, 2)
    source = reader.get_source(namespace, "doc:pre")
    assert (source.content, source.content_source, source.chunk_count) == ("A\n\nB", "chunks", 2)
    # Chunk i replaces (namespace, key, i); the other chunks stay.
    more = writer.put_chunks(
        PutChunksInput(
            namespace=namespace, natural_key="doc:pre", title="Pre-cut", chunks=(ChunkInput(1, "", "B2"),)
        )
    )
    assert more.chunk_count == 2
    assert reader.get_source(namespace, "doc:pre").content == "A\n\nB2"
    # Retain puts an original in the node: the source switches to it.
    writer.retain(RetainInput(namespace=namespace, natural_key="doc:pre", content="Original"))
    assert reader.get_source(namespace, "doc:pre").content_source == "original"


def test_validation_names_the_proto_fields(writer: DocumentWriter, namespace: str) -> None:
    with pytest.raises(InvalidArgument) as raised:
        writer.retain(
            RetainInput(
                namespace="",
                natural_key=" ",
                content="x" * (MAX_DOCUMENT_CONTENT_BYTES + 1),
                links=("doc:ok", "", "doc:ok", "bad\nkey"),
                scopes=tuple(f"task:{i}" for i in range(21)),
            )
        )
    fields = [v.field for v in raised.value.violations]
    assert fields == ["namespace", "natural_key", "links[1]", "links[2]", "links[3]", "scopes", "content"]
    with pytest.raises(InvalidArgument) as raised:
        writer.retain(
            RetainInput(namespace=namespace, natural_key="doc:x", content="a\x00b", scopes=("nocolon",))
        )
    assert [v.field for v in raised.value.violations] == ["scopes[0]", "content"]
    with pytest.raises(InvalidArgument) as raised:
        writer.put_chunks(
            PutChunksInput(
                namespace=namespace,
                natural_key="doc:x",
                chunks=(ChunkInput(0, "", " "), ChunkInput(0, "", "ok"), ChunkInput(-1, "", "ok")),
            )
        )
    assert [v.field for v in raised.value.violations] == [
        "chunks[0].text",
        "chunks[1].chunk_order",
        "chunks[2].chunk_order",
    ]
    with pytest.raises(InvalidArgument) as raised:
        writer.put_chunks(PutChunksInput(namespace=namespace, natural_key="doc:x", chunks=()))
    assert [v.field for v in raised.value.violations] == ["chunks"]


def test_protected_audit_nodes_are_neither_created_nor_overwritten(
    writer: DocumentWriter, database: Database, namespace: str
) -> None:
    graph = GraphStore(database)
    with database.connection() as conn:
        graph.upsert_node(
            conn,
            NodeWrite(
                namespace=namespace,
                natural_key="audit:1",
                node_type="audit_event",
                props={"action": "delete"},
            ),
            now=datetime.now(UTC),
        )
    with pytest.raises(FailedPrecondition):
        writer.retain(RetainInput(namespace=namespace, natural_key="audit:1", content="overwrite"))
    with pytest.raises(FailedPrecondition):
        writer.put_chunks(
            PutChunksInput(namespace=namespace, natural_key="audit:1", chunks=(ChunkInput(0, "", "x"),))
        )
    assert _vertex(database, namespace, "audit:1")["props"] == {"action": "delete"}
    with pytest.raises(InvalidArgument) as raised:
        writer.retain(RetainInput(namespace=namespace, natural_key="audit:2", content="x", type="pc_trace"))
    assert [v.field for v in raised.value.violations] == ["type"]


def test_front_matter_and_bounded_chunks_helpers() -> None:
    assert strip_front_matter("---\na: 1\n---\nbody") == "body"
    assert strip_front_matter("---\n---\nbody") == "body"
    assert strip_front_matter("\ufeff---\r\na: 1\r\n...\r\nbody") == "body"
    assert strip_front_matter("text\n---\na: 1\n---\n") == "text\n---\na: 1\n---\n"
    assert strip_front_matter("---\nnever closed\n") == "---\nnever closed\n"
    second = "---\na: 1\n---\n---\nb: 2\n---\nbody"
    assert strip_front_matter(second) == "---\nb: 2\n---\nbody"  # only the leading block is front matter
    pieces = bounded_chunks([("h", "x" * 25), ("g", "line\n" * 10)], hard_chars=10)
    assert all(len(text) <= 10 for _, text in pieces)
    assert "".join(text for heading, text in pieces if heading == "h") == "x" * 25


@pytest.fixture
def large_namespace(database: Database, provider: EmbeddingProvider, settings: Settings) -> Iterator[str]:
    """3000 chunks in another namespace whose vectors all lie close to the probe query's vector."""
    name = "test-large-" + uuid.uuid4().hex[:8]
    store = ChunkStore(settings)
    base = provider.encode_passages(
        [
            "How to upgrade libc6 on Debian bookworm",
            "Upgrading the C library package",
            "apt full-upgrade libc6",
        ]
    )
    rng = np.random.default_rng(7)
    with database.connection() as conn:
        for doc in range(100):
            writes = []
            for order in range(30):
                noise = np.asarray(rng.normal(0, 0.02, size=base.shape[1]), dtype=np.float32)
                vector = base[(doc + order) % 3] + noise
                vector /= np.linalg.norm(vector)
                writes.append(
                    ChunkWrite(
                        order, "Upgrade", f"libc6 upgrade notes {doc}-{order} for bookworm", vector, {}
                    )
                )
            store.replace_chunks(conn, NodeRef(name, f"doc:filler-{doc}"), writes)
        conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(settings.chunks_table)))
    yield name
    with database.connection() as conn:
        conn.execute(
            sql.SQL("DELETE FROM {} WHERE namespace = %s").format(sql.Identifier(settings.chunks_table)),
            (name,),
        )


def test_a_small_namespace_inside_a_large_table_still_gets_top_k(
    large_namespace: str,
    writer: DocumentWriter,
    database: Database,
    provider: EmbeddingProvider,
    namespace: str,
) -> None:
    for index in range(12):
        writer.retain(
            RetainInput(
                namespace=namespace,
                natural_key=f"doc:small-{index}",
                # about the query's subject, so the vector arm's relevance floor keeps them; the large
                # namespace's vectors still lie nearer to the query than any of them
                content=f"# Note {index}\n\nA short note number {index} about upgrading packages on a Debian server.",
                meta={"collection": "garden" if index % 2 else "other"},
            )
        )
    searcher = HybridSearcher(database, provider)
    query = "How to upgrade libc6 on Debian bookworm"
    hits = searcher.search(SearchQuery(namespace=namespace, query=query, top_k=10))
    assert len(hits) == 10
    assert all(hit.node_key.startswith("doc:small-") for hit in hits)
    assert all(hit.vector_score != 0 for hit in hits)
    filtered = searcher.search(
        SearchQuery(namespace=namespace, query=query, top_k=10, meta={"collection": "garden"})
    )
    assert len(filtered) == 6
    # With statistics the planner serves a small namespace exactly (namespace index + sort). Force the
    # HNSW plan, where the namespace filter runs after the index scan: the 3000 nearer rows of the large
    # namespace come first, and only the iterative scan (set by the pool) gets past them.
    store = ChunkStore(database.settings)
    vector = provider.encode_query(query)
    counts = {}
    for mode in ("relaxed_order", "off"):
        with database.connection() as conn:
            conn.execute("SET LOCAL enable_sort = off")
            conn.execute("SET LOCAL enable_bitmapscan = off")
            conn.execute(sql.SQL("SET LOCAL hnsw.iterative_scan = {}").format(sql.SQL(mode)))
            plan = conn.execute(
                sql.SQL(
                    "EXPLAIN SELECT 1 FROM {} WHERE namespace = %s ORDER BY embedding <=> %s LIMIT 10"
                ).format(store.table),
                (namespace, vector),
            ).fetchall()
            assert any("embedding_idx" in row[0] for row in plan), plan
            counts[mode] = len(store.vector_candidates(conn, ChunkFilter(namespace), vector, 10))
    # Either the iterative scan gets past the nearer rows of the other namespaces, or (a table so large
    # that the scan stops at hnsw.max_scan_tuples first, or no iterative scan) the exact statement fills in.
    assert counts == {"relaxed_order": 10, "off": 10}
    # Starve the index scan for certain: the exact statement is what still returns the top 10.
    with database.connection() as conn:
        conn.execute("SET LOCAL enable_sort = off")
        conn.execute("SET LOCAL enable_bitmapscan = off")
        conn.execute("SET LOCAL hnsw.iterative_scan = off")
        conn.execute("SET LOCAL hnsw.ef_search = 10")
        exact = store.vector_candidates(conn, ChunkFilter(namespace), vector, 10)
        conn.execute("SET LOCAL enable_sort = on")
        reference = conn.execute(
            sql.SQL(
                "SELECT node_key FROM {} WHERE namespace = %s ORDER BY (embedding <=> %s) + 0, node_key LIMIT 10"
            ).format(store.table),
            (namespace, vector),
        ).fetchall()
    assert [candidate.node_key for candidate in exact] == [row[0] for row in reference]


def test_an_entity_assertion_on_a_document_keeps_its_content_and_scopes(
    writer: DocumentWriter, database: Database, namespace: str
) -> None:
    """An observation's entity assertion whose key names a retained document adds its attributes and
    title; the content, provenance and workspace scope stay (dropping the scope would publish the node)."""
    from ingest_service.observations.recorder import ObservationRecorder

    writer.retain(
        RetainInput(
            namespace=namespace,
            natural_key="doc:runbook",
            title="Runbook",
            content="# Runbook\n\nRestart the service.",
            provenance={"uri": "git://runbook.md"},
            scopes=("workspace:ops",),
        )
    )
    recorded = ObservationRecorder(database).record_batch(
        [
            {
                "namespace": namespace,
                "source": {"system": "wiki", "stream": "pages", "external_id": "e-1"},
                "kind": "page.tagged",
                "occurred_at": "2026-01-01T00:00:00Z",
                "assertions": [{"entity": {"key": "doc:runbook", "attributes": {"owner": "team:ops"}}}],
            }
        ]
    )
    assert [result.status for result in recorded] == ["processed"]
    node = _vertex(database, namespace, "doc:runbook")
    assert node["props"]["content"] == "# Runbook\n\nRestart the service."
    assert node["props"]["provenance"] == {"uri": "git://runbook.md"}
    assert node["props"]["scopes"] == ["workspace:ops"]
    assert node["props"]["attributes"] == {"owner": "team:ops"}
    assert node["title"] == "Runbook"
    assert node["type"] == "document"
    with database.connection() as conn:
        row = conn.execute(
            "SELECT scopes, node_type FROM graph_nodes WHERE namespace = %s AND natural_key = %s",
            (namespace, "doc:runbook"),
        ).fetchone()
    assert row == (["workspace:ops"], "document")
