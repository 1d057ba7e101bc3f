"""SnapshotService.ReconcileStream over real gRPC (a snapshot reconciles streamed, in
bounded memory): the streamed and the unary RPC give the same result, a broken stream writes and closes
nothing, a re-run changes nothing, a drop closes exactly the dropped facts, and validation errors name
the item's position in the stream."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from google.protobuf import timestamp_pb2

from memory_service_grpc_client import rpc_failure
from memory_service_grpc_client.memory.v1 import knowledge_pb2
from memory_service_grpc_client.memory.v1 import snapshot_service_pb2
from memory_service_grpc_client.memory.v1 import snapshot_service_pb2_grpc
from tests.e2e.fact_pages import every_fact

pytestmark = pytest.mark.e2e

SOURCE, SCOPE = "archive", "suite:trixie"
PACKAGES = 60


def _ts(text: str) -> timestamp_pb2.Timestamp:
    message = timestamp_pb2.Timestamp()
    message.FromJsonString(text)
    return message


def snapshot(packages: range, *, changed: frozenset[int] = frozenset()) -> tuple[list[Any], list[Any]]:
    """Entities ``package:pN`` with attributes and one HAS_VERSION fact each (``changed`` ones differ)."""
    entities, facts = [], []
    for index in packages:
        section = "changed" if index in changed else "libs"
        entities.append({"key": f"package:p{index}", "attributes": {"section": section}})
        facts.append(
            {
                "subject": f"package:p{index}",
                "predicate": "HAS_VERSION",
                "object": f"version:p{index}@1.{index % 3}",
                "valid_from": "2025-01-01T00:00:00Z",
                "attributes": {"section": section},
            }
        )
    return entities, facts


def _header(namespace: str, snapshot_id: str, at: str) -> snapshot_service_pb2.ReconcileStreamRequest:
    return snapshot_service_pb2.ReconcileStreamRequest(
        header=snapshot_service_pb2.ReconcileStreamHeader(
            namespace=namespace, source=SOURCE, scope=SCOPE, snapshot_id=snapshot_id, snapshot_time=_ts(at)
        )
    )


def _part(entities: list[Any], facts: list[Any]) -> snapshot_service_pb2.ReconcileStreamRequest:
    return snapshot_service_pb2.ReconcileStreamRequest(
        items=snapshot_service_pb2.ReconcileStreamItems(
            entities=[json_format.ParseDict(e, knowledge_pb2.EntityAssertion()) for e in entities],
            facts=[json_format.ParseDict(f, knowledge_pb2.FactAssertion()) for f in facts],
        )
    )


def stream_messages(
    namespace: str, snapshot_id: str, at: str, entities: list[Any], facts: list[Any], *, size: int = 7
) -> Iterator[snapshot_service_pb2.ReconcileStreamRequest]:
    """The header, then parts of ``size`` facts and ``size`` entities with the facts FIRST (fact ends are
    streamed before their entities: the placeholders they make are completed by the entities)."""
    yield _header(namespace, snapshot_id, at)
    for start in range(0, max(len(entities), len(facts)), size):
        yield _part([], facts[start : start + size])
        yield _part(entities[start : start + size], [])
    yield _end(len(entities), len(facts))


def _end(entities: int, facts: int) -> snapshot_service_pb2.ReconcileStreamRequest:
    return snapshot_service_pb2.ReconcileStreamRequest(
        end=snapshot_service_pb2.ReconcileStreamEnd(entity_count=entities, fact_count=facts)
    )


def reconcile_stream(channel: grpc.Channel, messages: Iterator[Any]) -> Any:
    return snapshot_service_pb2_grpc.SnapshotServiceStub(channel).ReconcileStream(messages, timeout=300)


def reconcile_unary(
    channel: grpc.Channel, namespace: str, snapshot_id: str, at: str, entities: list[Any], facts: list[Any]
) -> Any:
    request = json_format.ParseDict(
        {
            "namespace": namespace,
            "source": SOURCE,
            "scope": SCOPE,
            "snapshot_id": snapshot_id,
            "snapshot_time": at,
            "entities": entities,
            "facts": facts,
        },
        snapshot_service_pb2.ReconcileRequest(),
    )
    return snapshot_service_pb2_grpc.SnapshotServiceStub(channel).Reconcile(request, timeout=300)


def all_facts(channel: grpc.Channel, namespace: str) -> dict[str, dict[str, Any]]:
    """Every fact of ``namespace`` with its history (fact_id -> proto3 JSON without observation times)."""
    facts: dict[str, dict[str, Any]] = {}
    for fact in every_fact(channel, namespace, "HAS_VERSION"):
        shown = json_format.MessageToDict(fact, preserving_proto_field_name=True)
        shown.pop("observed_at", None)
        facts[fact.fact_id] = shown
    return facts


def _without_namespace(facts: dict[str, dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Facts compared across namespaces: fact_ids contain the namespace, so compare their content."""
    return sorted(
        (
            f["subject"],
            f["predicate"],
            f["object"],
            f["valid_from"],
            f.get("valid_to"),
            str(f.get("attributes")),
        )
        for f in facts.values()
    )


def counts(response: Any) -> dict[str, int]:
    return json_format.MessageToDict(response.counts, preserving_proto_field_name=True)


def test_streamed_and_unary_give_the_same_result(
    ingest_channel: grpc.Channel, query_channel: grpc.Channel
) -> None:
    unary_ns, stream_ns = "snap-unary-" + uuid.uuid4().hex[:8], "snap-stream-" + uuid.uuid4().hex[:8]
    entities, facts = snapshot(range(PACKAGES))
    first_unary = reconcile_unary(ingest_channel, unary_ns, "s1", "2026-01-01T00:00:00Z", entities, facts)
    first_stream = reconcile_stream(
        ingest_channel, stream_messages(stream_ns, "s1", "2026-01-01T00:00:00Z", entities, facts)
    )
    assert counts(first_stream) == counts(first_unary)
    assert counts(first_unary) == {"entities_created": PACKAGES, "facts_created": PACKAGES}
    # Second snapshot: 3 packages dropped, 2 changed.
    entities, facts = snapshot(range(3, PACKAGES), changed=frozenset({10, 11}))
    second_unary = reconcile_unary(ingest_channel, unary_ns, "s2", "2026-02-01T00:00:00Z", entities, facts)
    second_stream = reconcile_stream(
        ingest_channel, stream_messages(stream_ns, "s2", "2026-02-01T00:00:00Z", entities, facts, size=5)
    )
    assert counts(second_stream) == counts(second_unary)
    assert counts(second_unary) == {
        "entities_updated": 2,
        "entities_unchanged": PACKAGES - 5,
        "facts_updated": 2,
        "facts_unchanged": PACKAGES - 5,
        "facts_closed": 3,
    }
    assert second_stream.previous_snapshot_id == second_unary.previous_snapshot_id == "s1"
    assert _without_namespace(all_facts(query_channel, stream_ns)) == _without_namespace(
        all_facts(query_channel, unary_ns)
    )


def _first_snapshot(
    ingest_channel: grpc.Channel, query_channel: grpc.Channel, prefix: str
) -> tuple[str, list[Any], list[Any], dict[str, dict[str, Any]]]:
    """Snapshot s1 of every package streamed into a new namespace: the namespace, the snapshot's entities
    and facts, and the facts it left."""
    namespace = prefix + uuid.uuid4().hex[:8]
    entities, facts = snapshot(range(PACKAGES))
    reconcile_stream(
        ingest_channel, stream_messages(namespace, "s1", "2026-01-01T00:00:00Z", entities, facts)
    )
    return namespace, entities, facts, all_facts(query_channel, namespace)


def test_rerun_changes_nothing_and_a_drop_closes_exactly_the_dropped_facts(
    ingest_channel: grpc.Channel, query_channel: grpc.Channel
) -> None:
    namespace, entities, facts, before = _first_snapshot(ingest_channel, query_channel, "snap-rerun-")
    again = reconcile_stream(
        ingest_channel, stream_messages(namespace, "s1", "2026-01-01T00:00:00Z", entities, facts)
    )
    assert again.unchanged and counts(again) == {"entities_created": PACKAGES, "facts_created": PACKAGES}
    same = reconcile_stream(
        ingest_channel, stream_messages(namespace, "s2", "2026-02-01T00:00:00Z", entities, facts, size=50)
    )
    assert not same.unchanged and same.previous_snapshot_id == "s1"
    assert counts(same) == {"entities_unchanged": PACKAGES, "facts_unchanged": PACKAGES}
    assert all_facts(query_channel, namespace) == before
    dropped = {5, 17, 42}
    kept = [i for i in range(PACKAGES) if i not in dropped]
    entities, facts = snapshot(kept)
    third = reconcile_stream(
        ingest_channel, stream_messages(namespace, "s3", "2026-03-01T00:00:00Z", entities, facts, size=11)
    )
    assert counts(third)["facts_closed"] == len(dropped)
    after = all_facts(query_channel, namespace)
    closed = {f["subject"] for f in after.values() if "valid_to" in f}
    assert closed == {f"package:p{i}" for i in dropped}
    assert all(f["valid_to"] == "2026-03-01T00:00:00Z" for f in after.values() if "valid_to" in f)
    assert {k: v for k, v in after.items() if "valid_to" not in v} == {
        k: v for k, v in before.items() if v["subject"] not in closed
    }


def test_a_broken_stream_writes_and_closes_nothing(
    ingest_channel: grpc.Channel, query_channel: grpc.Channel
) -> None:
    namespace, _, _, before = _first_snapshot(ingest_channel, query_channel, "snap-broken-")
    # s2 drops half the packages and adds new ones; the client dies after sending every part but before
    # the end message, so the server may have processed all items when the stream breaks.
    entities, facts = snapshot(range(PACKAGES // 2, PACKAGES + 20))
    sent_everything = threading.Event()
    never = threading.Event()

    def dying_client() -> Iterator[Any]:
        *items, _end_message = stream_messages(namespace, "s2", "2026-02-01T00:00:00Z", entities, facts)
        yield from items  # every item, but not the end message
        sent_everything.set()
        never.wait(60)  # the stream stays open until the call is cancelled

    future = snapshot_service_pb2_grpc.SnapshotServiceStub(ingest_channel).ReconcileStream.future(
        dying_client(), timeout=120
    )
    assert sent_everything.wait(60)
    future.cancel()
    never.set()
    with pytest.raises(grpc.FutureCancelledError):
        future.result()

    # A stream whose client iterator raises midway is cancelled by the client library the same way.
    def failing_client() -> Iterator[Any]:
        messages = stream_messages(namespace, "s2", "2026-02-01T00:00:00Z", entities, facts)
        for index, message in enumerate(messages):
            if index == 9:
                raise RuntimeError("the client's input broke")
            yield message

    with pytest.raises(grpc.RpcError) as raised:
        reconcile_stream(ingest_channel, failing_client())
    assert raised.value.code() in (grpc.StatusCode.CANCELLED, grpc.StatusCode.UNKNOWN)

    # A stream that ends with a deadline midway.
    def slow_client() -> Iterator[Any]:
        messages = stream_messages(namespace, "s2", "2026-02-01T00:00:00Z", entities, facts)
        yield next(messages)
        yield next(messages)
        never.clear()
        never.wait(3)
        yield from messages

    with pytest.raises(grpc.RpcError) as raised:
        snapshot_service_pb2_grpc.SnapshotServiceStub(ingest_channel).ReconcileStream(
            slow_client(), timeout=1.5
        )
    assert raised.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    _wait_until_unlocked(ingest_channel, namespace)
    after = all_facts(query_channel, namespace)
    changed = {k: (before.get(k), v) for k, v in after.items() if before.get(k) != v}
    assert not changed and after.keys() == before.keys()  # nothing created, changed or closed
    # The same snapshot_id sent again completely: a full run (the broken ones left no journal row).
    retried = reconcile_stream(
        ingest_channel, stream_messages(namespace, "s2", "2026-02-01T00:00:00Z", entities, facts)
    )
    assert not retried.unchanged and retried.previous_snapshot_id == "s1"
    assert counts(retried)["facts_closed"] == PACKAGES // 2
    assert counts(retried)["facts_created"] == 20


def _wait_until_unlocked(channel: grpc.Channel, namespace: str) -> None:
    """Waits until the server has rolled back the broken runs: a run of another snapshot_id of the same
    (source, scope) takes the scope's lock only after them. Its invalid item then rolls it back too."""
    bad = {"subject": "package:x", "predicate": "", "object": "version:x"}
    with pytest.raises(grpc.RpcError) as raised:
        reconcile_unary(channel, namespace, "probe", "2026-02-01T00:00:00Z", [], [bad])
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_validation_errors_point_at_the_item_and_write_nothing(
    ingest_channel: grpc.Channel, query_channel: grpc.Channel
) -> None:
    namespace = "snap-invalid-" + uuid.uuid4().hex[:8]
    entities, facts = snapshot(range(PACKAGES))
    facts[23]["subject"] = ""  # the 24th fact streamed
    facts[40] = dict(facts[2])  # listed twice, 38 facts apart
    entities[51]["type"] = "not a type!"
    with pytest.raises(grpc.RpcError) as raised:
        reconcile_stream(
            ingest_channel, stream_messages(namespace, "s1", "2026-01-01T00:00:00Z", entities, facts, size=4)
        )
    failure = rpc_failure(raised.value)
    assert failure.code == grpc.StatusCode.INVALID_ARGUMENT
    fields = {v.field: v.description for v in failure.violations}
    assert "facts[23].subject" in fields
    assert "facts[40]" in fields and "also facts[2]" in fields["facts[40]"]
    assert "entities[51].type" in fields
    assert all_facts(query_channel, namespace) == {}
    # The same snapshot_id with the items fixed is a first run: the failed one journaled nothing.
    entities, facts = snapshot(range(PACKAGES))
    fixed = reconcile_stream(
        ingest_channel, stream_messages(namespace, "s1", "2026-01-01T00:00:00Z", entities, facts)
    )
    assert not fixed.unchanged and counts(fixed)["facts_created"] == PACKAGES


def test_the_stream_must_start_with_one_header(ingest_channel: grpc.Channel) -> None:
    namespace = "snap-header-" + uuid.uuid4().hex[:8]
    entities, facts = snapshot(range(3))
    cases = {
        "header": [_part(entities, facts)],
        "items": [
            _header(namespace, "s1", "2026-01-01T00:00:00Z"),
            _part(entities, []),
            _header(namespace, "s1", "2026-01-01T00:00:00Z"),
        ],
        "snapshot_time": [
            snapshot_service_pb2.ReconcileStreamRequest(
                header=snapshot_service_pb2.ReconcileStreamHeader(
                    namespace=namespace, source=SOURCE, scope=SCOPE, snapshot_id="s1"
                )
            ),
            _end(0, 0),
        ],
        # Closed without the end message: never taken for a complete snapshot.
        "end": [_header(namespace, "s1", "2026-01-01T00:00:00Z"), _part(entities, facts)],
        "end.fact_count": [
            _header(namespace, "s1", "2026-01-01T00:00:00Z"),
            _part(entities, facts),
            _end(len(entities), len(facts) + 1),
        ],
    }
    for field, messages in cases.items():
        with pytest.raises(grpc.RpcError) as raised:
            reconcile_stream(ingest_channel, iter(messages))
        failure = rpc_failure(raised.value)
        assert failure.code == grpc.StatusCode.INVALID_ARGUMENT, field
        assert field in {v.field for v in failure.violations}, (field, failure.violations)
    late = [_header(namespace, "s1", "2026-01-01T00:00:00Z"), _end(0, 0), _part(entities, facts)]
    with pytest.raises(grpc.RpcError) as raised:
        reconcile_stream(ingest_channel, iter(late))
    assert "end" in {v.field for v in rpc_failure(raised.value).violations}
    # A header and the end alone are an empty snapshot: valid (it closes everything of an earlier one).
    empty = reconcile_stream(
        ingest_channel, iter([_header(namespace, "s0", "2026-01-01T00:00:00Z"), _end(0, 0)])
    )
    assert counts(empty) == {} and not empty.unchanged


def test_cli_reconcile_streams_a_jsonl_file(
    ingest_host: Any, query_channel: grpc.Channel, tmp_path: Any
) -> None:
    from typer.testing import CliRunner

    from memory_service_tools.cli import app

    namespace = "snap-cli-" + uuid.uuid4().hex[:8]
    entities, facts = snapshot(range(PACKAGES))
    path = tmp_path / "snapshot.jsonl"
    header = {"namespace": "overridden", "source": SOURCE, "scope": SCOPE, "snapshot_id": "s1"}
    lines = [json.dumps({"header": header | {"snapshot_time": "2026-01-01T00:00:00Z"}})]
    lines += [json.dumps({"items": {"entities": [e]}}, ensure_ascii=False) for e in entities]
    lines += ["", *(json.dumps({"items": {"facts": [f]}}) for f in facts)]
    path.write_text("\n".join(lines) + "\n")
    runner = CliRunner()
    address = ["--ingest-addr", f"127.0.0.1:{ingest_host.port}"]
    command = [*address, "reconcile", "--file", str(path), "--namespace", namespace, "--part-items", "25"]
    result = runner.invoke(app, command)
    assert result.exit_code == 0, result.output
    assert f"s1: reconciled: entities created {PACKAGES}, facts created {PACKAGES}" in result.stdout
    assert len(all_facts(query_channel, namespace)) == PACKAGES
    again = runner.invoke(app, [*command, "--json"])
    assert again.exit_code == 0 and json.loads(again.stdout)["unchanged"] is True
    # A bad line cancels the stream: nothing of the second snapshot is written.
    lines[0] = lines[0].replace('"s1"', '"s2"')
    lines[30] = "{not json"
    path.write_text("\n".join(lines[:-5]) + "\n")  # s2 would also drop 5 facts
    broken = runner.invoke(app, command)
    assert broken.exit_code == 1 and "line 31" in broken.output and "nothing was reconciled" in broken.output
    assert all("valid_to" not in f for f in all_facts(query_channel, namespace).values())
    # A refused snapshot prints each violation with the item's position.
    lines[30] = json.dumps(
        {"items": {"facts": [{"subject": "package:p1", "predicate": "", "object": "x:y"}]}}
    )
    path.write_text("\n".join(lines) + "\n")
    refused = runner.invoke(app, command)
    assert refused.exit_code == 1 and "facts[0]" in refused.output, refused.output
