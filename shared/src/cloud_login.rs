//! Cloud Login: an authenticator app holding an ECDSA P-256 key approves browser sign-ins.
//!
//! - Enrollment ([`enroll`]): a signed-in browser starts a pairing (a one-time secret shown as a
//!   link or QR code), the authenticator claims it with its public key and a signature, both
//!   screens show the same six-digit code, and the browser confirms it.
//! - Device commands ([`device`]): every request of the authenticator is a one-use signed proof
//!   (`pending`, `decide`, `revoke`) inside a short time window.
//! - Browser sign-in ([`login`]): anyone can start one for an identifier; an unknown account gets a
//!   decoy of the same shape. The browser waits, the authenticator approves with the matching
//!   code, and the browser completes once to receive its web session.
//! - Management ([`manage`]): the person's own devices, and administrators' view of another's.
//!
//! The settings are re-read for every operation; all lookups are scoped to the installation's
//! issuer, so two installations sharing a database never accept each other's keys or requests.

pub mod config;
pub mod device;
pub mod enroll;
pub mod error;
pub mod login;
pub mod manage;
pub mod proof;

use serde_json::Value;
use sqlx::PgConnection;
use uuid::Uuid;

pub use config::LoginConfig;
pub use error::CloudLoginError;

use crate::approvals;
use crate::audit::{self, AuditActor, AuditRecord, AuditTarget, Outcome};
use crate::auth::UserRecord;
use crate::settings::Settings;

/// The protocol name every signed message starts with.
pub const PROTOCOL: &str = "cloud-app-approval-v1";
/// Base path of the API.
pub const API_PATH: &str = "/api/auth/app-approval/v1";
/// Largest request body.
pub const BODY_BYTES: usize = 8192;
/// How long a started pairing lives.
pub const PAIRING_SECONDS: i64 = 300;
/// How long a browser sign-in waits for its approval.
pub const LOGIN_SECONDS: i64 = 300;
/// The window of a signed device command.
pub const PROOF_SECONDS: i64 = 60;
/// How far a device's clock may run ahead.
pub const PROOF_CLOCK_SKEW_SECONDS: i64 = 5;
/// A pairing can only be started, inspected or confirmed from a web sign-in at most this old.
pub const RECENT_SESSION_SECONDS: i64 = 600;
/// Active devices per account.
pub const DEVICES_PER_ACCOUNT: i64 = 20;
/// Open pairings, and open sign-ins, per account.
pub const PENDING_PER_ACCOUNT: i64 = 5;
/// Devices per page of a list.
pub const PAGE_SIZE: i64 = 20;
/// How often the browser and the authenticator poll.
pub const POLL_SECONDS: i64 = 5;
/// Longest device name, in characters.
pub const NAME_MAX_CHARS: usize = 80;
/// Expired rows each accepted write deletes per table at most.
pub const CLEANUP_BATCH: i64 = 100;
/// The authenticator app's origin when none is set.
pub const DEFAULT_APP_ORIGIN: &str = "https://cloud-login.pwa.k2b.dev";
/// The Postgres channel a decision is announced on (payload: the request id).
pub const DECISION_CHANNEL: &str = "app_login_decided";

/// The limits as `/info` publishes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = CloudLoginLimits)]
pub struct Limits {
    /// Largest request body, in bytes.
    pub body_bytes: usize,
    /// How long a started pairing lives.
    pub pairing_seconds: i64,
    /// How long a browser sign-in waits for its approval.
    pub login_seconds: i64,
    /// The window of a signed device command.
    pub proof_seconds: i64,
    /// How old a web sign-in may be to start, inspect or confirm a pairing.
    pub recent_session_seconds: i64,
    /// Active devices per account.
    pub devices_per_account: i64,
    /// Open pairings, and open sign-ins, per account.
    pub pending_per_account: i64,
    /// Devices per page of a list.
    pub page_size: i64,
    /// How often the browser and the authenticator poll.
    pub poll_seconds: i64,
}

/// The limits as `/info` publishes them.
pub fn limits() -> Limits {
    Limits {
        body_bytes: BODY_BYTES,
        pairing_seconds: PAIRING_SECONDS,
        login_seconds: LOGIN_SECONDS,
        proof_seconds: PROOF_SECONDS,
        recent_session_seconds: RECENT_SESSION_SECONDS,
        devices_per_account: DEVICES_PER_ACCOUNT,
        pending_per_account: PENDING_PER_ACCOUNT,
        page_size: PAGE_SIZE,
        poll_seconds: POLL_SECONDS,
    }
}

/// A signed-in person acting on the management routes: their session family and whether they
/// hold the administrator role right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ManageActor {
    pub user_id: Uuid,
    pub sid: Uuid,
    pub admin: bool,
}

/// The account, which must be usable now (exists, not expired, category on).
pub(crate) async fn eligible(
    conn: &mut PgConnection,
    settings: &Settings,
    user_id: Uuid,
) -> Result<UserRecord, CloudLoginError> {
    Ok(approvals::require_eligible_account(conn, settings, user_id).await?)
}

/// A recent browser sign-in of `actor` (app sessions never count), and a usable account.
pub(crate) async fn recent(
    conn: &mut PgConnection,
    settings: &Settings,
    actor: ManageActor,
) -> Result<UserRecord, CloudLoginError> {
    Ok(approvals::require_recent_web_session(
        conn,
        settings,
        actor.user_id,
        actor.sid,
        RECENT_SESSION_SECONDS,
    )
    .await?)
}

/// Writes an `auth.app.<action>` audit row (target `app_device`) in the caller's transaction.
pub(crate) async fn record(
    conn: &mut PgConnection,
    action: &str,
    actor: Uuid,
    target: Uuid,
    metadata: &[(&str, Value)],
    request_id: Option<String>,
) -> Result<(), CloudLoginError> {
    let mut event = AuditRecord::new(format!("auth.app.{action}"), Outcome::Allowed)
        .actor(AuditActor::user(actor))
        .target(AuditTarget::new("app_device", target))
        .request_id(request_id);
    for (key, value) in metadata {
        event = event.meta(key, value.clone());
    }
    audit::record(conn, &event).await?;
    Ok(())
}

/// Deletes up to [`CLEANUP_BATCH`] expired pairings, sign-ins and used command ids (each accepted
/// write does this, so no burst causes an unbounded sweep). Returns the rows deleted.
pub async fn cleanup(conn: &mut PgConnection) -> Result<CleanupReport, CloudLoginError> {
    let (pairings, logins, proofs): (i64, i64, i64) = sqlx::query_as(
        "WITH pairings AS (
           DELETE FROM auth.app_pairings WHERE id IN (
             SELECT id FROM auth.app_pairings WHERE expires_at < now()
              ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED)
           RETURNING 1),
         logins AS (
           DELETE FROM auth.app_logins WHERE id IN (
             SELECT id FROM auth.app_logins WHERE expires_at < now()
              ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED)
           RETURNING 1),
         proofs AS (
           DELETE FROM auth.app_device_proofs WHERE (device_id, jti) IN (
             SELECT device_id, jti FROM auth.app_device_proofs WHERE expires_at < now()
              ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED)
           RETURNING 1)
         SELECT (SELECT count(*) FROM pairings), (SELECT count(*) FROM logins),
                (SELECT count(*) FROM proofs)",
    )
    .bind(CLEANUP_BATCH)
    .fetch_one(conn)
    .await?;
    Ok(CleanupReport {
        pairings: pairings as u64,
        logins: logins as u64,
        proofs: proofs as u64,
    })
}

/// What one cleanup deleted.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct CleanupReport {
    pub pairings: u64,
    pub logins: u64,
    pub proofs: u64,
}
