"""WebhookService (ingest_service): webhook subscriptions and their dead letters."""

from __future__ import annotations

from memory_service_grpc_client.memory.v1 import webhook_service_pb2, webhook_service_pb2_grpc
from memory_service_grpc_client.service_calls import ServiceCalls

__all__ = ["WebhookCalls"]


class WebhookCalls(ServiceCalls):
    """The calls of WebhookService on `MemoryClient`."""

    def create_webhook_subscription(
        self, request: webhook_service_pb2.CreateWebhookSubscriptionRequest
    ) -> webhook_service_pb2.CreateWebhookSubscriptionResponse:
        """WebhookService.CreateWebhookSubscription (not idempotent: sent once)."""
        stub = webhook_service_pb2_grpc.WebhookServiceStub(self.ingest_channel)
        return self._write(stub.CreateWebhookSubscription, request, idempotent=False)

    def list_webhook_subscriptions(
        self, request: webhook_service_pb2.ListWebhookSubscriptionsRequest
    ) -> webhook_service_pb2.ListWebhookSubscriptionsResponse:
        """WebhookService.ListWebhookSubscriptions."""
        stub = webhook_service_pb2_grpc.WebhookServiceStub(self.ingest_channel)
        return self._read(stub.ListWebhookSubscriptions, request)

    def delete_webhook_subscription(
        self, request: webhook_service_pb2.DeleteWebhookSubscriptionRequest
    ) -> webhook_service_pb2.DeleteWebhookSubscriptionResponse:
        """WebhookService.DeleteWebhookSubscription."""
        stub = webhook_service_pb2_grpc.WebhookServiceStub(self.ingest_channel)
        return self._write(stub.DeleteWebhookSubscription, request, idempotent=False)

    def list_dead_letters(
        self, request: webhook_service_pb2.ListDeadLettersRequest
    ) -> webhook_service_pb2.ListDeadLettersResponse:
        """WebhookService.ListDeadLetters (admin)."""
        stub = webhook_service_pb2_grpc.WebhookServiceStub(self.ingest_channel)
        return self._read(stub.ListDeadLetters, request)

    def replay_dead_letters(
        self, request: webhook_service_pb2.ReplayDeadLettersRequest
    ) -> webhook_service_pb2.ReplayDeadLettersResponse:
        """WebhookService.ReplayDeadLetters (admin)."""
        stub = webhook_service_pb2_grpc.WebhookServiceStub(self.ingest_channel)
        return self._write(stub.ReplayDeadLetters, request, idempotent=False)
