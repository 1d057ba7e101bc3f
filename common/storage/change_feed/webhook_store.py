"""SQL of webhook subscriptions and deliveries (migration 0035; the named queries of ``webhooks.sql``).

Every method takes the caller's connection, so the dispatcher turns a page of changes into deliveries and
advances the subscription's cursor in one transaction (a crash repeats the page; the deliveries' key,
subscription and event id, keeps each event once).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from common.kernel.config import Settings
from common.storage.change_feed.secret_sealing import SecretSealer
from common.storage.named_queries import Queries
from common.storage.row_count import fetch_count
from common.storage.visibility import Visibility

__all__ = ["DeadLetterRow", "DeliveryRow", "WebhookStore", "WebhookSubscriptionRow"]


@dataclass(frozen=True)
class WebhookSubscriptionRow:
    """One subscription as stored (see migration 0035)."""

    subscription_id: str
    namespace: str
    target_url: str
    secret: str  # as stored: sealed when keys are configured (`WebhookStore.sealer` opens it)
    event_types: tuple[str, ...]
    key_prefixes: tuple[str, ...]
    predicates: tuple[str, ...]
    creator: str
    unrestricted: bool
    creator_scopes: tuple[str, ...]
    pii_clearance: bool
    cursor: int
    created_at: datetime

    @property
    def visibility(self) -> Visibility:
        """What the creator could read: its deliveries are filtered by this."""
        if self.unrestricted:
            return Visibility.everything()
        return Visibility(unrestricted=False, scopes=frozenset(self.creator_scopes))

    @classmethod
    def of(cls, row: Sequence[Any]) -> WebhookSubscriptionRow:
        """The row of a ``SELECT subscription_id, namespace, ... created_at`` query."""
        return cls(
            subscription_id=row[0],
            namespace=row[1],
            target_url=row[2],
            secret=row[3],
            event_types=tuple(row[4]),
            key_prefixes=tuple(row[5]),
            predicates=tuple(row[6]),
            creator=row[7],
            unrestricted=bool(row[8]),
            creator_scopes=tuple(row[9]),
            pii_clearance=bool(row[10]),
            cursor=int(row[11]),
            created_at=row[12],
        )


@dataclass(frozen=True)
class DeliveryRow:
    """A pending delivery: the event id, its cursor, the CloudEvent (JSON), the attempts made and the
    seconds until the next may be made (0: now)."""

    event_id: int
    cursor: int
    body: dict[str, Any]
    attempts: int
    wait_seconds: float


@dataclass(frozen=True)
class DeadLetterRow:
    """A delivery whose attempts ran out."""

    subscription_id: str
    event_id: int
    cursor: int
    body: dict[str, Any]
    attempts: int
    last_error: str


class WebhookStore:
    """Named queries of ``webhooks.sql`` over the caller's connection."""

    def __init__(self, settings: Settings) -> None:
        self.queries = Queries.for_settings("webhooks.sql", settings)
        self.sealer = SecretSealer(settings.webhook_secret_keys.get_secret_value())

    def insert_subscription(
        self, conn: psycopg.Connection[Any], row: WebhookSubscriptionRow
    ) -> WebhookSubscriptionRow:
        """Stores ``row`` with its secret sealed (its cursor and created_at are set here: after the
        namespace's last change); returns it as stored."""
        sealed = self.sealer.seal(row.secret)
        stored = conn.execute(
            self.queries["insert_subscription"],
            {
                "subscription_id": row.subscription_id,
                "namespace": row.namespace,
                "target_url": row.target_url,
                "secret": sealed,
                "event_types": list(row.event_types),
                "key_prefixes": list(row.key_prefixes),
                "predicates": list(row.predicates),
                "creator": row.creator,
                "unrestricted": row.unrestricted,
                "creator_scopes": list(row.creator_scopes),
                "pii_clearance": row.pii_clearance,
            },
        ).fetchone()
        assert stored is not None
        return WebhookSubscriptionRow.of(
            (
                row.subscription_id,
                row.namespace,
                row.target_url,
                sealed,
                row.event_types,
                row.key_prefixes,
                row.predicates,
                row.creator,
                row.unrestricted,
                row.creator_scopes,
                row.pii_clearance,
                stored[0],
                stored[1],
            )
        )

    def subscriptions_of(self, conn: psycopg.Connection[Any], namespace: str) -> list[WebhookSubscriptionRow]:
        """The namespace's subscriptions, oldest first."""
        rows = conn.execute(self.queries["subscriptions_of_namespace"], {"namespace": namespace}).fetchall()
        return [WebhookSubscriptionRow.of(row) for row in rows]

    def subscription(
        self, conn: psycopg.Connection[Any], subscription_id: str
    ) -> WebhookSubscriptionRow | None:
        """One subscription, None when there is none."""
        row = conn.execute(self.queries["subscription"], {"subscription_id": subscription_id}).fetchone()
        return WebhookSubscriptionRow.of(row) if row else None

    def subscription_ids(self, conn: psycopg.Connection[Any]) -> list[str]:
        """Every subscription's id."""
        return [str(row[0]) for row in conn.execute(self.queries["subscription_ids"]).fetchall()]

    def subscriptions_due(self, conn: psycopg.Connection[Any]) -> list[str]:
        """Subscriptions with a pending delivery due now."""
        return [str(row[0]) for row in conn.execute(self.queries["subscriptions_due"]).fetchall()]

    def lock_subscription(
        self, conn: psycopg.Connection[Any], subscription_id: str
    ) -> WebhookSubscriptionRow | None:
        """The subscription locked for this transaction; None when gone or locked by another dispatcher."""
        row = conn.execute(self.queries["lock_subscription"], {"subscription_id": subscription_id}).fetchone()
        return WebhookSubscriptionRow.of(row) if row else None

    def delete_subscription(
        self, conn: psycopg.Connection[Any], namespace: str, subscription_id: str
    ) -> bool:
        """Deletes it with its deliveries; False when the namespace has no such subscription."""
        row = conn.execute(
            self.queries["delete_subscription"], {"namespace": namespace, "subscription_id": subscription_id}
        ).fetchone()
        return row is not None

    def add_deliveries(
        self,
        conn: psycopg.Connection[Any],
        subscription: WebhookSubscriptionRow,
        deliveries: Sequence[tuple[int, int, dict[str, Any]]],
        *,
        through: int,
    ) -> None:
        """Stores ``(event id, cursor, CloudEvent)`` deliveries (each event once) and advances the cursor
        to ``through``, in one statement each."""
        if deliveries:
            conn.execute(
                self.queries["insert_deliveries"],
                {
                    "subscription_id": subscription.subscription_id,
                    "namespace": subscription.namespace,
                    "event_ids": [d[0] for d in deliveries],
                    "cursors": [d[1] for d in deliveries],
                    "bodies": [Jsonb(d[2]) for d in deliveries],
                },
            )
        conn.execute(
            self.queries["advance_cursor"],
            {"subscription_id": subscription.subscription_id, "cursor": through},
        )

    def pending(self, conn: psycopg.Connection[Any], subscription_id: str, limit: int) -> list[DeliveryRow]:
        """The next pending deliveries, in cursor order."""
        rows = conn.execute(
            self.queries["pending_deliveries"], {"subscription_id": subscription_id, "limit": limit}
        ).fetchall()
        return [DeliveryRow(int(r[0]), int(r[1]), r[2], int(r[3]), float(r[4])) for r in rows]

    def mark_delivered(
        self, conn: psycopg.Connection[Any], subscription_id: str, event_ids: Sequence[int]
    ) -> None:
        """The receiver accepted these events (one statement)."""
        if event_ids:
            conn.execute(
                self.queries["mark_delivered"],
                {"subscription_id": subscription_id, "event_ids": list(event_ids)},
            )

    def record_failure(
        self,
        conn: psycopg.Connection[Any],
        subscription_id: str,
        event_id: int,
        error: str,
        *,
        max_attempts: int,
        wait_seconds: float,
    ) -> tuple[int, bool]:
        """Counts a failed attempt, the next not before ``wait_seconds``; returns (attempts made, became a
        dead letter)."""
        row = conn.execute(
            self.queries["record_failure"],
            {
                "subscription_id": subscription_id,
                "event_id": event_id,
                "error": error[:500],
                "max_attempts": max_attempts,
                "wait": wait_seconds,
            },
        ).fetchone()
        if row is None:
            return 0, False
        return int(row[0]), row[1] == "dead"

    def dead_letters(
        self, conn: psycopg.Connection[Any], namespace: str, subscription_id: str, limit: int
    ) -> list[DeadLetterRow]:
        """Dead letters of the namespace (of one subscription when ``subscription_id``), oldest first."""
        rows = conn.execute(
            self.queries["dead_letters"],
            {"namespace": namespace, "subscription_id": subscription_id, "limit": limit},
        ).fetchall()
        return [DeadLetterRow(str(r[0]), int(r[1]), int(r[2]), r[3], int(r[4]), str(r[5])) for r in rows]

    def replay_dead_letters(
        self,
        conn: psycopg.Connection[Any],
        namespace: str,
        subscription_id: str,
        event_ids: Sequence[int] | None,
    ) -> int:
        """Puts the dead letters back to pending (only ``event_ids`` when given); how many."""
        return fetch_count(
            conn,
            self.queries["replay_dead_letters"],
            {
                "namespace": namespace,
                "subscription_id": subscription_id,
                "event_ids": None if event_ids is None else list(event_ids),
            },
        )
