-- Identity signing keys and session families. The key ring keeps at most one pending and one
-- active key per purpose; sessions reference the key that signed them, so a key is deleted only
-- once no family needs it.

CREATE TABLE IF NOT EXISTS auth.signing_keys (
    id                    uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    purpose               text NOT NULL CHECK (purpose IN ('session', 'invocation', 'oauth')),
    state                 text NOT NULL CHECK (state IN ('pending', 'active', 'retired', 'revoked')),
    kid                   text NOT NULL UNIQUE CHECK (kid ~ '^[0-9a-f-]{36}$'),
    alg                   text NOT NULL DEFAULT 'RS256' CHECK (alg = 'RS256'),
    public_jwk            jsonb NOT NULL CHECK (octet_length(public_jwk::text) <= 16384),
    encrypted_private_jwk text NOT NULL CHECK (octet_length(encrypted_private_jwk) <= 32768),
    encryption_key_id     text NOT NULL CHECK (encryption_key_id ~ '^[0-9a-f]{16}$'),
    created_at            timestamptz NOT NULL DEFAULT now(),
    activate_at           timestamptz NOT NULL,
    sign_until            timestamptz NOT NULL,
    verify_until          timestamptz NOT NULL,
    activated_at          timestamptz,
    retired_at            timestamptz,
    revoked_at            timestamptz,
    revoke_reason         text CHECK (char_length(revoke_reason) <= 500),
    CHECK (sign_until >= activate_at),
    CHECK (verify_until >= sign_until),
    CHECK (state <> 'active' OR activated_at IS NOT NULL),
    CHECK (state <> 'retired' OR retired_at IS NOT NULL),
    CHECK (state <> 'revoked' OR revoked_at IS NOT NULL)
);

CREATE UNIQUE INDEX IF NOT EXISTS signing_keys_one_pending_idx
    ON auth.signing_keys (purpose) WHERE state = 'pending';
CREATE UNIQUE INDEX IF NOT EXISTS signing_keys_one_active_idx
    ON auth.signing_keys (purpose) WHERE state = 'active';
CREATE INDEX IF NOT EXISTS signing_keys_verify_idx
    ON auth.signing_keys (purpose, state, verify_until);

CREATE TABLE IF NOT EXISTS auth.session_families (
    sid                uuid PRIMARY KEY,
    user_id            uuid NOT NULL REFERENCES auth.users (id) ON DELETE CASCADE,
    auth_epoch         bigint NOT NULL CHECK (auth_epoch >= 0),
    signing_kid        text NOT NULL REFERENCES auth.signing_keys (kid) ON DELETE RESTRICT,
    issued_at          timestamptz NOT NULL DEFAULT now(),
    expires_at         timestamptz NOT NULL,
    revoked_at         timestamptz,
    revocation_reason  text,
    created_request_id text CHECK (octet_length(created_request_id) <= 256),
    created_user_agent text CHECK (octet_length(created_user_agent) <= 1024),
    revoked_request_id text CHECK (octet_length(revoked_request_id) <= 256),
    -- Set when the session was issued before the user accepted the current legal terms.
    legal_pending      boolean NOT NULL DEFAULT false,
    -- Set for a mobile-app session: the device it belongs to (the device table and its foreign
    -- key arrive with the pairing schema). Null for a browser session.
    pwa_device_id      uuid,
    CHECK (expires_at > issued_at),
    CHECK (revocation_reason IS NULL OR revoked_at IS NOT NULL)
);

CREATE INDEX IF NOT EXISTS session_families_lookup_idx
    ON auth.session_families (sid, user_id, expires_at) WHERE revoked_at IS NULL;
CREATE INDEX IF NOT EXISTS session_families_user_idx
    ON auth.session_families (user_id, expires_at DESC) WHERE revoked_at IS NULL;
CREATE INDEX IF NOT EXISTS session_families_kid_idx
    ON auth.session_families (signing_kid, expires_at DESC);

-- Accepted legal terms (sessions issued while acceptance was pending need one).
CREATE TABLE IF NOT EXISTS auth.legal_acceptances (
    user_id     uuid NOT NULL REFERENCES auth.users (id) ON DELETE CASCADE,
    version     text NOT NULL DEFAULT 'current' CHECK (char_length(version) BETWEEN 1 AND 64),
    accepted_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, version)
);

-- Service accounts: user-delegated (act for a person) or resource-bound (act for an app or
-- another resource; a registered app's workload identity is one of these).
CREATE TABLE IF NOT EXISTS auth.service_accounts (
    id                uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    kind              text NOT NULL CHECK (kind IN ('user_delegated', 'resource_bound')),
    name              text NOT NULL CHECK (char_length(name) BETWEEN 1 AND 200),
    status            text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'disabled')),
    delegated_user_id uuid REFERENCES auth.users (id) ON DELETE CASCADE,
    app_id            text CHECK (app_id ~ '^[a-z][a-z0-9-]{0,79}$'),
    resource_type     text CHECK (char_length(resource_type) BETWEEN 1 AND 100),
    resource_id       text CHECK (char_length(resource_id) BETWEEN 1 AND 200),
    created_at        timestamptz NOT NULL DEFAULT now(),
    CHECK (kind <> 'user_delegated' OR delegated_user_id IS NOT NULL),
    CHECK (kind <> 'resource_bound' OR (resource_type IS NOT NULL AND resource_id IS NOT NULL))
);

CREATE UNIQUE INDEX IF NOT EXISTS service_accounts_app_workload_idx
    ON auth.service_accounts (app_id) WHERE kind = 'resource_bound' AND resource_type = 'cloud.app';

-- Credentials of service accounts. Tokens are `cld_` + 43 base64url characters (256 random
-- bits); only their SHA-256 is stored.
CREATE TABLE IF NOT EXISTS auth.service_account_credentials (
    id                 uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    service_account_id uuid NOT NULL REFERENCES auth.service_accounts (id) ON DELETE CASCADE,
    kind               text NOT NULL DEFAULT 'api_token' CHECK (kind IN ('api_token')),
    token_hash         text NOT NULL UNIQUE CHECK (token_hash ~ '^[0-9a-f]{64}$'),
    scopes             text[] NOT NULL DEFAULT '{}'
                       CHECK (cardinality(scopes) <= 100),
    created_at         timestamptz NOT NULL DEFAULT now(),
    last_used_at       timestamptz,
    revoked_at         timestamptz
);

CREATE INDEX IF NOT EXISTS service_account_credentials_account_idx
    ON auth.service_account_credentials (service_account_id) WHERE revoked_at IS NULL;
