-- Data protection (docs/how-to/data-protection.md): erasure receipts, legal holds, retention settings.
-- erasure_receipts: one row per EraseSubject; holds hashes and counts only, never an erased value.
--   match_hashes  sha256 hex of salt || value for each value matched (salt: the receipt's own)
--   counts        a JSON object: kind of row -> how many were erased
CREATE TABLE IF NOT EXISTS erasure_receipts (
    receipt_id     text PRIMARY KEY,
    namespace      text NOT NULL,
    erase_time     timestamptz NOT NULL,
    principal      text NOT NULL,
    selector_kind  text NOT NULL,
    salt           text NOT NULL,
    match_hashes   jsonb NOT NULL DEFAULT jsonb_build_array(),
    counts         jsonb NOT NULL DEFAULT jsonb_build_object(),
    audit_event_id text NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS erasure_receipts_namespace_idx ON erasure_receipts (namespace, erase_time);
-- legal_holds: a hold on a whole namespace (subject_key '') or on one subject (a node key or a value's
-- hash), active while lifted_at is NULL.
CREATE TABLE IF NOT EXISTS legal_holds (
    hold_id      text PRIMARY KEY,
    namespace    text NOT NULL,
    subject_key  text NOT NULL DEFAULT '',
    reason       text NOT NULL DEFAULT '',
    created_by   text NOT NULL,
    create_time  timestamptz NOT NULL,
    lifted_by    text NOT NULL DEFAULT '',
    lift_time    timestamptz
);
CREATE INDEX IF NOT EXISTS legal_holds_active_idx ON legal_holds (namespace, subject_key)
    WHERE lift_time IS NULL;
-- retention_rules: how long data of one class lives in a namespace (data_class: observations,
-- memories, context_traces, audit_events; selector: the observation kind or memory tier, '' for all).
CREATE TABLE IF NOT EXISTS retention_rules (
    namespace    text NOT NULL,
    data_class   text NOT NULL,
    selector     text NOT NULL DEFAULT '',
    max_age      interval NOT NULL,
    update_time  timestamptz NOT NULL,
    PRIMARY KEY (namespace, data_class, selector)
);
