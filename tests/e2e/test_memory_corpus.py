"""Memory records on real data: the 5,415 Debian upload observations' contents as memories of
20 users in 3 projects, through token-secured servers (each user its own token of one organisation).

Checks scoping (lists, recall and Search see only the caller's memories of the caller's project), bad
input on real data (the 20 contents longer than 8,000 characters fail with their field path, nothing of
them stored), idempotent re-sends, expiry, tiers and summary expansion end to end.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC
from datetime import datetime
from datetime import timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import duration_pb2
from google.protobuf import field_mask_pb2

from common.auth.principals import Right
from common.domain.memory_records import memory_query
from common.domain.memory_scope import MemoryScope
from common.kernel.config import Settings
from common.kernel.memory_names import memory_namespace
from ingest_service.memories.maintenance import MemoryMaintenance
from memory_service_grpc_client import ClientSecurity
from memory_service_grpc_client import iter_pages
from memory_service_grpc_client import make_channel
from memory_service_grpc_client import rpc_failure
from memory_service_grpc_client.memory.v1 import memory_query_service_pb2
from memory_service_grpc_client.memory.v1 import memory_query_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import memory_record_pb2
from memory_service_grpc_client.memory.v1 import memory_service_pb2
from memory_service_grpc_client.memory.v1 import memory_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2_grpc
from memory_service_tools.token_writer import add_token
from tests.conftest import CORPORA
from tests.e2e.conftest import token_secured_services

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(3600)]

USERS = [f"u{i:02d}" for i in range(20)]
PROJECTS = ["prj-a", "prj-b", "prj-c"]
MAX_TEXT = 8000


class Corpus:
    def __init__(self, tokens_file: Path) -> None:
        self.organization = "deb" + uuid.uuid4().hex[:10]
        self.tokens = {
            user: add_token(
                tokens_file,
                principal=f"corpus-{self.organization}-{user}",
                namespaces={memory_namespace(self.organization, "production"): [Right.READ, Right.WRITE]},
                memory_scope=(self.organization, "production", user),
            )[0]
            for user in USERS
        }
        self.items: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
        for index, line in enumerate(
            (CORPORA / "debian-uploads" / "observations.jsonl").open(encoding="utf-8")
        ):
            observation = json.loads(line)
            owner = (USERS[index % len(USERS)], PROJECTS[index % len(PROJECTS)])
            self.items[owner].append(
                {
                    "key": observation["source"]["external_id"],
                    "text": observation["content"],
                    "source": observation["source"]["system"],
                    "event_type": observation["kind"],
                }
            )
        self.ids: dict[tuple[str, str], list[str]] = {}
        self.results: dict[tuple[str, str], list[Any]] = {}
        self.ingest_addr = self.query_addr = ""

    def channel(self, side: str, user: str) -> grpc.Channel:
        address = self.ingest_addr if side == "ingest" else self.query_addr
        return make_channel(address, security=ClientSecurity(token=self.tokens[user]))

    def add(self, user: str, project: str, items: list[dict[str, Any]]) -> list[Any]:
        request = memory_service_pb2.AddMemoriesRequest(
            memories=[
                memory_service_pb2.NewMemory(
                    idempotency_key=item["key"],
                    text=item["text"],
                    source=item["source"],
                    event_type=item["event_type"],
                )
                for item in items
            ]
        )
        with self.channel("ingest", user) as channel:
            stub = memory_service_pb2_grpc.MemoryServiceStub(channel)
            return list(stub.AddMemories(request, timeout=600, metadata=(("x-project-id", project),)).results)

    def list_ids(self, user: str, project: str, **fields: Any) -> list[memory_record_pb2.Memory]:
        with self.channel("query", user) as channel:
            stub = memory_query_service_pb2_grpc.MemoryQueryServiceStub(channel)
            return list(
                iter_pages(
                    lambda request: stub.ListMemories(
                        request, timeout=60, metadata=(("x-project-id", project),)
                    ),
                    memory_query_service_pb2.ListMemoriesRequest(page_size=100, **fields),
                    lambda page: page.memories,
                )
            )

    def recall(self, user: str, project: str, query: str, **fields: Any) -> list[Any]:
        with self.channel("query", user) as channel:
            stub = memory_query_service_pb2_grpc.MemoryQueryServiceStub(channel)
            return list(
                stub.RecallMemories(
                    memory_query_service_pb2.RecallMemoriesRequest(query=query, **fields),
                    timeout=60,
                    metadata=(("x-project-id", project),),
                ).memories
            )

    def get(self, user: str, project: str, memory_id: str) -> memory_record_pb2.Memory:
        with self.channel("query", user) as channel:
            stub = memory_query_service_pb2_grpc.MemoryQueryServiceStub(channel)
            return stub.GetMemory(
                memory_query_service_pb2.GetMemoryRequest(memory_id=memory_id),
                timeout=60,
                metadata=(("x-project-id", project),),
            ).memory

    def write(self, user: str, project: str, method: str, request: Any) -> Any:
        with self.channel("ingest", user) as channel:
            stub = memory_service_pb2_grpc.MemoryServiceStub(channel)
            return getattr(stub, method)(request, timeout=120, metadata=(("x-project-id", project),))


@pytest.fixture(scope="module")
def corpus(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Corpus]:
    tokens_file = tmp_path_factory.mktemp("memory-corpus") / "tokens.yaml"
    loaded = Corpus(tokens_file)
    with token_secured_services(settings, tokens_file) as (loaded.ingest_addr, loaded.query_addr):
        for owner, items in loaded.items.items():
            loaded.results[owner] = loaded.add(*owner, items)
            loaded.ids[owner] = [r.memory_id for r in loaded.results[owner] if r.memory_id]
        yield loaded


def test_every_content_is_stored_except_the_over_long_ones_which_name_their_field(corpus: Corpus) -> None:
    total = failed = 0
    for owner, results in corpus.results.items():
        for index, (item, result) in enumerate(zip(corpus.items[owner], results)):
            total += 1
            if len(item["text"]) > MAX_TEXT:
                failed += 1
                assert result.status == "failed" and not result.memory_id
                assert list(result.field_violations) == [
                    f"memories[{index}].text: at most {MAX_TEXT} characters"
                ]
            else:
                assert result.status == "created", (owner, index, list(result.field_violations))
    assert total == 5415 and failed == 20


def test_sending_everything_again_creates_nothing(corpus: Corpus) -> None:
    for owner in [(USERS[0], PROJECTS[0]), (USERS[7], PROJECTS[1])]:
        again = corpus.add(*owner, corpus.items[owner])
        assert not any(r.created for r in again)
        assert [r.memory_id for r in again if r.memory_id] == corpus.ids[owner]


def test_each_user_lists_exactly_its_memories_of_the_project(corpus: Corpus) -> None:
    listed_total = 0
    for user in USERS:
        for project in PROJECTS:
            listed = {m.memory_id for m in corpus.list_ids(user, project)}
            assert listed == set(corpus.ids.get((user, project), [])), (user, project)
            listed_total += len(listed)
    assert listed_total == 5415 - 20


def test_recall_never_returns_another_users_memory_even_for_its_exact_text(corpus: Corpus) -> None:
    for number, user in enumerate(USERS):
        project = PROJECTS[number % len(PROJECTS)]
        mine = set(corpus.ids[(user, project)])
        other = USERS[(number + 3) % len(USERS)]
        victim_text = next(i["text"] for i in corpus.items[(other, project)] if len(i["text"]) <= MAX_TEXT)
        recalled = corpus.recall(user, project, victim_text[:4000], top_k=20, touch=False)
        assert recalled and {r.memory.memory_id for r in recalled} <= mine
        assert all(r.memory.scope.user_id == user and r.memory.scope.project_id == project for r in recalled)
        own = corpus.items[(user, project)][0]
        top = corpus.recall(user, project, own["text"][:4000], top_k=1, preset="similarity", touch=False)
        assert top[0].memory.text == own["text"]


def test_search_in_the_project_namespace_shows_only_the_callers_chunks(corpus: Corpus) -> None:
    for user in USERS[:5]:
        project = PROJECTS[0]
        mine = set(corpus.ids.get((user, project), []))
        namespace = memory_namespace(corpus.organization, "production", project)
        with corpus.channel("query", user) as channel:
            stub = retrieval_service_pb2_grpc.RetrievalServiceStub(channel)
            for query in ("debian/control Standards-Version", "New upstream release", "closes: #"):
                hits = stub.Search(
                    retrieval_service_pb2.SearchRequest(namespace=namespace, query=query, top_k=100),
                    timeout=60,
                ).hits
                assert hits and {h.node_key for h in hits} <= mine


def test_expired_memories_hide_then_the_sweep_removes_them(
    corpus: Corpus, maintenance: MemoryMaintenance
) -> None:
    user, project = USERS[5], PROJECTS[2]
    victims = corpus.ids[(user, project)][:3]
    for memory_id in victims:
        corpus.write(
            user,
            project,
            "UpdateMemory",
            memory_service_pb2.UpdateMemoryRequest(
                memory_id=memory_id,
                memory=memory_service_pb2.NewMemory(ttl=duration_pb2.Duration(seconds=3600)),
                update_mask=field_mask_pb2.FieldMask(paths=["ttl"]),
            ),
        )
    later = datetime.now(UTC) + timedelta(hours=2)
    only = [memory_namespace(corpus.organization, "production", project)]  # this run's namespace alone
    maintenance.sweep_expired(later, only)  # within the grace period: nothing removed
    assert all(corpus.get(user, project, m).memory_id == m for m in victims)
    # Judged two hours later they are expired (the servers judge at their clock: read the store at `later`).
    scope = MemoryScope(corpus.organization, "production", project, user)
    with maintenance.database.connection() as conn:
        visible = maintenance.store.list_page(
            conn, dataclasses.replace(memory_query(scope), now=later), limit=1000
        )
    assert not {s.row["memory_id"] for s in visible} & set(victims)
    events, refused = maintenance.sweep_expired(
        later + timedelta(hours=maintenance.settings.memory_expiry_grace_hours), only
    )
    assert len(events) == 3 and not refused
    for memory_id in victims:
        with pytest.raises(grpc.RpcError) as raised:
            corpus.get(user, project, memory_id)
        assert rpc_failure(raised.value).code == grpc.StatusCode.NOT_FOUND
    assert len(corpus.list_ids(user, project)) == len(corpus.ids[(user, project)]) - 3


def test_a_lossless_summary_expands_into_its_originals_a_lossy_one_hides_them(corpus: Corpus) -> None:
    user, project = USERS[7], PROJECTS[1]
    originals = corpus.ids[(user, project)][:5]
    summary = corpus.write(
        user,
        project,
        "SummarizeMemories",
        memory_service_pb2.SummarizeMemoriesRequest(memory_ids=originals, lossless=True, max_sentences=3),
    ).summary
    recalled = corpus.recall(user, project, summary.text[:4000], top_k=10, expand_summaries=True, touch=False)
    found = {r.memory.memory_id: r for r in recalled}
    assert summary.memory_id in found
    assert [m.memory_id for m in found[summary.memory_id].expanded] == originals
    lossy_user, lossy_project = USERS[8], PROJECTS[2]
    hidden = corpus.ids[(lossy_user, lossy_project)][:10]
    lossy = corpus.write(
        lossy_user,
        lossy_project,
        "SummarizeMemories",
        memory_service_pb2.SummarizeMemoriesRequest(memory_ids=hidden),
    ).summary
    listed = {m.memory_id for m in corpus.list_ids(lossy_user, lossy_project)}
    assert lossy.memory_id in listed and not listed & set(hidden)
    assert corpus.get(lossy_user, lossy_project, hidden[0]).summary_id == lossy.memory_id


def test_unused_memories_go_warm_and_a_recall_of_warm_ones_brings_them_back(
    corpus: Corpus, maintenance: MemoryMaintenance
) -> None:
    user, project = USERS[9], PROJECTS[0]
    maintenance.apply_tier_policy(
        datetime.now(UTC) + timedelta(days=maintenance.settings.memory_warm_after_days + 1),
        [memory_namespace(corpus.organization, "production", project)],
    )
    query = corpus.items[(user, project)][0]["text"][:4000]
    assert corpus.recall(user, project, query, touch=False) == []  # hot only by default
    warm = memory_record_pb2.MemoryFilter(tiers=[memory_record_pb2.MEMORY_TIER_WARM])
    recalled = corpus.recall(user, project, query, top_k=5, filter=warm)
    assert len(recalled) == 5 and all(r.memory.tier == memory_record_pb2.MEMORY_TIER_WARM for r in recalled)
    again = corpus.recall(user, project, query, top_k=5, touch=False)
    assert {r.memory.memory_id for r in again} == {r.memory.memory_id for r in recalled}
