-- Accounts. Every session, device and credential belongs to a row here.
CREATE SCHEMA IF NOT EXISTS auth;

CREATE TABLE IF NOT EXISTS auth.users (
    id               uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    uid              text NOT NULL UNIQUE
                     CHECK (char_length(uid) BETWEEN 1 AND 64 AND uid !~ '[[:space:][:cntrl:]]'),
    provider         text NOT NULL CHECK (provider IN ('local', 'ipa')),
    profile          text NOT NULL DEFAULT 'user' CHECK (profile IN ('user', 'guest')),
    display_name     text CHECK (char_length(display_name) <= 200),
    mail             text CHECK (char_length(mail) <= 254),
    account_expires  timestamptz,
    last_login_local timestamptz,
    -- Only local accounts carry a stored admin flag; FreeIPA admins come from group membership.
    admin            boolean NOT NULL DEFAULT false CHECK (NOT admin OR provider = 'local'),
    -- Sign out everywhere increments it; sessions, pairings and devices remember the epoch they
    -- were made in, and a mismatch ends them.
    auth_epoch       bigint NOT NULL DEFAULT 0 CHECK (auth_epoch >= 0),
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX IF NOT EXISTS users_mail_lower_idx ON auth.users (lower(mail)) WHERE mail IS NOT NULL;

-- Groups an account manages (grants the `group-manager` role).
CREATE TABLE IF NOT EXISTS auth.group_managers (
    user_id    uuid NOT NULL REFERENCES auth.users (id) ON DELETE CASCADE,
    group_name text NOT NULL CHECK (char_length(group_name) BETWEEN 1 AND 255),
    PRIMARY KEY (user_id, group_name)
);

-- Effective FreeIPA group memberships, synchronised from the directory; membership of a
-- configured admin group (`freeipa.groups.admin`) makes an IPA account an administrator.
CREATE TABLE IF NOT EXISTS auth.ipa_user_effective_groups (
    user_id    uuid NOT NULL REFERENCES auth.users (id) ON DELETE CASCADE,
    group_name text NOT NULL CHECK (char_length(group_name) BETWEEN 1 AND 255),
    PRIMARY KEY (user_id, group_name)
);
