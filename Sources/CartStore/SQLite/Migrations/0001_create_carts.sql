-- Carts, their lines, and the event log (outbox) that every committed change appends to.

CREATE TABLE carts (
    id TEXT PRIMARY KEY NOT NULL,
    -- Grows by one per committed change; 0 never appears in this table (a cart exists once changed).
    version INTEGER NOT NULL CHECK (version >= 1)
);

CREATE TABLE cart_items (
    cart_id TEXT NOT NULL REFERENCES carts(id) ON DELETE CASCADE,
    sku TEXT NOT NULL,
    quantity INTEGER NOT NULL CHECK (quantity BETWEEN 1 AND 10000),
    unit_price_cents INTEGER NOT NULL CHECK (unit_price_cents BETWEEN 0 AND 1000000000),
    name TEXT CHECK (name IS NULL OR length(name) <= 200),
    -- The seq of the event that put this line in the cart: lines read back in the order they were added.
    position INTEGER NOT NULL,
    PRIMARY KEY (cart_id, sku)
) WITHOUT ROWID;

CREATE INDEX cart_items_by_position ON cart_items(cart_id, position);

-- AUTOINCREMENT: a seq is never reused, even after pruning removes the newest rows,
-- and a rolled-back transaction gives its seq back, so committed seqs have no gaps.
CREATE TABLE cart_events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    cart_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    change TEXT NOT NULL,          -- JSON of the change (CartChange)
    cart_version INTEGER NOT NULL,
    committed_at INTEGER NOT NULL  -- milliseconds since 1970
);

CREATE INDEX cart_events_by_cart ON cart_events(cart_id, seq);
CREATE INDEX cart_events_by_time ON cart_events(committed_at);
