//! Session tokens: the `session_token` (browser) and `pwa_session` (mobile app) cookies.
//!
//! A token is an RS256 JWT (`typ: cloud-session+jwt`) with strict claims; its kind is not in the
//! token but in its family row (`pwa_device_id` set ⇒ app session). A token is valid while its
//! signature verifies (30 s skew) and its family, user and key say so in Postgres.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::PgConnection;
use uuid::Uuid;

use super::constants::{
    IDENTITY_CLOCK_TOLERANCE_SECONDS, MAX_COMPACT_TOKEN_BYTES, ROLLOUT_MARGIN, SESSION_AUDIENCE,
    SESSION_TOKEN_TYPE,
};
use super::metrics::Counter;
use super::{Identity, IdentityError, IssueOptions, Purpose, SigningScope, jwt};
use crate::auth::{SessionKind, UserRecord};
use crate::settings::{AccountCategory, Settings};

/// Cookie of a browser session.
pub const SESSION_COOKIE: &str = "session_token";
/// Cookie of a mobile-app session (the only session cookie every app receives on `/`).
pub const APP_SESSION_COOKIE: &str = "pwa_session";
/// Lifetime of a mobile-app session.
pub const APP_SESSION_SECONDS: i64 = 86_400;

/// The claims of a session token; unknown claims are refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionClaims {
    pub iss: String,
    pub aud: String,
    pub token_use: String,
    pub sub: Uuid,
    pub sid: Uuid,
    pub auth_epoch: u64,
    pub iat: u64,
    pub exp: u64,
}

/// What to issue.
#[derive(Debug, Clone)]
pub struct SessionRequest {
    pub user_id: Uuid,
    /// `None` for a browser session; the device for a mobile-app session.
    pub device_id: Option<Uuid>,
    /// Lifetime; defaults to `user.session.expiry_hours` (browser) or 24 h (app).
    pub ttl: Option<Duration>,
    pub request_id: Option<String>,
    pub user_agent: Option<String>,
    pub legal_pending: bool,
}

impl SessionRequest {
    pub fn web(user_id: Uuid) -> SessionRequest {
        SessionRequest {
            user_id,
            device_id: None,
            ttl: None,
            request_id: None,
            user_agent: None,
            legal_pending: false,
        }
    }
}

/// An issued session.
#[derive(Clone, PartialEq, Eq)]
pub struct IssuedSession {
    pub token: String,
    pub sid: Uuid,
    pub issued_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
}

impl std::fmt::Debug for IssuedSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IssuedSession")
            .field("token", &"[REDACTED]")
            .field("sid", &self.sid)
            .field("issued_at", &self.issued_at)
            .field("expires_at", &self.expires_at)
            .finish()
    }
}

impl IssuedSession {
    /// Seconds until expiry, for the cookie's `Max-Age`.
    pub fn max_age_seconds(&self) -> i64 {
        (self.expires_at - Utc::now()).num_seconds().max(1)
    }
}

/// The configured lifetime of a browser session: `user.session.expiry_hours` (finite, ≥ 1).
pub async fn web_session_ttl(
    settings: &Settings,
    conn: &mut PgConnection,
) -> Result<Duration, IdentityError> {
    let hours = settings
        .get_uncached(conn, "user.session.expiry_hours")
        .await?
        .as_f64()
        .filter(|h| h.is_finite() && *h >= 1.0)
        .unwrap_or(8.0);
    Ok(Duration::from_secs((hours * 3600.0).floor() as u64))
}

/// Issues a session inside an issuance scope (the caller's transaction, which may also hold its
/// own writes, such as a device change): locks the user, checks the account category, makes
/// sure the key's verify window covers the session, inserts the family and signs.
pub async fn issue_in_scope(
    scope: &mut SigningScope,
    settings: &Settings,
    request: &SessionRequest,
) -> Result<IssuedSession, IdentityError> {
    let user = crate::auth::lock_user(&mut scope.tx, request.user_id)
        .await?
        .ok_or(IdentityError::AccountUnavailable)?;
    if !settings
        .category_enabled(&mut scope.tx, user.category())
        .await?
    {
        return Err(IdentityError::AccountUnavailable);
    }
    let ttl = match (request.ttl, request.device_id) {
        (Some(ttl), _) => ttl,
        (None, Some(_)) => Duration::from_secs(APP_SESSION_SECONDS as u64),
        (None, None) => web_session_ttl(settings, &mut scope.tx).await?,
    };
    if ttl.is_zero() {
        return Err(IdentityError::ExpiryBeforeIssuance);
    }
    let window =
        ttl.as_secs_f64() + IDENTITY_CLOCK_TOLERANCE_SECONDS as f64 + ROLLOUT_MARGIN.as_secs_f64();
    // Normally a no-op (keys verify a day past their signing period); it only touches the row
    // when a session would outlive the key's window, so concurrent issuances do not queue here.
    sqlx::query(
        "UPDATE auth.signing_keys SET verify_until = now() + make_interval(secs => $2)
         WHERE kid = $1 AND verify_until < now() + make_interval(secs => $2)",
    )
    .bind(&scope.signer.kid)
    .bind(window)
    .execute(&mut *scope.tx)
    .await?;
    let sid = Uuid::new_v4();
    let (issued_at, expires_at): (DateTime<Utc>, DateTime<Utc>) = sqlx::query_as(
        "INSERT INTO auth.session_families (sid, user_id, auth_epoch, signing_kid, issued_at,
            expires_at, created_request_id, created_user_agent, legal_pending, pwa_device_id)
         VALUES ($1, $2, $3, $4, now(), now() + make_interval(secs => $5), $6, $7, $8, $9)
         RETURNING issued_at, expires_at",
    )
    .bind(sid)
    .bind(user.id)
    .bind(user.auth_epoch)
    .bind(&scope.signer.kid)
    .bind(ttl.as_secs_f64())
    .bind(bounded(request.request_id.as_deref(), 256))
    .bind(bounded(request.user_agent.as_deref(), 1024))
    .bind(request.legal_pending)
    .bind(request.device_id)
    .fetch_one(&mut *scope.tx)
    .await?;
    if expires_at <= issued_at {
        return Err(IdentityError::ExpiryBeforeIssuance);
    }
    let claims = SessionClaims {
        iss: scope.issuer.clone(),
        aud: SESSION_AUDIENCE.into(),
        token_use: "session".into(),
        sub: user.id,
        sid,
        auth_epoch: user.auth_epoch.max(0) as u64,
        iat: issued_at.timestamp().max(0) as u64,
        exp: expires_at.timestamp().max(0) as u64,
    };
    let token = scope.sign(SESSION_TOKEN_TYPE, &claims)?;
    Ok(IssuedSession {
        token,
        sid,
        issued_at,
        expires_at,
    })
}

/// Ends one session family (a sign-out of that session only); returns whether it was live.
pub async fn revoke_family(
    conn: &mut PgConnection,
    sid: Uuid,
    reason: &str,
    request_id: Option<&str>,
) -> Result<bool, IdentityError> {
    let result = sqlx::query(
        "UPDATE auth.session_families
         SET revoked_at = now(), revocation_reason = $2, revoked_request_id = $3
         WHERE sid = $1 AND revoked_at IS NULL",
    )
    .bind(sid)
    .bind(reason)
    .bind(bounded(request_id, 256))
    .execute(conn)
    .await?;
    Ok(result.rows_affected() == 1)
}

/// Session families of accounts whose `account_expires` has passed, ended per run.
pub const EXPIRED_ACCOUNT_BATCH: i64 = 500;

/// Ends the live session families (web and app) of accounts whose `account_expires` has passed,
/// [`EXPIRED_ACCOUNT_BATCH`] per call, so extending the account later does not bring them back.
/// Validation refuses them already; this makes the end permanent. Returns how many ended.
pub async fn end_sessions_of_expired_accounts(pool: &sqlx::PgPool) -> Result<u64, IdentityError> {
    let result = sqlx::query(
        "UPDATE auth.session_families
         SET revoked_at = now(), revocation_reason = 'account_expired'
         WHERE sid IN (
           SELECT f.sid FROM auth.session_families f JOIN auth.users u ON u.id = f.user_id
           WHERE f.revoked_at IS NULL AND f.expires_at > now()
             AND u.account_expires IS NOT NULL AND u.account_expires <= now()
           ORDER BY f.sid LIMIT $1 FOR UPDATE OF f SKIP LOCKED)",
    )
    .bind(EXPIRED_ACCOUNT_BATCH)
    .execute(pool)
    .await?;
    Ok(result.rows_affected())
}

/// Cuts a text to at most `max` bytes on a character boundary.
fn bounded(value: Option<&str>, max: usize) -> Option<String> {
    let value = value?;
    let mut end = value.len().min(max);
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    Some(value[..end].to_string())
}

impl Identity {
    /// Issues a session on its own (family insert, signature and commit under one deadline).
    pub async fn issue_session(
        &self,
        settings: &Settings,
        request: SessionRequest,
        options: IssueOptions,
    ) -> Result<IssuedSession, IdentityError> {
        self.with_active_signer(Purpose::Session, options, |mut scope| async move {
            let result = issue_in_scope(&mut scope, settings, &request).await;
            (scope, result)
        })
        .await
    }

    /// Verifies a session token's signature and claims (no database check of the family):
    /// size ≤ 4 KiB, header exactly `{alg: RS256, kid, typ: cloud-session+jwt}`, a known session
    /// key, `aud` `cloud`, the current issuer, `token_use` `session`, 30 s skew. `None` also when
    /// the keys or the issuer cannot be read; [`Identity::check_session_token`] tells those apart.
    pub async fn verify_session_token(&self, token: &str) -> Option<SessionClaims> {
        self.check_session_token(token).await.ok().flatten()
    }

    /// [`Identity::verify_session_token`] for request paths: `Ok(None)` for a token that is not a
    /// valid session, `Err` when the database or the settings cannot be read, so a signed-in
    /// caller is never taken for an anonymous one during an outage.
    pub async fn check_session_token(
        &self,
        token: &str,
    ) -> Result<Option<SessionClaims>, IdentityError> {
        let claims = self.verify_session_inner(token).await;
        self.metrics().inc(if matches!(claims, Ok(Some(_))) {
            Counter::VerifySuccess
        } else {
            Counter::VerifyFailure
        });
        claims
    }

    async fn verify_session_inner(
        &self,
        token: &str,
    ) -> Result<Option<SessionClaims>, IdentityError> {
        if token.len() > MAX_COMPACT_TOKEN_BYTES {
            return Ok(None);
        }
        let Some(parsed) = jwt::parse(token) else {
            return Ok(None);
        };
        if parsed.typ != SESSION_TOKEN_TYPE || !jwt::is_session_kid(&parsed.kid) {
            return Ok(None);
        }
        let Some(key) = self
            .find_verification_key(Purpose::Session, &parsed.kid)
            .await?
        else {
            return Ok(None);
        };
        let Some(claims) = parsed.verify::<SessionClaims>(&key) else {
            return Ok(None);
        };
        let issuer = self.runtime_config().await?.issuer.clone();
        Ok(check_session_claims(&claims, &issuer, Utc::now().timestamp()).then_some(claims))
    }
}

/// The claim rules of a session token at time `now` (seconds).
pub fn check_session_claims(claims: &SessionClaims, issuer: &str, now: i64) -> bool {
    let tolerance = IDENTITY_CLOCK_TOLERANCE_SECONDS;
    let (Ok(exp), Ok(iat)) = (i64::try_from(claims.exp), i64::try_from(claims.iat)) else {
        return false;
    };
    claims.iss == issuer
        && claims.aud == SESSION_AUDIENCE
        && claims.token_use == "session"
        && exp > 0
        && exp > iat
        && exp > now.saturating_sub(tolerance)
        && iat <= now.saturating_add(tolerance)
}

/// A session the database confirms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidSession {
    pub user: UserRecord,
    pub sid: Uuid,
    pub kind: SessionKind,
    /// Whether the account manages a group (read in the same round trip, for its roles).
    pub manages_groups: bool,
}

/// The database side of a session's validity: its family (same sid and user) is neither revoked
/// nor expired, the family's, the token's and the user's epochs are equal, its signing key is not
/// revoked, the account has not expired, legal terms are accepted when they were pending, and
/// the account category is on.
pub async fn validate_session(
    conn: &mut PgConnection,
    settings: &Settings,
    claims: &SessionClaims,
) -> Result<Option<ValidSession>, IdentityError> {
    // The family, its key, the account, whether it manages a group and the stored switches of
    // the account categories in one round trip.
    #[derive(sqlx::FromRow)]
    struct SessionRow {
        pwa_device_id: Option<Uuid>,
        manages_groups: bool,
        freeipa_switch: Option<String>,
        guest_switch: Option<String>,
        login_switch: Option<String>,
        #[sqlx(flatten)]
        user: UserRecord,
    }
    let row: Option<SessionRow> = sqlx::query_as(
        "SELECT f.pwa_device_id, u.id, u.uid, u.provider, u.profile, u.display_name, u.mail,
                u.account_expires, u.admin, u.auth_epoch,
                EXISTS (SELECT 1 FROM auth.group_managers m WHERE m.user_id = u.id)
                    AS manages_groups,
                (SELECT value FROM settings.entries WHERE key = $4) AS freeipa_switch,
                (SELECT value FROM settings.entries WHERE key = $5) AS guest_switch,
                (SELECT value FROM settings.entries WHERE key = $6) AS login_switch
         FROM auth.session_families f
         JOIN auth.users u ON u.id = f.user_id
         JOIN auth.signing_keys k ON k.kid = f.signing_kid
         WHERE f.sid = $1 AND f.user_id = $2 AND f.revoked_at IS NULL AND f.expires_at > now()
           AND f.auth_epoch = $3 AND u.auth_epoch = $3 AND k.state <> 'revoked'
           AND (u.account_expires IS NULL OR u.account_expires > now())
           AND (NOT f.legal_pending
                OR EXISTS (SELECT 1 FROM auth.legal_acceptances a WHERE a.user_id = u.id))",
    )
    .bind(claims.sid)
    .bind(claims.sub)
    .bind(claims.auth_epoch as i64)
    .bind(AccountCategory::FreeIpa.setting_key())
    .bind(AccountCategory::Guest.setting_key())
    .bind(AccountCategory::Login.setting_key())
    .fetch_optional(&mut *conn)
    .await?;
    let Some(SessionRow {
        pwa_device_id: device,
        manages_groups,
        freeipa_switch,
        guest_switch,
        login_switch,
        user,
    }) = row
    else {
        return Ok(None);
    };
    let category = user.category();
    let switch = match category {
        AccountCategory::FreeIpa => freeipa_switch,
        AccountCategory::Guest => guest_switch,
        AccountCategory::Login => login_switch,
    };
    if !settings.category_enabled_in(category, switch.as_deref())? {
        return Ok(None);
    }
    Ok(Some(ValidSession {
        user,
        sid: claims.sid,
        kind: match device {
            Some(device_id) => SessionKind::App { device_id },
            None => SessionKind::Web,
        },
        manages_groups,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims(now: i64) -> SessionClaims {
        SessionClaims {
            iss: "https://cloud.example".into(),
            aud: "cloud".into(),
            token_use: "session".into(),
            sub: Uuid::new_v4(),
            sid: Uuid::new_v4(),
            auth_epoch: 3,
            iat: now as u64,
            exp: (now + 3600) as u64,
        }
    }

    /// Scenarios 12, 13 and 15 (claim side): wrong audience, use or issuer, expiry beyond the
    /// skew, issuance in the future.
    #[test]
    fn claim_rules() {
        let now = 1_800_000_000;
        let issuer = "https://cloud.example";
        assert!(check_session_claims(&claims(now), issuer, now));
        let mut c = claims(now);
        c.aud = "app:mail".into();
        assert!(!check_session_claims(&c, issuer, now));
        let mut c = claims(now);
        c.token_use = "access".into();
        assert!(!check_session_claims(&c, issuer, now));
        assert!(!check_session_claims(
            &claims(now),
            "https://other.example",
            now
        ));
        let mut c = claims(now);
        c.exp = (now - 31) as u64;
        c.iat = (now - 3600) as u64;
        assert!(!check_session_claims(&c, issuer, now));
        c.exp = (now - 29) as u64;
        assert!(
            check_session_claims(&c, issuer, now),
            "within the 30 s skew"
        );
        let mut c = claims(now);
        c.iat = (now + 31) as u64;
        c.exp = (now + 3600) as u64;
        assert!(!check_session_claims(&c, issuer, now));
        let mut c = claims(now);
        c.exp = c.iat;
        assert!(!check_session_claims(&c, issuer, now));
    }

    #[test]
    fn unknown_claims_and_negative_numbers_are_refused() {
        let now = 1_800_000_000i64;
        let mut value = serde_json::to_value(claims(now)).expect("json");
        value["roles"] = serde_json::json!(["admin"]);
        assert!(serde_json::from_value::<SessionClaims>(value).is_err());
        let mut value = serde_json::to_value(claims(now)).expect("json");
        value["nbf"] = serde_json::json!(now + 31);
        assert!(serde_json::from_value::<SessionClaims>(value).is_err());
        let mut value = serde_json::to_value(claims(now)).expect("json");
        value["auth_epoch"] = serde_json::json!(-1);
        assert!(serde_json::from_value::<SessionClaims>(value).is_err());
    }

    #[test]
    fn bounded_cuts_on_character_boundaries() {
        assert_eq!(bounded(Some("äbc"), 1).as_deref(), Some(""));
        assert_eq!(bounded(Some("äbc"), 2).as_deref(), Some("ä"));
        assert_eq!(bounded(None, 2), None);
    }
}
