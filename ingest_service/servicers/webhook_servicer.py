"""WebhookService transport: proto <-> domain mapping only; the domain is
`ingest_service.change_feed.subscriptions`."""

from __future__ import annotations

import grpc

from common.auth.principals import current_principal
from common.grpc.proto_mapping import change_filter
from common.grpc.proto_mapping import dict_to_struct
from common.grpc.proto_mapping import timestamp
from common.storage.change_feed.webhook_store import WebhookSubscriptionRow
from common.storage.visibility import visibility_for
from ingest_service.change_feed.subscriptions import Creator
from ingest_service.change_feed.subscriptions import WebhookSubscriptions
from memory_service_grpc_client.memory.v1 import webhook_service_pb2
from memory_service_grpc_client.memory.v1 import webhook_service_pb2_grpc


def _subscription(row: WebhookSubscriptionRow) -> webhook_service_pb2.WebhookSubscription:
    return webhook_service_pb2.WebhookSubscription(
        subscription_id=row.subscription_id,
        namespace=row.namespace,
        target_url=row.target_url,
        event_types=list(row.event_types),
        key_prefixes=list(row.key_prefixes),
        predicates=list(row.predicates),
        creator=row.creator,
        cursor=row.cursor,
        create_time=timestamp(row.created_at),
    )


class WebhookServicer(webhook_service_pb2_grpc.WebhookServiceServicer):  # type: ignore[misc]
    """memory.v1.WebhookService; domain errors are mapped to status codes by the server's interceptor."""

    def __init__(self, subscriptions: WebhookSubscriptions) -> None:
        self.subscriptions = subscriptions

    def CreateWebhookSubscription(
        self, request: webhook_service_pb2.CreateWebhookSubscriptionRequest, context: grpc.ServicerContext
    ) -> webhook_service_pb2.CreateWebhookSubscriptionResponse:
        principal = current_principal()
        row, secret = self.subscriptions.create(
            request.namespace,
            request.target_url,
            change_filter(request),
            Creator(
                name=principal.name if principal else "",
                visibility=visibility_for(principal),
                pii_clearance=bool(principal and principal.pii_clearance),
            ),
        )
        return webhook_service_pb2.CreateWebhookSubscriptionResponse(
            subscription=_subscription(row), secret=secret
        )

    def ListWebhookSubscriptions(
        self, request: webhook_service_pb2.ListWebhookSubscriptionsRequest, context: grpc.ServicerContext
    ) -> webhook_service_pb2.ListWebhookSubscriptionsResponse:
        rows = self.subscriptions.of_namespace(request.namespace)
        return webhook_service_pb2.ListWebhookSubscriptionsResponse(
            subscriptions=[_subscription(r) for r in rows]
        )

    def DeleteWebhookSubscription(
        self, request: webhook_service_pb2.DeleteWebhookSubscriptionRequest, context: grpc.ServicerContext
    ) -> webhook_service_pb2.DeleteWebhookSubscriptionResponse:
        self.subscriptions.delete(request.namespace, request.subscription_id)
        return webhook_service_pb2.DeleteWebhookSubscriptionResponse()

    def ListDeadLetters(
        self, request: webhook_service_pb2.ListDeadLettersRequest, context: grpc.ServicerContext
    ) -> webhook_service_pb2.ListDeadLettersResponse:
        rows = self.subscriptions.dead_letters(request.namespace, request.subscription_id, request.page_size)
        return webhook_service_pb2.ListDeadLettersResponse(
            dead_letters=[
                webhook_service_pb2.DeadLetter(
                    subscription_id=row.subscription_id,
                    event_id=str(row.event_id),
                    cursor=row.cursor,
                    event_type=str(row.body.get("data", {}).get("event_type", "")),
                    attempts=row.attempts,
                    last_error=row.last_error,
                    cloud_event=dict_to_struct(row.body),
                )
                for row in rows
            ]
        )

    def ReplayDeadLetters(
        self, request: webhook_service_pb2.ReplayDeadLettersRequest, context: grpc.ServicerContext
    ) -> webhook_service_pb2.ReplayDeadLettersResponse:
        replayed = self.subscriptions.replay(
            request.namespace,
            request.subscription_id,
            list(request.event_ids),
            everything=request.all_dead_letters,
        )
        return webhook_service_pb2.ReplayDeadLettersResponse(replayed=replayed)
