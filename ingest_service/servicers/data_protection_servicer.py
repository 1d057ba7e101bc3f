"""DataProtectionService transport: proto <-> domain mapping only (docs/how-to/data-protection.md)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import grpc

from common.grpc.proto_mapping import optional_instant
from common.grpc.proto_mapping import timestamp
from common.storage.data_protection.legal_hold_store import HoldRow
from common.storage.data_protection.retention_store import RetentionRule
from ingest_service.data_protection.erasure import EraseInput
from ingest_service.data_protection.erasure import ErasureReceipt
from ingest_service.data_protection.erasure import SubjectEraser
from ingest_service.data_protection.namespace_archive import NamespaceArchive
from ingest_service.data_protection.retention import RetentionEnforcer
from ingest_service.validation.legal_holds import LegalHolds
from memory_service_grpc_client.memory.v1 import data_protection_service_pb2 as pb
from memory_service_grpc_client.memory.v1 import data_protection_service_pb2_grpc

ARCHIVE_CHUNK_BYTES = 256 * 1024


def _subject(request: pb.ExportNamespaceRequest | pb.EraseSubjectRequest, **options: Any) -> EraseInput:
    """The data subject a request selects (its namespace, node_key, memory_user and value) as an
    `EraseInput` with ``options`` (reason, confirm, validate_only)."""
    return EraseInput(
        namespace=request.namespace,
        node_key=request.node_key,
        memory_user=request.memory_user,
        value=request.value,
        **options,
    )


def receipt_to_proto(receipt: ErasureReceipt) -> pb.ErasureReceipt:
    """An `ErasureReceipt` as its message."""
    return pb.ErasureReceipt(
        receipt_id=receipt.receipt_id,
        namespace=receipt.namespace,
        erase_time=timestamp(receipt.erase_time),
        principal=receipt.principal,
        selector_kind=receipt.selector_kind,
        salt=receipt.salt,
        match_hashes=receipt.match_hashes,
        counts=receipt.counts,
        audit_event_id=receipt.audit_event_id,
        validate_only=receipt.validate_only,
        blocked_by_hold=receipt.blocked_by_hold,
    )


def hold_to_proto(hold: HoldRow) -> pb.LegalHold:
    """A `HoldRow` as its message."""
    message = pb.LegalHold(
        hold_id=hold.hold_id,
        namespace=hold.namespace,
        subject_key=hold.subject_key,
        reason=hold.reason,
        create_principal=hold.created_by,
        create_time=timestamp(hold.create_time),
        lift_principal=hold.lifted_by,
    )
    if hold.lift_time is not None:
        message.lift_time.CopyFrom(timestamp(hold.lift_time))
    return message


def rule_to_proto(rule: RetentionRule) -> pb.RetentionRule:
    """A `RetentionRule` as its message."""
    message = pb.RetentionRule(namespace=rule.namespace, data_class=rule.data_class, selector=rule.selector)
    message.max_age.FromTimedelta(rule.max_age)
    return message


class DataProtectionServicer(data_protection_service_pb2_grpc.DataProtectionServiceServicer):  # type: ignore[misc]
    """memory.v1.DataProtectionService over the erasure, hold and retention domain objects."""

    def __init__(
        self,
        eraser: SubjectEraser,
        holds: LegalHolds,
        retention: RetentionEnforcer,
        archive: NamespaceArchive,
    ) -> None:
        self.eraser = eraser
        self.holds = holds
        self.retention = retention
        self.archive = archive

    def ExportNamespace(
        self, request: pb.ExportNamespaceRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.ExportNamespaceResponse]:
        pending = bytearray()
        for line in self.archive.export(request.namespace, subject=_subject(request)):
            pending += line
            if len(pending) >= ARCHIVE_CHUNK_BYTES:
                yield pb.ExportNamespaceResponse(data=bytes(pending))
                pending.clear()
        if pending:
            yield pb.ExportNamespaceResponse(data=bytes(pending))

    def ImportNamespace(
        self, request_iterator: Iterator[pb.ImportNamespaceRequest], context: grpc.ServicerContext
    ) -> pb.ImportNamespaceResponse:
        first = next(request_iterator, None)
        namespace = first.namespace if first is not None else ""

        def data() -> Iterator[bytes]:
            if first is not None:
                yield first.data
            for message in request_iterator:
                yield message.data

        report = self.archive.import_archive(namespace, data())
        return pb.ImportNamespaceResponse(read_counts=report.read, written_counts=report.written)

    def EraseSubject(
        self, request: pb.EraseSubjectRequest, context: grpc.ServicerContext
    ) -> pb.EraseSubjectResponse:
        receipt = self.eraser.erase(
            _subject(
                request, reason=request.reason, confirm=request.confirm, validate_only=request.validate_only
            )
        )
        return pb.EraseSubjectResponse(receipt=receipt_to_proto(receipt))

    def GetErasureReceipt(
        self, request: pb.GetErasureReceiptRequest, context: grpc.ServicerContext
    ) -> pb.GetErasureReceiptResponse:
        receipt = self.eraser.get_receipt(request.namespace, request.receipt_id)
        return pb.GetErasureReceiptResponse(receipt=receipt_to_proto(receipt))

    def CreateLegalHold(
        self, request: pb.CreateLegalHoldRequest, context: grpc.ServicerContext
    ) -> pb.CreateLegalHoldResponse:
        hold = self.holds.set_hold(request.namespace, request.subject_key, request.reason)
        return pb.CreateLegalHoldResponse(hold=hold_to_proto(hold))

    def LiftLegalHold(
        self, request: pb.LiftLegalHoldRequest, context: grpc.ServicerContext
    ) -> pb.LiftLegalHoldResponse:
        hold = self.holds.lift_hold(request.namespace, request.hold_id)
        return pb.LiftLegalHoldResponse(hold=hold_to_proto(hold))

    def ListLegalHolds(
        self, request: pb.ListLegalHoldsRequest, context: grpc.ServicerContext
    ) -> pb.ListLegalHoldsResponse:
        holds = self.holds.list_holds(request.namespace, include_lifted=request.include_lifted)
        return pb.ListLegalHoldsResponse(holds=[hold_to_proto(h) for h in holds])

    def SetRetentionRule(
        self, request: pb.SetRetentionRuleRequest, context: grpc.ServicerContext
    ) -> pb.SetRetentionRuleResponse:
        rule = self.retention.set_rule(
            RetentionRule(
                namespace=request.rule.namespace,
                data_class=request.rule.data_class,
                selector=request.rule.selector,
                max_age=request.rule.max_age.ToTimedelta()
                if request.rule.HasField("max_age")
                else timedelta(0),
            )
        )
        return pb.SetRetentionRuleResponse(rule=rule_to_proto(rule))

    def DeleteRetentionRule(
        self, request: pb.DeleteRetentionRuleRequest, context: grpc.ServicerContext
    ) -> pb.DeleteRetentionRuleResponse:
        self.retention.delete_rule(request.namespace, request.data_class, request.selector)
        return pb.DeleteRetentionRuleResponse()

    def PreviewRetention(
        self, request: pb.PreviewRetentionRequest, context: grpc.ServicerContext
    ) -> pb.PreviewRetentionResponse:
        now = optional_instant(request, "as_time")
        previews = self.retention.preview(request.namespace, now)
        return pb.PreviewRetentionResponse(
            previews=[
                pb.RetentionPreview(
                    rule=rule_to_proto(p.rule),
                    cutoff_time=timestamp(p.cutoff),
                    due_count=p.due,
                    blocked_by_hold=p.blocked_by_hold,
                )
                for p in previews
            ]
        )
