-- The live app registry: one entry per running app, published by its heartbeat and alive for
-- 180 s (three heartbeats) unless renewed. Readers ignore expired rows; maintenance prunes them.
CREATE SCHEMA IF NOT EXISTS registry;

CREATE TABLE IF NOT EXISTS registry.apps (
    app_id        text PRIMARY KEY CHECK (app_id ~ '^[a-z][a-z0-9-]{0,79}$'),
    entry         jsonb NOT NULL
                  CHECK (jsonb_typeof(entry) = 'object' AND octet_length(entry::text) <= 65536),
    registered_at timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz NOT NULL,
    CHECK (expires_at > updated_at)
);

CREATE INDEX IF NOT EXISTS apps_expires_idx ON registry.apps (expires_at);
