-- Mobile-app pairing: devices (the installed app's key), pairings (the web-to-phone handshake)
-- and the link from a session family to the device it belongs to.

CREATE TABLE IF NOT EXISTS auth.pwa_devices (
    id                   uuid PRIMARY KEY,
    user_id              uuid NOT NULL REFERENCES auth.users (id) ON DELETE CASCADE,
    name                 text NOT NULL CHECK (char_length(name) BETWEEN 1 AND 80),
    platform             text NOT NULL CHECK (platform IN ('ios', 'android', 'other')),
    auth_epoch           bigint NOT NULL CHECK (auth_epoch >= 0),
    -- SHA-256 (hex) of the device secret; the secret itself is only ever in the app's cookie.
    secret_hash          text NOT NULL CHECK (secret_hash ~ '^[0-9a-f]{64}$'),
    previous_secret_hash text CHECK (previous_secret_hash ~ '^[0-9a-f]{64}$'),
    rotated_at           timestamptz NOT NULL,
    created_at           timestamptz NOT NULL DEFAULT now(),
    last_used_at         timestamptz NOT NULL DEFAULT now(),
    revoked_at           timestamptz,
    revocation_reason    text CHECK (char_length(revocation_reason) BETWEEN 1 AND 64),
    locale               text CHECK (char_length(locale) BETWEEN 1 AND 35),
    notified_at          timestamptz,
    CHECK (revocation_reason IS NULL OR revoked_at IS NOT NULL)
);

CREATE INDEX IF NOT EXISTS pwa_devices_active_idx
    ON auth.pwa_devices (user_id, created_at, id) WHERE revoked_at IS NULL;
CREATE INDEX IF NOT EXISTS pwa_devices_unnotified_idx
    ON auth.pwa_devices (created_at) WHERE notified_at IS NULL;
CREATE INDEX IF NOT EXISTS pwa_devices_cleanup_idx
    ON auth.pwa_devices (revoked_at, rotated_at);

CREATE TABLE IF NOT EXISTS auth.pwa_pairings (
    id                     uuid PRIMARY KEY,
    user_id                uuid NOT NULL REFERENCES auth.users (id) ON DELETE CASCADE,
    -- The web session family that started the pairing; only it can inspect, confirm or cancel.
    initiator_sid          uuid NOT NULL,
    auth_epoch             bigint NOT NULL CHECK (auth_epoch >= 0),
    link_secret_hash       text NOT NULL UNIQUE CHECK (link_secret_hash ~ '^[0-9a-f]{64}$'),
    completion_secret_hash text UNIQUE CHECK (completion_secret_hash ~ '^[0-9a-f]{64}$'),
    comparison             text CHECK (comparison ~ '^[0-9]{6}$'),
    platform               text CHECK (platform IN ('ios', 'android', 'other')),
    device_name            text CHECK (char_length(device_name) BETWEEN 1 AND 80),
    failed_attempts        smallint NOT NULL DEFAULT 0 CHECK (failed_attempts BETWEEN 0 AND 3),
    state                  text NOT NULL DEFAULT 'pending'
                           CHECK (state IN ('pending', 'claimed', 'confirmed', 'completed', 'cancelled')),
    device_id              uuid REFERENCES auth.pwa_devices (id) ON DELETE SET NULL,
    claim_until            timestamptz NOT NULL,
    expires_at             timestamptz NOT NULL,
    created_at             timestamptz NOT NULL DEFAULT now(),
    CHECK (claim_until <= expires_at),
    CHECK (expires_at > created_at),
    -- A claimed pairing carries what the phone sent and the code the web must type.
    CHECK (state IN ('pending', 'cancelled')
           OR (completion_secret_hash IS NOT NULL AND comparison IS NOT NULL
               AND platform IS NOT NULL AND device_name IS NOT NULL))
);

CREATE INDEX IF NOT EXISTS pwa_pairings_user_idx ON auth.pwa_pairings (user_id, expires_at);
CREATE INDEX IF NOT EXISTS pwa_pairings_expiry_idx ON auth.pwa_pairings (expires_at);

-- An app session belongs to its device; deleting the device deletes its families.
DO $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM pg_constraint WHERE conname = 'session_families_pwa_device_fk'
    ) THEN
        ALTER TABLE auth.session_families
            ADD CONSTRAINT session_families_pwa_device_fk
            FOREIGN KEY (pwa_device_id) REFERENCES auth.pwa_devices (id) ON DELETE CASCADE;
    END IF;
END
$$;

CREATE INDEX IF NOT EXISTS session_families_pwa_device_idx
    ON auth.session_families (pwa_device_id) WHERE pwa_device_id IS NOT NULL;
