"""RecallMemories through the approximate stage (`common.storage.memories.recall`) on a database of its own.

Two namespaces (projects) of real Debian upload texts: in ``near`` the owner holds 300 memories and a
neighbour (another user) 150 memories with the same texts (the same vectors: were the owner filter not
inside the index scan, they would be the nearest); in ``far`` the same owner id holds 500 memories
with the same texts. The tenant indexes are synchronised as `cb index-tenants` does, with a threshold
of 100: ``near`` (under half of the chunks) gets an HNSW index of its own, ``far`` (most of the table)
is served by the table's index, so both index kinds are exercised. With ``memory_recall_exact_below``
100 and 50 candidates per call (5 x top_k), every recall of the owner takes the approximate path.

Proved: for 40 queries (sentences of other uploads) the approximate path's top 10 is the exact top 10 (same
ids, same order, through the real gRPC call too); hidden (lossy summary) and expired memories, the
neighbour's, and the other namespace's never reach the candidates nor the results, even for a query that is
their own text (also when the owner holds a live copy of a hidden memory's text, which the lookup of copies
reaches); when the owner holds more copies of one text than the index scan returns, every copy is a candidate
(and none of the neighbour's), so the approximate top 2 is the exact one; the planner settings of the index
scan do not outlive it. With ``memory_owner_index_min_rows`` 150 the neighbour (about a third of ``near``)
gets an HNSW index of its own (the owner, two thirds of ``near`` and all of ``far``, does not): its candidate
statement is planned on that index (without the owner's scope condition it would not be), and its hidden,
expired, the owner's and the other namespace's memories never reach its candidates or results, while the
same statement without the liveness filters finds the hidden and expired ones in that index. AddMemories' batch semantics are unchanged (a retried batch writes nothing, an invalid
item writes nothing while the valid ones are created, a key twice in one batch is a duplicate).
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC
from datetime import datetime
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from psycopg import sql

from common.kernel.config import Settings
from common.kernel.memory_names import memory_namespace
from common.storage.chunks.owner_vector_indexes import OwnerIndexRegistry
from common.storage.chunks.owner_vector_indexes import owner_index_name
from common.storage.chunks.tenant_vector_indexes import OWN_INDEX
from common.storage.chunks.tenant_vector_indexes import TABLE_INDEX
from common.storage.chunks.tenant_vector_indexes import TenantIndexRegistry
from common.storage.chunks.tenant_vector_indexes import TenantVectorIndexes
from common.storage.database import Database
from common.storage.memories.recall import APPROXIMATE
from common.storage.memories.recall import EXACT
from common.storage.memories.recall import MemoryRecall
from common.storage.memories.store import MemoryQuery
from common.storage.schema import migrations
from common.text_models.embeddings.factory import build_embedding_provider
from ingest_service.main import create_ingest_host
from memory_service_grpc_client import wait_for_serving
from memory_service_grpc_client.memory.v1 import memory_query_service_pb2
from memory_service_grpc_client.memory.v1 import memory_query_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import memory_service_pb2
from memory_service_grpc_client.memory.v1 import memory_service_pb2_grpc
from query_service.main import create_query_host
from query_service.readers.memory_recall import RECALL_PRESETS

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

UPLOADS = Path(__file__).resolve().parents[3] / "shared" / "corpora" / "debian-uploads" / "observations.jsonl"
NEAR, FAR = "recall-near", "recall-far"
OWNER, NEIGHBOUR = "owner", "neighbour"
QUERIES = 40
COPIED = 960
"""The text the owner holds `COPIES` times in ``near``."""
COPIES = 40


def _texts() -> list[str]:
    texts = []
    for line in UPLOADS.open(encoding="utf-8"):
        content = json.loads(line)["content"]
        if 200 <= len(content) <= 4000:
            texts.append(content)
    return texts


class Stubs:
    def __init__(self, ingest: grpc.Channel, query: grpc.Channel) -> None:
        self.write = memory_service_pb2_grpc.MemoryServiceStub(ingest)
        self.read = memory_query_service_pb2_grpc.MemoryQueryServiceStub(query)

    def add(
        self, user: str, project: str, items: list[dict[str, Any]]
    ) -> memory_service_pb2.AddMemoriesResponse:
        request = json_format.ParseDict(
            {"memories": items, "userId": user}, memory_service_pb2.AddMemoriesRequest()
        )
        return self.write.AddMemories(request, timeout=300, metadata=(("x-project-id", project),))

    def recall(self, user: str, project: str, query: str) -> list[str]:
        request = memory_query_service_pb2.RecallMemoriesRequest(
            query=query, user_id=user, top_k=10, touch=False
        )
        response = self.read.RecallMemories(request, timeout=60, metadata=(("x-project-id", project),))
        return [r.memory.memory_id for r in response.memories]


@pytest.fixture(scope="module")
def world(settings: Settings) -> Iterator[dict[str, Any]]:
    from tests.conftest import fresh_database

    with fresh_database(settings) as fresh:
        tuned = fresh.model_copy(
            update={
                "memory_recall_exact_below": 100,
                "memory_recall_candidates": 10,
                "tenant_vector_index_min_rows": 100,
                "memory_owner_index_min_rows": 150,
            }
        )
        database = Database(tuned, prepare=migrations.apply)
        migrations.apply(database)
        ingest = create_ingest_host(tuned, address="127.0.0.1:0", metrics_port=0)
        query = create_query_host(tuned, address="127.0.0.1:0", metrics_port=0)
        ingest.start()
        query.start()
        channels = [grpc.insecure_channel(f"127.0.0.1:{host.port}") for host in (ingest, query)]
        try:
            for host in (ingest, query):
                assert wait_for_serving(f"127.0.0.1:{host.port}", timeout=120)
            stubs = Stubs(*channels)
            texts = _texts()
            ids: dict[tuple[str, str], list[str]] = {}
            for user, project, count in ((OWNER, NEAR, 300), (NEIGHBOUR, NEAR, 150), (OWNER, FAR, 500)):
                made: list[str] = []
                for start in range(0, count, 100):
                    items = [
                        {"idempotencyKey": f"t{i}", "text": texts[i]}
                        for i in range(start, min(count, start + 100))
                    ]
                    made += [r.memory_id for r in stubs.add(user, project, items).results]
                ids[(user, project)] = made
            near_owner = ids[(OWNER, NEAR)]
            # Copies of one text beyond what the index scan returns (the owner's, each less important than
            # the next), the neighbour's more important ones, and a live copy of a text about to be hidden.
            copies = [
                r.memory_id
                for r in stubs.add(
                    OWNER,
                    NEAR,
                    [
                        {"idempotencyKey": f"copy{i}", "text": texts[COPIED], "importance": i / COPIES}
                        for i in range(COPIES)
                    ],
                ).results
            ]
            theirs = [
                r.memory_id
                for r in stubs.add(
                    NEIGHBOUR,
                    NEAR,
                    [
                        {"idempotencyKey": f"copy{i}", "text": texts[COPIED], "importance": 1.0}
                        for i in range(4)
                    ],
                ).results
            ]
            (again,) = stubs.add(OWNER, NEAR, [{"idempotencyKey": "again", "text": texts[0]}]).results
            ids[(OWNER, NEAR)] = [*near_owner, *copies, again.memory_id]
            ids[(NEIGHBOUR, NEAR)] = [*ids[(NEIGHBOUR, NEAR)], *theirs]
            # Hidden by a lossy summary: two of the owner's memories in `near`.
            summary = stubs.write.SummarizeMemories(
                memory_service_pb2.SummarizeMemoriesRequest(
                    memory_ids=near_owner[:2], lossless=False, max_sentences=2, user_id=OWNER
                ),
                timeout=120,
                metadata=(("x-project-id", NEAR),),
            )
            # Expired: a memory that is a copy of a stored text, with a one-second TTL.
            (expiring,) = stubs.add(
                OWNER, NEAR, [{"idempotencyKey": "expiring", "text": texts[2] + " (copy)", "ttl": "1s"}]
            ).results
            # The same for the neighbour, whose recall goes through an index of its own.
            neighbour_summary = stubs.write.SummarizeMemories(
                memory_service_pb2.SummarizeMemoriesRequest(
                    memory_ids=ids[(NEIGHBOUR, NEAR)][:2], lossless=False, max_sentences=2, user_id=NEIGHBOUR
                ),
                timeout=120,
                metadata=(("x-project-id", NEAR),),
            )
            (neighbour_expiring,) = stubs.add(
                NEIGHBOUR, NEAR, [{"idempotencyKey": "expiring", "text": texts[3] + " (copy)", "ttl": "1s"}]
            ).results
            time.sleep(2.5)
            changes = TenantVectorIndexes(tuned).synchronise(min_rows=100)
            yield {
                "settings": tuned,
                "database": database,
                "stubs": stubs,
                "texts": texts,
                "ids": ids,
                "hidden": set(near_owner[:2]),
                "summary": summary.summary.memory_id,
                "expiring": expiring.memory_id,
                "changes": changes,
                "copies": copies,
                "neighbour_copies": theirs,
                "neighbour_hidden": set(ids[(NEIGHBOUR, NEAR)][:2]),
                "neighbour_summary": neighbour_summary.summary.memory_id,
                "neighbour_expiring": neighbour_expiring.memory_id,
            }
        finally:
            for channel in channels:
                channel.close()
            ingest.stop(5)
            query.stop(5)
            database.close()


def _query(project: str, user: str = OWNER) -> MemoryQuery:
    return MemoryQuery(
        namespace=memory_namespace("local", "development", project),
        user_id=user,
        now=datetime.now(UTC),
        tiers=("hot",),
    )


def test_both_index_kinds_serve_the_namespaces(world: dict[str, Any]) -> None:
    database: Database = world["database"]
    registry = TenantIndexRegistry(world["settings"], cache_seconds=0)
    with database.connection() as conn:
        assert registry.index_of(conn, memory_namespace("local", "development", NEAR)) == OWN_INDEX
        assert registry.index_of(conn, memory_namespace("local", "development", FAR)) == TABLE_INDEX


@pytest.mark.parametrize(("project", "user"), [(NEAR, OWNER), (FAR, OWNER), (NEAR, NEIGHBOUR)])
def test_the_approximate_top_ten_is_the_exact_top_ten(world: dict[str, Any], project: str, user: str) -> None:
    settings: Settings = world["settings"]
    database: Database = world["database"]
    stubs: Stubs = world["stubs"]
    recall = MemoryRecall(settings)
    encoder = build_embedding_provider(settings)
    rng = random.Random(7)
    queries = [" ".join(rng.choice(world["texts"][600:]).split()[:30]) for _ in range(QUERIES)]
    same = 0
    for text in queries:
        vector = encoder.encode_query(text)
        with database.connection() as conn:
            approximate = recall.recall(
                conn, _query(project, user), vector, RECALL_PRESETS["balanced"], limit=10
            )
            exact = recall.recall(
                conn, _query(project, user), vector, RECALL_PRESETS["balanced"], limit=10, exact=True
            )
        assert approximate.path == APPROXIMATE and approximate.candidates >= 50
        assert exact.path == EXACT
        approximate_ids = [m.row["memory_id"] for m in approximate.memories]
        exact_ids = [m.row["memory_id"] for m in exact.memories]
        assert len(exact_ids) == 10
        same += approximate_ids == exact_ids
        assert stubs.recall(user, project, text) == approximate_ids  # the served path is this one
    assert same >= QUERIES * 0.95, f"{same}/{QUERIES} queries with the exact top 10"


def test_gone_and_foreign_memories_never_become_candidates(world: dict[str, Any]) -> None:
    settings: Settings = world["settings"]
    database: Database = world["database"]
    stubs: Stubs = world["stubs"]
    texts: list[str] = world["texts"]
    ids = world["ids"]
    recall = MemoryRecall(settings)
    encoder = build_embedding_provider(settings)
    gone = world["hidden"] | {world["expiring"]}
    foreign = set(ids[(NEIGHBOUR, NEAR)]) | set(ids[(OWNER, FAR)])
    # The texts of the hidden and expired memories themselves: their own vectors are the nearest.
    for text in (texts[0], texts[1], texts[2] + " (copy)", texts[5]):
        vector = encoder.encode_query(text)
        with database.connection() as conn:
            candidates = recall.candidates(conn, _query(NEAR), vector, 10)
            assert candidates is not None and len(candidates) >= 50
            assert not set(candidates) & (gone | foreign)
            assert set(candidates) <= set(ids[(OWNER, NEAR)]) | {world["summary"]}
            # The control: without the liveness filters the hidden ones are there.
            unfiltered = recall.candidates(
                conn, replace(_query(NEAR), include_hidden=True, include_expired=True), vector, 10
            )
        assert unfiltered is not None
        served = stubs.recall(OWNER, NEAR, text)
        assert served and not set(served) & (gone | foreign)
    with database.connection() as conn:
        control = recall.candidates(
            conn,
            replace(_query(NEAR), include_hidden=True, include_expired=True),
            encoder.encode_query(texts[0]),
            10,
        )
    assert control is not None and set(control) & world["hidden"]
    # The neighbour, asking with the owner's texts, sees only its own memories.
    for text in (texts[0], texts[3]):
        with database.connection() as conn:
            theirs = recall.candidates(conn, _query(NEAR, NEIGHBOUR), encoder.encode_query(text), 10)
        live = (set(ids[(NEIGHBOUR, NEAR)]) - world["neighbour_hidden"]) | {world["neighbour_summary"]}
        assert theirs is not None and set(theirs) <= live
        assert set(stubs.recall(NEIGHBOUR, NEAR, text)) <= live


def test_a_small_owner_is_scored_exactly(world: dict[str, Any]) -> None:
    settings: Settings = world["settings"].model_copy(update={"memory_recall_exact_below": 1000})
    database: Database = world["database"]
    recall = MemoryRecall(settings)
    vector = build_embedding_provider(settings).encode_query(world["texts"][700])
    with database.connection() as conn:
        outcome = recall.recall(conn, _query(NEAR), vector, RECALL_PRESETS["balanced"], limit=10)
    assert outcome.path == EXACT and len(outcome.memories) == 10


def _counts(database: Database, namespace: str) -> tuple[int, int, int]:
    with database.connection() as conn:
        return tuple(  # type: ignore[return-value]
            int(conn.execute(statement, (namespace,)).fetchone()[0])  # type: ignore[index]
            for statement in (
                "SELECT count(*) FROM memories WHERE namespace = %s",
                "SELECT count(*) FROM chunks WHERE namespace = %s AND node_type = 'memory'",
                "SELECT count(*) FROM graph_nodes WHERE namespace = %s AND node_type = 'memory'",
            )
        )


def test_add_memories_batch_semantics_are_unchanged(world: dict[str, Any]) -> None:
    database: Database = world["database"]
    stubs: Stubs = world["stubs"]
    texts: list[str] = world["texts"]
    namespace = memory_namespace("local", "development", NEAR)
    before = _counts(database, namespace)
    # A retried batch: every item a duplicate with its id, nothing written.
    retried = stubs.add(OWNER, NEAR, [{"idempotencyKey": f"t{i}", "text": texts[i]} for i in range(10, 20)])
    assert [r.status for r in retried.results] == ["duplicate"] * 10
    assert [r.memory_id for r in retried.results] == world["ids"][(OWNER, NEAR)][10:20]
    assert _counts(database, namespace) == before
    # A mixed batch: the invalid item fails and writes nothing, a key twice is one memory.
    mixed = stubs.add(
        OWNER,
        NEAR,
        [
            {"idempotencyKey": "new-a", "text": texts[900]},
            {"idempotencyKey": "bad", "text": texts[901], "importance": 7},
            {"idempotencyKey": "new-a", "text": texts[900]},
            {"idempotencyKey": "new-b", "text": texts[902]},
        ],
    )
    assert [r.status for r in mixed.results] == ["created", "failed", "duplicate", "created"]
    assert mixed.results[1].memory_id == "" and mixed.results[1].field_violations
    assert mixed.results[2].memory_id == mixed.results[0].memory_id
    assert _counts(database, namespace) == tuple(count + 2 for count in before)
    # An all-invalid batch changes nothing.
    invalid = stubs.add(OWNER, NEAR, [{"idempotencyKey": "bad-2", "text": ""}])
    assert [r.status for r in invalid.results] == ["failed"]
    assert _counts(database, namespace) == tuple(count + 2 for count in before)


def test_copies_of_a_text_beyond_the_index_scan_are_all_scored(world: dict[str, Any]) -> None:
    settings: Settings = world["settings"]
    database: Database = world["database"]
    copies: list[str] = world["copies"]
    recall = MemoryRecall(settings)
    vector = build_embedding_provider(settings).encode_query(world["texts"][COPIED])
    weights = RECALL_PRESETS["balanced"]
    with database.connection() as conn:
        # top 2: the index scan returns 10 rows, fewer than the owner's 40 copies of the text.
        candidates = recall.candidates(conn, _query(NEAR), vector, 2)
        approximate = recall.recall(conn, _query(NEAR), vector, weights, limit=2)
        exact = recall.recall(conn, _query(NEAR), vector, weights, limit=2, exact=True)
    assert candidates is not None
    assert set(copies) <= set(candidates)
    assert not set(candidates) & set(world["neighbour_copies"])
    assert approximate.path == APPROXIMATE
    best = [m.row["memory_id"] for m in approximate.memories]
    assert best == [m.row["memory_id"] for m in exact.memories] == [copies[-1], copies[-2]]


def test_the_index_scan_settings_do_not_outlive_the_candidates(world: dict[str, Any]) -> None:
    settings: Settings = world["settings"]
    database: Database = world["database"]
    recall = MemoryRecall(settings)
    vector = build_embedding_provider(settings).encode_query(world["texts"][700])
    with database.connection() as conn:
        settings_now = "SELECT current_setting('enable_sort'), current_setting('hnsw.ef_search')"
        before = conn.execute(settings_now).fetchone()
        assert recall.candidates(conn, _query(NEAR), vector, 10) is not None
        after = conn.execute(settings_now).fetchone()
    assert after == before == ("on", str(settings.hnsw_ef_search))


def _plan(conn: Any, recall: MemoryRecall, query: MemoryQuery, vector: Any) -> str:
    """The plan of the candidate statement, with its planner settings."""
    planned = recall.candidate_statement(conn, query, vector, 10)
    assert planned is not None
    with conn.transaction():
        conn.execute("SELECT set_config('enable_sort', 'off', true)")
        rows = conn.execute(sql.SQL("EXPLAIN ") + planned.statement, planned.params, prepare=False).fetchall()
    return "\n".join(row[0] for row in rows)


def test_an_owner_with_a_small_share_gets_an_index_of_their_own(world: dict[str, Any]) -> None:
    settings: Settings = world["settings"]
    database: Database = world["database"]
    near, far = (memory_namespace("local", "development", project) for project in (NEAR, FAR))
    name = owner_index_name(settings.chunks_table, near, NEIGHBOUR)
    # The neighbour holds about a third of `near`; the owner two thirds of it and all of `far`: only the
    # neighbour gets an index, built by the synchronisation of the tenant indexes.
    built = [c for c in world["changes"] if c.user_id]
    assert [(c.namespace, c.user_id, c.index_name, c.action) for c in built] == [
        (near, NEIGHBOUR, name, "built")
    ]
    registry = OwnerIndexRegistry(settings, cache_seconds=0)
    recall = MemoryRecall(settings)
    vector = build_embedding_provider(settings).encode_query(world["texts"][700])
    with database.connection() as conn:
        assert (
            registry.scope_of(conn, near, NEIGHBOUR) == f"principal:memory-user/local/development/{NEIGHBOUR}"
        )
        assert registry.scope_of(conn, near, OWNER) is None and registry.scope_of(conn, far, OWNER) is None
        (valid,) = conn.execute(
            "SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%s)", (name,)
        ).fetchone()
        assert valid
        # The neighbour's candidates come from that index; the owner's from the namespace's.
        assert name in _plan(conn, recall, _query(NEAR, NEIGHBOUR), vector)
        assert name not in _plan(conn, recall, _query(NEAR), vector)
        assert name not in _plan(
            conn, MemoryRecall(settings, owner_indexes=False), _query(NEAR, NEIGHBOUR), vector
        )
    # Running again changes nothing.
    assert [c for c in TenantVectorIndexes(settings).synchronise(min_rows=100) if c.user_id] == []


def test_an_owner_index_shows_only_the_owners_live_memories(world: dict[str, Any]) -> None:
    settings: Settings = world["settings"]
    database: Database = world["database"]
    stubs: Stubs = world["stubs"]
    texts: list[str] = world["texts"]
    ids = world["ids"]
    recall = MemoryRecall(settings)
    encoder = build_embedding_provider(settings)
    gone = world["neighbour_hidden"] | {world["neighbour_expiring"]}
    live = (set(ids[(NEIGHBOUR, NEAR)]) - gone) | {world["neighbour_summary"]}
    others = set(ids[(OWNER, NEAR)]) | set(ids[(OWNER, FAR)]) | {world["summary"], world["expiring"]}
    # Their hidden and expired memories' own texts, a text the owner holds too, one only the owner holds.
    for text in (texts[0], texts[1], texts[3] + " (copy)", texts[20], texts[250]):
        vector = encoder.encode_query(text)
        with database.connection() as conn:
            candidates = recall.candidates(conn, _query(NEAR, NEIGHBOUR), vector, 10)
            unfiltered = recall.candidates(
                conn, replace(_query(NEAR, NEIGHBOUR), include_hidden=True, include_expired=True), vector, 10
            )
        assert candidates is not None and len(candidates) >= 50
        assert set(candidates) <= live
        assert not set(candidates) & (gone | others)
        assert unfiltered is not None and set(unfiltered) <= live | gone
        served = stubs.recall(NEIGHBOUR, NEAR, text)
        assert served and set(served) <= live
    # The control: the index holds the hidden and expired ones; the liveness filters keep them out.
    with database.connection() as conn:
        control = recall.candidates(
            conn,
            replace(_query(NEAR, NEIGHBOUR), include_hidden=True, include_expired=True),
            encoder.encode_query(texts[0]),
            10,
        )
        expired = recall.candidates(
            conn,
            replace(_query(NEAR, NEIGHBOUR), include_expired=True),
            encoder.encode_query(texts[3] + " (copy)"),
            10,
        )
    assert control is not None and set(control) & world["neighbour_hidden"]
    assert expired is not None and world["neighbour_expiring"] in expired
    # Their copies of a text the owner holds 40 times: all of theirs, none of the owner's.
    with database.connection() as conn:
        copies = recall.candidates(conn, _query(NEAR, NEIGHBOUR), encoder.encode_query(texts[COPIED]), 2)
    assert copies is not None and set(world["neighbour_copies"]) <= set(copies)
    assert not set(copies) & set(world["copies"])
