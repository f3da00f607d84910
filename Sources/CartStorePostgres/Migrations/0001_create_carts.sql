-- Carts, their lines, and the event log that every committed change appends to: the same
-- tables as the SQLite schema (../0001_create_carts.sql), shared by every server on the database.

CREATE TABLE carts (
    id TEXT PRIMARY KEY,
    -- Grows by one per committed change; 0 never appears in this table (a cart exists once changed).
    version BIGINT NOT NULL CHECK (version >= 1)
);

CREATE TABLE cart_items (
    cart_id TEXT NOT NULL REFERENCES carts(id) ON DELETE CASCADE,
    sku TEXT NOT NULL,
    quantity INTEGER NOT NULL CHECK (quantity BETWEEN 1 AND 10000),
    unit_price_cents BIGINT NOT NULL CHECK (unit_price_cents BETWEEN 0 AND 1000000000),
    name TEXT CHECK (name IS NULL OR length(name) <= 200),
    -- The seq of the event that put this line in the cart: lines read back in the order they were added.
    position BIGINT NOT NULL,
    PRIMARY KEY (cart_id, sku)
);

CREATE INDEX cart_items_by_position ON cart_items (cart_id, position);

-- The one global seq: a mutation's transaction takes the next one by updating this row, and
-- holds the row's lock until it commits, so seq order is commit order on every server, and a
-- rolled-back change gives its seq back: committed seqs have no gaps.
CREATE TABLE event_seq (
    only_row BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (only_row),
    latest BIGINT NOT NULL
);
INSERT INTO event_seq (latest) VALUES (0);

CREATE TABLE cart_events (
    seq BIGINT PRIMARY KEY,
    cart_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    change TEXT NOT NULL,          -- JSON of the change (CartChange)
    cart_version BIGINT NOT NULL,
    committed_at BIGINT NOT NULL   -- milliseconds since 1970
);

CREATE INDEX cart_events_by_cart ON cart_events (cart_id, seq);
CREATE INDEX cart_events_by_time ON cart_events (committed_at);
