"""Registering a domain pack and enabling it in a namespace over a real channel (DomainPackService)."""

from __future__ import annotations

from typing import Any

import grpc
from google.protobuf import json_format

from memory_service_grpc_client.memory.v1 import domain_pack_service_pb2
from memory_service_grpc_client.memory.v1 import domain_pack_service_pb2_grpc


def register_pack(channel: grpc.Channel, pack: dict[str, Any]) -> bool:
    """RegisterPackage of ``pack`` (its JSON form); whether this call created it."""
    stub = domain_pack_service_pb2_grpc.DomainPackServiceStub(channel)
    request = json_format.ParseDict({"package": pack}, domain_pack_service_pb2.RegisterPackageRequest())
    return bool(stub.RegisterPackage(request, timeout=60).created)


def enable_pack(channel: grpc.Channel, namespace: str, pack: dict[str, Any], strict: bool = False) -> None:
    """SetNamespaceKinds: ``pack`` is the one package of ``namespace``."""
    reference = domain_pack_service_pb2.PackageRef(name=pack["name"], version=pack["version"])
    request = domain_pack_service_pb2.SetNamespaceKindsRequest(
        namespace=namespace, packages=[reference], strict=strict
    )
    domain_pack_service_pb2_grpc.DomainPackServiceStub(channel).SetNamespaceKinds(request, timeout=60)
