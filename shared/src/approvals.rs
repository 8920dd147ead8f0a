//! Primitives both approval flows share (mobile-app pairing and Cloud Login): one-time pairing
//! secrets and comparison codes, the account eligibility check and the recent web sign-in check.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rand::{Rng, RngCore};
use sha2::{Digest, Sha256};
use sqlx::PgConnection;
use subtle::ConstantTimeEq;
use uuid::Uuid;

use crate::auth::{self, AuthError, UserRecord};
use crate::settings::{Settings, SettingsError};

/// Length of a pairing secret: 32 random bytes, unpadded base64url.
pub const SECRET_CHARS: usize = 43;

/// Why an account or session does not qualify.
#[derive(Debug, thiserror::Error)]
pub enum EligibilityError {
    /// The account is missing, expired or its category is switched off.
    #[error("the account cannot be used")]
    Forbidden,
    /// No recent web sign-in of this session.
    #[error("a recent web sign-in is needed")]
    Reauthenticate,
    #[error("settings: {0}")]
    Settings(#[from] SettingsError),
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
}

impl From<AuthError> for EligibilityError {
    fn from(error: AuthError) -> Self {
        match error {
            AuthError::Database(e) => EligibilityError::Database(e),
            AuthError::Settings(e) => EligibilityError::Settings(e),
            _ => EligibilityError::Forbidden,
        }
    }
}

/// A new secret: 32 random bytes as 43 unpadded base64url characters.
pub fn create_secret() -> String {
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    URL_SAFE_NO_PAD.encode(bytes)
}

/// The stored form of a secret: SHA-256, lowercase hex. Only hashes are ever stored.
pub fn hash_secret(value: &str) -> String {
    hex::encode(Sha256::digest(value.as_bytes()))
}

/// Whether `value` hashes to `hash`, compared in constant time (false when the lengths differ or
/// the stored hash is not hex).
pub fn secret_matches(value: &str, hash: &str) -> bool {
    let Ok(stored) = hex::decode(hash) else {
        return false;
    };
    let actual = Sha256::digest(value.as_bytes());
    stored.len() == actual.len() && bool::from(stored.as_slice().ct_eq(actual.as_slice()))
}

/// Whether two codes are equal: lengths first, then the bytes in constant time.
pub fn codes_match(given: &str, expected: &str) -> bool {
    given.len() == expected.len() && bool::from(given.as_bytes().ct_eq(expected.as_bytes()))
}

/// A random comparison code: 0..=999999, zero-padded to six digits.
pub fn comparison_code() -> String {
    format!("{:06}", rand::rngs::OsRng.gen_range(0..1_000_000u32))
}

/// Whether `value` has the shape of a secret (43 base64url characters).
pub fn is_secret_shaped(value: &str) -> bool {
    value.len() == SECRET_CHARS
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Whether an account may be used right now: it exists, has not expired and its category is on
/// (read from the database, never a cache). Returns the account.
pub async fn require_eligible_account(
    conn: &mut PgConnection,
    settings: &Settings,
    user_id: Uuid,
) -> Result<UserRecord, EligibilityError> {
    let user = auth::find_user(conn, user_id)
        .await?
        .ok_or(EligibilityError::Forbidden)?;
    require_eligible(conn, settings, &user).await?;
    Ok(user)
}

/// The eligibility rules for an account already read (or locked) by the caller.
pub async fn require_eligible(
    conn: &mut PgConnection,
    settings: &Settings,
    user: &UserRecord,
) -> Result<(), EligibilityError> {
    if account_expired(conn, user).await? {
        return Err(EligibilityError::Forbidden);
    }
    if !settings.category_enabled(conn, user.category()).await? {
        return Err(EligibilityError::Forbidden);
    }
    Ok(())
}

/// Whether the account's expiry has passed (by the database clock).
pub async fn account_expired(
    conn: &mut PgConnection,
    user: &UserRecord,
) -> Result<bool, sqlx::Error> {
    if user.account_expires.is_none() {
        return Ok(false);
    }
    sqlx::query_scalar(
        "SELECT account_expires IS NOT NULL AND account_expires <= now() FROM auth.users WHERE id = $1",
    )
    .bind(user.id)
    .fetch_optional(conn)
    .await
    .map(|expired| expired.unwrap_or(true))
}

/// Whether the user has accepted the legal terms.
pub async fn legal_accepted(conn: &mut PgConnection, user_id: Uuid) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM auth.legal_acceptances WHERE user_id = $1)")
        .bind(user_id)
        .fetch_one(conn)
        .await
}

/// Records the user's acceptance of the current legal terms (idempotent).
pub async fn accept_legal_terms(conn: &mut PgConnection, user_id: Uuid) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO auth.legal_acceptances (user_id) VALUES ($1)
         ON CONFLICT (user_id, version) DO NOTHING",
    )
    .bind(user_id)
    .execute(conn)
    .await
    .map(|_| ())
}

/// A recent web sign-in: the family `sid` of `user_id` is live (not revoked, not expired, in the
/// user's current epoch), is a browser session (app sessions renew daily without a sign-in and
/// never count) and was issued less than `seconds` ago; then the account must be eligible.
pub async fn require_recent_web_session(
    conn: &mut PgConnection,
    settings: &Settings,
    user_id: Uuid,
    sid: Uuid,
    seconds: i64,
) -> Result<UserRecord, EligibilityError> {
    let recent: bool = sqlx::query_scalar(
        "SELECT EXISTS (
           SELECT 1 FROM auth.session_families f JOIN auth.users u ON u.id = f.user_id
           WHERE f.sid = $1 AND f.user_id = $2 AND f.revoked_at IS NULL
             AND f.auth_epoch = u.auth_epoch AND f.expires_at > now()
             AND f.pwa_device_id IS NULL
             AND f.issued_at > now() - make_interval(secs => $3))",
    )
    .bind(sid)
    .bind(user_id)
    .bind(seconds as f64)
    .fetch_one(&mut *conn)
    .await?;
    if !recent {
        return Err(EligibilityError::Reauthenticate);
    }
    require_eligible_account(conn, settings, user_id).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_43_base64url_characters_and_unique() {
        let a = create_secret();
        let b = create_secret();
        assert_eq!(a.len(), SECRET_CHARS);
        assert!(is_secret_shaped(&a));
        assert_ne!(a, b);
    }

    #[test]
    fn hashes_match_only_their_secret() {
        let secret = create_secret();
        let hash = hash_secret(&secret);
        assert_eq!(hash.len(), 64);
        assert!(secret_matches(&secret, &hash));
        assert!(!secret_matches(&create_secret(), &hash));
        assert!(!secret_matches(&secret, &hash[..62]), "shorter hash");
        assert!(!secret_matches(&secret, "zz"), "not hex");
        assert_ne!(hash, secret);
    }

    #[test]
    fn comparison_codes_are_six_digits() {
        for _ in 0..200 {
            let code = comparison_code();
            assert_eq!(code.len(), 6);
            assert!(code.bytes().all(|b| b.is_ascii_digit()));
        }
        assert!(codes_match("012345", "012345"));
        assert!(!codes_match("012345", "012346"));
        assert!(!codes_match("12345", "012345"));
    }

    #[test]
    fn secret_shape() {
        assert!(!is_secret_shaped(&"a".repeat(42)));
        assert!(!is_secret_shaped(&format!("{}=", "a".repeat(42))));
        assert!(!is_secret_shaped(&format!("{}+", "a".repeat(42))));
        assert!(is_secret_shaped(&format!("{}-_", "a".repeat(41))));
    }
}
