"""Webhook subscriptions: create, list, delete, and the dead-letter list (WebhookService).

A subscription keeps its creator's visibility (`common.storage.visibility.Visibility`: unrestricted, or
the restricting scopes the token held) and personal data clearance, so it never delivers what the
creator could not read (`ingest_service.change_feed.delivery`). Its secret is made here and shown once.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from common.domain.change_filters import change_filter_violations
from common.kernel.config import Settings
from common.kernel.errors import FailedPrecondition
from common.kernel.errors import FieldViolation
from common.kernel.errors import InvalidArgument
from common.kernel.errors import NotFound
from common.kernel.identifiers import NAMESPACE_PATTERN
from common.storage.change_feed.outbox import ChangeFilter
from common.storage.change_feed.webhook_store import DeadLetterRow
from common.storage.change_feed.webhook_store import WebhookStore
from common.storage.change_feed.webhook_store import WebhookSubscriptionRow
from common.storage.database import Database
from common.storage.visibility import Visibility
from ingest_service.change_feed.targets import target_refusal

__all__ = ["Creator", "WebhookSubscriptions"]

MAX_PAGE_SIZE = 1000
DEFAULT_PAGE_SIZE = 100
_SUBSCRIPTION_ID = "whk-"


@dataclass(frozen=True)
class Creator:
    """Who creates a subscription: its name, visibility and personal data clearance."""

    name: str
    visibility: Visibility
    pii_clearance: bool


def _namespace_violations(namespace: str) -> list[FieldViolation]:
    if NAMESPACE_PATTERN.match(namespace):
        return []
    return [FieldViolation("namespace", "required, pattern [A-Za-z0-9][A-Za-z0-9._:-]{0,127}")]


class WebhookSubscriptions:
    """The domain of WebhookService (see the module doc)."""

    def __init__(self, database: Database, settings: Settings) -> None:
        self.database = database
        self.settings = settings
        self.store = WebhookStore(settings)

    def create(
        self, namespace: str, target_url: str, filters: ChangeFilter, creator: Creator
    ) -> tuple[WebhookSubscriptionRow, str]:
        """A new subscription and its secret.

        Raises:
            InvalidArgument: a bad namespace, target URL (`target_refusal`) or filter.
            FailedPrecondition: reason WEBHOOK_SECRET_KEY_MISSING: tokens are checked and no key seals the
                secret at rest.
        """
        violations = _namespace_violations(namespace) + change_filter_violations(filters)
        refusal = target_refusal(target_url, self.settings.webhook_allowed_targets)
        if refusal is not None:
            violations.append(FieldViolation("target_url", refusal))
        if violations:
            raise InvalidArgument(violations)
        if self.settings.tokens_required and not self.store.sealer.sealing:
            raise FailedPrecondition(
                "webhook secrets are stored sealed when tokens are checked: set CB_WEBHOOK_SECRET_KEYS"
                " (docs/how-to/change-feed.md)",
                reason="WEBHOOK_SECRET_KEY_MISSING",
            )
        secret = secrets.token_urlsafe(32)
        row = WebhookSubscriptionRow(
            subscription_id=_SUBSCRIPTION_ID + uuid.uuid4().hex[:24],
            namespace=namespace,
            target_url=target_url,
            secret=secret,
            event_types=filters.event_types,
            key_prefixes=filters.key_prefixes,
            predicates=filters.predicates,
            creator=creator.name,
            unrestricted=creator.visibility.unrestricted,
            creator_scopes=tuple(sorted(creator.visibility.scopes)),
            pii_clearance=creator.pii_clearance,
            cursor=0,
            created_at=None,  # type: ignore[arg-type]  # set by the insert
        )
        with self.database.connection() as conn:
            return self.store.insert_subscription(conn, row), secret

    def of_namespace(self, namespace: str) -> list[WebhookSubscriptionRow]:
        """The namespace's subscriptions, oldest first.

        Raises:
            InvalidArgument: a bad namespace.
        """
        if violations := _namespace_violations(namespace):
            raise InvalidArgument(violations)
        with self.database.connection() as conn:
            return self.store.subscriptions_of(conn, namespace)

    def delete(self, namespace: str, subscription_id: str) -> None:
        """Deletes a subscription with its deliveries.

        Raises:
            InvalidArgument: a bad namespace; NotFound: no such subscription in it.
        """
        if violations := _namespace_violations(namespace):
            raise InvalidArgument(violations)
        with self.database.connection() as conn:
            if not self.store.delete_subscription(conn, namespace, subscription_id):
                raise NotFound(f"no webhook subscription {subscription_id!r} in {namespace!r}")

    def dead_letters(self, namespace: str, subscription_id: str, page_size: int) -> list[DeadLetterRow]:
        """Dead letters of the namespace (of one subscription when given), oldest cursor first.

        Raises:
            InvalidArgument: a bad namespace or page_size.
        """
        violations = _namespace_violations(namespace)
        if not 0 <= page_size <= MAX_PAGE_SIZE:
            violations.append(FieldViolation("page_size", f"0..{MAX_PAGE_SIZE} (0: {DEFAULT_PAGE_SIZE})"))
        if violations:
            raise InvalidArgument(violations)
        with self.database.connection() as conn:
            return self.store.dead_letters(conn, namespace, subscription_id, page_size or DEFAULT_PAGE_SIZE)

    def replay(
        self, namespace: str, subscription_id: str, event_ids: Sequence[str], *, everything: bool
    ) -> int:
        """Puts dead letters of a subscription back in the queue; how many.

        Raises:
            InvalidArgument: a bad namespace or event id, no event ids without ``everything``.
            NotFound: no such subscription in the namespace.
        """
        violations = _namespace_violations(namespace)
        ids: list[int] = []
        for index, event_id in enumerate(event_ids):
            if event_id.isdigit() and len(event_id) <= 18:
                ids.append(int(event_id))
            else:
                violations.append(FieldViolation(f"event_ids[{index}]", "an event id (digits)"))
        if not event_ids and not everything:
            violations.append(
                FieldViolation(
                    "all_dead_letters", "name event_ids, or set all_dead_letters to replay every one"
                )
            )
        if violations:
            raise InvalidArgument(violations)
        with self.database.connection() as conn:
            subscription = self.store.subscription(conn, subscription_id)
            if subscription is None or subscription.namespace != namespace:
                raise NotFound(f"no webhook subscription {subscription_id!r} in {namespace!r}")
            return self.store.replay_dead_letters(conn, namespace, subscription_id, ids or None)
