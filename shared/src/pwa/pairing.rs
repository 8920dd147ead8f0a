//! The pairing handshake: start and inspect (web), claim (phone), confirm and cancel (web),
//! complete (phone). Lock order everywhere: the user row, then the pairing or device row.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{FromRow, PgConnection};
use utoipa::ToSchema;
use uuid::Uuid;

use super::devices::{self, DeviceRow, RevokeBy};
use super::{
    AppSession, CONFIRM_ATTEMPTS, DEVICES_PER_ACCOUNT, DeviceKey, LINK_CLAIM_SECONDS,
    PAIRING_SECONDS, PENDING_PER_ACCOUNT, Platform, PwaError, RECENT_SESSION_SECONDS, WebActor,
    web_family_valid,
};
use crate::Core;
use crate::approvals::{
    self, EligibilityError, codes_match, comparison_code, create_secret, hash_secret,
};
use crate::audit::{self, AuditActor, AuditRecord, AuditTarget, Outcome};
use crate::auth::{self, UserRecord};
use crate::identity::session::{IssuedSession, SessionRequest, issue_in_scope};
use crate::identity::{IssueOptions, Purpose};
use crate::telemetry::metrics;

/// A started pairing; the only time the link secret leaves the server.
#[derive(Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = PwaStartedPairing)]
pub struct StartedPairing {
    /// The pairing's id (the web's later requests name it).
    pub id: Uuid,
    /// The link secret for the phone (shown as a QR code, `/pwa/#pair=<secret>`): 43 base64url
    /// characters.
    pub secret: String,
    /// Until when a phone can claim the pairing (5 minutes).
    pub claim_until: DateTime<Utc>,
    /// When the pairing ends (10 minutes).
    pub expires_at: DateTime<Utc>,
}

impl std::fmt::Debug for StartedPairing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StartedPairing({})", self.id)
    }
}

/// What the web sees of its pairing (never the code).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = PwaPairingStatus)]
pub struct PairingStatus {
    #[schema(value_type = PairingState)]
    pub state: String,
    pub claim_until: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    /// The claiming phone; `null` while the pairing is pending.
    #[schema(required = true)]
    pub device: Option<DeviceSummary>,
    /// Wrong codes the web may still type.
    #[schema(minimum = 0, maximum = 3)]
    pub attempts_left: i64,
}

/// The states of a pairing (`auth.pwa_pairings.state`), as [`PairingStatus`] names them.
#[derive(ToSchema)]
#[serde(rename_all = "lowercase")]
#[schema(as = PwaPairingState)]
pub enum PairingState {
    Pending,
    Claimed,
    Confirmed,
    Completed,
    Cancelled,
}

/// The phone that claimed a pairing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[schema(as = PwaDeviceSummary)]
pub struct DeviceSummary {
    /// The device's name ("iPhone", "iPad", "Android" or "Phone").
    pub name: String,
    #[schema(value_type = super::Platform)]
    pub platform: String,
}

/// The account a phone is pairing with, as the phone shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[schema(as = PwaAccountName)]
pub struct AccountName {
    /// The display name, else the uid.
    pub name: String,
}

/// A claimed pairing: the code both screens show, and the completion secret for the phone's
/// cookie.
#[derive(Clone, PartialEq, Eq)]
pub struct Claimed {
    pub code: String,
    pub account: AccountName,
    pub expires_at: DateTime<Utc>,
    pub completion_secret: String,
}

impl std::fmt::Debug for Claimed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Claimed(expires_at: {})", self.expires_at)
    }
}

/// What the phone learns when it asks to complete.
#[derive(Clone, PartialEq, Eq)]
pub enum Completion {
    /// The web has not typed the code yet.
    Waiting {
        code: String,
        account: AccountName,
        expires_at: DateTime<Utc>,
    },
    /// Paired; `credentials` is `None` when the request already carries this device's session.
    Paired {
        credentials: Option<Credentials>,
        platform: Platform,
    },
}

impl std::fmt::Debug for Completion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Completion::Waiting { expires_at, .. } => write!(f, "Waiting({expires_at})"),
            Completion::Paired { credentials, .. } => {
                write!(f, "Paired(new credentials: {})", credentials.is_some())
            }
        }
    }
}

/// A device key and an app session for the phone's cookies.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub device_key: DeviceKey,
    pub session: IssuedSession,
}

/// What the phone presents when it completes.
#[derive(Clone, Default)]
pub struct CompleteRequest {
    pub completion_secret: Option<String>,
    pub device_key: Option<DeviceKey>,
    pub app_session: Option<AppSession>,
    /// The user of a valid web session in the same cookie jar.
    pub web_user_id: Option<Uuid>,
    pub request_id: Option<String>,
    pub user_agent: Option<String>,
}

impl std::fmt::Debug for CompleteRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompleteRequest")
            .field(
                "completion_secret",
                &self.completion_secret.as_ref().map(|_| "[REDACTED]"),
            )
            .field("device_key", &self.device_key)
            .field("app_session", &self.app_session)
            .field("web_user_id", &self.web_user_id)
            .field("request_id", &self.request_id)
            .finish()
    }
}

#[derive(Debug, Clone, FromRow)]
struct PairingRow {
    id: Uuid,
    user_id: Uuid,
    initiator_sid: Uuid,
    auth_epoch: i64,
    comparison: Option<String>,
    platform: Option<String>,
    device_name: Option<String>,
    failed_attempts: i16,
    state: String,
    device_id: Option<Uuid>,
    claim_until: DateTime<Utc>,
    expires_at: DateTime<Utc>,
    /// `expires_at <= now()`, by the database clock.
    expired: bool,
    /// `claim_until <= now()`.
    claim_passed: bool,
}

const PAIRING_COLUMNS: &str = "id, user_id, initiator_sid, auth_epoch, comparison, platform, \
     device_name, failed_attempts, state, device_id, claim_until, expires_at, \
     expires_at <= now() AS expired, claim_until <= now() AS claim_passed";

/// The pairing `id` started by this web session.
async fn own_pairing(
    conn: &mut PgConnection,
    actor: WebActor,
    id: Uuid,
    lock: bool,
) -> Result<Option<PairingRow>, sqlx::Error> {
    let statement = format!(
        "SELECT {PAIRING_COLUMNS} FROM auth.pwa_pairings
         WHERE id = $1 AND user_id = $2 AND initiator_sid = $3{}",
        if lock { " FOR UPDATE" } else { "" }
    );
    sqlx::query_as(sqlx::AssertSqlSafe(statement))
        .bind(id)
        .bind(actor.user_id)
        .bind(actor.sid)
        .fetch_optional(conn)
        .await
}

/// A pairing found by the hash of one of its secrets (`column` is a fixed column name).
async fn pairing_by_hash(
    conn: &mut PgConnection,
    column: &'static str,
    secret: &str,
) -> Result<Option<PairingRow>, sqlx::Error> {
    let statement = format!("SELECT {PAIRING_COLUMNS} FROM auth.pwa_pairings WHERE {column} = $1");
    sqlx::query_as(sqlx::AssertSqlSafe(statement))
        .bind(hash_secret(secret))
        .fetch_optional(conn)
        .await
}

async fn lock_pairing(
    conn: &mut PgConnection,
    id: Uuid,
) -> Result<Option<PairingRow>, sqlx::Error> {
    let statement =
        format!("SELECT {PAIRING_COLUMNS} FROM auth.pwa_pairings WHERE id = $1 FOR UPDATE");
    sqlx::query_as(sqlx::AssertSqlSafe(statement))
        .bind(id)
        .fetch_optional(conn)
        .await
}

fn audit_record(
    action: &str,
    actor: Uuid,
    target: (&str, Uuid),
    request_id: Option<String>,
) -> AuditRecord {
    AuditRecord::new(action, Outcome::Allowed)
        .actor(AuditActor::user(actor))
        .target(AuditTarget::new(target.0, target.1))
        .request_id(request_id)
}

/// Starts a pairing from a recent web sign-in (at most five open per account).
pub async fn start(
    core: &Core,
    actor: WebActor,
    request_id: Option<String>,
) -> Result<StartedPairing, PwaError> {
    let mut tx = core.pool.begin().await?;
    auth::lock_user(&mut tx, actor.user_id)
        .await?
        .ok_or(PwaError::Reauthenticate)?;
    approvals::require_recent_web_session(
        &mut tx,
        &core.settings,
        actor.user_id,
        actor.sid,
        RECENT_SESSION_SECONDS,
    )
    .await?;
    let open: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM auth.pwa_pairings
         WHERE user_id = $1 AND expires_at > now() AND state IN ('pending', 'claimed', 'confirmed')",
    )
    .bind(actor.user_id)
    .fetch_one(&mut *tx)
    .await?;
    if open >= PENDING_PER_ACCOUNT {
        return Err(PwaError::LimitReached);
    }
    let id = Uuid::new_v4();
    let secret = create_secret();
    let (claim_until, expires_at): (DateTime<Utc>, DateTime<Utc>) = sqlx::query_as(
        "INSERT INTO auth.pwa_pairings (id, user_id, initiator_sid, auth_epoch, link_secret_hash,
            claim_until, expires_at)
         SELECT $1, u.id, $3, u.auth_epoch, $4, now() + make_interval(secs => $5),
                now() + make_interval(secs => $6)
         FROM auth.users u WHERE u.id = $2
         RETURNING claim_until, expires_at",
    )
    .bind(id)
    .bind(actor.user_id)
    .bind(actor.sid)
    .bind(hash_secret(&secret))
    .bind(LINK_CLAIM_SECONDS as f64)
    .bind(PAIRING_SECONDS as f64)
    .fetch_one(&mut *tx)
    .await?;
    audit::record(
        &mut tx,
        &audit_record(
            "auth.pwa.pairing.start",
            actor.user_id,
            ("pwa_pairing", id),
            request_id,
        ),
    )
    .await?;
    tx.commit().await?;
    metrics::count("PairingStarted", 1);
    Ok(StartedPairing {
        id,
        secret,
        claim_until,
        expires_at,
    })
}

/// The state of the web session's own pairing.
pub async fn inspect(core: &Core, actor: WebActor, id: Uuid) -> Result<PairingStatus, PwaError> {
    let mut conn = core.pool.acquire().await?;
    let row = own_pairing(&mut conn, actor, id, false)
        .await?
        .ok_or(PwaError::NotFound)?;
    let epoch: Option<i64> = sqlx::query_scalar("SELECT auth_epoch FROM auth.users WHERE id = $1")
        .bind(actor.user_id)
        .fetch_optional(&mut *conn)
        .await?;
    if row.expired || epoch != Some(row.auth_epoch) || (row.state == "pending" && row.claim_passed)
    {
        return Err(PwaError::EXPIRED);
    }
    let device = match (&row.device_name, &row.platform) {
        (Some(name), Some(platform)) if row.state != "pending" => Some(DeviceSummary {
            name: name.clone(),
            platform: platform.clone(),
        }),
        _ => None,
    };
    Ok(PairingStatus {
        state: row.state,
        claim_until: row.claim_until,
        expires_at: row.expires_at,
        device,
        attempts_left: (i64::from(CONFIRM_ATTEMPTS) - i64::from(row.failed_attempts)).max(0),
    })
}

/// The phone claims a pairing with the link secret: the pairing learns the platform and device
/// name, and both screens get the comparison code.
pub async fn claim(
    core: &Core,
    secret: &str,
    platform: Platform,
    user_agent: Option<&str>,
) -> Result<Claimed, PwaError> {
    let found = {
        let mut conn = core.pool.acquire().await?;
        pairing_by_hash(&mut conn, "link_secret_hash", secret).await?
    };
    let found = found.ok_or(PwaError::EXPIRED)?;
    let completion_secret = create_secret();
    let code = comparison_code();
    let mut tx = core.pool.begin().await?;
    let user = auth::lock_user(&mut tx, found.user_id).await?;
    let row = lock_pairing(&mut tx, found.id)
        .await?
        .ok_or(PwaError::EXPIRED)?;
    let Some(user) = user else {
        return Err(PwaError::EXPIRED);
    };
    if row.state == "cancelled" || row.expired || row.claim_passed {
        return Err(PwaError::EXPIRED);
    }
    if row.state != "pending" {
        return Err(PwaError::AlreadyUsed);
    }
    if user.auth_epoch != row.auth_epoch {
        return Err(PwaError::EXPIRED);
    }
    match approvals::require_eligible(&mut tx, &core.settings, &user).await {
        Ok(()) => {}
        Err(EligibilityError::Forbidden) => return Err(PwaError::EXPIRED),
        Err(other) => return Err(other.into()),
    }
    let name = platform.device_name(user_agent);
    sqlx::query(
        "UPDATE auth.pwa_pairings SET state = 'claimed', completion_secret_hash = $2,
            comparison = $3, platform = $4, device_name = $5
         WHERE id = $1",
    )
    .bind(row.id)
    .bind(hash_secret(&completion_secret))
    .bind(&code)
    .bind(platform.as_str())
    .bind(name)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(Claimed {
        code,
        account: AccountName {
            name: user.shown_name().to_string(),
        },
        expires_at: row.expires_at,
        completion_secret,
    })
}

/// The web types the code the phone shows. Wrong codes count (and commit) even though the
/// request fails; the third wrong code cancels the pairing.
pub async fn confirm(
    core: &Core,
    actor: WebActor,
    id: Uuid,
    code: &str,
    request_id: Option<String>,
) -> Result<(), PwaError> {
    let result = confirm_code(core, actor, id, code, request_id).await;
    match &result {
        // A wrong code, the third of which cancels the pairing (no attempts left).
        Err(
            PwaError::WrongCode { .. }
            | PwaError::Expired {
                attempts_left: Some(_),
            },
        ) => metrics::count("PairingCodeWrong", 1),
        // A code typed for a pairing that expired, was cancelled or lost its web session.
        Err(PwaError::Expired {
            attempts_left: None,
        }) => metrics::count("PairingCodeExpired", 1),
        _ => {}
    }
    result
}

async fn confirm_code(
    core: &Core,
    actor: WebActor,
    id: Uuid,
    code: &str,
    request_id: Option<String>,
) -> Result<(), PwaError> {
    let mut tx = core.pool.begin().await?;
    let user = auth::lock_user(&mut tx, actor.user_id).await?;
    let row = own_pairing(&mut tx, actor, id, true)
        .await?
        .ok_or(PwaError::NotFound)?;
    let Some(user) = user else {
        return Err(PwaError::EXPIRED);
    };
    if row.state == "cancelled"
        || row.expired
        || user.auth_epoch != row.auth_epoch
        || !web_family_valid(&mut tx, row.initiator_sid, row.user_id).await?
    {
        return Err(PwaError::EXPIRED);
    }
    if row.state != "claimed" {
        return Err(PwaError::Conflict);
    }
    approvals::require_eligible(&mut tx, &core.settings, &user).await?;
    let expected = row.comparison.as_deref().unwrap_or_default();
    if expected.is_empty() || !codes_match(code, expected) {
        let failed = row.failed_attempts.saturating_add(1);
        if failed >= CONFIRM_ATTEMPTS {
            cancel_in_tx(&mut tx, actor.user_id, row.id, "wrong_code", request_id).await?;
            tx.commit().await?;
            return Err(PwaError::Expired {
                attempts_left: Some(0),
            });
        }
        sqlx::query("UPDATE auth.pwa_pairings SET failed_attempts = $2 WHERE id = $1")
            .bind(row.id)
            .bind(failed)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        return Err(PwaError::WrongCode {
            attempts_left: i64::from(CONFIRM_ATTEMPTS - failed),
        });
    }
    sqlx::query("UPDATE auth.pwa_pairings SET state = 'confirmed' WHERE id = $1")
        .bind(row.id)
        .execute(&mut *tx)
        .await?;
    audit::record(
        &mut tx,
        &audit_record(
            "auth.pwa.pairing.confirm",
            actor.user_id,
            ("pwa_pairing", row.id),
            request_id,
        )
        .meta("platform", row.platform.clone().unwrap_or_default()),
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

/// The web cancels its pairing (a no-op when already cancelled; a completed pairing cannot be).
pub async fn cancel(
    core: &Core,
    actor: WebActor,
    id: Uuid,
    request_id: Option<String>,
) -> Result<(), PwaError> {
    let mut tx = core.pool.begin().await?;
    auth::lock_user(&mut tx, actor.user_id).await?;
    let row = own_pairing(&mut tx, actor, id, true)
        .await?
        .ok_or(PwaError::NotFound)?;
    match row.state.as_str() {
        "completed" => return Err(PwaError::Conflict),
        "cancelled" => return Ok(()),
        _ => {}
    }
    cancel_in_tx(&mut tx, actor.user_id, row.id, "user", request_id).await?;
    tx.commit().await?;
    Ok(())
}

/// Cancels a pairing (its failed attempts at the limit when the reason is wrong codes) and
/// writes the audit row.
async fn cancel_in_tx(
    tx: &mut PgConnection,
    user_id: Uuid,
    pairing_id: Uuid,
    reason: &str,
    request_id: Option<String>,
) -> Result<(), PwaError> {
    sqlx::query(
        "UPDATE auth.pwa_pairings SET state = 'cancelled',
            failed_attempts = CASE WHEN $2 THEN $3 ELSE failed_attempts END
         WHERE id = $1",
    )
    .bind(pairing_id)
    .bind(reason == "wrong_code")
    .bind(CONFIRM_ATTEMPTS)
    .execute(&mut *tx)
    .await?;
    audit::record(
        tx,
        &audit_record(
            "auth.pwa.pairing.cancel",
            user_id,
            ("pwa_pairing", pairing_id),
            request_id,
        )
        .meta("reason", reason),
    )
    .await?;
    Ok(())
}

/// Whether the account may hold an app session: not expired, category on, legal terms accepted.
pub(crate) async fn app_eligible(
    conn: &mut PgConnection,
    core: &Core,
    user: &UserRecord,
) -> Result<bool, PwaError> {
    match approvals::require_eligible(conn, &core.settings, user).await {
        Ok(()) => {}
        Err(EligibilityError::Forbidden) => return Ok(false),
        Err(other) => return Err(other.into()),
    }
    Ok(approvals::legal_accepted(conn, user.id).await?)
}

/// How a device's key changes when the device gets a new session.
#[derive(Clone, PartialEq, Eq)]
pub(crate) enum KeyChange {
    /// A device just made with this secret's hash: no change.
    New(String),
    /// The current key becomes the previous one.
    Rotate,
    /// A new current key; the previous one stays (the app came back with it).
    KeepPrevious,
}

/// A new key and app session for a device, in the scope's transaction (which already holds the
/// user and device locks); `recover` writes the `device.recover` audit row.
pub(crate) async fn reissue(
    scope: &mut crate::identity::SigningScope,
    core: &Core,
    device: (Uuid, Uuid),
    change: KeyChange,
    recover: bool,
    client: (Option<String>, Option<String>),
) -> Result<Credentials, PwaError> {
    let ((user_id, device_id), (request_id, user_agent)) = (device, client);
    let statement = match change {
        KeyChange::New(_) => None,
        KeyChange::Rotate => Some(
            "UPDATE auth.pwa_devices SET previous_secret_hash = secret_hash, secret_hash = $2,
                rotated_at = now(), last_used_at = now()
             WHERE id = $1",
        ),
        KeyChange::KeepPrevious => Some(
            "UPDATE auth.pwa_devices SET secret_hash = $2, rotated_at = now(), last_used_at = now()
             WHERE id = $1",
        ),
    };
    let secret = match change {
        KeyChange::New(secret) => secret,
        _ => create_secret(),
    };
    if let Some(statement) = statement {
        sqlx::query(statement)
            .bind(device_id)
            .bind(hash_secret(&secret))
            .execute(&mut *scope.tx)
            .await?;
    }
    let request = SessionRequest {
        user_id,
        device_id: Some(device_id),
        ttl: Some(Duration::from_secs(super::SESSION_SECONDS as u64)),
        request_id: request_id.clone(),
        user_agent,
        legal_pending: false,
    };
    let session = issue_in_scope(scope, &core.settings, &request).await?;
    if recover {
        audit::record(
            &mut scope.tx,
            &audit_record(
                "auth.pwa.device.recover",
                user_id,
                ("pwa_device", device_id),
                request_id,
            ),
        )
        .await?;
    }
    Ok(Credentials {
        device_key: DeviceKey { device_id, secret },
        session,
    })
}

/// The phone asks to complete: waiting while the web has not confirmed; then the device is made
/// (or, on a retry after a lost response, recovered) and an app session issued.
pub async fn complete(core: &Core, request: CompleteRequest) -> Result<Completion, PwaError> {
    let secret = request
        .completion_secret
        .as_deref()
        .filter(|s| approvals::is_secret_shaped(s))
        .ok_or(PwaError::EXPIRED)?;
    let (row, presented) = {
        let mut conn = core.pool.acquire().await?;
        let row = pairing_by_hash(&mut conn, "completion_secret_hash", secret)
            .await?
            .ok_or(PwaError::EXPIRED)?;
        if row.state == "cancelled" || row.expired {
            return Err(PwaError::EXPIRED);
        }
        if row.state == "claimed" {
            return waiting(&mut conn, &row).await;
        }
        if row.state != "confirmed" && row.state != "completed" {
            return Err(PwaError::EXPIRED);
        }
        let presented = match &request.device_key {
            Some(key) => devices::presented(&mut conn, key).await?,
            None => None,
        };
        (row, presented)
    };
    let core_ref = core;
    let request = &request;
    // A confirmed pairing that pairs now completes; a completed one asked again is a retry.
    let first = row.state == "confirmed";
    let completion = core
        .identity
        .with_active_signer(
            Purpose::Session,
            IssueOptions::timeout(super::ISSUANCE_TIMEOUT_MS),
            |mut scope| async move {
                let result =
                    complete_in_scope(&mut scope, core_ref, request, &row, presented).await;
                (scope, result)
            },
        )
        .await;
    if first && matches!(completion, Ok(Completion::Paired { .. })) {
        metrics::count("PairingCompleted", 1);
    }
    completion
}

async fn waiting(conn: &mut PgConnection, row: &PairingRow) -> Result<Completion, PwaError> {
    let Some(user) = auth::find_user(conn, row.user_id).await? else {
        return Err(PwaError::EXPIRED);
    };
    if user.auth_epoch != row.auth_epoch
        || !web_family_valid(conn, row.initiator_sid, row.user_id).await?
    {
        return Err(PwaError::EXPIRED);
    }
    Ok(Completion::Waiting {
        code: row.comparison.clone().unwrap_or_default(),
        account: AccountName {
            name: user.shown_name().to_string(),
        },
        expires_at: row.expires_at,
    })
}

async fn complete_in_scope(
    scope: &mut crate::identity::SigningScope,
    core: &Core,
    request: &CompleteRequest,
    found: &PairingRow,
    presented: Option<DeviceRow>,
) -> Result<Completion, PwaError> {
    // A pairing's user never changes: the row read before the transaction names whom to lock.
    let user = auth::lock_user(&mut scope.tx, found.user_id).await?;
    let row = lock_pairing(&mut scope.tx, found.id)
        .await?
        .ok_or(PwaError::EXPIRED)?;
    let Some(user) = user else {
        return Err(PwaError::EXPIRED);
    };
    if row.expired || row.state == "cancelled" || user.auth_epoch != row.auth_epoch {
        return Err(PwaError::EXPIRED);
    }
    let platform = row
        .platform
        .as_deref()
        .and_then(Platform::parse)
        .ok_or(PwaError::EXPIRED)?;
    if let (Some(device_id), "completed") = (row.device_id, row.state.as_str()) {
        return retry(scope, core, request, &user, device_id, platform).await;
    }
    if row.state != "confirmed" || row.device_name.is_none() {
        return Err(PwaError::EXPIRED);
    }
    if !web_family_valid(&mut scope.tx, row.initiator_sid, user.id).await? {
        return Err(PwaError::EXPIRED);
    }
    if !app_eligible(&mut scope.tx, core, &user).await? {
        return Err(PwaError::AccountBlocked);
    }
    if let Some(device) = &presented {
        if device.user_id != user.id {
            return Err(PwaError::AlreadyPaired);
        }
        // The same person's earlier pairing of this app: replace it, if the key still matches.
        if let Some(key) = &request.device_key
            && devices::lock_matching(&mut scope.tx, key).await?.is_some()
        {
            devices::revoke_device(
                &mut scope.tx,
                device.id,
                "replaced",
                RevokeBy::Owner,
                request.request_id.clone(),
            )
            .await?;
        }
    }
    if platform != Platform::Ios
        && request
            .web_user_id
            .is_some_and(|web_user| web_user != user.id)
    {
        return Err(PwaError::AccountMismatch);
    }
    let active = devices::count_active(&mut scope.tx, user.id).await?;
    if active >= DEVICES_PER_ACCOUNT {
        return Err(PwaError::LimitReached);
    }
    let device_id = Uuid::new_v4();
    let secret = create_secret();
    sqlx::query(
        "INSERT INTO auth.pwa_devices (id, user_id, name, platform, auth_epoch, secret_hash,
            rotated_at, created_at, last_used_at)
         VALUES ($1, $2, $3, $4, $5, $6, now(), now(), now())",
    )
    .bind(device_id)
    .bind(user.id)
    .bind(row.device_name.as_deref().unwrap_or("Phone"))
    .bind(platform.as_str())
    .bind(user.auth_epoch)
    .bind(hash_secret(&secret))
    .execute(&mut *scope.tx)
    .await?;
    let credentials = reissue(
        scope,
        core,
        (user.id, device_id),
        KeyChange::New(secret),
        false,
        (request.request_id.clone(), request.user_agent.clone()),
    )
    .await?;
    sqlx::query("UPDATE auth.pwa_pairings SET state = 'completed', device_id = $2 WHERE id = $1")
        .bind(row.id)
        .bind(device_id)
        .execute(&mut *scope.tx)
        .await?;
    audit::record(
        &mut scope.tx,
        &audit_record(
            "auth.pwa.device.enroll",
            user.id,
            ("pwa_device", device_id),
            request.request_id.clone(),
        )
        .meta("platform", platform.as_str())
        .meta("pairingId", row.id.to_string()),
    )
    .await?;
    Ok(Completion::Paired {
        credentials: Some(credentials),
        platform,
    })
}

/// A completed pairing asked again (the phone lost the response, or asks twice): the device's
/// own session answers at once; otherwise the key is rotated and a new session issued.
async fn retry(
    scope: &mut crate::identity::SigningScope,
    core: &Core,
    request: &CompleteRequest,
    user: &UserRecord,
    device_id: Uuid,
    platform: Platform,
) -> Result<Completion, PwaError> {
    let device = devices::lock_active(&mut scope.tx, device_id)
        .await?
        .filter(|d| d.user_id == user.id)
        .ok_or(PwaError::EXPIRED)?;
    if request
        .app_session
        .is_some_and(|s| s.device_id == device.id && s.user_id == user.id)
    {
        return Ok(Completion::Paired {
            credentials: None,
            platform,
        });
    }
    if !app_eligible(&mut scope.tx, core, user).await? {
        return Err(PwaError::AccountBlocked);
    }
    devices::revoke_families(&mut scope.tx, device.id, "app_device_rotated").await?;
    let credentials = reissue(
        scope,
        core,
        (user.id, device.id),
        KeyChange::Rotate,
        true,
        (request.request_id.clone(), request.user_agent.clone()),
    )
    .await?;
    Ok(Completion::Paired {
        credentials: Some(credentials),
        platform,
    })
}
