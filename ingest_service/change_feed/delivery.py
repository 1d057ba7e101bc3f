"""Webhook deliveries: changes become signed CloudEvents posted to the subscriber, once per event id.

**Dispatch** (`WebhookDispatcher.dispatch`): the changes after a subscription's cursor are read from the
outbox with the creator's visibility and the subscription's filters (`ChangeOutbox.read_page`, as
WatchChanges reads them), built into CloudEvents 1.0 (structured JSON mode, the ``cloudevents`` package;
values masked when personal data protection is on and the creator holds no clearance) and stored as
deliveries, with the cursor advanced, in one transaction. A delivery's key is (subscription, event id):
a repeated dispatch adds nothing.

**Delivery** (`WebhookDeliverer.deliver`): a subscription's pending deliveries are posted one after the
other in cursor order (so in order per subject); the first that fails stops the round, and is tried again
after an exponential backoff (``CB_WEBHOOK_RETRY_WAIT_SECONDS`` doubled per attempt, at most
``CB_WEBHOOK_RETRY_MAX_WAIT_SECONDS``); after ``CB_WEBHOOK_MAX_ATTEMPTS`` it becomes a dead letter and the
next goes. A 2xx answer is success; anything else, a timeout or a refused target is a failed attempt.
A crash between the receiver's answer and the record of it sends the event again with the same id: the
receiver deduplicates by id (docs/how-to/change-feed.md).

**Signature** (`signature`): ``webhook-signature: v1=<hex HMAC-SHA256(secret, "<timestamp>." + body)>``
with ``webhook-timestamp`` (Unix seconds) and ``webhook-id`` (the event id) headers.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
from typing import Any

import httpx
from cloudevents.core.formats.json import JSONFormat
from cloudevents.core.v1.event import CloudEvent

from common.kernel.config import Settings
from common.kernel.errors import FailedPrecondition
from common.kernel.pii import mask
from common.kernel.pii import mask_value
from common.storage.change_feed.outbox import ChangeFilter
from common.storage.change_feed.outbox import ChangeOutbox
from common.storage.change_feed.outbox import ChangeRow
from common.storage.change_feed.webhook_store import WebhookStore
from common.storage.change_feed.webhook_store import WebhookSubscriptionRow
from common.storage.database import Database
from ingest_service.change_feed.targets import target_refusal

__all__ = [
    "CLOUD_EVENT_CONTENT_TYPE",
    "WebhookDeliverer",
    "WebhookDispatcher",
    "cloud_event_of",
    "signature",
]

log = logging.getLogger(__name__)

CLOUD_EVENT_CONTENT_TYPE = "application/cloudevents+json"
DISPATCH_PAGE = 500
DELIVERY_BATCH = 100


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` header value of ``body`` sent at ``timestamp`` (Unix seconds)."""
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"v1={digest}"


def cloud_event_of(change: ChangeRow, *, masked: bool) -> dict[str, Any]:
    """The structured-mode CloudEvent (JSON object) of ``change``; keys and values masked when ``masked``."""
    text = mask if masked else (lambda value: value)
    event = CloudEvent(
        attributes={
            "specversion": "1.0",
            "id": str(change.event_id),
            "source": f"memory-service/namespaces/{change.namespace}",
            "type": f"memory.{change.event_type}",
            "subject": text(change.item_key),
            "time": change.committed_at,
            "datacontenttype": "application/json",
        },
        data={
            "cursor": change.cursor,
            "namespace": change.namespace,
            "event_type": change.event_type,
            "item_key": text(change.item_key),
            "subject_key": text(change.subject_key),
            "predicate": change.predicate,
            "object_key": text(change.object_key),
            "scopes": list(change.scopes),
            "payload": mask_value(change.payload) if masked else change.payload,
        },
    )
    body: dict[str, Any] = json.loads(JSONFormat().write(event))
    return body


class WebhookDispatcher:
    """Turns new changes into deliveries (see the module doc)."""

    def __init__(self, database: Database) -> None:
        self.database = database
        self.outbox = ChangeOutbox(database)
        self.store = WebhookStore(database.settings)

    def subscription_ids(self) -> list[str]:
        """Every subscription's id."""
        with self.database.connection() as conn:
            return self.store.subscription_ids(conn)

    def due(self) -> list[str]:
        """Subscriptions with a pending delivery due now."""
        with self.database.connection() as conn:
            return self.store.subscriptions_due(conn)

    def dispatch(self, subscription_id: str) -> tuple[int, bool]:
        """Stores the deliveries of the changes after the subscription's cursor (up to a page); returns
        how many, and whether the page was full (more may wait). (0, False) when another dispatcher holds
        the subscription or it is gone."""
        with self.database.connection() as conn:
            subscription = self.store.lock_subscription(conn, subscription_id)
            if subscription is None:
                return 0, False
            page = self.outbox.read_page(
                subscription.namespace,
                subscription.cursor,
                visibility=subscription.visibility,
                filters=ChangeFilter(
                    event_types=subscription.event_types,
                    key_prefixes=subscription.key_prefixes,
                    predicates=subscription.predicates,
                ),
                limit=DISPATCH_PAGE,
            )
            if subscription.cursor and page.pruned_through > subscription.cursor:
                log.warning(
                    "webhook %s fell behind the outbox's retention: changes up to cursor %d were pruned"
                    " before their delivery",
                    subscription_id,
                    page.pruned_through,
                )
            masked = self.database.settings.pii_protection and not subscription.pii_clearance
            deliveries = [(c.event_id, c.cursor, cloud_event_of(c, masked=masked)) for c in page.changes]
            self.store.add_deliveries(conn, subscription, deliveries, through=page.cursor)
        return len(deliveries), page.full


class WebhookDeliverer:
    """Posts a subscription's pending deliveries (see the module doc).

    Args:
        database: the primary.
        settings: attempts, backoff, timeout and the target allow-list.
        client: the HTTP client (default: one of its own, no redirects followed).
    """

    def __init__(self, database: Database, settings: Settings, client: httpx.Client | None = None) -> None:
        self.database = database
        self.settings = settings
        self.store = WebhookStore(settings)
        self.client = client or httpx.Client(timeout=settings.webhook_timeout_seconds, follow_redirects=False)

    def backoff(self, attempts: int) -> float:
        """Seconds to wait after the ``attempts``-th failed attempt."""
        wait = self.settings.webhook_retry_wait_seconds * 2 ** max(0, attempts - 1)
        return float(min(self.settings.webhook_retry_max_wait_seconds, wait))

    def deliver(self, subscription_id: str) -> float | None:
        """One round of deliveries; returns the seconds after which the next round should run (0: at
        once, more is pending), or None when nothing is pending. The round's accepted deliveries are
        recorded together when it ends (a crash before that sends them again, with the same ids)."""
        with self.database.connection() as conn:
            subscription = self.store.subscription(conn, subscription_id)
            if subscription is None:
                return None
            pending = self.store.pending(conn, subscription_id, DELIVERY_BATCH)
        delivered: list[int] = []
        try:
            for delivery in pending:
                if delivery.wait_seconds > 0:
                    return delivery.wait_seconds
                error = self._post(subscription, delivery.body)
                if error is None:
                    delivered.append(delivery.event_id)
                    continue
                wait = self.backoff(delivery.attempts + 1)
                with self.database.connection() as conn:
                    self.store.mark_delivered(conn, subscription_id, delivered)
                    delivered = []
                    attempts, dead = self.store.record_failure(
                        conn,
                        subscription_id,
                        delivery.event_id,
                        error,
                        max_attempts=self.settings.webhook_max_attempts,
                        wait_seconds=wait,
                    )
                if not dead:
                    return wait
                log.warning(
                    "webhook %s: event %d is a dead letter after %d attempts (%s)",
                    subscription_id,
                    delivery.event_id,
                    attempts,
                    error,
                )
        finally:
            if delivered:
                with self.database.connection() as conn:
                    self.store.mark_delivered(conn, subscription_id, delivered)
        return 0.0 if len(pending) == DELIVERY_BATCH else None

    def _post(self, subscription: WebhookSubscriptionRow, event: dict[str, Any]) -> str | None:
        """Posts ``event``; None on a 2xx answer, else what went wrong."""
        refusal = target_refusal(subscription.target_url, self.settings.webhook_allowed_targets)
        if refusal is not None:
            return f"target refused: {refusal}"
        try:
            secret = self.store.sealer.open(subscription.secret)
        except FailedPrecondition as error:
            return str(error)  # a failed attempt, retried: the operator restores the key
        body = json.dumps(event, ensure_ascii=False, separators=(",", ":")).encode()
        timestamp = int(time.time())
        headers = {
            "content-type": CLOUD_EVENT_CONTENT_TYPE,
            "webhook-id": str(event.get("id", "")),
            "webhook-timestamp": str(timestamp),
            "webhook-signature": signature(secret, timestamp, body),
        }
        try:
            response = self.client.post(subscription.target_url, content=body, headers=headers)
        except httpx.HTTPError as error:
            return f"{type(error).__name__}: {error}"[:500]
        if 200 <= response.status_code < 300:
            return None
        return f"HTTP {response.status_code}"
