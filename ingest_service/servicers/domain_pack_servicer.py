"""DomainPackService transport: proto <-> domain mapping only (docs/explanation/architecture.md)."""

from __future__ import annotations

from datetime import UTC

import grpc
from google.protobuf import json_format

from common.packs.domain_packs import NamespaceKindsView
from common.packs.domain_packs import PackRegistry
from common.packs.domain_packs import PackView
from common.packs.kind_validation import KindValidator
from memory_service_grpc_client.memory.v1 import domain_pack_service_pb2 as pb
from memory_service_grpc_client.memory.v1 import domain_pack_service_pb2_grpc


def _package(view: PackView) -> pb.DomainPackage:
    message = json_format.ParseDict(view.content, pb.DomainPackage(), ignore_unknown_fields=True)
    message.create_time.FromDatetime(view.created_at.astimezone(UTC))
    return message


def _refs(view: NamespaceKindsView) -> list[pb.PackageRef]:
    return [pb.PackageRef(name=ref["name"], version=ref["version"]) for ref in view.packages]


class DomainPackServicer(domain_pack_service_pb2_grpc.DomainPackServiceServicer):  # type: ignore[misc]
    """memory.v1.DomainPackService; domain errors are mapped to status codes by the server's interceptor."""

    def __init__(self, registry: PackRegistry, kinds: KindValidator) -> None:
        self.registry = registry
        self.kinds = kinds

    def RegisterPackage(
        self, request: pb.RegisterPackageRequest, context: grpc.ServicerContext
    ) -> pb.RegisterPackageResponse:
        raw = json_format.MessageToDict(request.package)
        view = self.registry.register(raw)
        return pb.RegisterPackageResponse(package=_package(view), created=view.created)

    def GetPackage(
        self, request: pb.GetPackageRequest, context: grpc.ServicerContext
    ) -> pb.GetPackageResponse:
        return pb.GetPackageResponse(package=_package(self.registry.get(request.name, request.version)))

    def ListPackages(
        self, request: pb.ListPackagesRequest, context: grpc.ServicerContext
    ) -> pb.ListPackagesResponse:
        views, token = self.registry.list_packs(request.page_size, request.page_token)
        return pb.ListPackagesResponse(packages=[_package(view) for view in views], next_page_token=token)

    def SetNamespaceKinds(
        self, request: pb.SetNamespaceKindsRequest, context: grpc.ServicerContext
    ) -> pb.SetNamespaceKindsResponse:
        view = self.registry.set_namespace_kinds(
            request.namespace,
            [{"name": ref.name, "version": ref.version} for ref in request.packages],
            request.strict,
        )
        self.kinds.invalidate(request.namespace)
        return pb.SetNamespaceKindsResponse(
            namespace=view.namespace, packages=_refs(view), strict=view.strict
        )

    def GetNamespaceKinds(
        self, request: pb.GetNamespaceKindsRequest, context: grpc.ServicerContext
    ) -> pb.GetNamespaceKindsResponse:
        view = self.registry.get_namespace_kinds(request.namespace)
        return pb.GetNamespaceKindsResponse(
            namespace=view.namespace,
            packages=_refs(view),
            strict=view.strict,
            kinds=view.kinds,
            relations=view.relations,
        )
