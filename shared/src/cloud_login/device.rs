//! Signed device commands: `pending` (the sign-ins waiting for this person), `decide` (approve
//! or deny one, with its challenge and code) and `revoke` (the device removes itself).
//!
//! A command is accepted once: inside its window (issued at most 60 s ago and at most 5 s
//! ahead, expiring after now and at most 60 s after issue), signed by the device's enrolled
//! key, from an unrevoked device of this issuer whose owner is usable, with a `jti` the device
//! never used. The `jti` is stored only after the signature checked out, so nobody can burn
//! another device's command ids.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Value, json};
use sqlx::{FromRow, PgConnection};
use uuid::Uuid;

use super::proof::{self, Command, DeviceRequest, PublicKeyJwk};
use super::{
    CloudLoginError, DECISION_CHANNEL, PENDING_PER_ACCOUNT, POLL_SECONDS, PROOF_CLOCK_SKEW_SECONDS,
    PROOF_SECONDS, cleanup, config, eligible, record,
};
use crate::Core;
use crate::db::notify;

/// A sign-in waiting for a decision, as the authenticator shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, FromRow, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = CloudLoginPendingRequest)]
pub struct PendingLogin {
    #[sqlx(rename = "id")]
    pub request_id: Uuid,
    pub challenge: String,
    pub comparison: String,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
}

/// What a command answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandOutcome {
    Pending(Vec<PendingLogin>),
    Approved,
    Denied,
    Revoked,
}

impl CommandOutcome {
    /// The answer's body.
    pub fn answer(&self) -> CommandAnswer {
        match self {
            CommandOutcome::Pending(requests) => CommandAnswer::Pending {
                requests: requests.clone(),
                poll_after_seconds: POLL_SECONDS,
            },
            CommandOutcome::Approved => CommandAnswer::Done {
                state: CommandState::Approved,
            },
            CommandOutcome::Denied => CommandAnswer::Done {
                state: CommandState::Denied,
            },
            CommandOutcome::Revoked => CommandAnswer::Done {
                state: CommandState::Revoked,
            },
        }
    }
}

/// What a command answers: the waiting sign-ins (`pending`), or what was done (`decide`,
/// `revoke`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(untagged)]
#[schema(as = CloudLoginCommandAnswer)]
pub enum CommandAnswer {
    /// `pending`: at most five sign-ins waiting for this person, oldest first.
    Pending {
        #[schema(max_items = 5)]
        requests: Vec<PendingLogin>,
        #[serde(rename = "pollAfterSeconds")]
        poll_after_seconds: i64,
    },
    /// `decide` or `revoke`: the decision taken, or the device's own revocation.
    Done { state: CommandState },
}

/// What a `decide` or `revoke` command did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
#[schema(as = CloudLoginCommandState)]
pub enum CommandState {
    Approved,
    Denied,
    Revoked,
}

#[derive(FromRow)]
pub(crate) struct DeviceRow {
    pub id: Uuid,
    pub user_id: Uuid,
    pub public_key: Value,
}

/// Locks an unrevoked device of `issuer` whose owner is usable; anything else is 403.
pub(crate) async fn lock_active(
    core: &Core,
    conn: &mut PgConnection,
    issuer: &str,
    id: Uuid,
) -> Result<DeviceRow, CloudLoginError> {
    let device: DeviceRow = sqlx::query_as(
        "SELECT id, user_id, public_key FROM auth.app_devices
          WHERE id = $1 AND issuer = $2 AND revoked_at IS NULL
            FOR UPDATE",
    )
    .bind(id)
    .bind(issuer)
    .fetch_optional(&mut *conn)
    .await?
    .ok_or(CloudLoginError::Forbidden)?;
    eligible(conn, &core.settings, device.user_id).await?;
    Ok(device)
}

/// Whether a command's window holds at `now` (Unix seconds).
pub fn window_holds(issued_at: i64, expires_at: i64, now: i64) -> bool {
    issued_at <= now + PROOF_CLOCK_SKEW_SECONDS
        && issued_at >= now - PROOF_SECONDS
        && expires_at > now
        && expires_at > issued_at
        && expires_at <= issued_at + PROOF_SECONDS
}

/// Runs one signed command.
pub async fn command(
    core: &Core,
    request: &DeviceRequest,
    request_id: Option<String>,
) -> Result<CommandOutcome, CloudLoginError> {
    let mut tx = core.pool.begin().await?;
    let cfg = config::read_on(core, &mut tx).await?;
    cfg.require_feature()?;
    if request.issuer != cfg.issuer
        || !window_holds(
            request.issued_at,
            request.expires_at,
            Utc::now().timestamp(),
        )
    {
        return Err(CloudLoginError::Forbidden);
    }
    let device_id = Uuid::parse_str(&request.device_id).map_err(|_| CloudLoginError::Forbidden)?;
    let jti = Uuid::parse_str(&request.jti).map_err(|_| CloudLoginError::InvalidRequest)?;
    cleanup(&mut tx).await?;
    let device = lock_active(core, &mut tx, &cfg.issuer, device_id).await?;
    let key: PublicKeyJwk = serde_json::from_value(device.public_key.clone())
        .map_err(|_| CloudLoginError::Forbidden)?;
    if !proof::verify(&key, &proof::device_message(request), &request.signature) {
        return Err(CloudLoginError::Forbidden);
    }
    let fresh = sqlx::query(
        "INSERT INTO auth.app_device_proofs (device_id, jti, expires_at)
         VALUES ($1, $2, to_timestamp($3) + interval '60 seconds')
         ON CONFLICT DO NOTHING",
    )
    .bind(device.id)
    .bind(jti)
    .bind((request.expires_at + PROOF_CLOCK_SKEW_SECONDS) as f64)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    if fresh == 0 {
        return Err(CloudLoginError::Conflict);
    }
    sqlx::query("UPDATE auth.app_devices SET last_used_at = now() WHERE id = $1")
        .bind(device.id)
        .execute(&mut *tx)
        .await?;
    let outcome = match &request.command {
        Command::Revoke => {
            sqlx::query(
                "UPDATE auth.app_devices SET revoked_at = now(), revocation_reason = 'device'
                  WHERE id = $1",
            )
            .bind(device.id)
            .execute(&mut *tx)
            .await?;
            record(
                &mut tx,
                "device.revoke",
                device.user_id,
                device.id,
                &[("reason", json!("device"))],
                request_id,
            )
            .await?;
            CommandOutcome::Revoked
        }
        Command::Pending => {
            let user = eligible(&mut tx, &core.settings, device.user_id).await?;
            let requests: Vec<PendingLogin> = sqlx::query_as(
                "SELECT id, challenge, comparison, created_at, expires_at FROM auth.app_logins
                  WHERE issuer = $1 AND user_id = $2 AND state = 'pending' AND expires_at > now()
                    AND auth_epoch = $3 AND category = $4
                  ORDER BY created_at, id
                  LIMIT $5",
            )
            .bind(&cfg.issuer)
            .bind(device.user_id)
            .bind(user.auth_epoch)
            .bind(user.category().as_str())
            .bind(PENDING_PER_ACCOUNT)
            .fetch_all(&mut *tx)
            .await?;
            CommandOutcome::Pending(requests)
        }
        Command::Decide {
            request_id: login_id,
            challenge,
            comparison,
            approve,
        } => {
            let login_id = Uuid::parse_str(login_id).map_err(|_| CloudLoginError::Conflict)?;
            decide(
                core,
                &mut tx,
                &cfg.issuer,
                &device,
                login_id,
                (challenge, comparison, *approve),
                request_id,
            )
            .await?
        }
    };
    tx.commit().await?;
    Ok(outcome)
}

#[derive(FromRow)]
struct LoginRow {
    state: String,
    expired: bool,
    challenge: String,
    comparison: String,
    auth_epoch: Option<i64>,
    category: String,
}

async fn decide(
    core: &Core,
    conn: &mut PgConnection,
    issuer: &str,
    device: &DeviceRow,
    login_id: Uuid,
    (challenge, comparison, approve): (&str, &str, bool),
    request_id: Option<String>,
) -> Result<CommandOutcome, CloudLoginError> {
    let login: Option<LoginRow> = sqlx::query_as(
        "SELECT state, expires_at <= now() AS expired, challenge, comparison, auth_epoch, category
           FROM auth.app_logins WHERE id = $1 AND issuer = $2 AND user_id = $3
            FOR UPDATE",
    )
    .bind(login_id)
    .bind(issuer)
    .bind(device.user_id)
    .fetch_optional(&mut *conn)
    .await?;
    let user = eligible(conn, &core.settings, device.user_id).await?;
    let Some(login) = login else {
        return Err(CloudLoginError::Conflict);
    };
    let matches = crate::approvals::codes_match(challenge, &login.challenge)
        && crate::approvals::codes_match(comparison, &login.comparison);
    if login.state != "pending"
        || login.expired
        || !matches
        || login.auth_epoch != Some(user.auth_epoch)
        || login.category != user.category().as_str()
    {
        return Err(CloudLoginError::Conflict);
    }
    let state = if approve { "approved" } else { "denied" };
    sqlx::query("UPDATE auth.app_logins SET state = $2, approved_by = $3 WHERE id = $1")
        .bind(login_id)
        .bind(state)
        .bind(device.id)
        .execute(&mut *conn)
        .await?;
    record(
        conn,
        if approve {
            "login.approve"
        } else {
            "login.deny"
        },
        device.user_id,
        device.id,
        &[("requestId", json!(login_id))],
        request_id,
    )
    .await?;
    // Delivered at commit: a browser waiting in any execution environment wakes up.
    notify::notify(conn, DECISION_CHANNEL, &login_id.to_string()).await?;
    Ok(if approve {
        CommandOutcome::Approved
    } else {
        CommandOutcome::Denied
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_is_sixty_seconds_with_five_ahead() {
        let now = 1_700_000_000;
        assert!(window_holds(now, now + 60, now));
        assert!(window_holds(now - 59, now + 1, now));
        assert!(window_holds(now + 5, now + 65, now), "5 s ahead");
        assert!(!window_holds(now + 6, now + 66, now), "6 s ahead");
        assert!(!window_holds(now - 61, now + 1, now), "issued too long ago");
        assert!(!window_holds(now - 10, now, now), "expired");
        assert!(!window_holds(now, now + 61, now), "lives longer than 60 s");
        assert!(!window_holds(now, now, now), "expires at issue");
        assert!(!window_holds(1, 61, now), "issued at 1");
    }
}
