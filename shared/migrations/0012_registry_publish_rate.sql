-- Registry publishes counted per app and minute, so one app cannot flood the registry (and every
-- dashboard reading it) from however many execution environments it runs in. One row per app:
-- the current minute and how many publishes it has seen.
CREATE TABLE IF NOT EXISTS registry.publish_rate (
    app_id       text PRIMARY KEY CHECK (app_id ~ '^[a-z][a-z0-9-]{0,79}$'),
    window_start timestamptz NOT NULL,
    publishes    integer NOT NULL CHECK (publishes > 0)
);
