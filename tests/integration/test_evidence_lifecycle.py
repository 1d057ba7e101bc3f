"""Redact and purge on the real database and embedder (docs/explanation/knowledge-model.md).

Every test works in a namespace of its own; observation A asserts two facts and a text fragment,
observation B repeats one of A's facts, so that fact is backed by two observations.
"""

from __future__ import annotations

import threading
from datetime import UTC
from datetime import datetime
from typing import Any

import pytest

from common.domain.observation_view import observation_view
from common.kernel.config import Settings
from common.kernel.errors import InvalidArgument
from common.kernel.errors import NotFound
from common.kernel.identifiers import fact_id
from common.kernel.identifiers import graph_label
from common.storage.chunks.rows import ChunkFilter
from common.storage.chunks.store import ChunkStore
from common.storage.database import Database
from common.storage.fact_rows import FactQuery
from common.storage.fact_rows import FactRow
from common.storage.fact_store import FactStore
from common.storage.graph.store import GraphStore
from common.storage.observation_store import ObservationStore
from common.text_models.embeddings.provider import EmbeddingProvider
from ingest_service.facts.assertions import FactAsserter
from ingest_service.observations.recorder import ObservationRecorder
from ingest_service.observations.removal import ObservationRemover
from tests.database_rows import fetch_rows
from tests.work_observations import work_assigned

pytestmark = pytest.mark.integration

START = "2026-01-01T00:00:00Z"
SECRET = "ZEBRA-4711"


@pytest.fixture(scope="module")
def recorder(database: Database, provider: EmbeddingProvider) -> ObservationRecorder:
    return ObservationRecorder(database, encoder=provider)


@pytest.fixture(scope="module")
def remover(database: Database) -> ObservationRemover:
    return ObservationRemover(database)


def at(text: str) -> datetime:
    return datetime.fromisoformat(text)


def fact(subject: str, predicate: str, obj: str, valid_from: str = START, **extra: Any) -> dict[str, Any]:
    return {
        "fact": {"subject": subject, "predicate": predicate, "object": obj, "valid_from": valid_from, **extra}
    }


def observation(
    namespace: str, external_id: str, assertions: list[dict[str, Any]], content: str = ""
) -> dict[str, Any]:
    alice = {"type": "person", "id": "alice"}
    data = {"ticket": f"T-{external_id}"}
    provenance = {"uri": f"tracker://people/{external_id}"}
    return work_assigned(
        namespace, external_id, START, assertions, content=content, subject=alice, data=data,
        provenance=provenance,
    )


def record_a_and_b(recorder: ObservationRecorder, namespace: str) -> tuple[str, str]:
    """A: alice WORKS_ON alpha, alice KNOWS bob, a text fragment; B: alice WORKS_ON alpha again."""
    a, b = recorder.record_batch(
        [
            observation(
                namespace,
                "a",
                [
                    {"entity": {"key": {"type": "person", "id": "alice"}, "title": "Alice"}},
                    fact("person:alice", "WORKS_ON", "project:alpha"),
                    fact("person:alice", "KNOWS", "person:bob"),
                    {"text": {"text": f"Alice moved to project Alpha, codename {SECRET}.", "title": "Move"}},
                ],
                content=f"Alice joined alpha under codename {SECRET}",
            ),
            observation(namespace, "b", [fact("person:alice", "WORKS_ON", "project:alpha")]),
        ]
    )
    assert (a.status, b.status) == ("processed", "processed")
    assert a.text_fragments == 1
    return a.observation_id, b.observation_id


def ids(namespace: str) -> tuple[str, str]:
    works = fact_id(namespace, "person:alice", "WORKS_ON", "project:alpha", at(START))
    knows = fact_id(namespace, "person:alice", "KNOWS", "person:bob", at(START))
    return works, knows


def fact_row(database: Database, namespace: str, fid: str) -> FactRow:
    with database.connection() as conn:
        row = FactStore(GraphStore(database)).get(conn, namespace, fid)
    assert row is not None
    return row


def edge(database: Database, namespace: str, predicate: str, fid: str) -> dict[str, Any]:
    graph = GraphStore(database)
    with database.connection() as conn:
        rows = graph.cypher(
            conn,
            f"MATCH ()-[e:{graph_label('predicate', predicate)} {{namespace: $namespace, fact_id: $fact_id}}]->()"
            " RETURN properties(e)",
            {"namespace": namespace, "fact_id": fid},
        )
    assert len(rows) == 1, rows
    return dict(rows[0])


def node_keys(database: Database, namespace: str) -> set[str]:
    with database.connection() as conn:
        rows = conn.execute(
            "SELECT natural_key FROM graph_nodes WHERE namespace = %s", (namespace,)
        ).fetchall()
    return {str(row[0]) for row in rows}


def vertex_count(database: Database, namespace: str, node_type: str, natural_key: str) -> int:
    graph = GraphStore(database)
    with database.connection() as conn:
        rows = graph.cypher(
            conn,
            f"MATCH (n:{graph_label('node_type', node_type)} {{namespace: $namespace, natural_key: $key}})"
            " RETURN count(n)",
            {"namespace": namespace, "key": natural_key},
        )
    return int(rows[0])


def chunk_counts(database: Database, namespace: str) -> dict[str, int]:
    query = "SELECT node_key, count(*) FROM chunks WHERE namespace = %s GROUP BY 1"
    rows = fetch_rows(database, query, namespace)
    return {str(key): int(count) for key, count in rows}


def secret_hits(database: Database, settings: Settings, namespace: str) -> int:
    """Chunks of the namespace where full text or trigram search finds the codename."""
    store = ChunkStore(settings)
    where = ChunkFilter(namespace=namespace)
    with database.connection() as conn:
        keys = {c.key for c in store.trigram_candidates(conn, where, SECRET, 10)}
        keys |= {c.key for c in store.text_candidates(conn, where, SECRET, 10)}
    return len(keys)


def current_facts(database: Database, namespace: str, *, include_lost: bool = False) -> list[str]:
    with database.connection() as conn:
        rows = FactStore(GraphStore(database)).list(
            conn,
            FactQuery(namespace=namespace, subject="person:alice", include_lost=include_lost),
            datetime.now(UTC),
        )
    return [row.predicate for row in rows]


def test_redact_strikes_evidence_and_removes_searchable_content(
    database: Database,
    settings: Settings,
    recorder: ObservationRecorder,
    remover: ObservationRemover,
    namespace: str,
) -> None:
    a, b = record_a_and_b(recorder, namespace)
    works, knows = ids(namespace)
    assert secret_hits(database, settings, namespace) == 2  # episode chunk + text fragment chunk
    assert sorted(fact_row(database, namespace, works).observation_ids) == sorted([a, b])

    outcome = remover.redact(namespace, a, "GDPR request 42")

    assert (outcome.facts_affected, outcome.facts_evidence_lost) == (2, 1)
    view = outcome.observation
    assert view.status == "redacted" and view.status_details == ["GDPR request 42"]
    assert view.observation_id == a
    assert view.fields["content"] == "" and view.fields["data"] == {} and view.fields["assertions"] == []
    assert view.fields["source"] == {"system": "tracker", "stream": "people", "external_id": "a"}
    assert view.fields["occurred_at"] == START
    assert view.fields["provenance"] == {"uri": "tracker://people/a"}
    # the fact backed by two observations survives the loss of one
    survivor = fact_row(database, namespace, works)
    assert survivor.observation_ids == [b] and not survivor.evidence_lost
    assert edge(database, namespace, "WORKS_ON", works)["observation_ids"] == [b]
    # the fact backed by A alone lost its evidence: out of every listing, still in table and graph
    lost = fact_row(database, namespace, knows)
    assert lost.observation_ids == [] and lost.evidence_lost
    lost_edge = edge(database, namespace, "KNOWS", knows)
    assert lost_edge["observation_ids"] == [] and lost_edge["evidence_lost"] is True
    assert current_facts(database, namespace) == ["WORKS_ON"]
    assert sorted(current_facts(database, namespace, include_lost=True)) == ["KNOWS", "WORKS_ON"]
    # searchable copies of the content are gone; the episode vertex stays, the text fragment goes
    assert secret_hits(database, settings, namespace) == 0
    keys = node_keys(database, namespace)
    assert f"episode:{a}" in keys and f"text:{a}/3" not in keys
    assert vertex_count(database, namespace, "text", f"text:{a}/3") == 0
    assert f"episode:{a}" not in chunk_counts(database, namespace)
    assert {"person:alice", "person:bob", "project:alpha"} <= keys  # entities and placeholders stay


def test_redact_is_idempotent(
    database: Database, recorder: ObservationRecorder, remover: ObservationRemover, namespace: str
) -> None:
    a, _ = record_a_and_b(recorder, namespace)
    remover.redact(namespace, a, "first reason")
    with database.connection() as conn:
        before = conn.execute(
            "SELECT fact_id, observation_ids, evidence_lost FROM facts WHERE namespace = %s ORDER BY 1",
            (namespace,),
        ).fetchall()
    again = remover.redact(namespace, a, "second reason")
    assert (again.facts_affected, again.facts_evidence_lost) == (0, 0)
    assert again.observation.status_details == ["first reason"]
    with database.connection() as conn:
        after = conn.execute(
            "SELECT fact_id, observation_ids, evidence_lost FROM facts WHERE namespace = %s ORDER BY 1",
            (namespace,),
        ).fetchall()
    assert after == before
    # a redacted observation sent again is a duplicate: it does not revive its facts
    [duplicate] = recorder.record_batch(
        [observation(namespace, "a", [fact("person:alice", "KNOWS", "person:bob")])]
    )
    assert (duplicate.created, duplicate.status) == (False, "redacted")
    assert fact_row(database, namespace, ids(namespace)[1]).evidence_lost


def test_purge_removes_the_projection_and_the_row(
    database: Database,
    settings: Settings,
    recorder: ObservationRecorder,
    remover: ObservationRemover,
    namespace: str,
) -> None:
    a, b = record_a_and_b(recorder, namespace)
    works, knows = ids(namespace)

    outcome = remover.purge(namespace, a, "wrong tenant")

    assert outcome.observation_id == a
    assert (outcome.facts_affected, outcome.facts_evidence_lost) == (2, 1)
    assert outcome.nodes_deleted == sorted([f"episode:{a}", f"text:{a}/3"])
    assert outcome.chunks_deleted == 2
    with database.connection() as conn:
        assert conn.execute(
            "SELECT count(*) FROM observations WHERE observation_id = %s", (a,)
        ).fetchone() == (0,)
    keys = node_keys(database, namespace)
    assert f"episode:{a}" not in keys and f"text:{a}/3" not in keys
    assert vertex_count(database, namespace, "episode", f"episode:{a}") == 0
    assert vertex_count(database, namespace, "text", f"text:{a}/3") == 0
    assert f"episode:{b}" in keys and vertex_count(database, namespace, "episode", f"episode:{b}") == 1
    assert {"person:alice", "person:bob", "project:alpha"} <= keys
    assert secret_hits(database, settings, namespace) == 0
    assert set(chunk_counts(database, namespace)) == {f"episode:{b}"}
    assert fact_row(database, namespace, works).observation_ids == [b]
    assert fact_row(database, namespace, knows).evidence_lost
    assert edge(database, namespace, "KNOWS", knows)["evidence_lost"] is True
    assert current_facts(database, namespace) == ["WORKS_ON"]

    with pytest.raises(NotFound):
        remover.purge(namespace, a)
    with pytest.raises(NotFound):
        remover.redact(namespace, a)
    # after a purge the same observation is new again, and its evidence revives the lost fact
    [again] = recorder.record_batch(
        [observation(namespace, "a", [fact("person:alice", "KNOWS", "person:bob")])]
    )
    assert again.created and again.observation_id == a
    revived = fact_row(database, namespace, knows)
    assert revived.observation_ids == [a] and not revived.evidence_lost
    assert edge(database, namespace, "KNOWS", knows)["evidence_lost"] is False


def test_purge_after_redact_removes_what_is_left(
    database: Database, recorder: ObservationRecorder, remover: ObservationRemover, namespace: str
) -> None:
    a, _ = record_a_and_b(recorder, namespace)
    remover.redact(namespace, a, "")
    outcome = remover.purge(namespace, a)
    assert outcome.nodes_deleted == [f"episode:{a}"]
    assert (outcome.chunks_deleted, outcome.facts_affected, outcome.facts_evidence_lost) == (0, 0, 0)
    assert f"episode:{a}" not in node_keys(database, namespace)


def test_unknown_observation_and_bad_input(
    recorder: ObservationRecorder, remover: ObservationRemover, namespace: str
) -> None:
    a, _ = record_a_and_b(recorder, namespace)
    for call in (remover.redact, remover.purge):
        with pytest.raises(NotFound):
            call(namespace, "obs-000000000000000000000000")
        with pytest.raises(NotFound):
            call(namespace + "-other", a)  # ids are per namespace
        with pytest.raises(InvalidArgument) as caught:
            call("", "")
        assert [v.field for v in caught.value.violations] == ["namespace", "observation_id"]


def test_agent_assertion_is_evidence_no_redaction_takes_away(
    database: Database, recorder: ObservationRecorder, remover: ObservationRemover, namespace: str
) -> None:
    a, _ = record_a_and_b(recorder, namespace)
    _, knows = ids(namespace)
    asserter = FactAsserter(database)
    [strengthened, direct] = asserter.assert_facts(
        namespace,
        [
            {"subject": "person:alice", "predicate": "KNOWS", "object": "person:bob", "valid_from": START},
            {"subject": "person:alice", "predicate": "LIKES", "object": "topic:tea", "valid_from": START},
        ],
        source_path="agent:run/1",
    )
    assert strengthened.fact_id == knows and not strengthened.created
    assert direct.created
    outcome = remover.purge(namespace, a)
    assert (outcome.facts_affected, outcome.facts_evidence_lost) == (2, 0)
    row = fact_row(database, namespace, knows)
    assert row.observation_ids == [] and row.agent_asserted and not row.evidence_lost
    agent_fact = fact_row(database, namespace, direct.fact_id)
    assert agent_fact.observation_ids == [] and not agent_fact.evidence_lost and agent_fact.origin == "agent"
    assert agent_fact.source_path == "agent:run/1"
    assert sorted(current_facts(database, namespace)) == ["KNOWS", "LIKES", "WORKS_ON"]


def test_a_lost_successor_leaves_the_history_it_wrote(
    database: Database, recorder: ObservationRecorder, remover: ObservationRemover, namespace: str
) -> None:
    """Documented choice: the closure a lost fact caused stays (history is never rewritten)."""
    record_a_and_b(recorder, namespace)
    works, _ = ids(namespace)
    [c] = recorder.record_batch(
        [
            observation(
                namespace,
                "c",
                [fact("person:alice", "WORKS_ON", "project:beta", "2026-03-01T00:00:00Z", supersedes=works)],
            )
        ]
    )
    beta = fact_id(namespace, "person:alice", "WORKS_ON", "project:beta", at("2026-03-01T00:00:00Z"))
    remover.redact(namespace, c.observation_id, "retracted")
    assert fact_row(database, namespace, beta).evidence_lost
    alpha = fact_row(database, namespace, works)
    assert alpha.valid_to == at("2026-03-01T00:00:00Z") and alpha.superseded_by == beta
    assert observation_view(_row(database, namespace, c.observation_id)).status == "redacted"


def _row(database: Database, namespace: str, observation_id: str) -> dict[str, Any]:
    with database.connection() as conn:
        row = ObservationStore(database.settings).get(conn, namespace, observation_id)
    assert row is not None
    return row


def test_concurrent_removals_of_every_observation_behind_a_fact(
    database: Database, recorder: ObservationRecorder, remover: ObservationRemover, namespace: str
) -> None:
    """8 threads redact or purge the 8 observations behind one fact at once, while 4 more threads record
    new evidence for another fact: each removal strikes exactly its own id, the fact ends evidence_lost,
    and row and edge agree."""
    items = [observation(namespace, f"o{i}", [fact("person:alice", "KNOWS", "person:bob")]) for i in range(8)]
    ids_ = [result.observation_id for result in recorder.record_batch(items)]
    _, knows = ids(namespace)
    assert sorted(fact_row(database, namespace, knows).observation_ids) == sorted(ids_)
    errors: list[BaseException] = []

    def remove(index: int) -> None:
        try:
            (remover.redact if index % 2 else remover.purge)(namespace, ids_[index], "concurrent")
        except BaseException as error:  # noqa: BLE001 - collected and asserted below
            errors.append(error)

    def write(index: int) -> None:
        try:
            recorder.record_batch(
                [observation(namespace, f"w{index}", [fact("person:alice", "KNOWS", "person:carol")])]
            )
        except BaseException as error:  # noqa: BLE001 - collected and asserted below
            errors.append(error)

    threads = [threading.Thread(target=remove, args=(i,)) for i in range(8)]
    threads += [threading.Thread(target=write, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    row = fact_row(database, namespace, knows)
    assert row.observation_ids == [] and row.evidence_lost
    props = edge(database, namespace, "KNOWS", knows)
    assert props["observation_ids"] == [] and props["evidence_lost"] is True
    carol = fact_row(
        database, namespace, fact_id(namespace, "person:alice", "KNOWS", "person:carol", at(START))
    )
    assert len(carol.observation_ids) == 4 and not carol.evidence_lost
    assert current_facts(database, namespace) == ["KNOWS"]
