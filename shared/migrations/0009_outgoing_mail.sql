-- Outgoing mail: SMTP profiles, which apps may use them, which app may read which other app's
-- log, and the messages themselves, which are also the outbox of delivery.
CREATE EXTENSION IF NOT EXISTS pg_trgm;
CREATE SCHEMA IF NOT EXISTS outgoing_mail;

CREATE TABLE IF NOT EXISTS outgoing_mail.profiles (
    id                      uuid PRIMARY KEY,
    key                     text NOT NULL UNIQUE CHECK (key ~ '^[a-z0-9][a-z0-9-]{0,62}$'),
    name                    text NOT NULL CHECK (char_length(name) BETWEEN 1 AND 120),
    from_address            text NOT NULL CHECK (char_length(from_address) BETWEEN 3 AND 320),
    from_name               text,
    smtp_host               text NOT NULL CHECK (char_length(smtp_host) BETWEEN 1 AND 253),
    smtp_port               integer NOT NULL CHECK (smtp_port BETWEEN 1 AND 65535),
    -- true: implicit TLS; false: STARTTLS when the server offers it.
    smtp_secure             boolean NOT NULL,
    smtp_user               text,
    smtp_password_encrypted text,
    pace_per_minute         integer NOT NULL DEFAULT 60 CHECK (pace_per_minute BETWEEN 1 AND 6000),
    daily_recipient_limit   integer CHECK (daily_recipient_limit >= 1),
    max_attachment_bytes    integer NOT NULL DEFAULT 15728640
                            CHECK (max_attachment_bytes BETWEEN 1 AND 26214400),
    -- The bulk lane's pacing gate: the earliest time the next bulk message may start.
    next_bulk_slot_at       timestamptz NOT NULL DEFAULT now(),
    is_default              boolean NOT NULL DEFAULT false,
    revision                integer NOT NULL DEFAULT 1 CHECK (revision >= 1),
    created_at              timestamptz NOT NULL DEFAULT now(),
    updated_at              timestamptz NOT NULL DEFAULT now(),
    updated_by              text,
    -- Bounce mailbox (IMAP), read by nothing yet.
    imap_host               text,
    imap_port               integer CHECK (imap_port BETWEEN 1 AND 65535),
    imap_secure             boolean,
    imap_user               text,
    imap_password_encrypted text,
    imap_mailbox            text
);

-- At most one default profile.
CREATE UNIQUE INDEX IF NOT EXISTS outgoing_mail_one_default
    ON outgoing_mail.profiles (is_default) WHERE is_default;

CREATE TABLE IF NOT EXISTS outgoing_mail.app_access (
    app_id     text PRIMARY KEY CHECK (char_length(app_id) BETWEEN 1 AND 200),
    mode       text NOT NULL CHECK (mode IN ('default', 'selected')),
    updated_at timestamptz NOT NULL DEFAULT now(),
    updated_by text
);

CREATE TABLE IF NOT EXISTS outgoing_mail.app_profiles (
    app_id     text NOT NULL,
    profile_id uuid NOT NULL REFERENCES outgoing_mail.profiles (id) ON DELETE CASCADE,
    PRIMARY KEY (app_id, profile_id)
);

-- Which app (reader) may read which other app's (source) mail log. Core's own log is never
-- granted, and an app always reads its own.
CREATE TABLE IF NOT EXISTS outgoing_mail.app_log_access (
    app_id        text NOT NULL CHECK (char_length(app_id) BETWEEN 1 AND 200),
    source_app_id text NOT NULL CHECK (char_length(source_app_id) BETWEEN 1 AND 200),
    created_at    timestamptz NOT NULL DEFAULT now(),
    created_by    text,
    PRIMARY KEY (app_id, source_app_id),
    CONSTRAINT app_log_access_not_self CHECK (app_id <> source_app_id),
    CONSTRAINT app_log_access_not_core CHECK (source_app_id <> 'core')
);

CREATE TABLE IF NOT EXISTS outgoing_mail.messages (
    id                uuid PRIMARY KEY,
    app_id            text NOT NULL CHECK (char_length(app_id) BETWEEN 1 AND 200),
    profile_id        uuid REFERENCES outgoing_mail.profiles (id) ON DELETE SET NULL,
    profile_key       text NOT NULL,
    batch_id          uuid,
    lane              text NOT NULL CHECK (lane IN ('immediate', 'bulk')),
    idempotency_key   text CHECK (char_length(idempotency_key) BETWEEN 1 AND 200),
    ref_scope         text CHECK (char_length(ref_scope) BETWEEN 1 AND 200),
    ref_id            text CHECK (char_length(ref_id) BETWEEN 1 AND 200),
    to_addresses      text[] NOT NULL CHECK (cardinality(to_addresses) BETWEEN 1 AND 50),
    recipient_count   integer NOT NULL CHECK (recipient_count BETWEEN 1 AND 50),
    subject           text NOT NULL CHECK (char_length(subject) <= 998),
    text_body         text CHECK (octet_length(text_body) <= 524288),
    html_body         text,
    headers           jsonb,
    from_name         text,
    reply_to          text,
    -- Fixed across retries, so a duplicate delivery carries the same Message-ID.
    message_id_header text NOT NULL UNIQUE,
    attachments       jsonb NOT NULL DEFAULT '[]',
    attachment_refs   jsonb,
    status            text NOT NULL
                      CHECK (status IN ('queued', 'sending', 'sent', 'failed', 'bounced', 'cancelled')),
    error_code        text,
    error_message     text,
    smtp_response     text,
    failures          jsonb NOT NULL DEFAULT '[]',
    attempt_count     integer NOT NULL DEFAULT 0 CHECK (attempt_count >= 0),
    next_attempt_at   timestamptz,
    deadline_at       timestamptz NOT NULL,
    actor_type        text CHECK (actor_type IN ('user', 'service_account')),
    actor_id          text,
    actor_name        text,
    created_at        timestamptz NOT NULL DEFAULT now(),
    sent_at           timestamptz,
    bounced_at        timestamptz,
    content_purged_at timestamptz,
    updated_at        timestamptz NOT NULL DEFAULT now(),
    UNIQUE (app_id, idempotency_key)
);

CREATE INDEX IF NOT EXISTS outgoing_mail_messages_ref
    ON outgoing_mail.messages (app_id, ref_scope, ref_id);
CREATE INDEX IF NOT EXISTS outgoing_mail_messages_due
    ON outgoing_mail.messages (status, lane, profile_id, next_attempt_at);
CREATE INDEX IF NOT EXISTS outgoing_mail_messages_quota
    ON outgoing_mail.messages (app_id, profile_id, created_at);
CREATE INDEX IF NOT EXISTS outgoing_mail_messages_log
    ON outgoing_mail.messages (app_id, created_at DESC, id);
CREATE INDEX IF NOT EXISTS outgoing_mail_messages_created
    ON outgoing_mail.messages (created_at, id);
CREATE INDEX IF NOT EXISTS outgoing_mail_messages_batch
    ON outgoing_mail.messages (batch_id) WHERE batch_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS outgoing_mail_messages_bulk_queue
    ON outgoing_mail.messages (profile_id, (coalesce(next_attempt_at, created_at)), id)
    WHERE status = 'queued' AND lane = 'bulk';
CREATE INDEX IF NOT EXISTS outgoing_mail_messages_bulk_deadline
    ON outgoing_mail.messages (deadline_at)
    WHERE status = 'queued' AND lane = 'bulk';

-- What `q` searches: the subject and the recipients, lowercased, one per line, so a term never
-- spans two fields. Functions are schema-qualified: an index expression must not depend on the
-- search path of whoever writes a row.
CREATE OR REPLACE FUNCTION outgoing_mail.search_text(subject text, addresses text[])
    RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
    AS $$ SELECT pg_catalog.lower(subject || E'\n' || pg_catalog.array_to_string(addresses, E'\n')) $$;

-- What `recipient` matches exactly (case-insensitively).
CREATE OR REPLACE FUNCTION outgoing_mail.lower_addresses(addresses text[])
    RETURNS text[] LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
    AS $$ SELECT pg_catalog.array_agg(pg_catalog.lower(address))
          FROM pg_catalog.unnest(addresses) AS address $$;

CREATE INDEX IF NOT EXISTS outgoing_mail_messages_search
    ON outgoing_mail.messages
    USING gin (outgoing_mail.search_text(subject, to_addresses) gin_trgm_ops);
CREATE INDEX IF NOT EXISTS outgoing_mail_messages_recipients
    ON outgoing_mail.messages
    USING gin (outgoing_mail.lower_addresses(to_addresses));

-- Attachment objects in the object store, counted against the installation's total while they
-- may live (the store expires them 48 hours after they were written, S3 up to a day later;
-- delivery and cancellation delete them earlier).
CREATE TABLE IF NOT EXISTS outgoing_mail.attachment_objects (
    object_key text PRIMARY KEY,
    app_id     text NOT NULL,
    bytes      bigint NOT NULL CHECK (bytes BETWEEN 0 AND 26214400),
    -- An upload the app performs itself: reserved at this size, verified when a message names it.
    upload     boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);

CREATE INDEX IF NOT EXISTS outgoing_mail_attachment_objects_expiry
    ON outgoing_mail.attachment_objects (expires_at);
