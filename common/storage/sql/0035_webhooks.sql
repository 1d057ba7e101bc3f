-- Webhook subscriptions of the change feed (docs/how-to/change-feed.md "Webhooks") and their deliveries.
--
-- webhook_subscriptions: what to deliver where. The creator's visibility is kept with it (unrestricted,
-- or the restricting scopes its token held, and its personal data clearance): a webhook never delivers
-- what its creator could not read. cursor: the outbox cursor up to which the dispatcher has turned
-- changes into deliveries.
CREATE TABLE IF NOT EXISTS webhook_subscriptions (
    subscription_id  text PRIMARY KEY,
    namespace        text NOT NULL,
    target_url       text NOT NULL,
    secret           text NOT NULL,
    event_types      text[] NOT NULL DEFAULT ARRAY[]::text[],
    key_prefixes     text[] NOT NULL DEFAULT ARRAY[]::text[],
    predicates       text[] NOT NULL DEFAULT ARRAY[]::text[],
    creator          text NOT NULL DEFAULT '',
    unrestricted     boolean NOT NULL DEFAULT false,
    creator_scopes   text[] NOT NULL DEFAULT ARRAY[]::text[],
    pii_clearance    boolean NOT NULL DEFAULT false,
    cursor           bigint NOT NULL DEFAULT 0,
    created_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS webhook_subscriptions_namespace_idx ON webhook_subscriptions (namespace, created_at);

-- webhook_deliveries: one row per (subscription, event): idempotent by event id. status pending |
-- delivered | dead (the dead-letter list: the attempts ran out); the event as it is delivered (masked
-- for an uncleared creator) is kept in body, so a replay sends the same CloudEvent.
CREATE TABLE IF NOT EXISTS webhook_deliveries (
    subscription_id  text NOT NULL REFERENCES webhook_subscriptions (subscription_id) ON DELETE CASCADE,
    event_id         bigint NOT NULL,
    cursor           bigint NOT NULL,
    namespace        text NOT NULL,
    body             jsonb NOT NULL,
    status           text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'dead')),
    attempts         integer NOT NULL DEFAULT 0,
    last_error       text NOT NULL DEFAULT '',
    -- not before this instant (the backoff after a failed attempt)
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    created_at       timestamptz NOT NULL DEFAULT now(),
    delivered_at     timestamptz,
    PRIMARY KEY (subscription_id, event_id)
);
-- The next delivery of a subscription (in cursor order) and its dead letters.
CREATE INDEX IF NOT EXISTS webhook_deliveries_pending_idx
    ON webhook_deliveries (subscription_id, cursor) WHERE status = 'pending';
CREATE INDEX IF NOT EXISTS webhook_deliveries_dead_idx
    ON webhook_deliveries (namespace, subscription_id, cursor) WHERE status = 'dead';
