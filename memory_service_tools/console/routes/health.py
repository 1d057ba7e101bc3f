"""Health: grpc.health.v1 of both services (readiness and liveness) and the embedding backlog."""

from __future__ import annotations

from typing import Any

from memory_service_grpc_client import health_status
from memory_service_grpc_client.memory.v1 import observation_service_pb2
from memory_service_tools.console.gateway import INGEST
from memory_service_tools.console.gateway import QUERY
from memory_service_tools.console.page_view import PageView
from memory_service_tools.console.views import from_timestamp
from memory_service_tools.console.views import instant_text

HEALTH_TIMEOUT_SECONDS = 1.0  # a service that does not answer within this is shown UNREACHABLE


def build(view: PageView) -> dict[str, Any]:
    """Values of health.html. Replica lag and the enrichment backlog are not served over gRPC: the page
    says so rather than reading the database."""
    client = view.gateway.client
    channels = {INGEST: client.ingest_channel, QUERY: client.query_channel}
    services = [
        {
            "name": name,
            "address": view.gateway.addresses[name],
            "ready": health_status(channel, "", timeout=HEALTH_TIMEOUT_SECONDS),
            "live": health_status(channel, "liveness", timeout=HEALTH_TIMEOUT_SECONDS),
        }
        for name, channel in channels.items()
    ]
    backlog = None
    if view.address.namespace:
        response = view.gateway.call_rpc(
            client.get_embedding_backlog,
            observation_service_pb2.GetEmbeddingBacklogRequest(namespace=view.address.namespace),
            service=INGEST,
        )
        if response is not None:
            backlog = {
                "pending": response.pending_chunks,
                "oldest": instant_text(from_timestamp(response.oldest_pending_written_at)),
            }
    return {"title": "Health", "services": services, "backlog": backlog}
