"""Memory records end to end (docs/how-to/memory-records.md worked examples): real servers, real
database, real embedder.

The session's servers run in development mode (scope local/development; a request's user_id selects the
user), so each test works as users of its own (uuid) and never sees another test's memories.
"""

from __future__ import annotations

import time
import uuid
from datetime import UTC
from datetime import datetime
from datetime import timedelta
from typing import Any

import grpc
import pytest
from google.protobuf import duration_pb2
from google.protobuf import field_mask_pb2
from google.protobuf import json_format

from common.kernel.memory_names import memory_namespace
from ingest_service.memories.maintenance import MemoryMaintenance
from memory_service_grpc_client import iter_pages
from memory_service_grpc_client.memory.v1 import memory_query_service_pb2 as q
from memory_service_grpc_client.memory.v1 import memory_query_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import memory_record_pb2
from memory_service_grpc_client.memory.v1 import memory_service_pb2 as m
from memory_service_grpc_client.memory.v1 import memory_service_pb2_grpc
from tests.e2e.refusals import code_and_fields

pytestmark = pytest.mark.e2e

ALICE = {
    "idempotencyKey": "9421",
    "text": "User Alice prefers concise replies and uses dark mode.",
    "source": "api",
    "tags": ["preference", "ui"],
    "importance": 0.7,
    "memoryType": "MEMORY_TYPE_FACT",
}
INCIDENT = {
    "idempotencyKey": "18420",
    "text": "Customer 8821 reported login failures after MFA reset; support re-enrolled the MFA device.",
    "source": "support_ticket",
    "eventType": "incident_resolved",
    "tags": ["mfa", "incident"],
    "importance": 0.6,
    "memoryType": "MEMORY_TYPE_EVENT",
}


def _user() -> str:
    return "u-" + uuid.uuid4().hex[:12]


class Memories:
    def __init__(self, ingest: grpc.Channel, query: grpc.Channel) -> None:
        self.write = memory_service_pb2_grpc.MemoryServiceStub(ingest)
        self.read = memory_query_service_pb2_grpc.MemoryQueryServiceStub(query)

    def add(self, user: str, *items: dict[str, Any], project: str = "") -> m.AddMemoriesResponse:
        request = json_format.ParseDict({"memories": list(items), "userId": user}, m.AddMemoriesRequest())
        return self.write.AddMemories(request, timeout=120, metadata=_project(project))

    def recall(self, user: str, query: str, project: str = "", **fields: Any) -> q.RecallMemoriesResponse:
        request = q.RecallMemoriesRequest(query=query, user_id=user, **fields)
        return self.read.RecallMemories(request, timeout=60, metadata=_project(project))

    def get(self, user: str, memory_id: str, project: str = "") -> memory_record_pb2.Memory:
        return self.read.GetMemory(
            q.GetMemoryRequest(memory_id=memory_id, user_id=user), timeout=60, metadata=_project(project)
        ).memory

    def list(self, user: str, project: str = "", **fields: Any) -> list[memory_record_pb2.Memory]:
        return list(
            iter_pages(
                lambda request: self.read.ListMemories(request, timeout=60, metadata=_project(project)),
                q.ListMemoriesRequest(user_id=user, page_size=50, **fields),
                lambda page: page.memories,
            )
        )


def _project_id() -> str:
    """A project of its own: memories in a namespace no other test touches (maintenance is confined to it)."""
    return "prj-" + uuid.uuid4().hex[:10]


def _namespace(record: memory_record_pb2.Memory) -> str:
    return memory_namespace(record.scope.organization_id, record.scope.environment, record.scope.project_id)


def _project(project: str) -> tuple[tuple[str, str], ...]:
    return (("x-project-id", project),) if project else ()


@pytest.fixture
def memories(ingest_channel: grpc.Channel, query_channel: grpc.Channel) -> Memories:
    return Memories(ingest_channel, query_channel)


def test_the_seed_examples_are_added_recalled_and_read_back(memories: Memories) -> None:
    user = _user()
    added = memories.add(user, ALICE, INCIDENT)
    assert [r.status for r in added.results] == ["created", "created"]
    alice_id, incident_id = (r.memory_id for r in added.results)
    recalled = memories.recall(user, "How does Alice like her answers?").memories
    assert recalled[0].memory.memory_id == alice_id
    assert recalled[0].similarity > recalled[1].similarity
    incident = memories.recall(user, "MFA login problem of customer 8821", preset="important").memories
    assert incident[0].memory.memory_id == incident_id
    record = memories.get(user, incident_id)
    assert record.event_type == "incident_resolved" and list(record.tags) == ["mfa", "incident"]
    assert (
        record.memory_type == memory_record_pb2.MEMORY_TYPE_EVENT
        and record.tier == memory_record_pb2.MEMORY_TIER_HOT
    )
    assert record.scope.user_id == user and record.scope.environment == "development"
    assert record.version == 1 and record.enriched_version == 0  # due for the enrichment
    assert record.recall_count == 2 and record.HasField("last_recall_time")  # both recalls touched it
    assert {r.memory_id for r in memories.list(user)} == {alice_id, incident_id}


def test_importance_does_not_lift_an_unrelated_preference_over_the_matching_incident(
    memories: Memories,
) -> None:
    # What a user saw with the "important" preset: a preference at similarity 0.05 above the incident
    # the query is about (0.2); importance and recency scale relevance, they never make a memory related.
    user = _user()
    preference = {"text": "The user prefers dark mode and short answers.", "importance": 1.0}
    incident = {"text": "Payments API incident: duplicate invoices after a retry loop.", "importance": 0.3}
    added = memories.add(user, preference, incident)
    preference_id, incident_id = (r.memory_id for r in added.results)
    recalled = memories.recall(user, "why were customers charged twice", preset="important").memories
    by_id = {r.memory.memory_id: r for r in recalled}
    assert 0 < by_id[preference_id].similarity < 0.1 < 0.15 < by_id[incident_id].similarity
    assert [r.memory.memory_id for r in recalled] == [incident_id, preference_id]
    for r in recalled:  # important: similarity x (0.5 + 0.1 recency + 0.4 importance)
        expected = r.similarity * (0.5 + 0.1 * r.recency + 0.4 * r.importance)
        assert r.score == pytest.approx(expected, rel=1e-6)


def test_retries_with_the_same_key_return_the_same_id_and_write_nothing(memories: Memories) -> None:
    user = _user()
    first = memories.add(user, ALICE).results[0]
    again = memories.add(user, {**ALICE, "text": "changed text, same key"}).results[0]
    assert again.memory_id == first.memory_id and not again.created and again.status == "duplicate"
    assert memories.get(user, first.memory_id).text == ALICE["text"]
    twice = memories.add(user, INCIDENT, INCIDENT).results  # the same item twice in one batch
    assert twice[0].memory_id == twice[1].memory_id and [r.status for r in twice] == ["created", "duplicate"]
    assert len(memories.list(user)) == 2


def test_bad_items_fail_with_their_field_path_and_nothing_of_them_is_stored(memories: Memories) -> None:
    user = _user()
    results = memories.add(
        user,
        ALICE,
        {"text": "", "importance": 1.5},
        {"text": "x", "ttl": "5s", "expireTime": "2999-01-01T00:00:00Z"},
    ).results
    assert results[0].status == "created"
    assert results[1].status == "failed" and not results[1].memory_id
    assert any(v.startswith("memories[1].text:") for v in results[1].field_violations)
    assert any(v.startswith("memories[1].importance:") for v in results[1].field_violations)
    assert results[2].field_violations[0].startswith("memories[2].ttl:")
    nul = memories.add(user, {"text": "a\u0000b", "metadata": {"k": "v\u0000"}}).results[0]
    assert nul.status == "failed" and {v.split(":")[0] for v in nul.field_violations} == {
        "memories[0].text",
        "memories[0].metadata.k",
    }
    assert len(memories.list(user)) == 1
    code, fields = code_and_fields(lambda: memories.add(user))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and fields == ["memories"]
    memory_id = results[0].memory_id
    update = m.UpdateMemoryRequest(
        memory_id=memory_id,
        user_id=user,
        memory=m.NewMemory(importance=3.0, text="new"),
        update_mask=field_mask_pb2.FieldMask(paths=["importance", "text"]),
    )
    code, fields = code_and_fields(lambda: memories.write.UpdateMemory(update, timeout=60))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and fields == ["memory.importance"]
    unchanged = memories.get(user, memory_id)
    assert (
        unchanged.text == ALICE["text"]
        and unchanged.importance == pytest.approx(0.7)
        and unchanged.version == 1
    )
    code, fields = code_and_fields(lambda: memories.recall(user, "x", preset="nonsense"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and fields == ["preset"]
    code, fields = code_and_fields(lambda: memories.recall(user, "x", project="bad:project"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and fields == ["x-project-id"]
    # unknown or unspecified enum values in a filter are refused, not ignored (new-user trial): an
    # undefined number by the transport's check of every request, the unspecified value by the filter's
    unknown = memory_record_pb2.MemoryFilter(tiers=[memory_record_pb2.MEMORY_TIER_HOT, 99, 0])
    code, fields = code_and_fields(lambda: memories.recall(user, "x", filter=unknown))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and fields == ["filter.tiers[1]"]
    unspecified = memory_record_pb2.MemoryFilter(tiers=[memory_record_pb2.MEMORY_TIER_HOT, 0])
    code, fields = code_and_fields(lambda: memories.recall(user, "x", filter=unspecified))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and fields == ["filter.tiers[1]"]
    code, fields = code_and_fields(
        lambda: memories.list(user, filter=memory_record_pb2.MemoryFilter(memory_types=[42]))
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT and fields == ["filter.memory_types[0]"]
    code, _ = code_and_fields(lambda: memories.get(user, "mem-000000000000000000000000"))
    assert code == grpc.StatusCode.NOT_FOUND


def test_update_re_embeds_and_makes_the_enrichment_due_again(memories: Memories) -> None:
    user = _user()
    memory_id = memories.add(user, ALICE).results[0].memory_id
    update = m.UpdateMemoryRequest(
        memory_id=memory_id,
        user_id=user,
        memory=m.NewMemory(text="Bob wants long detailed answers with code samples.", importance=0.9),
        update_mask=field_mask_pb2.FieldMask(paths=["text", "importance"]),
    )
    changed = memories.write.UpdateMemory(update, timeout=60).memory
    assert changed.version == 2 and changed.importance == pytest.approx(0.9)
    assert memories.recall(user, "code samples for Bob").memories[0].memory.text.startswith("Bob wants")
    code, fields = code_and_fields(
        lambda: memories.write.UpdateMemory(
            m.UpdateMemoryRequest(
                memory_id=memory_id, user_id=user, update_mask=field_mask_pb2.FieldMask(paths=["id"])
            ),
            timeout=60,
        )
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT and fields == ["update_mask"]


def test_projects_are_separate_and_delete_is_audited(memories: Memories) -> None:
    user = _user()
    in_a = memories.add(user, ALICE, project="prj-a").results[0].memory_id
    in_b = memories.add(user, ALICE, project="prj-b").results[0].memory_id
    assert in_a != in_b  # the namespace is part of the id
    assert [r.memory_id for r in memories.list(user, project="prj-a")] == [in_a]
    code, _ = code_and_fields(lambda: memories.get(user, in_b, project="prj-a"))
    assert code == grpc.StatusCode.NOT_FOUND
    deleted = memories.write.DeleteMemory(
        m.DeleteMemoryRequest(memory_id=in_a, user_id=user, reason="user asked"),
        timeout=60,
        metadata=_project("prj-a"),
    )
    assert deleted.audit_event_id.startswith("aud-")
    code, _ = code_and_fields(lambda: memories.get(user, in_a, project="prj-a"))
    assert code == grpc.StatusCode.NOT_FOUND
    assert memories.recall(user, "Alice", project="prj-a").memories == []


def test_expired_memories_are_hidden_readable_by_id_then_swept(
    memories: Memories, maintenance: MemoryMaintenance
) -> None:
    user, project = _user(), _project_id()
    results = memories.add(user, {**ALICE, "ttl": "3600s"}, INCIDENT, project=project).results
    expiring, kept = results[0].memory_id, results[1].memory_id
    assert memories.get(user, expiring, project).expire_time.ToDatetime(tzinfo=UTC) > datetime.now(UTC)
    only = [_namespace(memories.get(user, kept, project))]  # this test's namespace alone
    # An hour and a bit later (the sweep judges at the instant it is given): hidden, but not swept yet.
    later = datetime.now(UTC) + timedelta(hours=2)
    maintenance.run(now=later, namespaces=only)
    assert memories.get(user, expiring, project).memory_id == expiring
    grace = timedelta(hours=maintenance.settings.memory_expiry_grace_hours)
    report = maintenance.run(now=later + grace, namespaces=only)
    assert report.expired_deleted == 1 and len(report.audit_event_ids) == 1
    code, _ = code_and_fields(lambda: memories.get(user, expiring, project))
    assert code == grpc.StatusCode.NOT_FOUND
    assert [r.memory_id for r in memories.list(user, project)] == [kept]


def test_maintenance_confined_to_namespaces_leaves_the_others_alone(
    memories: Memories, maintenance: MemoryMaintenance
) -> None:
    user, inside, outside = _user(), _project_id(), _project_id()
    expiring_in, aging_in = (
        r.memory_id for r in memories.add(user, {**ALICE, "ttl": "3600s"}, INCIDENT, project=inside).results
    )
    expiring_out, aging_out = (
        r.memory_id for r in memories.add(user, {**ALICE, "ttl": "3600s"}, INCIDENT, project=outside).results
    )
    grace = timedelta(hours=maintenance.settings.memory_expiry_grace_hours + 2)
    later = datetime.now(UTC) + timedelta(days=maintenance.settings.memory_warm_after_days + 1) + grace
    report = maintenance.run(now=later, namespaces=[_namespace(memories.get(user, aging_in, inside))])
    assert report.expired_deleted == 1 and report.moved_to_warm == 2  # both aged, one then swept
    assert code_and_fields(lambda: memories.get(user, expiring_in, inside))[0] == grpc.StatusCode.NOT_FOUND
    assert memories.get(user, aging_in, inside).tier == memory_record_pb2.MEMORY_TIER_WARM
    for memory_id in (expiring_out, aging_out):  # the other namespace: neither swept nor aged
        assert memories.get(user, memory_id, outside).tier == memory_record_pb2.MEMORY_TIER_HOT


def test_an_expired_memory_is_hidden_from_recall_and_lists_but_get_shows_it(memories: Memories) -> None:
    user = _user()
    results = memories.add(user, {**ALICE, "ttl": "1s"}, INCIDENT).results
    expiring, kept = results[0].memory_id, results[1].memory_id
    deadline = time.monotonic() + 60  # wait for the instant to pass (no assertion on durations)
    while not memories.get(user, expiring).expired and time.monotonic() < deadline:
        time.sleep(0.2)
    record = memories.get(user, expiring)
    assert record.expired and record.HasField("expire_time")
    assert [r.memory_id for r in memories.list(user)] == [kept]
    assert {r.memory_id for r in memories.list(user, include_expired=True)} == {expiring, kept}
    assert expiring not in {
        r.memory.memory_id for r in memories.recall(user, "Alice replies dark mode").memories
    }


def test_ttl_and_expire_time_set_the_expiry(memories: Memories) -> None:
    user = _user()
    ttl = m.NewMemory(text="remember the parking spot: level 3", ttl=duration_pb2.Duration(seconds=600))
    before = datetime.now(UTC)
    result = memories.write.AddMemories(
        m.AddMemoriesRequest(memories=[ttl], user_id=user), timeout=60
    ).results[0]
    expiry = memories.get(user, result.memory_id).expire_time.ToDatetime(tzinfo=UTC)
    assert before + timedelta(seconds=590) < expiry < datetime.now(UTC) + timedelta(seconds=610)
    assert not memories.get(user, result.memory_id).expired


def test_lossy_summaries_replace_originals_lossless_ones_expand(memories: Memories) -> None:
    user = _user()
    texts = [
        "The customer could not log in after the MFA reset.",
        "Support re-enrolled the MFA device of the customer.",
        "After re-enrolment the login worked again.",
    ]
    ids = [r.memory_id for r in memories.add(user, *({"text": t, "tags": ["mfa"]} for t in texts)).results]
    summary = memories.write.SummarizeMemories(
        m.SummarizeMemoriesRequest(memory_ids=ids, lossless=True, max_sentences=2, user_id=user), timeout=60
    )
    assert summary.created and summary.summary.is_summary and summary.summary.lossless
    assert list(summary.summary.summarized_ids) == ids and summary.summary.parent_id.startswith("group-")
    assert summary.summary.text and all(s in " ".join(texts) for s in summary.summary.text.split(". ")[:1])
    again = memories.write.SummarizeMemories(
        m.SummarizeMemoriesRequest(memory_ids=ids, lossless=True, max_sentences=2, user_id=user), timeout=60
    )
    assert not again.created and again.summary.memory_id == summary.summary.memory_id
    recalled = memories.recall(user, "MFA login", top_k=10, expand_summaries=True).memories
    by_id = {r.memory.memory_id: r for r in recalled}
    assert set(ids) <= set(by_id)  # lossless: originals stay recallable
    assert [o.memory_id for o in by_id[summary.summary.memory_id].expanded] == ids
    # A lossy summary of another group hides its originals from recall and lists, not from GetMemory.
    others = [r.memory_id for r in memories.add(user, *({"text": t + " (2)"} for t in texts)).results]
    lossy = memories.write.SummarizeMemories(
        m.SummarizeMemoriesRequest(memory_ids=others, user_id=user), timeout=60
    ).summary
    assert not lossy.lossless
    listed = {r.memory_id for r in memories.list(user)}
    assert lossy.memory_id in listed and not set(others) & listed
    assert not set(others) & {r.memory.memory_id for r in memories.recall(user, "MFA", top_k=50).memories}
    assert memories.get(user, others[0]).summary_id == lossy.memory_id
    memories.write.DeleteMemory(m.DeleteMemoryRequest(memory_id=lossy.memory_id, user_id=user), timeout=60)
    assert set(others) <= {r.memory_id for r in memories.list(user)}  # its originals are back
    assert memories.get(user, others[0]).summary_id == ""
    code, fields = code_and_fields(
        lambda: memories.write.SummarizeMemories(
            m.SummarizeMemoriesRequest(memory_ids=[ids[0], "mem-unknown"], user_id=user), timeout=60
        )
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT and fields == ["memory_ids[1]"]


def test_summarize_by_filter(memories: Memories) -> None:
    user = _user()
    memories.add(
        user,
        {"text": "Prefers tea over coffee.", "tags": ["drink"]},
        {"text": "Drinks green tea daily.", "tags": ["drink"]},
        ALICE,
    )
    summary = memories.write.SummarizeMemories(
        m.SummarizeMemoriesRequest(filter=memory_record_pb2.MemoryFilter(tags=["drink"]), user_id=user),
        timeout=60,
    ).summary
    assert len(summary.summarized_ids) == 2 and list(summary.tags) == ["drink"]


def test_tiers_age_and_a_recall_brings_a_memory_back(
    memories: Memories, maintenance: MemoryMaintenance
) -> None:
    user, project = _user(), _project_id()
    memory_id = memories.add(user, ALICE, project=project).results[0].memory_id
    only = [_namespace(memories.get(user, memory_id, project))]
    days = maintenance.settings.memory_warm_after_days
    maintenance.apply_tier_policy(datetime.now(UTC) + timedelta(days=days + 1), only)
    assert memories.get(user, memory_id, project).tier == memory_record_pb2.MEMORY_TIER_WARM
    assert memories.recall(user, "Alice", project).memories == []  # hot only by default
    warm = memory_record_pb2.MemoryFilter(tiers=[memory_record_pb2.MEMORY_TIER_WARM])
    recalled = memories.recall(user, "Alice", project, filter=warm).memories
    assert [r.memory.memory_id for r in recalled] == [memory_id]
    assert memories.get(user, memory_id, project).tier == memory_record_pb2.MEMORY_TIER_HOT  # touched
    cold_days = maintenance.settings.memory_cold_after_days
    maintenance.apply_tier_policy(datetime.now(UTC) + timedelta(days=cold_days + 1), only)
    maintenance.apply_tier_policy(datetime.now(UTC) + timedelta(days=cold_days + 1), only)
    assert memories.get(user, memory_id, project).tier == memory_record_pb2.MEMORY_TIER_COLD


def test_an_expiry_pass_after_a_clock_jump_is_refused_unless_allowed(
    memories: Memories, maintenance: MemoryMaintenance
) -> None:
    """12 memories with a one-hour TTL, 2 without: a pass judged a day later would expire 12 of 14, more
    than the share (and the floor of 10): left alone and named; the explicit word expires them. A pass
    where few memories are due (the ordinary case) expires them without it."""
    user, project = _user(), _project_id()
    items = [{"text": f"Deploy note {i}: release train {i} shipped.", "ttl": "3600s"} for i in range(12)]
    items += [{"text": f"Standing preference {i}: keep replies short."} for i in range(2)]
    ids = [r.memory_id for r in memories.add(user, *items, project=project).results]
    assert len(ids) == 14 and all(ids)
    only = [_namespace(memories.get(user, ids[0], project))]
    grace = timedelta(hours=maintenance.settings.memory_expiry_grace_hours)
    jumped = datetime.now(UTC) + timedelta(hours=2) + grace
    report = maintenance.run(now=jumped, namespaces=only)
    assert report.expired_deleted == 0 and [(r.namespace, r.due, r.total) for r in report.refused] == [
        (only[0], 12, 14)
    ]
    assert len(memories.list(user, project)) == 14  # listed as judged now: nothing was removed
    allowed = maintenance.run(now=jumped, namespaces=only, allow_mass_sweep=True)
    assert allowed.expired_deleted == 12 and not allowed.refused
    assert len(memories.list(user, project)) == 2
    # Ordinary expiry: 1 due of 13 is swept without any word.
    more = [{"text": f"Build log {i}: green."} for i in range(10)] + [
        {"text": "Short-lived note.", "ttl": "3600s"}
    ]
    memories.add(user, *more, project=project)
    ordinary = maintenance.run(now=jumped, namespaces=only)
    assert ordinary.expired_deleted == 1 and not ordinary.refused
