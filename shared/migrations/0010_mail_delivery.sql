-- Delivery of outgoing mail: the daily tasks' last run (one process a day runs each), and the
-- rows whose attachment objects are still to delete after they ended.
CREATE TABLE IF NOT EXISTS outgoing_mail.daily_runs (
    task     text PRIMARY KEY,
    last_day date NOT NULL
);

CREATE INDEX IF NOT EXISTS outgoing_mail_messages_leftover_objects
    ON outgoing_mail.messages (id)
    WHERE attachment_refs IS NOT NULL AND status IN ('sent', 'failed', 'cancelled', 'bounced');
