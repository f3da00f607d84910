-- A cart's lines no longer name their cart through a foreign key. Carts and lines are written
-- only by the store, in the one statement that writes a batch, which writes every cart whose
-- lines it writes; no cart is ever deleted. So the key's check could not fail, and it cost
-- PostgreSQL a lookup and a lock on the cart (FOR KEY SHARE) for every line written, about a
-- third of the database's CPU per write, all of it under the seq row that every server's
-- writes wait for (docs/PERFORMANCE.md, Writes).
ALTER TABLE cart_items DROP CONSTRAINT IF EXISTS cart_items_cart_id_fkey
