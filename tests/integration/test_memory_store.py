"""Memory records on the real database: concurrent retries write each memory once, and the
enrichment hook is idempotent per version (what the enrichment worker relies on)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from common.domain.memory_records import EnrichmentFields
from common.domain.memory_records import MemoryEnrichment
from common.domain.memory_scope import MemoryScope
from common.kernel.config import Settings
from common.storage.database import Database
from common.storage.schema import migrations
from common.text_models.embeddings.provider import EmbeddingProvider
from ingest_service.memories.validation import NewMemoryInput
from ingest_service.memories.writer import MemoryWriter

pytestmark = pytest.mark.integration


def _scope() -> MemoryScope:
    return MemoryScope("it" + uuid.uuid4().hex[:10], "staging", "p1", "8821")


def _counts(database: Database, scope: MemoryScope) -> tuple[int, int, int]:
    with database.connection() as conn:
        rows = conn.execute(
            "SELECT count(*) FROM memories WHERE namespace = %s", (scope.namespace,)
        ).fetchone()
        chunks = conn.execute(
            "SELECT count(*) FROM chunks WHERE namespace = %s", (scope.namespace,)
        ).fetchone()
        nodes = conn.execute(
            "SELECT count(*) FROM graph_nodes WHERE namespace = %s AND node_type = 'memory'",
            (scope.namespace,),
        ).fetchone()
    assert rows and chunks and nodes
    return int(rows[0]), int(chunks[0]), int(nodes[0])


def test_concurrent_retries_of_one_batch_write_each_memory_once(
    database: Database, provider: EmbeddingProvider
) -> None:
    scope = _scope()
    writer = MemoryWriter(database, provider)
    items = [
        NewMemoryInput(text=f"memory number {i} of the batch", idempotency_key=f"k{i}") for i in range(20)
    ]
    with ThreadPoolExecutor(max_workers=4) as pool:  # .result() re-raises a writer's error
        outcomes = [f.result(timeout=300) for f in [pool.submit(writer.add, scope, items) for _ in range(4)]]
    for index in range(len(items)):
        ids = {outcome[index].memory_id for outcome in outcomes}
        assert len(ids) == 1
        assert sum(outcome[index].created for outcome in outcomes) == 1  # exactly one writer created it
    assert _counts(database, scope) == (20, 20, 20)


@pytest.fixture
def own_database(fresh_settings: Settings) -> Iterator[Database]:
    """A database of its own: `MemoryEnrichment.due` lists the due memories of the whole database, and
    the shared one holds every earlier run's (over 100,000 on a long-used development machine)."""
    database = Database(fresh_settings, prepare=migrations.apply)
    migrations.apply(database)
    yield database
    database.close()


def test_the_enrichment_hook_is_idempotent_per_version(
    own_database: Database, provider: EmbeddingProvider
) -> None:
    database = own_database
    scope = _scope()
    heard: list[tuple[str, str, int]] = []
    writer = MemoryWriter(database, provider, on_due=heard.extend)
    (added,) = writer.add(
        scope, [NewMemoryInput(text="Customer 8821 reported login failures after MFA reset.")]
    )
    key = added.memory_id
    assert heard == [(scope.namespace, key, 1)]
    enrichment = MemoryEnrichment(database)
    assert enrichment.due() == [(scope.namespace, key, 1)]
    job = enrichment.read(scope.namespace, key, 1)
    assert job is not None and job.scopes == (scope.owner_scope,) and "8821" in job.text
    fields = EnrichmentFields(
        entities=["Customer 8821", "MFA"], topics=["login"], memory_type="event", quality_score=0.8
    )
    linked: list[int] = []

    def failing_links(conn: object) -> None:
        raise RuntimeError("links failed")

    with pytest.raises(RuntimeError):
        enrichment.write(scope.namespace, key, 1, fields, also=failing_links)
    assert enrichment.due() == [(scope.namespace, key, 1)]  # the fields were not written without the links
    assert enrichment.write(scope.namespace, key, 1, fields, also=lambda conn: linked.append(1))
    assert linked == [1]
    # a retried job changes nothing, and links nothing
    assert not enrichment.write(scope.namespace, key, 1, fields, also=lambda conn: linked.append(2))
    assert linked == [1]
    assert enrichment.read(scope.namespace, key, 1) is None  # done: drop the job
    assert enrichment.due() == []
    record = writer.update(scope, key, NewMemoryInput(text="Customer 8821 can log in again."), ["text"])
    assert record.version == 2 and record.enriched_version == 1 and record.memory_type == "event"
    assert list(record.entities) == ["Customer 8821", "MFA"] and record.quality_score == pytest.approx(0.8)
    assert heard[-1] == (scope.namespace, key, 2)
    assert not enrichment.write(scope.namespace, key, 1, fields)  # a stale job of version 1
    assert enrichment.write(scope.namespace, key, 2, EnrichmentFields(entities=["Customer 8821"]))
    with pytest.raises(ValueError):
        enrichment.write(scope.namespace, key, 3, EnrichmentFields(memory_type="gossip"))


def test_a_failing_enqueue_hook_loses_nothing(own_database: Database, provider: EmbeddingProvider) -> None:
    database = own_database
    scope = _scope()

    def broken(_due: object) -> None:
        raise RuntimeError("queue down")

    (added,) = MemoryWriter(database, provider, on_due=broken).add(
        scope, [NewMemoryInput(text="kept and due")]
    )
    assert added.created
    assert MemoryEnrichment(database).due() == [(scope.namespace, added.memory_id, 1)]


class _FailingOnCall:
    """The real provider, failing on its ``fail_on``-th call of ``encode_passages`` (a slice of a batch)."""

    def __init__(self, provider: EmbeddingProvider, fail_on: int) -> None:
        self.provider, self.fail_on, self.calls = provider, fail_on, 0

    def encode_passages(self, texts: list[str]) -> object:
        self.calls += 1
        if self.calls == self.fail_on:
            raise RuntimeError("the embedding failed in the middle of the batch")
        return self.provider.encode_passages(texts)


def test_a_failure_after_the_first_slices_are_written_writes_nothing_and_a_retry_each_once(
    database: Database, provider: EmbeddingProvider
) -> None:
    scope = _scope()
    items = [NewMemoryInput(text=f"slice test memory {i}", idempotency_key=f"s{i}") for i in range(70)]
    # 70 items: slices of 25, 25, 20; the third call fails after two slices' chunks may be written.
    failing = _FailingOnCall(provider, fail_on=3)
    with pytest.raises(RuntimeError, match="middle of the batch"):
        MemoryWriter(database, failing).add(scope, items)  # type: ignore[arg-type]
    assert failing.calls == 3
    assert _counts(database, scope) == (0, 0, 0)
    results = MemoryWriter(database, provider).add(scope, items)
    assert [r.status for r in results] == ["created"] * 70
    assert _counts(database, scope) == (70, 70, 70)
    again = MemoryWriter(database, provider).add(scope, items)
    assert [r.status for r in again] == ["duplicate"] * 70
    assert [r.memory_id for r in again] == [r.memory_id for r in results]
    assert _counts(database, scope) == (70, 70, 70)
