"""Attacks on B from namespace A through data protection and webhooks (erasure, receipts, legal holds,
retention, export and import, subscriptions), for `tests/e2e/test_namespace_isolation.py`."""

from __future__ import annotations

import functools

import grpc

from tests.e2e.isolation_world import World
from tests.e2e.isolation_world import answer_or_refusal
from tests.e2e.isolation_world import holds_nothing_of_b
from tests.e2e.isolation_world import invoke
from tests.e2e.isolation_world import refusal_code


def erase_subject(world: World) -> None:
    """A's admin erasing B's keys and marker inside A erases nothing of B; the receipt names nothing of B."""
    b = world.b
    from memory_service_grpc_client.memory.v1 import data_protection_service_pb2 as dp

    for request in (
        dp.EraseSubjectRequest(namespace=world.a.ns, node_key=b.person, reason="iso", confirm=True),
        dp.EraseSubjectRequest(namespace=world.a.ns, value=b.marker, reason="iso", confirm=True),
    ):
        answer = answer_or_refusal(world, "/memory.v1.DataProtectionService/EraseSubject", request)
        if answer is not None:
            holds_nothing_of_b(world, answer)


def erasure_receipt(world: World) -> None:
    """A receipt made in A is readable in A only: asked for in B's name it is refused."""
    from memory_service_grpc_client.memory.v1 import data_protection_service_pb2 as dp

    made = invoke(
        world,
        "/memory.v1.DataProtectionService/EraseSubject",
        dp.EraseSubjectRequest(
            namespace=world.a.ns, node_key="person:iso-nobody", reason="iso", confirm=True
        ),
        world.attacker,
    )
    method = "/memory.v1.DataProtectionService/GetErasureReceipt"
    read = invoke(
        world,
        method,
        dp.GetErasureReceiptRequest(namespace=world.a.ns, receipt_id=made.receipt.receipt_id),
        world.attacker,
    )
    assert read.receipt.receipt_id == made.receipt.receipt_id
    asked_in_b = dp.GetErasureReceiptRequest(namespace=world.b.ns, receipt_id=made.receipt.receipt_id)
    code = refusal_code(functools.partial(invoke, world, method, asked_in_b, world.both))
    assert code in (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.NOT_FOUND), code


def legal_holds(world: World) -> None:
    """A hold made in A on B's key is A's: listed in A only, lifted in A; nothing of B changes."""
    from memory_service_grpc_client.memory.v1 import data_protection_service_pb2 as dp

    made = invoke(
        world,
        "/memory.v1.DataProtectionService/CreateLegalHold",
        dp.CreateLegalHoldRequest(namespace=world.a.ns, subject_key=world.b.doc, reason="iso"),
        world.attacker,
    )
    listed = invoke(
        world,
        "/memory.v1.DataProtectionService/ListLegalHolds",
        dp.ListLegalHoldsRequest(namespace=world.a.ns),
        world.attacker,
    )
    assert made.hold.hold_id in {hold.hold_id for hold in listed.holds}
    invoke(
        world,
        "/memory.v1.DataProtectionService/LiftLegalHold",
        dp.LiftLegalHoldRequest(namespace=world.a.ns, hold_id=made.hold.hold_id),
        world.attacker,
    )


def retention_attack(world: World) -> None:
    """A retention rule of A previews and deletes only A's data (B's is checked untouched afterwards)."""
    from google.protobuf import duration_pb2
    from google.protobuf import timestamp_pb2

    from memory_service_grpc_client.memory.v1 import data_protection_service_pb2 as dp

    rule = dp.RetentionRule(
        namespace=world.a.ns,
        data_class="context_traces",
        max_age=duration_pb2.Duration(seconds=86_400 * 3650),
    )
    invoke(
        world,
        "/memory.v1.DataProtectionService/SetRetentionRule",
        dp.SetRetentionRuleRequest(rule=rule),
        world.attacker,
    )
    preview = invoke(
        world,
        "/memory.v1.DataProtectionService/PreviewRetention",
        dp.PreviewRetentionRequest(
            namespace=world.a.ns, as_time=timestamp_pb2.Timestamp(seconds=4_102_444_800)
        ),
        world.attacker,
    )
    holds_nothing_of_b(world, preview)
    invoke(
        world,
        "/memory.v1.DataProtectionService/DeleteRetentionRule",
        dp.DeleteRetentionRuleRequest(namespace=world.a.ns, data_class="context_traces"),
        world.attacker,
    )


def export_import(world: World) -> None:
    """A's export holds nothing of B; the same archive relabelled as B's is refused into A."""
    from memory_service_grpc_client.memory.v1 import data_protection_service_pb2 as dp

    parts = invoke(
        world,
        "/memory.v1.DataProtectionService/ExportNamespace",
        dp.ExportNamespaceRequest(namespace=world.a.ns),
        world.attacker,
    )
    archive = b"".join(part.data for part in parts)
    assert archive
    holds_nothing_of_b(world, archive)
    forged = archive.replace(world.a.ns.encode(), world.b.ns.encode())
    method = "/memory.v1.DataProtectionService/ImportNamespace"
    code = refusal_code(
        functools.partial(
            invoke,
            world,
            method,
            [dp.ImportNamespaceRequest(namespace=world.a.ns, data=forged)],
            world.attacker,
        )
    )
    assert code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.PERMISSION_DENIED), code


def webhooks_attack(world: World) -> None:
    """A's subscriptions and dead letters are A's: none of B's are listed, replayed or deleted from A."""
    from memory_service_grpc_client.memory.v1 import webhook_service_pb2 as wh

    # Loopback is not allow-listed here: the subscription is refused, and nothing else exists in A.
    answer_or_refusal(
        world,
        "/memory.v1.WebhookService/CreateWebhookSubscription",
        wh.CreateWebhookSubscriptionRequest(namespace=world.a.ns, target_url="http://127.0.0.1:9/hook"),
    )
    listed = invoke(
        world,
        "/memory.v1.WebhookService/ListWebhookSubscriptions",
        wh.ListWebhookSubscriptionsRequest(namespace=world.a.ns),
        world.attacker,
    )
    holds_nothing_of_b(world, listed)
    for method, request in (
        ("ListDeadLetters", wh.ListDeadLettersRequest(namespace=world.a.ns, subscription_id="wh-none")),
        (
            "ReplayDeadLetters",
            wh.ReplayDeadLettersRequest(
                namespace=world.a.ns, subscription_id="wh-none", all_dead_letters=True
            ),
        ),
        (
            "DeleteWebhookSubscription",
            wh.DeleteWebhookSubscriptionRequest(namespace=world.a.ns, subscription_id="wh-none"),
        ),
    ):
        answer = answer_or_refusal(world, f"/memory.v1.WebhookService/{method}", request)
        if answer is not None:
            holds_nothing_of_b(world, answer)
