-- Cloud Login: authenticator apps holding a P-256 key approve browser sign-ins. Only public keys
-- and hashes of secrets are stored; private keys never leave the phone.

CREATE TABLE IF NOT EXISTS auth.app_devices (
    id           uuid PRIMARY KEY,
    -- The installation's origin the device enrolled with; every lookup is scoped to it.
    issuer       text NOT NULL CHECK (char_length(issuer) BETWEEN 1 AND 2048),
    user_id      uuid NOT NULL REFERENCES auth.users (id) ON DELETE CASCADE,
    name         text NOT NULL CHECK (char_length(name) BETWEEN 1 AND 80),
    -- A strict JWK {kty, crv, x, y} of a P-256 public key.
    public_key   jsonb NOT NULL CHECK (
                     jsonb_typeof(public_key) = 'object'
                     AND public_key ->> 'kty' = 'EC' AND public_key ->> 'crv' = 'P-256'
                     AND public_key ->> 'x' ~ '^[A-Za-z0-9_-]{43}$'
                     AND public_key ->> 'y' ~ '^[A-Za-z0-9_-]{43}$'
                     AND public_key - 'kty' - 'crv' - 'x' - 'y' = '{}'::jsonb),
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz,
    revoked_at   timestamptz,
    -- Who revoked it: the device itself, its owner, or an administrator (who notifies the owner).
    revocation_reason text CHECK (revocation_reason IN ('device', 'user', 'admin')),
    revocation_notified_at timestamptz,
    -- Enrolled by an administrator for this person.
    assisted     boolean NOT NULL,
    enrolled_by  uuid REFERENCES auth.users (id) ON DELETE SET NULL,
    notified_at  timestamptz,
    UNIQUE (issuer, user_id, public_key),
    CHECK ((revocation_reason IS NULL) = (revoked_at IS NULL))
);

CREATE INDEX IF NOT EXISTS app_devices_owner_idx
    ON auth.app_devices (issuer, user_id, id);
CREATE INDEX IF NOT EXISTS app_devices_unnotified_idx
    ON auth.app_devices (created_at) WHERE notified_at IS NULL;
CREATE INDEX IF NOT EXISTS app_devices_revocation_unnotified_idx
    ON auth.app_devices (revoked_at)
    WHERE revocation_reason = 'admin' AND revocation_notified_at IS NULL;

-- Sign-in looks an identifier up by uid or mail address, in any case.
CREATE INDEX IF NOT EXISTS users_lower_uid_idx ON auth.users (lower(uid));
CREATE INDEX IF NOT EXISTS users_lower_mail_idx ON auth.users (lower(btrim(mail)));

CREATE TABLE IF NOT EXISTS auth.app_pairings (
    id            uuid PRIMARY KEY,
    issuer        text NOT NULL CHECK (char_length(issuer) BETWEEN 1 AND 2048),
    user_id       uuid NOT NULL REFERENCES auth.users (id) ON DELETE CASCADE,
    initiated_by  uuid NOT NULL REFERENCES auth.users (id) ON DELETE CASCADE,
    assisted      boolean NOT NULL,
    -- The web session family that started it; only that session can inspect, confirm or cancel.
    initiator_sid uuid NOT NULL,
    secret_hash   text NOT NULL UNIQUE CHECK (secret_hash ~ '^[0-9a-f]{64}$'),
    expires_at    timestamptz NOT NULL,
    state         text NOT NULL DEFAULT 'pending'
                  CHECK (state IN ('pending', 'claimed', 'confirmed', 'cancelled')),
    device_id     uuid,
    public_key    jsonb CHECK (public_key IS NULL OR jsonb_typeof(public_key) = 'object'),
    name          text CHECK (char_length(name) BETWEEN 1 AND 80),
    comparison    text CHECK (comparison ~ '^[0-9]{6}$'),
    created_at    timestamptz NOT NULL DEFAULT now(),
    CHECK (expires_at > created_at),
    CHECK (assisted = (user_id <> initiated_by)),
    -- A claimed pairing carries the device's key, name, id and the code the web must type.
    CHECK (state = 'pending'
           OR state = 'cancelled'
           OR (device_id IS NOT NULL AND public_key IS NOT NULL AND name IS NOT NULL
               AND comparison IS NOT NULL))
);

CREATE INDEX IF NOT EXISTS app_pairings_user_idx ON auth.app_pairings (issuer, user_id, expires_at);
CREATE INDEX IF NOT EXISTS app_pairings_expiry_idx ON auth.app_pairings (expires_at);

CREATE TABLE IF NOT EXISTS auth.app_logins (
    id           uuid PRIMARY KEY,
    issuer       text NOT NULL CHECK (char_length(issuer) BETWEEN 1 AND 2048),
    -- NULL for a decoy: the identifier matched no usable account.
    user_id      uuid REFERENCES auth.users (id) ON DELETE CASCADE,
    auth_epoch   bigint CHECK (auth_epoch >= 0),
    category     text NOT NULL CHECK (category IN ('guest', 'login', 'freeipa')),
    browser_hash text NOT NULL CHECK (browser_hash ~ '^[0-9a-f]{64}$'),
    challenge    text NOT NULL CHECK (challenge ~ '^[A-Za-z0-9_-]{43}$'),
    comparison   text NOT NULL CHECK (comparison ~ '^[0-9]{6}$'),
    state        text NOT NULL DEFAULT 'pending'
                 CHECK (state IN ('pending', 'approved', 'denied', 'consumed')),
    approved_by  uuid REFERENCES auth.app_devices (id) ON DELETE SET NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    CHECK (expires_at > created_at),
    CHECK ((user_id IS NULL) = (auth_epoch IS NULL)),
    -- A decoy is never decided.
    CHECK (user_id IS NOT NULL OR state = 'pending')
);

CREATE INDEX IF NOT EXISTS app_logins_pending_idx
    ON auth.app_logins (issuer, user_id, expires_at) WHERE user_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS app_logins_expiry_idx ON auth.app_logins (expires_at);

-- Used command ids (`jti`) per device, kept until shortly after the command expired.
CREATE TABLE IF NOT EXISTS auth.app_device_proofs (
    device_id  uuid NOT NULL REFERENCES auth.app_devices (id) ON DELETE CASCADE,
    jti        uuid NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (device_id, jti)
);

CREATE INDEX IF NOT EXISTS app_device_proofs_expiry_idx ON auth.app_device_proofs (expires_at);
