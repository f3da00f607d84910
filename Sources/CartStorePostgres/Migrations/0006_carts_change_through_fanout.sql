-- Carts, their lines and their events change only through fanout. Every server keeps the carts
-- its writes planned on (`CartCache`) and every subscriber follows the log: a change made by
-- hand (an UPDATE in psql) has no event, so no subscriber hears of it, and the next write
-- through a server that kept the cart writes it back over the fix. So a statement that would
-- change them from a session that is not fanout's is refused, with the way to do it instead
-- (docs/OPERATING.md, "Fixing a cart by hand"). fanout's own sessions say they are with the
-- setting `fanout.writer` (a startup parameter of each); a session that sets it itself takes
-- the consequences on its own (restart every server after).
CREATE FUNCTION fanout_refuse_changes_by_hand() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF coalesce(current_setting('fanout.writer', true), '') <> 'on' THEN
        RAISE EXCEPTION 'fanout: % is changed only through fanout''s HTTP API, so that every change has its event and every server and subscriber sees it', TG_TABLE_NAME
            USING ERRCODE = 'insufficient_privilege',
                HINT = 'change the cart with the operator''s token (docs/OPERATING.md, "Fixing a cart by hand")';
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER carts_change_through_fanout BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON carts
    FOR EACH STATEMENT EXECUTE FUNCTION fanout_refuse_changes_by_hand();

CREATE TRIGGER cart_items_change_through_fanout BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON cart_items
    FOR EACH STATEMENT EXECUTE FUNCTION fanout_refuse_changes_by_hand();

CREATE TRIGGER cart_events_change_through_fanout BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON cart_events
    FOR EACH STATEMENT EXECUTE FUNCTION fanout_refuse_changes_by_hand();
