"""Hostile-tenant and careless-user attacks on the audit trail and the mass-deletion guard, against the real
services (in-process, real database and embedder) started with bearer tokens like the other e2e tests.

1. AuditService.ListAuditEvents / TraceService.GetTrace: who may read which events, masking for an
   uncleared admin (principal, target key, details and scopes), crafted page tokens.
2. The mass-deletion guard: vault runs of an empty / non-Markdown folder, dry runs (a document hidden
   from the caller is neither counted nor named), empty snapshots.

Bad input on every RPC is in ``test_hostile_bad_input.py``, the MCP server in ``test_hostile_tenant_mcp.py``.
Each check asserts what the documentation promises (docs/reference/errors.md,
docs/how-to/safe-bulk-deletion.md, docs/explanation/knowledge-model.md).
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from datetime import UTC
from datetime import datetime
from datetime import timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from google.protobuf import timestamp_pb2

from common.grpc.proto_mapping import timestamp
from common.kernel.config import Settings
from common.storage.database import Database
from memory_service_grpc_client import rpc_failure
from memory_service_grpc_client.memory.v1 import knowledge_pb2
from memory_service_grpc_client.memory.v1 import snapshot_service_pb2
from memory_service_grpc_client.memory.v1 import snapshot_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import trace_service_pb2
from memory_service_grpc_client.memory.v1 import trace_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import vault_service_pb2
from memory_service_grpc_client.memory.v1 import vault_service_pb2_grpc
from tests.e2e.audit_reads import every_audit_event
from tests.e2e.audit_reads import list_audit_events
from tests.e2e.hostile_tenant_world import DEEP
from tests.e2e.hostile_tenant_world import EMAIL
from tests.e2e.hostile_tenant_world import World
from tests.e2e.hostile_tenant_world import describe
from tests.e2e.hostile_tenant_world import failure_of
from tests.e2e.hostile_tenant_world import ns_counts
from tests.e2e.hostile_tenant_world import running_world
from tests.e2e.hostile_tenant_world import violated_fields
from tests.e2e.vault_helpers import ingest
from tests.e2e.vault_helpers import write

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def world(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with running_world(settings, tmp_path_factory) as world:
        yield world


def _trace(channel: grpc.Channel, namespace: str, trace_id: str) -> Any:
    return trace_service_pb2_grpc.TraceServiceStub(channel).GetTrace(
        trace_service_pb2.GetTraceRequest(namespace=namespace, trace_id=trace_id), timeout=60
    )


def _db_event_ids(database: Database, namespace: str) -> set[str]:
    with database.connection() as conn:
        return {str(r[0]) for r in conn.execute("SELECT event_id FROM audit_events WHERE namespace = %s", (namespace,))}


def _forge(namespace: str, payload: dict[str, Any] | bytes, **filters: Any) -> str:
    """A page token computed like the service does (its check value is not secret)."""
    from query_service.audit_reader import AuditListInput
    from query_service.audit_reader import _check_value
    from query_service.audit_reader import _filter_digest

    if isinstance(payload, dict):
        payload = {**payload, "f": payload.get("f", _filter_digest(AuditListInput(namespace=namespace, **filters)))}
        data = json.dumps(payload, separators=(",", ":")).encode()
    else:
        data = payload
    return base64.urlsafe_b64encode(data).decode().rstrip("=") + "." + _check_value(data)


def test_the_admin_of_a_sees_every_event_of_a_and_nothing_else(world: World, database: Database) -> None:
    stored = _db_event_ids(database, world.a)
    with world.query(world.a_admin) as channel:
        listed = every_audit_event(channel, namespace=world.a, page_size=2)
    ids = {e.event_id for e in listed}
    # the cleared admin's own listing is audited (one pii_access event) after it was read
    assert stored <= ids <= _db_event_ids(database, world.a), (stored - ids, ids - stored)
    assert not ids & set(world.ids["b"])
    pii = [e for e in listed if e.action == "pii_access"]
    assert pii and {e.principal for e in pii} == {EMAIL}, "the other principal's pii_access events"
    assert world.ids["hr_delete"][0] in ids, "the scoped delete event of another principal"
    # its trace as well, whatever the events' scopes
    with world.query(world.a_admin) as channel:
        for trace_id in (world.pii_trace, world.hr_trace, world.export_trace):
            entries = _trace(channel, world.a, trace_id).trace.entries
            assert entries, trace_id


def test_an_uncleared_admin_reads_every_value_masked(world: World) -> None:
    with world.query(world.a_masked_admin) as channel:
        listed = every_audit_event(channel, namespace=world.a, action="pii_access")
        trace = _trace(channel, world.a, world.pii_trace)
    assert listed and all(e.principal != EMAIL for e in listed)
    leaks = [
        (e.event_id, json_format.MessageToDict(e))
        for e in listed
        if EMAIL in json_format.MessageToJson(e)
    ]
    problems = [f"ListAuditEvents shows {EMAIL} to the uncleared admin: {leaks}"] if leaks else []
    if EMAIL in json_format.MessageToJson(trace):
        problems.append(f"GetTrace shows {EMAIL} to the uncleared admin: {json_format.MessageToDict(trace)}")
    assert not problems, "\n".join(problems)


def _denied_variants(world: World, namespace: str) -> list[dict[str, Any]]:
    now = datetime.now(UTC)
    return [
        {},
        {"page_size": 1000},
        {"action": "pii_access"},
        {"principal": EMAIL},
        {"node_key": f"contact:{EMAIL}"},
        {"start_time": timestamp(now - timedelta(days=1)), "end_time": timestamp(now + timedelta(days=1))},
        {"page_token": _forge(namespace, {"t": now.isoformat(), "id": "aud-" + "f" * 24})},
        {"page_token": "garbage"},
        {"action": "Not An Action", "page_size": -1},
    ]


@pytest.mark.parametrize(
    "who", ["a_reader", "a_writer", "officer", "b_admin", "star_reader", "nobody", "unknown"]
)
def test_nobody_but_an_admin_of_a_lists_a_or_learns_anything(world: World, who: str) -> None:
    token = getattr(world, who)
    expected = grpc.StatusCode.UNAUTHENTICATED if who == "unknown" else grpc.StatusCode.PERMISSION_DENIED
    # a page token issued for B's listing, used on A
    with world.query(world.b_admin) as channel:
        b_token = list_audit_events(channel, namespace=world.b, page_size=1).next_page_token
    assert b_token
    answers: dict[str, list[tuple[Any, str, str]]] = {}
    with world.query(token) as channel:
        for namespace in (world.a, world.ghost):
            seen = []
            for fields in [*_denied_variants(world, namespace), {"page_token": b_token}]:
                failure = failure_of(lambda: list_audit_events(channel, namespace=namespace, **fields))  # noqa: B023 - called at once
                meta = {k: v for k, v in failure.metadata.items() if k != "request_id"}
                seen.append((failure.code, failure.message.replace(namespace, "<NS>"), json.dumps(meta, sort_keys=True).replace(namespace, "<NS>")))
                assert failure.code == expected, (fields, describe(failure))
                for secret in (*([] if who == "officer" else [EMAIL]), "pii_access", world.pii_trace, *world.ids["export"], *world.ids["hr_delete"]):
                    if secret not in json.dumps({k: str(v) for k, v in fields.items()}):
                        assert secret not in failure.message and secret not in str(failure.metadata), (
                            fields, describe(failure)
                        )
            answers[namespace] = seen
    assert answers[world.a] == answers[world.ghost], "refusals about A differ from those about an empty namespace"


@pytest.mark.parametrize("who", ["a_reader", "a_writer", "b_admin", "nobody", "unknown"])
def test_get_trace_keeps_others_events_hidden(world: World, who: str) -> None:
    token = getattr(world, who)
    ghost_trace = "atk-no-such-trace-" + uuid.uuid4().hex[:6]
    with world.query(token) as channel:
        results = {}
        for trace_id in (world.pii_trace, world.hr_trace, ghost_trace):
            failure = failure_of(lambda: _trace(channel, world.a, trace_id))  # noqa: B023 - called at once
            results[trace_id] = (failure.code, failure.message.replace(trace_id, "<T>"))
    if who in ("a_reader", "a_writer"):
        assert {code for code, _ in results.values()} == {grpc.StatusCode.NOT_FOUND}, results
    elif who == "unknown":
        assert {code for code, _ in results.values()} == {grpc.StatusCode.UNAUTHENTICATED}, results
    else:
        assert {code for code, _ in results.values()} == {grpc.StatusCode.PERMISSION_DENIED}, results
    assert len(set(results.values())) == 1, f"a hidden trace answers unlike a missing one: {results}"
    # the officer reads its own pii_access event; in another namespace the trace does not exist
    with world.query(world.officer) as channel:
        own = _trace(channel, world.a, world.pii_trace).trace.entries
        # (each cleared GetTrace that shows personal data is itself audited under the trace)
        assert own and {e.audit_event.principal for e in own} == {EMAIL}
    with world.query(world.b_admin) as channel:
        failure = failure_of(lambda: _trace(channel, world.b, world.pii_trace))
        assert failure.code == grpc.StatusCode.NOT_FOUND, describe(failure)


@pytest.mark.parametrize(
    "trace_id", ["a\u0000b", "t" * 257, "t" * (1 << 20), " "], ids=["nul", "257", "1MB", "blank"]
)
def test_get_trace_bad_ids(world: World, trace_id: str) -> None:
    with world.query(world.a_admin) as channel:
        failure = failure_of(lambda: _trace(channel, world.a, trace_id))
    assert failure.code == grpc.StatusCode.INVALID_ARGUMENT and "trace_id" in violated_fields(failure), describe(failure)


def _page_token_cases(world: World, issued: str, b_token: str) -> dict[str, tuple[dict[str, Any], str]]:
    body, _, check = issued.partition(".")
    flipped = body[:-2] + ("A" if body[-2] != "A" else "B") + body[-1]
    now = datetime.now(UTC).isoformat()
    return {
        "tampered_body": ({}, flipped + "." + check),
        "tampered_check": ({}, body + "." + ("0" if check[0] != "0" else "1") + check[1:]),
        "no_check": ({}, body),
        "other_filters": ({"action": "export"}, issued),
        "other_time_range": ({"start_time": timestamp(datetime(2020, 1, 1, tzinfo=UTC))}, issued),
        "other_namespace_token": ({}, b_token),
        "nul_raw": ({}, "\u0000"),
        "nul_in_body": ({}, body + "\u0000." + check),
        "forged_nul_in_id": ({}, _forge(world.a, {"t": now, "id": "aud-\u0000"})),
        "forged_nul_in_time": ({}, _forge(world.a, {"t": now + "\u0000", "id": "aud-x"})),
        "forged_instant_overflow_low": ({}, _forge(world.a, {"t": "0001-01-01T00:00:00+01:00", "id": "aud-x"})),
        "forged_instant_overflow_high": ({}, _forge(world.a, {"t": "9999-12-31T23:59:59-01:00", "id": "aud-x"})),
        "forged_deep_json": ({}, _forge(world.a, DEEP)),
        "forged_list_payload": ({}, _forge(world.a, b"[1,2,3]")),
        "forged_number_time": ({}, _forge(world.a, {"t": 12, "id": "aud-x"})),
        "forged_non_utf8": ({}, _forge(world.a, b"\xff\xfe{}")),
        "huge_1MB": ({}, "A" * (1 << 20)),
        "huge_3MB": ({}, body + "A" * (3 << 20) + "." + check),
    }


def test_page_tokens_are_invalid_argument_never_internal(world: World) -> None:
    with world.query(world.a_admin) as channel:
        first = list_audit_events(channel, namespace=world.a, page_size=1)
    with world.query(world.b_admin) as channel:
        b_token = list_audit_events(channel, namespace=world.b, page_size=1).next_page_token
    assert first.next_page_token and b_token
    wrong: list[str] = []
    with world.query(world.a_admin) as channel:
        for name, (filters, token) in _page_token_cases(world, first.next_page_token, b_token).items():
            try:
                list_audit_events(channel, namespace=world.a, page_size=1, page_token=token, **filters)
            except grpc.RpcError as error:
                failure = rpc_failure(error)
                if failure.code != grpc.StatusCode.INVALID_ARGUMENT or violated_fields(failure) != ["page_token"]:
                    wrong.append(f"{name}: {describe(failure)}")
                continue
            wrong.append(f"{name}: accepted")
        # the issued token still works with its own request
        again = list_audit_events(channel, namespace=world.a, page_size=1, page_token=first.next_page_token)
        assert again.events and again.events[0].event_id != first.events[0].event_id
    assert not wrong, "\n".join(wrong)


def test_out_of_range_times_and_sizes_on_the_listing(world: World) -> None:
    cases = {
        "start_far_future": ({"start_time": timestamp_pb2.Timestamp(seconds=2**40)}, "start_time"),
        "end_far_past": ({"end_time": timestamp_pb2.Timestamp(seconds=-(2**40))}, "end_time"),
        "nanos": ({"start_time": timestamp_pb2.Timestamp(seconds=0, nanos=2_000_000_000)}, "start_time"),
        "end_before_start": (
            {"start_time": timestamp(datetime(2026, 1, 2, tzinfo=UTC)), "end_time": timestamp(datetime(2026, 1, 1, tzinfo=UTC))},
            "end_time",
        ),
        "page_size_negative": ({"page_size": -1}, "page_size"),
        "page_size_huge": ({"page_size": 2**31 - 1}, "page_size"),
        "principal_nul": ({"principal": "x\u0000"}, "principal"),
        "node_key_1MB": ({"node_key": "k" * (1 << 20)}, "node_key"),
        "action_1MB": ({"action": "a" * (1 << 20)}, "action"),
    }
    wrong = []
    with world.query(world.a_admin) as channel:
        for name, (fields, path) in cases.items():
            failure = failure_of(lambda: list_audit_events(channel, namespace=world.a, **fields))  # noqa: B023 - called at once
            if failure.code != grpc.StatusCode.INVALID_ARGUMENT or path not in violated_fields(failure):
                wrong.append(f"{name}: {describe(failure)}")
    assert not wrong, "\n".join(wrong)


def _vault(root: Path) -> None:
    write(root, "alpha.md", "# Alpha\n\nAlpha runbook. Related: [Beta](beta.md).\n")
    write(root, "beta.md", "---\nrelated_to: alpha.md\n---\n# Beta\n\nBeta runbook, see [[alpha]].\n")
    write(root, "gamma.md", "---\nscopes: [workspace:vs]\nrelated_to: beta.md\n---\n# Gamma\n\nGamma (restricted).\n")


def _stream(namespace: str, *, dry_run: bool = False, allow: bool = False) -> Iterator[Any]:
    yield vault_service_pb2.IngestVaultRequest(
        header=vault_service_pb2.IngestVaultHeader(namespace=namespace, dry_run=dry_run, allow_mass_sweep=allow)
    )
    yield vault_service_pb2.IngestVaultRequest(end=vault_service_pb2.IngestVaultEnd(document_count=0))


def _refusal(failure: Any) -> dict[str, str]:
    assert failure.code == grpc.StatusCode.FAILED_PRECONDITION, describe(failure)
    assert failure.reason == "MASS_SWEEP_REFUSED", describe(failure)
    return {k: v for k, v in failure.metadata.items() if k != "request_id"}


@pytest.fixture(scope="module")
def vault_world(world: World, tmp_path_factory: pytest.TempPathFactory, database: Database) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("vault") / "vault"
    _vault(root)
    with world.ingest(world.v_writer) as channel:
        first = ingest(channel, root, world.v)
    assert first.counts.documents_new == 3, first
    loaded = ns_counts(database, world.v)
    assert loaded["vault_documents"] == 3 and loaded["chunks"] > 0 and loaded["facts"] > 0, loaded
    empty = tmp_path_factory.mktemp("typo")
    other = tmp_path_factory.mktemp("not-markdown")
    (other / "picture.png").write_bytes(b"\x89PNG\r\n\x1a\n")  # not a format the vault reads
    (other / "notes.orig").write_text("# a file of no format the vault reads\n")
    (other / "doc.md.bak").write_text("# a backup\n")
    (other / "data.bin").write_bytes(b"\x00\x01")
    (other / ".hidden").mkdir()
    (other / ".hidden" / "x.md").write_text("# in a hidden folder\n")
    return {"root": root, "empty": empty, "other": other, "loaded": loaded}


def _last_run_status(database: Database, namespace: str) -> str:
    with database.connection() as conn:
        row = conn.execute(
            "SELECT status FROM vault_runs WHERE namespace = %s ORDER BY started_at DESC LIMIT 1", (namespace,)
        ).fetchone()
    return str(row[0]) if row else ""


@pytest.mark.parametrize("folder", ["empty", "other", "raw_stream"])
def test_a_typo_folder_is_refused_and_changes_nothing(
    world: World, vault_world: dict[str, Any], database: Database, folder: str
) -> None:
    before = ns_counts(database, world.v)
    with world.ingest(world.v_writer) as channel:
        if folder == "raw_stream":
            stub = vault_service_pb2_grpc.VaultServiceStub(channel)
            failure = failure_of(lambda: stub.IngestVault(_stream(world.v), timeout=120))
        else:
            failure = failure_of(lambda: ingest(channel, vault_world[folder], world.v))
    assert _refusal(failure) == {"would_sweep": "3", "total": "3", "share": "0.5"}
    assert ns_counts(database, world.v) == before
    assert _last_run_status(database, world.v) == "refused"
    # the dry run says the same and writes nothing
    with world.ingest(world.v_writer) as channel:
        if folder == "raw_stream":
            dry = vault_service_pb2_grpc.VaultServiceStub(channel).IngestVault(_stream(world.v, dry_run=True), timeout=120)
        else:
            dry = ingest(channel, vault_world[folder], world.v, dry_run=True)
    assert dry.counts.documents_swept == 3 and dry.sweep_refused and not dry.swept, dry
    assert ns_counts(database, world.v) == before


def test_a_narrow_writers_dry_run_does_not_reveal_hidden_documents(
    world: World, vault_world: dict[str, Any], database: Database
) -> None:
    """The narrow writer (no workspace:vs) cannot see doc gamma; a dry run of an empty folder must not
    name it (a hidden item answers like a missing one)."""
    with world.ingest(world.v_narrow) as channel:
        dry = ingest(channel, vault_world["empty"], world.v, dry_run=True)
        failure = failure_of(lambda: ingest(channel, vault_world["empty"], world.v))
    hidden = [k for k in dry.swept_keys if "gamma" in k]
    assert not hidden, (
        f"dry run by a token without workspace:vs lists hidden keys {list(dry.swept_keys)} "
        f"(documents_swept={dry.counts.documents_swept}); the refusal says {describe(failure)} {dict(failure.metadata)}"
    )


def test_a_vault_sweep_with_the_flag_runs(world: World, vault_world: dict[str, Any], database: Database) -> None:
    with world.ingest(world.v_writer) as channel:
        swept = ingest(channel, vault_world["empty"], world.v, allow_mass_sweep=True)
    assert swept.swept and swept.counts.documents_swept == 3, swept
    after = ns_counts(database, world.v)
    assert after["vault_documents"] == 0 and after["chunks"] == 0, after


def _facts(count: int) -> list[Any]:
    return [
        json_format.ParseDict(
            {"subject": f"package:p{i}", "predicate": "DEPENDS_ON", "object": "package:libc6"},
            knowledge_pb2.FactAssertion(),
        )
        for i in range(count)
    ]


def test_an_empty_snapshot_is_refused_and_the_flag_works(world: World, database: Database) -> None:
    ns = world.v + "-snap"
    with world.ingest(world.star_reader) as channel:
        stub = snapshot_service_pb2_grpc.SnapshotServiceStub(channel)

        def reconcile(snapshot_id: str, day: int, facts: list[Any], **extra: Any) -> Any:
            return stub.Reconcile(
                snapshot_service_pb2.ReconcileRequest(
                    namespace=ns, source="atk", scope="suite:x", snapshot_id=snapshot_id,
                    snapshot_time=timestamp_pb2.Timestamp(seconds=1_767_225_600 + day * 86_400),
                    facts=facts, **extra,
                ),
                timeout=60,
            )

        def stream(snapshot_id: str, day: int, allow: bool) -> Any:
            header = snapshot_service_pb2.ReconcileStreamHeader(
                namespace=ns, source="atk", scope="suite:x", snapshot_id=snapshot_id,
                snapshot_time=timestamp_pb2.Timestamp(seconds=1_767_225_600 + day * 86_400),
                allow_mass_sweep=allow,
            )
            messages = [
                snapshot_service_pb2.ReconcileStreamRequest(header=header),
                snapshot_service_pb2.ReconcileStreamRequest(end=snapshot_service_pb2.ReconcileStreamEnd()),
            ]
            return stub.ReconcileStream(iter(messages), timeout=60)

        reconcile("s1", 0, _facts(4))
        before = ns_counts(database, ns)
        assert before["open_facts"] == 4
        assert _refusal(failure_of(lambda: reconcile("s2", 1, []))) == {"would_sweep": "4", "total": "4", "share": "0.5"}
        assert ns_counts(database, ns) == before
        assert _refusal(failure_of(lambda: stream("s2", 1, False)))["would_sweep"] == "4"
        assert ns_counts(database, ns) == before
        closed = stream("s2", 1, True)
        assert closed.counts.facts_closed == 4
        assert ns_counts(database, ns)["open_facts"] == 0


def test_an_uncleared_admin_cannot_unmask_by_filtering(world: World) -> None:
    # the same refusal for a value that is stored and one that is not: nothing to tell them apart
    answers = []
    with world.query(world.a_masked_admin) as channel:
        for value in (EMAIL, "nobody-" + EMAIL):
            for fields in ({"principal": value}, {"node_key": f"contact:{value}"}):
                with pytest.raises(grpc.RpcError) as refused:
                    every_audit_event(channel, namespace=world.a, **fields)
                failure = rpc_failure(refused.value)
                metadata = {k: v for k, v in failure.metadata.items() if k != "request_id"}
                answers.append((failure.code, failure.reason, metadata))
    assert answers[:2] == answers[2:]
    assert [a[1:] for a in answers[:2]] == [
        ("PII_CLEARANCE_REQUIRED", {"field": "principal"}),
        ("PII_CLEARANCE_REQUIRED", {"field": "node_key"}),
    ]
    assert all(a[0] == grpc.StatusCode.PERMISSION_DENIED for a in answers)
    with world.query(world.a_admin) as channel:  # a cleared admin still filters by it
        assert every_audit_event(channel, namespace=world.a, principal=EMAIL)
