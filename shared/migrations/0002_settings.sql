-- Installation settings. Values are JSON encrypted with a key derived from APP_SECRET
-- (AES-256-GCM, bound to the row's key), so a database dump does not reveal them.
CREATE SCHEMA IF NOT EXISTS settings;

CREATE TABLE IF NOT EXISTS settings.entries (
    key        text PRIMARY KEY CHECK (key ~ '^[a-z0-9_]+(\.[a-z0-9_]+)+$' AND char_length(key) <= 200),
    value      text NOT NULL CHECK (char_length(value) > 0),
    updated_at timestamptz NOT NULL DEFAULT now()
);
