-- The platform outbox: side effects written in the same transaction as the change that causes
-- them, drained by the `outbox` function in order per key, at least once, then deleted.
CREATE SCHEMA IF NOT EXISTS events;

CREATE TABLE IF NOT EXISTS events.outbox (
    seq             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id              uuid NOT NULL UNIQUE,
    app_id          text NOT NULL CHECK (char_length(app_id) BETWEEN 1 AND 80),
    kind            text NOT NULL CHECK (kind IN ('event', 'live')),
    ordering_key    text NOT NULL CHECK (char_length(ordering_key) BETWEEN 1 AND 600),
    coalesce_key    text CHECK (coalesce_key IS NULL OR (kind = 'live' AND char_length(coalesce_key) <= 700)),
    payload         jsonb NOT NULL CHECK (
                        octet_length(payload::text) <= CASE kind WHEN 'event' THEN 4096 ELSE 33792 END),
    attempts        integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    claimed_until   timestamptz,
    last_error      text CHECK (char_length(last_error) <= 1000),
    created_at      timestamptz NOT NULL DEFAULT now()
);

-- Claims walk one outbox in sequence order...
CREATE INDEX IF NOT EXISTS idx_events_outbox_sequence ON events.outbox (kind, app_id, seq);
-- ...and ask per key whether a row of it is claimed or waiting for a retry.
CREATE INDEX IF NOT EXISTS idx_events_outbox_busy ON events.outbox (kind, app_id, ordering_key)
    WHERE claimed_until IS NOT NULL OR attempts > 0;
-- Coalescing: one row per (app, coalesce key); the key carries the writing transaction's id.
CREATE UNIQUE INDEX IF NOT EXISTS idx_events_outbox_coalesce ON events.outbox (app_id, coalesce_key)
    WHERE coalesce_key IS NOT NULL;

-- The only write path. Coalesced writes merge only within one transaction (last payload wins,
-- the first row keeps its place). A live payload too large to ever publish becomes a reload
-- hint at write time, so no row can fail forever.
CREATE OR REPLACE FUNCTION events.enqueue(
    p_id uuid,
    p_app_id text,
    p_kind text,
    p_ordering_key text,
    p_payload jsonb,
    p_coalesce text DEFAULT NULL
) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_payload jsonb := p_payload;
BEGIN
    IF p_kind = 'live' AND octet_length(p_payload::text) > 32768 THEN
        v_payload := jsonb_build_object('v', 1, 'k', p_ordering_key, 'r', true);
    END IF;
    INSERT INTO events.outbox (id, app_id, kind, ordering_key, coalesce_key, payload)
    VALUES (
        p_id, p_app_id, p_kind, p_ordering_key,
        CASE WHEN p_coalesce IS NULL THEN NULL ELSE pg_current_xact_id()::text || ':' || p_coalesce END,
        v_payload)
    ON CONFLICT (app_id, coalesce_key) WHERE coalesce_key IS NOT NULL
    DO UPDATE SET payload = EXCLUDED.payload;
END;
$$;
