-- Exactly-once writes: the key a change was made with, on its event, and each key with its
-- answer, written in the change's transaction (see docs/PROTOCOL.md, "Exactly-once writes").

ALTER TABLE cart_events ADD COLUMN idempotency_key TEXT;

CREATE TABLE idempotency_keys (
    -- Whose key: a signed token's sub, or '' for the operator's token.
    scope TEXT NOT NULL,
    key TEXT NOT NULL,
    -- The request the key was first used with (the route and its arguments, canonical JSON).
    fingerprint TEXT NOT NULL,
    -- The event it made, and the commit answered again to a repeat: {"cart":…,"event":…}.
    seq INTEGER NOT NULL,
    answer TEXT NOT NULL,
    created_at INTEGER NOT NULL,  -- milliseconds since 1970
    PRIMARY KEY (scope, key)
);

CREATE INDEX idempotency_keys_by_seq ON idempotency_keys(seq);
CREATE INDEX idempotency_keys_by_time ON idempotency_keys(created_at);
