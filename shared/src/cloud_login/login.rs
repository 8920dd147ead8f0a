//! Browser sign-in with an authenticator: start (anyone), status (the browser, optionally held
//! until the decision), complete (once, into a web session).
//!
//! `start` never tells whether an account exists: an identifier that matches no usable account
//! of the category (unknown, ambiguous, expired, switched off, or with five open requests) gets a
//! decoy row with no user, of the same shape and through the same statements, so the answer and
//! its timing are the same.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::FromRow;
use tokio::time::Instant;
use uuid::Uuid;

use super::{
    CloudLoginError, DECISION_CHANNEL, LOGIN_SECONDS, PENDING_PER_ACCOUNT, POLL_SECONDS, cleanup,
    config, device, eligible, record,
};
use crate::Core;
use crate::approvals::{comparison_code, create_secret, hash_secret, secret_matches};
use crate::db::notify;
use crate::settings::AccountCategory;

/// The longest a status request is held: it ends well inside the front door's budget.
pub const HOLD_MAX: Duration = Duration::from_secs(15);
/// How often a held status re-reads the row when no notification arrives.
pub const HOLD_POLL: Duration = Duration::from_secs(2);

/// Parses a category name of the API.
pub fn parse_category(value: &str) -> Option<AccountCategory> {
    match value {
        "guest" => Some(AccountCategory::Guest),
        "login" => Some(AccountCategory::Login),
        "freeipa" => Some(AccountCategory::FreeIpa),
        _ => None,
    }
}

/// A started sign-in, as the browser keeps it.
#[derive(Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = CloudLoginStartedLogin)]
pub struct StartedLogin {
    pub request_id: Uuid,
    pub browser_secret: String,
    pub comparison: String,
    pub expires_at: DateTime<Utc>,
    pub poll_after_seconds: i64,
}

impl std::fmt::Debug for StartedLogin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StartedLogin({})", self.request_id)
    }
}

#[derive(FromRow)]
struct Candidate {
    id: Uuid,
    provider: String,
    profile: String,
    auth_epoch: i64,
    expired: bool,
}

/// Starts a sign-in for `identifier` (a uid or a mail address, any case) in `category`.
pub async fn start(
    core: &Core,
    identifier: &str,
    category: AccountCategory,
) -> Result<StartedLogin, CloudLoginError> {
    let identifier = identifier.trim();
    let mut tx = core.pool.begin().await?;
    let cfg = config::read_on(core, &mut tx).await?;
    cfg.require_feature()?;
    cleanup(&mut tx).await?;
    let candidates: Vec<Candidate> = sqlx::query_as(
        "SELECT id, provider, profile, auth_epoch,
                account_expires IS NOT NULL AND account_expires <= now() AS expired
           FROM auth.users
          WHERE lower(uid) = lower($1) OR lower(btrim(mail)) = lower($1)
          LIMIT 2",
    )
    .bind(identifier)
    .fetch_all(&mut *tx)
    .await?;
    // Both paths read the category switch, lock and count: only the values differ.
    let enabled = core.settings.category_enabled(&mut tx, category).await?;
    let mut candidate = match candidates.as_slice() {
        [one] if enabled && !one.expired && category_of(one) == Some(category) => Some(one),
        _ => None,
    };
    // The person's starts take turns (an advisory lock on their id), then a count that sees
    // every committed request (a count in the locking statement would read the snapshot from
    // before the wait). A decoy locks a random id: the same work, with nobody to wait for.
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended('app-login:' || $1::text, 0))")
        .bind(candidate.map_or_else(Uuid::new_v4, |c| c.id))
        .execute(&mut *tx)
        .await?;
    let open: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM auth.app_logins
          WHERE issuer = $1 AND user_id = $2 AND expires_at > now()
            AND state IN ('pending', 'approved')",
    )
    .bind(&cfg.issuer)
    .bind(candidate.map(|c| c.id))
    .fetch_one(&mut *tx)
    .await?;
    if open >= PENDING_PER_ACCOUNT {
        candidate = None;
    }
    let id = Uuid::new_v4();
    let browser_secret = create_secret();
    let comparison = comparison_code();
    let expires_at: DateTime<Utc> = sqlx::query_scalar(
        "INSERT INTO auth.app_logins
           (id, issuer, user_id, auth_epoch, category, browser_hash, challenge, comparison,
            expires_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, now() + make_interval(secs => $9))
         RETURNING expires_at",
    )
    .bind(id)
    .bind(&cfg.issuer)
    .bind(candidate.map(|c| c.id))
    .bind(candidate.map(|c| c.auth_epoch))
    .bind(category.as_str())
    .bind(hash_secret(&browser_secret))
    .bind(create_secret())
    .bind(&comparison)
    .bind(LOGIN_SECONDS as f64)
    .fetch_one(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(StartedLogin {
        request_id: id,
        browser_secret,
        comparison,
        expires_at,
        poll_after_seconds: POLL_SECONDS,
    })
}

fn category_of(candidate: &Candidate) -> Option<AccountCategory> {
    match (candidate.provider.as_str(), candidate.profile.as_str()) {
        ("ipa", _) => Some(AccountCategory::FreeIpa),
        ("local", "guest") => Some(AccountCategory::Guest),
        ("local", "user") => Some(AccountCategory::Login),
        _ => None,
    }
}

/// A sign-in's state as the browser sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
#[schema(as = CloudLoginState)]
pub enum LoginState {
    Pending,
    Approved,
    Denied,
    Consumed,
    Expired,
}

/// The state and the time left (by the database clock); a wrong secret is the same 404 as a
/// missing request.
async fn read_state(
    core: &Core,
    issuer: &str,
    id: Uuid,
    secret: &str,
) -> Result<(LoginState, Duration), CloudLoginError> {
    let row: Option<(String, bool, f64, String)> = sqlx::query_as(
        "SELECT state, expires_at <= now(),
                extract(epoch FROM expires_at - now())::float8 * 1000, browser_hash
           FROM auth.app_logins WHERE id = $1 AND issuer = $2",
    )
    .bind(id)
    .bind(issuer)
    .fetch_optional(&core.pool)
    .await?;
    let Some((state, expired, remaining_ms, _)) =
        row.filter(|(_, _, _, hash)| secret_matches(secret, hash))
    else {
        return Err(CloudLoginError::Missing);
    };
    let state = match (expired, state.as_str()) {
        (true, _) => LoginState::Expired,
        (false, "approved") => LoginState::Approved,
        (false, "denied") => LoginState::Denied,
        (false, "consumed") => LoginState::Consumed,
        (false, _) => LoginState::Pending,
    };
    Ok((state, Duration::from_millis(remaining_ms.max(0.0) as u64)))
}

/// The sign-in's state. With `hold`, a pending sign-in is answered when it is decided (woken by
/// the decision's notification, from any execution environment), when it expires, when `hold`
/// (at most [`HOLD_MAX`]) has passed, or when `abort` completes, whichever comes first; the
/// answer is the state at that moment.
pub async fn status(
    core: &Core,
    id: Uuid,
    secret: &str,
    hold: Option<Duration>,
    abort: impl Future<Output = ()>,
) -> Result<LoginState, CloudLoginError> {
    let cfg = config::read(core).await?;
    cfg.require_feature()?;
    let (state, remaining) = read_state(core, &cfg.issuer, id, secret).await?;
    let hold = hold.unwrap_or_default().min(HOLD_MAX);
    if state != LoginState::Pending || hold.is_zero() {
        return Ok(state);
    }
    // Wake just after the expiry, so the re-read sees it expired.
    let deadline = Instant::now() + hold.min(remaining + Duration::from_millis(20));
    let issuer = cfg.issuer.as_str();
    let payload = id.to_string();
    let waited = notify::wait_for(
        &core.notifications,
        DECISION_CHANNEL,
        &payload,
        deadline,
        HOLD_POLL,
        || async {
            let (state, _) = read_state(core, issuer, id, secret).await?;
            Ok::<_, CloudLoginError>((state != LoginState::Pending, state))
        },
    );
    tokio::select! {
        state = waited => Ok(state.unwrap_or(LoginState::Pending)),
        () = abort => Ok(read_state(core, issuer, id, secret).await?.0),
    }
}

#[derive(FromRow)]
struct ConsumeRow {
    state: String,
    expired: bool,
    user_id: Option<Uuid>,
    approved_by: Option<Uuid>,
    auth_epoch: Option<i64>,
    category: String,
}

/// Consumes an approved sign-in once; returns the person to issue a web session for. The
/// commit is the authorization boundary: a failure after it needs a new sign-in, never a
/// replay of the approval.
pub async fn complete(
    core: &Core,
    id: Uuid,
    secret: &str,
    request_id: Option<String>,
) -> Result<Uuid, CloudLoginError> {
    let mut tx = core.pool.begin().await?;
    let cfg = config::read_on(core, &mut tx).await?;
    cfg.require_feature()?;
    cleanup(&mut tx).await?;
    let snapshot: Option<(Option<Uuid>, String)> = sqlx::query_as(
        "SELECT approved_by, browser_hash FROM auth.app_logins WHERE id = $1 AND issuer = $2",
    )
    .bind(id)
    .bind(&cfg.issuer)
    .fetch_optional(&mut *tx)
    .await?;
    let Some((Some(approved_by), _)) = snapshot.filter(|(_, hash)| secret_matches(secret, hash))
    else {
        return Err(CloudLoginError::Conflict);
    };
    // Lock order is device, then request, as in a decision.
    let device = device::lock_active(core, &mut tx, &cfg.issuer, approved_by).await?;
    let row: Option<ConsumeRow> = sqlx::query_as(
        "SELECT state, expires_at <= now() AS expired, user_id, approved_by, auth_epoch, category
           FROM auth.app_logins WHERE id = $1 AND issuer = $2 FOR UPDATE",
    )
    .bind(id)
    .bind(&cfg.issuer)
    .fetch_optional(&mut *tx)
    .await?;
    let user = eligible(&mut tx, &core.settings, device.user_id).await?;
    let Some(row) = row else {
        return Err(CloudLoginError::Conflict);
    };
    if row.state != "approved"
        || row.expired
        || row.user_id != Some(device.user_id)
        || row.approved_by != Some(device.id)
        || row.auth_epoch != Some(user.auth_epoch)
        || row.category != user.category().as_str()
    {
        return Err(CloudLoginError::Conflict);
    }
    sqlx::query("UPDATE auth.app_logins SET state = 'consumed' WHERE id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    record(
        &mut tx,
        "login.consume",
        user.id,
        device.id,
        &[("requestId", serde_json::json!(id))],
        request_id,
    )
    .await?;
    tx.commit().await?;
    Ok(user.id)
}
