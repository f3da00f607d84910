-- The floor under a durable fanout write on PostgreSQL, for pgbench (benchmarks/writes.sh): what
-- one change writes, as plain statements in a transaction of its own, on fanout's schema (a
-- database a fanout-server has migrated), with the session setting fanout's own sessions have
-- (PGOPTIONS="-c fanout.writer=on"). One item added to a random cart of 1 000 (writes.lua's):
-- the seq row held, the cart's version and lines read, the event, the cart's version and the
-- line written, a notification with the event for the other servers, COMMIT (one WAL flush).
-- fanout-server does the same for a batch of changes in five round trips (PostgresBatch).
\set cart random(1, 1000)
\set sku random(1, 20)
BEGIN;
SELECT latest FROM event_seq FOR UPDATE;
SELECT version FROM carts WHERE id = 'c' || :cart::int::text;
SELECT sku, quantity, unit_price_cents, name, position FROM cart_items WHERE cart_id = 'c' || :cart::int::text ORDER BY position;
UPDATE event_seq SET latest = latest + 1 RETURNING latest AS seq \gset
INSERT INTO cart_events (seq, cart_id, kind, change, cart_version, committed_at)
    SELECT :seq::bigint, 'c' || :cart::int::text, 'itemAdded', '{"addedQuantity":1,"item":{"quantity":1,"sku":"s' || :sku::int::text || '","unitPriceCents":100}}',
        coalesce((SELECT version FROM carts WHERE id = 'c' || :cart::int::text), 0) + 1, (extract(epoch FROM clock_timestamp()) * 1000)::bigint;
INSERT INTO carts (id, version) VALUES ('c' || :cart::int::text, 1) ON CONFLICT (id) DO UPDATE SET version = carts.version + 1;
INSERT INTO cart_items (cart_id, sku, quantity, unit_price_cents, name, position) VALUES ('c' || :cart::int::text, 's' || :sku::int::text, 1, 100, NULL, :seq::bigint)
    ON CONFLICT (cart_id, sku) DO UPDATE SET quantity = least(cart_items.quantity + 1, 10000);
SELECT pg_notify('fanout_events', '{"seq":' || :seq::bigint::text || ',"cartId":"c' || :cart::int::text || '","kind":"itemAdded","change":{"addedQuantity":1,"item":{"quantity":1,"sku":"s' || :sku::int::text || '","unitPriceCents":100}},"version":1,"committedAt":0}');
COMMIT;
