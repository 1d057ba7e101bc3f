"""`common.storage.vault_store` on the real database: the namespace lock of vault runs, the journal of
documents and how it sees a node rewritten through the API."""

from __future__ import annotations

import threading
from datetime import UTC
from datetime import datetime
from typing import Any

import pytest

from common.kernel.errors import Unavailable
from common.storage.database import Database
from common.storage.graph.store import GraphStore
from common.storage.graph.store import NodeWrite
from common.storage.vault_store import VaultStore

pytestmark = pytest.mark.integration


def test_namespace_lock_serialises_and_gives_up_when_unwanted(database: Database, namespace: str) -> None:
    store = VaultStore(database.settings)
    held, release = threading.Event(), threading.Event()

    def first() -> None:
        with store.namespace_lock(namespace, still_wanted=lambda: True):
            held.set()
            release.wait(30)

    thread = threading.Thread(target=first)
    thread.start()
    assert held.wait(30)
    # A second run waits, and stops when its caller left.
    with pytest.raises(Unavailable) as abandoned, store.namespace_lock(namespace, still_wanted=lambda: False):
        pytest.fail("the lock was held by the first run")
    assert abandoned.value.reason == "VAULT_RUN_ABANDONED"
    with store.namespace_lock(namespace + "-other", still_wanted=lambda: False):
        pass  # another namespace does not wait
    release.set()
    thread.join(30)
    with store.namespace_lock(namespace, still_wanted=lambda: False):
        pass  # released at the end of the first run


def _record_a(store: VaultStore, conn: Any, namespace: str, now: datetime) -> None:
    """Journals a.md as doc:a, indexed by run-1 at ``now``."""
    store.record_document(
        conn,
        namespace=namespace,
        natural_key="doc:a",
        source_path="a.md",
        fingerprint="f1",
        indexed_at=now,
        run_id="run-1",
        links={"title": "A"},
    )


def test_journal_tracks_the_node_it_projected(database: Database, namespace: str) -> None:
    store, graph = VaultStore(database.settings), GraphStore(database)
    now = datetime.now(UTC)
    node = NodeWrite(
        namespace=namespace,
        natural_key="doc:a",
        node_type="document",
        origin="vault",
        props={"content": "v1"},
    )
    with database.connection() as conn:
        graph.upsert_node(conn, node, now=now)
        _record_a(store, conn, namespace, now)
    with database.connection() as conn:
        (stored,) = store.documents(conn, namespace).values()
    assert stored.node_intact and stored.seen_run == "run-1" and stored.links == {"title": "A"}
    with database.connection() as conn:  # an agent rewrites the node: the journal sees it
        graph.upsert_node(
            conn, NodeWrite(namespace, "doc:a", "document", props={"content": "agent"}), now=now
        )
        store.mark_seen(conn, namespace, "run-2", ["doc:a"])
    with database.connection() as conn:
        (stored,) = store.documents(conn, namespace).values()
    assert not stored.node_intact and stored.seen_run == "run-2"
    with database.connection() as conn:
        label = graph.node_labels(conn, namespace, ["doc:a"])["doc:a"]
        store.reduce_to_placeholder(
            conn,
            graph,
            namespace=namespace,
            natural_key="doc:a",
            node_type="document",
            label=label,
            scopes=[],
            now=now,
        )
        store.forget_document(conn, namespace, "doc:a")
    with database.connection() as conn:
        vertex = graph.get_node(conn, namespace, "doc:a")
        assert store.documents(conn, namespace) == {}
    assert vertex is not None and vertex["placeholder"] is True and "content" not in vertex["props"]


def test_an_agents_retained_chunks_are_found_by_their_digest(database: Database, namespace: str) -> None:
    """`record_agent_retain` digests in Python what `delete_agent_retained_chunks` digests in SQL (any
    Unicode): only the API chunks still as the Retain wrote them go, vault chunks and others stay."""
    from common.storage.chunks.store import ChunkStore
    from common.storage.chunks.store import ChunkWrite
    from common.storage.chunks.store import NodeRef

    store, chunks = VaultStore(database.settings), ChunkStore(database.settings)
    node = NodeRef(namespace=namespace, node_key="doc:a")
    retained = [(0, "Заголовок › ü", "Текст — naïve 👍"), (1, "", "second")]
    with database.connection() as conn:
        _record_a(store, conn, namespace, datetime.now(UTC))
        store.record_agent_retain(conn, namespace, "doc:a", retained)
        api = [ChunkWrite(order, heading, text, None, {}) for order, heading, text in retained]
        api.append(ChunkWrite(2, "", "an agent's PutChunks chunk", None, {}))
        chunks.replace_chunks(conn, node, api, delete_beyond=False)
        chunks.replace_chunks(  # a vault chunk with the same text as a retained one: not the agent's
            conn,
            NodeRef(namespace=namespace, node_key="doc:b"),
            [api[1]],
            delete_beyond=False,
            seen_run="run-1",
        )
        chunks.replace_chunks(
            conn, node, [ChunkWrite(1, "", "changed by PutChunks", None, {})], delete_beyond=False
        )
        assert store.delete_agent_retained_chunks(conn, namespace, "doc:a") == 1
        left = conn.execute(
            "SELECT node_key, chunk_order, text FROM chunks WHERE namespace = %s ORDER BY node_key, chunk_order",
            (namespace,),
        ).fetchall()
    assert [tuple(row) for row in left] == [
        ("doc:a", 1, "changed by PutChunks"),
        ("doc:a", 2, "an agent's PutChunks chunk"),
        ("doc:b", 1, "second"),
    ]
