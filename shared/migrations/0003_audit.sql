-- Security-relevant actions, written in the same transaction as the change they describe.
CREATE SCHEMA IF NOT EXISTS audit;

CREATE TABLE IF NOT EXISTS audit.events (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    created_at      timestamptz NOT NULL DEFAULT now(),
    action          text NOT NULL CHECK (char_length(action) BETWEEN 1 AND 200),
    outcome         text NOT NULL CHECK (outcome IN ('allowed', 'denied', 'failed')),
    actor_user_id   uuid,
    actor_uid       text,
    actor_provider  text,
    actor_roles     text[] NOT NULL DEFAULT '{}',
    target_type     text,
    target_id       text,
    target_label    text,
    target_provider text,
    reason          text CHECK (char_length(reason) <= 503),
    error_code      text,
    error_message   text CHECK (char_length(error_message) <= 503),
    request_id      text CHECK (char_length(request_id) <= 256),
    metadata        jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(metadata) = 'object')
);

CREATE INDEX IF NOT EXISTS events_created_idx ON audit.events (created_at DESC, id DESC);
CREATE INDEX IF NOT EXISTS events_actor_idx ON audit.events (actor_user_id, created_at DESC)
    WHERE actor_user_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS events_action_idx ON audit.events (action, created_at DESC);
