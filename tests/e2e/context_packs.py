"""A context pack compiled over a real channel, the one request the context tests build again and again."""

from __future__ import annotations

from typing import Any

import grpc

from memory_service_grpc_client.memory.v1 import context_service_pb2
from memory_service_grpc_client.memory.v1 import context_service_pb2_grpc


def compile_pack(
    channel: grpc.Channel, namespace: str, timeout: float = 60, **fields: Any
) -> context_service_pb2.ContextPack:
    """The pack CompileContext answers in ``namespace``; ``fields`` are the request's other fields."""
    request = context_service_pb2.CompileContextRequest(namespace=namespace, **fields)
    return context_service_pb2_grpc.ContextServiceStub(channel).CompileContext(request, timeout=timeout).pack
