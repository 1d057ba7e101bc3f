"""The webhook tasks of the worker's procrastinate queue (`cb worker`, beside the enrichment tasks of
`ingest_service.memories.enrichment.queue`).

* `DISPATCH_TASK` (periodic, ``CB_WEBHOOK_DISPATCH_CRON``, every second by default): turns the new changes
  of every subscription into deliveries (`WebhookDispatcher`) and defers a delivery job for each
  subscription that got some, or whose next attempt is due (a job lost with a dead worker is so replaced).
* `DELIVER_TASK` (argument: the subscription id; procrastinate ``lock`` and ``queueing_lock`` per
  subscription, so one runs at a time and at most one waits): one round of `WebhookDeliverer.deliver`,
  then defers itself again after the backoff it answered (``schedule_in``).
* `STALLED_TASK` (every minute): delivery jobs of a worker that stopped sending heartbeats go back to
  the queue.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import procrastinate
from procrastinate.exceptions import AlreadyEnqueued

from common.storage.queue_jobs import retry_stalled_jobs
from ingest_service.change_feed.delivery import WebhookDeliverer
from ingest_service.change_feed.delivery import WebhookDispatcher

__all__ = ["DELIVER_TASK", "DISPATCH_TASK", "QUEUE", "register_webhook_tasks"]

log = logging.getLogger(__name__)

QUEUE = "webhooks"
DISPATCH_TASK = "webhook.dispatch"
DELIVER_TASK = "webhook.deliver"
STALLED_TASK = "webhook.retry_stalled"
STALLED_AFTER_SECONDS = 60.0
MAX_PAGES_PER_ROUND = 20


def _lock(subscription_id: str) -> str:
    return f"webhook:{subscription_id}"


def register_webhook_tasks(
    app: procrastinate.App, dispatcher: WebhookDispatcher, deliverer: WebhookDeliverer, *, dispatch_cron: str
) -> None:
    """Registers the tasks of the module doc on ``app`` (run the worker on `QUEUE` too)."""

    async def defer_delivery(subscription_id: str, seconds: float = 0.0) -> None:
        lock = _lock(subscription_id)
        options: dict[str, Any] = {"lock": lock, "queueing_lock": lock}
        if seconds > 0:
            options["schedule_in"] = {"seconds": seconds}
        try:
            await deliver_task.configure(**options).defer_async(subscription_id=subscription_id)
        except AlreadyEnqueued:
            pass  # one waits already: it runs the next round

    async def deliver(subscription_id: str) -> None:
        wait = await asyncio.to_thread(deliverer.deliver, subscription_id)
        if wait is not None:
            await defer_delivery(subscription_id, wait)

    async def dispatch(timestamp: int) -> int:
        added = 0
        for subscription_id in await asyncio.to_thread(dispatcher.subscription_ids):
            for _ in range(MAX_PAGES_PER_ROUND):  # a backlog: several pages now, not one per round
                count, full = await asyncio.to_thread(dispatcher.dispatch, subscription_id)
                added += count
                if count:
                    await defer_delivery(subscription_id)
                if not full:
                    break
        for subscription_id in await asyncio.to_thread(dispatcher.due):
            await defer_delivery(subscription_id)
        return added

    async def retry_stalled(timestamp: int) -> int:
        return await retry_stalled_jobs(app, DELIVER_TASK, STALLED_AFTER_SECONDS)

    deliver_task = app.task(name=DELIVER_TASK, queue=QUEUE)(deliver)
    dispatch_task = app.task(name=DISPATCH_TASK, queue=QUEUE, queueing_lock=DISPATCH_TASK)(dispatch)
    app.periodic(cron=dispatch_cron, periodic_id="webhook-dispatch")(dispatch_task)
    stalled_task = app.task(name=STALLED_TASK, queue=QUEUE, queueing_lock=STALLED_TASK)(retry_stalled)
    app.periodic(cron="* * * * *", periodic_id="webhook-stalled")(stalled_task)
