-- Exactly-once writes: the key a change was made with, on its event, and each key with its
-- answer, written in the change's transaction: the same as ../0002_idempotency_keys.sql.

ALTER TABLE cart_events ADD COLUMN idempotency_key TEXT;

CREATE TABLE idempotency_keys (
    -- Whose key: a signed token's sub, or '' for the operator's token.
    scope TEXT NOT NULL,
    key TEXT NOT NULL,
    -- The request the key was first used with (the route and its arguments, canonical JSON).
    fingerprint TEXT NOT NULL,
    -- The event it made, and the commit answered again to a repeat: {"cart":…,"event":…}.
    seq BIGINT NOT NULL,
    answer TEXT NOT NULL,
    created_at BIGINT NOT NULL,   -- milliseconds since 1970
    PRIMARY KEY (scope, key)
);

CREATE INDEX idempotency_keys_by_seq ON idempotency_keys (seq);
CREATE INDEX idempotency_keys_by_time ON idempotency_keys (created_at);
