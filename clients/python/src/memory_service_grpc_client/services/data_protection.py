"""DataProtectionService (ingest_service): erasure, legal holds, retention rules, namespace export and import."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import grpc

from memory_service_grpc_client.errors import raise_for_status
from memory_service_grpc_client.memory.v1 import data_protection_service_pb2, data_protection_service_pb2_grpc
from memory_service_grpc_client.service_calls import ServiceCalls

__all__ = ["DataProtectionCalls"]


class DataProtectionCalls(ServiceCalls):
    """The calls of DataProtectionService on `MemoryClient`."""

    def erase_subject(
        self, request: data_protection_service_pb2.EraseSubjectRequest
    ) -> data_protection_service_pb2.EraseSubjectResponse:
        """DataProtectionService.EraseSubject (all or nothing; a repeat finds nothing: retried on UNAVAILABLE)."""
        stub = data_protection_service_pb2_grpc.DataProtectionServiceStub(self.ingest_channel)
        return self._write(stub.EraseSubject, request, idempotent=True)

    def get_erasure_receipt(
        self, request: data_protection_service_pb2.GetErasureReceiptRequest
    ) -> data_protection_service_pb2.GetErasureReceiptResponse:
        """DataProtectionService.GetErasureReceipt."""
        stub = data_protection_service_pb2_grpc.DataProtectionServiceStub(self.ingest_channel)
        return self._write(stub.GetErasureReceipt, request, idempotent=True)

    def create_legal_hold(
        self, request: data_protection_service_pb2.CreateLegalHoldRequest
    ) -> data_protection_service_pb2.CreateLegalHoldResponse:
        """DataProtectionService.CreateLegalHold (sent once: a repeat places a second hold)."""
        stub = data_protection_service_pb2_grpc.DataProtectionServiceStub(self.ingest_channel)
        return self._write(stub.CreateLegalHold, request, idempotent=False)

    def lift_legal_hold(
        self, request: data_protection_service_pb2.LiftLegalHoldRequest
    ) -> data_protection_service_pb2.LiftLegalHoldResponse:
        """DataProtectionService.LiftLegalHold (sent once: a repeat is NOT_FOUND)."""
        stub = data_protection_service_pb2_grpc.DataProtectionServiceStub(self.ingest_channel)
        return self._write(stub.LiftLegalHold, request, idempotent=False)

    def list_legal_holds(
        self, request: data_protection_service_pb2.ListLegalHoldsRequest
    ) -> data_protection_service_pb2.ListLegalHoldsResponse:
        """DataProtectionService.ListLegalHolds."""
        stub = data_protection_service_pb2_grpc.DataProtectionServiceStub(self.ingest_channel)
        return self._write(stub.ListLegalHolds, request, idempotent=True)

    def set_retention_rule(
        self, request: data_protection_service_pb2.SetRetentionRuleRequest
    ) -> data_protection_service_pb2.SetRetentionRuleResponse:
        """DataProtectionService.SetRetentionRule (a replace: retried on UNAVAILABLE)."""
        stub = data_protection_service_pb2_grpc.DataProtectionServiceStub(self.ingest_channel)
        return self._write(stub.SetRetentionRule, request, idempotent=True)

    def delete_retention_rule(
        self, request: data_protection_service_pb2.DeleteRetentionRuleRequest
    ) -> data_protection_service_pb2.DeleteRetentionRuleResponse:
        """DataProtectionService.DeleteRetentionRule (sent once: a repeat is NOT_FOUND)."""
        stub = data_protection_service_pb2_grpc.DataProtectionServiceStub(self.ingest_channel)
        return self._write(stub.DeleteRetentionRule, request, idempotent=False)

    def preview_retention(
        self, request: data_protection_service_pb2.PreviewRetentionRequest
    ) -> data_protection_service_pb2.PreviewRetentionResponse:
        """DataProtectionService.PreviewRetention."""
        stub = data_protection_service_pb2_grpc.DataProtectionServiceStub(self.ingest_channel)
        return self._write(stub.PreviewRetention, request, idempotent=True)

    def export_namespace(
        self, request: data_protection_service_pb2.ExportNamespaceRequest, *, timeout: float
    ) -> Iterator[bytes]:
        """DataProtectionService.ExportNamespace: the archive's bytes as the server streams them."""
        stub = data_protection_service_pb2_grpc.DataProtectionServiceStub(self.ingest_channel)
        try:
            for message in stub.ExportNamespace(request, timeout=timeout, metadata=self._call_metadata()):
                yield message.data
        except grpc.RpcError as exc:
            raise_for_status(exc)

    def import_namespace(
        self, requests: Iterable[data_protection_service_pb2.ImportNamespaceRequest], *, timeout: float
    ) -> data_protection_service_pb2.ImportNamespaceResponse:
        """DataProtectionService.ImportNamespace: the first message names the namespace; sent once (a
        failed import wrote nothing, and a repeated one writes nothing new)."""
        stub = data_protection_service_pb2_grpc.DataProtectionServiceStub(self.ingest_channel)
        return self._send_stream(stub.ImportNamespace, requests, timeout=timeout)
