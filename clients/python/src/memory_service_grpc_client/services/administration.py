"""The calls of administration: data protection, domain packs, the audit trail and the namespaces a token
reads (one mixin a service)."""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Iterator

import grpc

from memory_service_grpc_client.errors import raise_for_status
from memory_service_grpc_client.memory.v1 import audit_service_pb2
from memory_service_grpc_client.memory.v1 import audit_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import data_protection_service_pb2
from memory_service_grpc_client.memory.v1 import data_protection_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import domain_pack_service_pb2
from memory_service_grpc_client.memory.v1 import domain_pack_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import namespace_service_pb2
from memory_service_grpc_client.memory.v1 import namespace_service_pb2_grpc
from memory_service_grpc_client.pagination import iter_pages
from memory_service_grpc_client.service_calls import ServiceCalls

__all__ = ["AuditCalls", "DataProtectionCalls", "DomainPackCalls", "NamespaceCalls"]


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


class DomainPackCalls(ServiceCalls):
    """The calls of DomainPackService on `MemoryClient`."""

    def register_package(
        self, request: domain_pack_service_pb2.RegisterPackageRequest
    ) -> domain_pack_service_pb2.RegisterPackageResponse:
        """DomainPackService.RegisterPackage."""
        stub = domain_pack_service_pb2_grpc.DomainPackServiceStub(self.ingest_channel)
        return self._write(stub.RegisterPackage, request, idempotent=False)

    def get_package(
        self, request: domain_pack_service_pb2.GetPackageRequest
    ) -> domain_pack_service_pb2.GetPackageResponse:
        """DomainPackService.GetPackage (served by ingest_service)."""
        stub = domain_pack_service_pb2_grpc.DomainPackServiceStub(self.ingest_channel)
        return self._read(stub.GetPackage, request)

    def list_packages(
        self, request: domain_pack_service_pb2.ListPackagesRequest
    ) -> domain_pack_service_pb2.ListPackagesResponse:
        """DomainPackService.ListPackages (served by ingest_service)."""
        stub = domain_pack_service_pb2_grpc.DomainPackServiceStub(self.ingest_channel)
        return self._read(stub.ListPackages, request)

    def iter_packages(
        self, request: domain_pack_service_pb2.ListPackagesRequest, *, limit: int | None = None
    ) -> Iterator[domain_pack_service_pb2.DomainPackage]:
        """Every registered pack, page after page of ListPackages (as `iter_facts`)."""
        return iter_pages(self.list_packages, request, lambda page: page.packages, limit=limit)

    def set_namespace_kinds(
        self, request: domain_pack_service_pb2.SetNamespaceKindsRequest
    ) -> domain_pack_service_pb2.SetNamespaceKindsResponse:
        """DomainPackService.SetNamespaceKinds."""
        stub = domain_pack_service_pb2_grpc.DomainPackServiceStub(self.ingest_channel)
        return self._write(stub.SetNamespaceKinds, request, idempotent=False)

    def get_namespace_kinds(
        self, request: domain_pack_service_pb2.GetNamespaceKindsRequest
    ) -> domain_pack_service_pb2.GetNamespaceKindsResponse:
        """DomainPackService.GetNamespaceKinds."""
        stub = domain_pack_service_pb2_grpc.DomainPackServiceStub(self.ingest_channel)
        return self._read(stub.GetNamespaceKinds, request)


class AuditCalls(ServiceCalls):
    """The calls of AuditService on `MemoryClient`."""

    def record_audit_event(
        self, request: audit_service_pb2.RecordAuditEventRequest
    ) -> audit_service_pb2.RecordAuditEventResponse:
        """AuditService.RecordAuditEvent (retried only with a ``client_event_id``, which makes it
        idempotent)."""
        stub = audit_service_pb2_grpc.AuditServiceStub(self.ingest_channel)
        return self._write(stub.RecordAuditEvent, request, idempotent=bool(request.client_event_id))

    def list_audit_events(
        self, request: audit_service_pb2.ListAuditEventsRequest
    ) -> audit_service_pb2.ListAuditEventsResponse:
        """AuditService.ListAuditEvents (served by query_service): one page, newest first."""
        stub = audit_service_pb2_grpc.AuditServiceStub(self.query_channel)
        return self._read(stub.ListAuditEvents, request)

    def iter_audit_events(
        self, request: audit_service_pb2.ListAuditEventsRequest, *, limit: int | None = None
    ) -> Iterator[audit_service_pb2.AuditEvent]:
        """Every event of a ListAuditEvents query, page after page, newest first; stops after ``limit``
        events when given. ``request`` is not changed."""
        return iter_pages(self.list_audit_events, request, lambda page: page.events, limit=limit)


class NamespaceCalls(ServiceCalls):
    """The calls of NamespaceService on `MemoryClient`."""

    def list_namespaces(
        self, request: namespace_service_pb2.ListNamespacesRequest | None = None
    ) -> namespace_service_pb2.ListNamespacesResponse:
        """NamespaceService.ListNamespaces: one page of the namespaces this token can read that hold
        something it sees (see `iter_namespaces` and `list_every_namespace`)."""
        stub = namespace_service_pb2_grpc.NamespaceServiceStub(self.query_channel)
        return self._read(stub.ListNamespaces, request or namespace_service_pb2.ListNamespacesRequest())

    def iter_namespaces(
        self, request: namespace_service_pb2.ListNamespacesRequest | None = None, *, limit: int | None = None
    ) -> Iterator[namespace_service_pb2.NamespaceSummary]:
        """Every namespace of a ListNamespaces query, page after page, by name; stops after ``limit``
        namespaces when given. ``request`` is not changed."""
        return iter_pages(
            self.list_namespaces,
            request or namespace_service_pb2.ListNamespacesRequest(),
            lambda page: page.namespaces,
            limit=limit,
        )

    def list_every_namespace(
        self, request: namespace_service_pb2.ListNamespacesRequest | None = None
    ) -> namespace_service_pb2.ListNamespacesResponse:
        """Every page of a ListNamespaces query collected into one response (no ``next_page_token``)."""
        return namespace_service_pb2.ListNamespacesResponse(namespaces=list(self.iter_namespaces(request)))

    def get_namespace_stats(
        self, request: namespace_service_pb2.GetNamespaceStatsRequest
    ) -> namespace_service_pb2.GetNamespaceStatsResponse:
        """NamespaceService.GetNamespaceStats: one namespace's counts by kind, as this token sees them."""
        stub = namespace_service_pb2_grpc.NamespaceServiceStub(self.query_channel)
        return self._read(stub.GetNamespaceStats, request)
