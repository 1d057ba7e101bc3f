-- Static SQL of webhook subscriptions and deliveries (common/storage/change_feed/webhook_store.py; tables
-- of migration 0035). Subscription columns, in the order of WebhookSubscriptionRow: see
-- {subscription_columns} below, written out in each query.

-- name: insert_subscription
-- A new subscription starting after the namespace's last cursor (changes committed before it are not
-- delivered); returns its cursor.
INSERT INTO webhook_subscriptions (subscription_id, namespace, target_url, secret, event_types, key_prefixes,
    predicates, creator, unrestricted, creator_scopes, pii_clearance, cursor)
VALUES (%(subscription_id)s, %(namespace)s, %(target_url)s, %(secret)s, %(event_types)s, %(key_prefixes)s,
    %(predicates)s, %(creator)s, %(unrestricted)s, %(creator_scopes)s, %(pii_clearance)s,
    coalesce((SELECT last_cursor FROM change_feed_heads WHERE namespace = %(namespace)s), 0))
RETURNING cursor, created_at

-- name: subscriptions_of_namespace
-- The namespace's subscriptions, oldest first.
SELECT subscription_id, namespace, target_url, secret, event_types, key_prefixes, predicates, creator,
    unrestricted, creator_scopes, pii_clearance, cursor, created_at
FROM webhook_subscriptions WHERE namespace = %(namespace)s ORDER BY created_at, subscription_id

-- name: subscription_ids
-- Every subscription id (the dispatcher's round).
SELECT subscription_id FROM webhook_subscriptions ORDER BY subscription_id

-- name: lock_subscription
-- One subscription locked until the transaction ends, unless another dispatcher holds it (then no row).
SELECT subscription_id, namespace, target_url, secret, event_types, key_prefixes, predicates, creator,
    unrestricted, creator_scopes, pii_clearance, cursor, created_at
FROM webhook_subscriptions WHERE subscription_id = %(subscription_id)s FOR UPDATE SKIP LOCKED

-- name: subscription
-- One subscription.
SELECT subscription_id, namespace, target_url, secret, event_types, key_prefixes, predicates, creator,
    unrestricted, creator_scopes, pii_clearance, cursor, created_at
FROM webhook_subscriptions WHERE subscription_id = %(subscription_id)s

-- name: delete_subscription
-- Deletes a subscription of the namespace (its deliveries cascade); returns its id.
DELETE FROM webhook_subscriptions WHERE namespace = %(namespace)s AND subscription_id = %(subscription_id)s
RETURNING subscription_id

-- name: insert_deliveries
-- The deliveries of one subscription (parallel arrays of event id, cursor, body), once per event.
INSERT INTO webhook_deliveries (subscription_id, event_id, cursor, namespace, body)
SELECT %(subscription_id)s, x.event_id, x.cursor, %(namespace)s, x.body
FROM unnest(%(event_ids)s::bigint[], %(cursors)s::bigint[], %(bodies)s::jsonb[]) AS x(event_id, cursor, body)
ORDER BY x.cursor
ON CONFLICT (subscription_id, event_id) DO NOTHING

-- name: advance_cursor
-- The dispatcher turned every change up to %(cursor)s into deliveries.
UPDATE webhook_subscriptions SET cursor = greatest(cursor, %(cursor)s) WHERE subscription_id = %(subscription_id)s

-- name: pending_deliveries
-- The next pending deliveries of a subscription, in cursor order.
SELECT event_id, cursor, body, attempts, greatest(0, extract(epoch FROM next_attempt_at - now()))::float8
FROM webhook_deliveries
WHERE subscription_id = %(subscription_id)s AND status = 'pending' ORDER BY cursor LIMIT %(limit)s

-- name: mark_delivered
-- Deliveries the receiver accepted (event ids %(event_ids)s of one subscription).
UPDATE webhook_deliveries SET status = 'delivered', attempts = attempts + 1, delivered_at = now(), last_error = ''
WHERE subscription_id = %(subscription_id)s AND event_id = ANY(%(event_ids)s::bigint[]) AND status = 'pending'

-- name: record_failure
-- A failed attempt, the next not before %(wait)s seconds; the delivery becomes a dead letter once
-- %(max_attempts)s were made. Returns the attempts and the status.
UPDATE webhook_deliveries
SET attempts = attempts + 1, last_error = %(error)s, next_attempt_at = now() + make_interval(secs => %(wait)s),
    status = CASE WHEN attempts + 1 >= %(max_attempts)s THEN 'dead' ELSE status END
WHERE subscription_id = %(subscription_id)s AND event_id = %(event_id)s AND status = 'pending'
RETURNING attempts, status

-- name: dead_letters
-- Dead letters of the namespace (of one subscription when %(subscription_id)s is not empty), oldest first.
SELECT subscription_id, event_id, cursor, body, attempts, last_error FROM webhook_deliveries
WHERE namespace = %(namespace)s AND status = 'dead'
    AND (%(subscription_id)s = '' OR subscription_id = %(subscription_id)s)
ORDER BY subscription_id, cursor LIMIT %(limit)s

-- name: replay_dead_letters
-- Puts dead letters of a subscription back to pending (only %(event_ids)s unless it is NULL); returns
-- how many.
WITH replayed AS (
    UPDATE webhook_deliveries SET status = 'pending', attempts = 0, last_error = '', next_attempt_at = now()
    WHERE namespace = %(namespace)s AND subscription_id = %(subscription_id)s AND status = 'dead'
        AND (%(event_ids)s::bigint[] IS NULL OR event_id = ANY(%(event_ids)s::bigint[]))
    RETURNING 1
)
SELECT count(*) FROM replayed

-- name: subscriptions_due
-- Subscriptions with a pending delivery due now (the dispatcher's safety net for lost jobs).
SELECT DISTINCT subscription_id FROM webhook_deliveries WHERE status = 'pending' AND next_attempt_at <= now()
