"""DomainPackService (ingest_service): domain packs and the kinds of a namespace."""

from __future__ import annotations

from collections.abc import Iterator

from memory_service_grpc_client.memory.v1 import domain_pack_service_pb2, domain_pack_service_pb2_grpc
from memory_service_grpc_client.pagination import iter_pages
from memory_service_grpc_client.service_calls import ServiceCalls

__all__ = ["DomainPackCalls"]


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
