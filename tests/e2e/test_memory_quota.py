"""The per-user memory quota end to end (docs/how-to/memory-records.md Quota): a real ingest server
with ``memory_quota_per_user`` set, the session's real query server, the real database and embedder.

The servers run in development mode (organisation local, environment development; a request's user_id
selects the user), so two user ids are two users of the same organisation, and each test works as users
of its own (uuid).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf import field_mask_pb2
from google.protobuf import json_format

from common.kernel.config import Settings
from ingest_service.main import create_ingest_host
from memory_service_grpc_client import rpc_failure
from memory_service_grpc_client import wait_for_serving
from memory_service_grpc_client.memory.v1 import memory_query_service_pb2 as q
from memory_service_grpc_client.memory.v1 import memory_query_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import memory_service_pb2 as m
from memory_service_grpc_client.memory.v1 import memory_service_pb2_grpc

pytestmark = pytest.mark.e2e

LIMIT = 3


def _user() -> str:
    return "u-" + uuid.uuid4().hex[:12]


def _items(prefix: str, count: int) -> list[dict[str, Any]]:
    return [
        {"idempotencyKey": f"{prefix}-{i}", "text": f"{prefix}: remembered fact number {i}."}
        for i in range(count)
    ]


class QuotaClient:
    def __init__(self, ingest: grpc.Channel, query: grpc.Channel) -> None:
        self.write = memory_service_pb2_grpc.MemoryServiceStub(ingest)
        self.read = memory_query_service_pb2_grpc.MemoryQueryServiceStub(query)

    def add(self, user: str, items: list[dict[str, Any]], project: str = "") -> list[m.AddMemoryResult]:
        request = json_format.ParseDict({"memories": items, "userId": user}, m.AddMemoriesRequest())
        return list(self.write.AddMemories(request, timeout=120, metadata=_project(project)).results)

    def ids(self, user: str, project: str = "") -> set[str]:
        page = self.read.ListMemories(
            q.ListMemoriesRequest(user_id=user, page_size=100), timeout=60, metadata=_project(project)
        )
        return {memory.memory_id for memory in page.memories}


def _project(project: str) -> tuple[tuple[str, str], ...]:
    return (("x-project-id", project),) if project else ()


def _refused(result: m.AddMemoryResult, count: int = LIMIT) -> bool:
    return (
        result.status == "failed"
        and result.error_code == "RESOURCE_EXHAUSTED"
        and result.quota_limit == LIMIT
        and result.quota_count == count
        and not result.memory_id
        and not result.created
    )


@pytest.fixture(scope="module")
def quota_ingest(settings: Settings) -> Iterator[grpc.Channel]:
    host = create_ingest_host(
        settings.model_copy(update={"memory_quota_per_user": LIMIT}), address="127.0.0.1:0", metrics_port=0
    )
    host.start()
    address = f"127.0.0.1:{host.port}"
    try:
        assert wait_for_serving(address, timeout=120), "ingest_service did not become SERVING"
        channel = grpc.insecure_channel(address)
        yield channel
        channel.close()
    finally:
        host.stop(5)


@pytest.fixture
def client(quota_ingest: grpc.Channel, query_channel: grpc.Channel) -> QuotaClient:
    return QuotaClient(quota_ingest, query_channel)


def test_a_user_at_the_limit_is_refused_and_nothing_of_the_item_is_written(client: QuotaClient) -> None:
    user = _user()
    first = client.add(user, _items("first", 2))
    assert [r.status for r in first] == ["created", "created"]
    # A batch that crosses the limit: admitted in order while below it, the rest refused.
    second = client.add(user, _items("second", 3))
    assert second[0].status == "created" and second[0].error_code == ""
    assert _refused(second[1]) and _refused(second[2])
    stored = client.ids(user)
    assert stored == {r.memory_id for r in first} | {second[0].memory_id}
    # At the limit: a retry of a stored item (same idempotency key) is a duplicate, not a refusal.
    retry = client.add(user, _items("first", 1))
    assert retry[0].status == "duplicate" and retry[0].memory_id == first[0].memory_id
    assert retry[0].error_code == ""
    assert client.ids(user) == stored


def test_other_users_and_other_projects_have_their_own_quota(client: QuotaClient) -> None:
    user, neighbour = _user(), _user()
    assert [r.status for r in client.add(user, _items("mine", LIMIT))] == ["created"] * LIMIT
    assert _refused(client.add(user, _items("more", 1))[0])
    # Another user of the same organisation (and environment and project).
    assert [r.status for r in client.add(neighbour, _items("theirs", LIMIT))] == ["created"] * LIMIT
    # The same user in another project.
    project = "prj-" + uuid.uuid4().hex[:8]
    elsewhere = client.add(user, _items("elsewhere", LIMIT), project=project)
    assert [r.status for r in elsewhere] == ["created"] * LIMIT
    assert len(client.ids(user, project)) == LIMIT and len(client.ids(user)) == LIMIT


def test_deleting_frees_room(client: QuotaClient) -> None:
    user = _user()
    ids = [r.memory_id for r in client.add(user, _items("full", LIMIT))]
    assert _refused(client.add(user, _items("late", 1))[0])
    client.write.DeleteMemory(
        m.DeleteMemoryRequest(memory_id=ids[0], user_id=user, reason="quota"), timeout=60
    )
    late = client.add(user, _items("late", 2))
    assert late[0].status == "created" and _refused(late[1])
    assert client.ids(user) == {*ids[1:], late[0].memory_id}


def test_summaries_do_not_count(client: QuotaClient) -> None:
    user = _user()
    ids = [r.memory_id for r in client.add(user, _items("grouped", LIMIT))]
    summary = client.write.SummarizeMemories(
        m.SummarizeMemoriesRequest(memory_ids=ids[:2], lossless=True, user_id=user), timeout=60
    )
    assert summary.created
    client.write.DeleteMemory(
        m.DeleteMemoryRequest(memory_id=ids[2], user_id=user, reason="quota"), timeout=60
    )
    assert client.add(user, _items("after", 1))[0].status == "created"  # 3 originals again, summary aside


def test_expired_memories_do_not_count(client: QuotaClient) -> None:
    user = _user()
    items = _items("kept", LIMIT - 1) + [{"text": "a short-lived memory", "ttl": "1s"}]
    assert [r.status for r in client.add(user, items)] == ["created"] * LIMIT
    deadline = time.monotonic() + 60
    while len(client.ids(user)) == LIMIT and time.monotonic() < deadline:  # lists hide it once expired
        time.sleep(0.2)
    assert len(client.ids(user)) == LIMIT - 1
    assert client.add(user, _items("after-expiry", 1))[0].status == "created"


def test_reviving_an_expired_memory_beyond_the_quota_is_refused(client: QuotaClient) -> None:
    user = _user()
    items = _items("kept", LIMIT - 1) + [{"text": "a memory that expires and comes back", "ttl": "1s"}]
    expiring = client.add(user, items)[-1].memory_id
    deadline = time.monotonic() + 60
    while expiring in client.ids(user) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert client.add(user, _items("refill", 1))[0].status == "created"  # at the limit again
    revive = m.UpdateMemoryRequest(
        memory_id=expiring, user_id=user, update_mask=field_mask_pb2.FieldMask(paths=["expire_time"])
    )
    with pytest.raises(grpc.RpcError) as raised:
        client.write.UpdateMemory(revive, timeout=60)
    failure = rpc_failure(raised.value)  # the client package decodes ErrorInfo and QuotaFailure
    assert failure.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert failure.reason == "MEMORY_QUOTA_EXCEEDED"
    assert [v.description for v in failure.quota_violations] == [
        f"limit {LIMIT} live memories per user, count {LIMIT}"
    ]
    assert expiring not in client.ids(user)  # nothing changed
    client.write.DeleteMemory(
        m.DeleteMemoryRequest(memory_id=expiring, user_id=user, reason="quota"), timeout=60
    )
    assert len(client.ids(user)) == LIMIT  # the deleted one was expired: the live count is unchanged


@pytest.mark.parametrize("round_", range(4))
def test_concurrent_batches_of_one_user_cannot_overshoot(client: QuotaClient, round_: int) -> None:
    """Rounds of 12 batches of one user released together: every round ends at exactly the limit."""
    user = _user()
    batches = 12
    start = threading.Barrier(batches)
    outcomes: list[list[m.AddMemoryResult]] = [[] for _ in range(batches)]

    def add(index: int) -> None:
        start.wait()
        outcomes[index] = client.add(user, _items(f"batch{index}", 2))

    threads = [threading.Thread(target=add, args=(i,)) for i in range(batches)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    results = [r for outcome in outcomes for r in outcome]
    created = [r.memory_id for r in results if r.status == "created"]
    assert len(created) == LIMIT
    assert sum(1 for r in results if r.error_code == "RESOURCE_EXHAUSTED") == 2 * batches - LIMIT
    assert client.ids(user) == set(created)
