-- A live update committed by any writer (another app's transaction that only runs SQL
-- included) notifies `k2b_outbox` with its app id at commit. A scheduled `outbox` run listens
-- and drains that outbox at once instead of at the next minute's sweep. Postgres folds the
-- identical notifications of one transaction into one.
CREATE OR REPLACE FUNCTION events.notify_live_row() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('k2b_outbox', NEW.app_id);
    RETURN NULL;
END;
$$;

DROP TRIGGER IF EXISTS live_row_notifies ON events.outbox;
CREATE TRIGGER live_row_notifies
    AFTER INSERT ON events.outbox
    FOR EACH ROW WHEN (NEW.kind = 'live')
    EXECUTE FUNCTION events.notify_live_row();
