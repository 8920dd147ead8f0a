//! Enrolling an authenticator: start (web), claim (device), result (device), inspect, confirm
//! and cancel (web). Only the web session family that started a pairing can see or finish it;
//! an assisted pairing (an administrator enrolling for someone else) also needs the
//! administrator role right now and the `user.app_approval.admin_pairing` opt-in.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Value, json};
use sqlx::{FromRow, PgConnection};
use utoipa::ToSchema;
use uuid::Uuid;

use super::proof::{self, PairingClaim, PublicKeyJwk};
use super::{
    CloudLoginError, DEVICES_PER_ACCOUNT, LoginConfig, ManageActor, PAIRING_SECONDS,
    PENDING_PER_ACCOUNT, PROTOCOL, cleanup, config, eligible, recent, record,
};
use crate::Core;
use crate::approvals::{codes_match, comparison_code, create_secret, hash_secret, secret_matches};
use crate::auth;

/// A started pairing: what the link (or QR code) carries to the authenticator. The only time the
/// secret leaves the server.
#[derive(Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = CloudLoginStartedPairing)]
pub struct StartedPairing {
    /// `cloud-app-approval-v1`.
    #[schema(value_type = String, example = "cloud-app-approval-v1")]
    pub protocol: &'static str,
    /// The installation's origin, which the authenticator signs.
    pub issuer: String,
    pub pairing_id: Uuid,
    /// The one-time secret for the authenticator: 43 base64url characters.
    pub secret: String,
    pub expires_at: DateTime<Utc>,
}

impl std::fmt::Debug for StartedPairing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StartedPairing({})", self.pairing_id)
    }
}

impl StartedPairing {
    /// The link the authenticator opens: `<appOrigin>/#pairing=<the JSON, URI-encoded>`.
    pub fn link(&self, app_origin: &str) -> String {
        let payload = serde_json::to_string(self).unwrap_or_default();
        let encoded: String =
            url::form_urlencoded::byte_serialize(payload.as_bytes()).collect::<String>();
        // `encodeURIComponent` writes a space as %20, never `+`.
        format!("{app_origin}/#pairing={}", encoded.replace('+', "%20"))
    }
}

/// A claimed pairing, as the device learns it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = CloudLoginClaimedPairing)]
pub struct ClaimedPairing {
    pub device_id: Uuid,
    pub comparison: String,
    pub expires_at: DateTime<Utc>,
}

#[derive(FromRow)]
struct PairingRow {
    id: Uuid,
    user_id: Uuid,
    initiated_by: Uuid,
    initiator_sid: Uuid,
    assisted: bool,
    secret_hash: String,
    state: String,
    expires_at: DateTime<Utc>,
    expired: bool,
    public_key: Option<Value>,
    name: Option<String>,
    device_id: Option<Uuid>,
    comparison: Option<String>,
}

const PAIRING_COLUMNS: &str = "id, user_id, initiated_by, initiator_sid, assisted, secret_hash, \
    state, expires_at, expires_at <= now() AS expired, public_key, name, device_id, comparison";

async fn find(
    conn: &mut PgConnection,
    issuer: &str,
    id: Uuid,
    lock: bool,
) -> Result<Option<PairingRow>, CloudLoginError> {
    let statement = format!(
        "SELECT {PAIRING_COLUMNS} FROM auth.app_pairings WHERE id = $1 AND issuer = $2{}",
        if lock { " FOR UPDATE" } else { "" }
    );
    Ok(sqlx::query_as(sqlx::AssertSqlSafe(statement))
        .bind(id)
        .bind(issuer)
        .fetch_optional(conn)
        .await?)
}

/// Starts a pairing for `target` (the actor when `None`). Another person's needs the current
/// administrator role and the opt-in.
pub async fn start(
    core: &Core,
    actor: ManageActor,
    target: Option<Uuid>,
    request_id: Option<String>,
) -> Result<StartedPairing, CloudLoginError> {
    let mut tx = core.pool.begin().await?;
    let cfg = config::read_on(core, &mut tx).await?;
    cfg.require_feature()?;
    cleanup(&mut tx).await?;
    recent(&mut tx, &core.settings, actor).await?;
    let target = target.unwrap_or(actor.user_id);
    let assisted = target != actor.user_id;
    if assisted && !(actor.admin && cfg.admin_pairing) {
        return Err(CloudLoginError::Forbidden);
    }
    auth::lock_user(&mut tx, target)
        .await?
        .ok_or(CloudLoginError::Forbidden)?;
    eligible(&mut tx, &core.settings, target).await?;
    let open: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM auth.app_pairings
          WHERE issuer = $1 AND user_id = $2 AND expires_at > now()
            AND state IN ('pending', 'claimed')",
    )
    .bind(&cfg.issuer)
    .bind(target)
    .fetch_one(&mut *tx)
    .await?;
    if open >= PENDING_PER_ACCOUNT {
        return Err(CloudLoginError::LimitReached);
    }
    let id = Uuid::new_v4();
    let secret = create_secret();
    let expires_at: DateTime<Utc> = sqlx::query_scalar(
        "INSERT INTO auth.app_pairings
           (id, issuer, user_id, initiated_by, initiator_sid, assisted, secret_hash, expires_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, now() + make_interval(secs => $8))
         RETURNING expires_at",
    )
    .bind(id)
    .bind(&cfg.issuer)
    .bind(target)
    .bind(actor.user_id)
    .bind(actor.sid)
    .bind(assisted)
    .bind(hash_secret(&secret))
    .bind(PAIRING_SECONDS as f64)
    .fetch_one(&mut *tx)
    .await?;
    record(
        &mut tx,
        "pairing.start",
        actor.user_id,
        id,
        &[
            ("targetUserId", json!(target)),
            ("assisted", json!(assisted)),
        ],
        request_id,
    )
    .await?;
    tx.commit().await?;
    Ok(StartedPairing {
        protocol: PROTOCOL,
        issuer: cfg.issuer,
        pairing_id: id,
        secret,
        expires_at,
    })
}

/// The device claims a pairing with its key, proving possession by signing the claim.
pub async fn claim(core: &Core, claim: &PairingClaim) -> Result<ClaimedPairing, CloudLoginError> {
    let mut tx = core.pool.begin().await?;
    let cfg = config::read_on(core, &mut tx).await?;
    cfg.require_feature()?;
    let message = proof::pairing_message(&cfg.issuer, claim);
    if !proof::verify(&claim.public_key, &message, &claim.signature) {
        return Err(CloudLoginError::Forbidden);
    }
    let id = Uuid::parse_str(&claim.pairing_id).map_err(|_| CloudLoginError::InvalidRequest)?;
    cleanup(&mut tx).await?;
    let pairing = find(&mut tx, &cfg.issuer, id, true)
        .await?
        .filter(|p| secret_matches(&claim.secret, &p.secret_hash) && !p.expired)
        .ok_or(CloudLoginError::Forbidden)?;
    eligible(&mut tx, &core.settings, pairing.user_id).await?;
    if pairing.state != "pending" {
        return Err(CloudLoginError::Conflict);
    }
    let device_id = Uuid::new_v4();
    let comparison = comparison_code();
    sqlx::query(
        "UPDATE auth.app_pairings
            SET state = 'claimed', public_key = $2, name = $3, device_id = $4, comparison = $5
          WHERE id = $1",
    )
    .bind(pairing.id)
    .bind(claim.public_key.to_json())
    .bind(&claim.name)
    .bind(device_id)
    .bind(&comparison)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(ClaimedPairing {
        device_id,
        comparison,
        expires_at: pairing.expires_at,
    })
}

/// What the device sees when it polls its pairing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = CloudLoginPairingResult)]
pub struct PairingResult {
    #[schema(value_type = PairingState)]
    pub state: String,
    /// The device's id once claimed.
    #[schema(required = true)]
    pub device_id: Option<Uuid>,
    /// Only while claimed.
    #[schema(required = true)]
    pub comparison: Option<String>,
}

/// The states of a pairing (`auth.app_pairings.state`).
#[derive(ToSchema)]
#[serde(rename_all = "lowercase")]
#[schema(as = CloudLoginPairingState)]
pub enum PairingState {
    Pending,
    Claimed,
    Confirmed,
    Cancelled,
}

/// The device polls with the pairing's secret and its own key; another key learns nothing.
pub async fn result(
    core: &Core,
    id: Uuid,
    secret: &str,
    key: &PublicKeyJwk,
) -> Result<PairingResult, CloudLoginError> {
    let mut conn = core.pool.acquire().await?;
    let cfg = config::read_on(core, &mut conn).await?;
    cfg.require_feature()?;
    let pairing = find(&mut conn, &cfg.issuer, id, false)
        .await?
        .filter(|p| secret_matches(secret, &p.secret_hash) && !p.expired)
        .ok_or(CloudLoginError::Forbidden)?;
    if let Some(claimed) = &pairing.public_key {
        let claimed: PublicKeyJwk =
            serde_json::from_value(claimed.clone()).map_err(|_| CloudLoginError::Forbidden)?;
        if claimed.x != key.x || claimed.y != key.y {
            return Err(CloudLoginError::Forbidden);
        }
    }
    let comparison = (pairing.state == "claimed")
        .then_some(pairing.comparison)
        .flatten();
    Ok(PairingResult {
        state: pairing.state,
        device_id: pairing.device_id,
        comparison,
    })
}

/// Only the starting session may act on a pairing; an assisted one also needs the current
/// administrator role and the opt-in; the owner must still be usable.
async fn authorize(
    core: &Core,
    conn: &mut PgConnection,
    cfg: &LoginConfig,
    actor: ManageActor,
    pairing: &PairingRow,
) -> Result<(), CloudLoginError> {
    recent(conn, &core.settings, actor).await?;
    if pairing.initiated_by != actor.user_id
        || pairing.initiator_sid != actor.sid
        || (pairing.assisted && !(actor.admin && cfg.admin_pairing))
    {
        return Err(CloudLoginError::Forbidden);
    }
    eligible(conn, &core.settings, pairing.user_id).await?;
    Ok(())
}

/// What the web sees of its pairing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = CloudLoginPairingStatus)]
pub struct PairingStatus {
    #[schema(value_type = PairingState)]
    pub state: String,
    /// The authenticator's name once claimed.
    #[schema(required = true)]
    pub name: Option<String>,
    /// The six-digit code once claimed.
    #[schema(required = true)]
    pub comparison: Option<String>,
    #[schema(required = true)]
    pub device_id: Option<Uuid>,
    /// The person the authenticator is enrolled for.
    pub user_id: Uuid,
}

/// The starting session inspects its pairing.
pub async fn inspect(
    core: &Core,
    actor: ManageActor,
    id: Uuid,
) -> Result<PairingStatus, CloudLoginError> {
    let mut tx = core.pool.begin().await?;
    let cfg = config::read_on(core, &mut tx).await?;
    cfg.require_feature()?;
    let pairing = find(&mut tx, &cfg.issuer, id, false)
        .await?
        .filter(|p| !p.expired)
        .ok_or(CloudLoginError::Missing)?;
    authorize(core, &mut tx, &cfg, actor, &pairing).await?;
    tx.commit().await?;
    Ok(PairingStatus {
        state: pairing.state,
        name: pairing.name,
        comparison: pairing.comparison,
        device_id: pairing.device_id,
        user_id: pairing.user_id,
    })
}

/// The starting session confirms the code both screens show: the device is enrolled.
pub async fn confirm(
    core: &Core,
    actor: ManageActor,
    id: Uuid,
    code: &str,
    request_id: Option<String>,
) -> Result<Uuid, CloudLoginError> {
    let mut tx = core.pool.begin().await?;
    let cfg = config::read_on(core, &mut tx).await?;
    cfg.require_feature()?;
    cleanup(&mut tx).await?;
    let pairing = find(&mut tx, &cfg.issuer, id, true)
        .await?
        .ok_or(CloudLoginError::Conflict)?;
    // Who asks comes first: nobody else learns anything about the code.
    authorize(core, &mut tx, &cfg, actor, &pairing).await?;
    let (Some(device_id), Some(name), Some(key), Some(expected)) = (
        pairing.device_id,
        pairing.name.clone(),
        pairing.public_key.clone(),
        pairing.comparison.clone(),
    ) else {
        return Err(CloudLoginError::Conflict);
    };
    if pairing.state != "claimed" || pairing.expired || !codes_match(code, &expected) {
        return Err(CloudLoginError::Conflict);
    }
    auth::lock_user(&mut tx, pairing.user_id)
        .await?
        .ok_or(CloudLoginError::Forbidden)?;
    let active: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM auth.app_devices
          WHERE issuer = $1 AND user_id = $2 AND revoked_at IS NULL",
    )
    .bind(&cfg.issuer)
    .bind(pairing.user_id)
    .fetch_one(&mut *tx)
    .await?;
    if active >= DEVICES_PER_ACCOUNT {
        return Err(CloudLoginError::LimitReached);
    }
    // The same key enrolled before (even revoked) is never enrolled again silently.
    let inserted = sqlx::query(
        "INSERT INTO auth.app_devices (id, issuer, user_id, name, public_key, assisted, enrolled_by)
         VALUES ($1, $2, $3, $4, $5, $6, $7)
         ON CONFLICT (issuer, user_id, public_key) DO NOTHING",
    )
    .bind(device_id)
    .bind(&cfg.issuer)
    .bind(pairing.user_id)
    .bind(&name)
    .bind(&key)
    .bind(pairing.assisted)
    .bind(actor.user_id)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    if inserted == 0 {
        return Err(CloudLoginError::Conflict);
    }
    sqlx::query("UPDATE auth.app_pairings SET state = 'confirmed' WHERE id = $1")
        .bind(pairing.id)
        .execute(&mut *tx)
        .await?;
    record(
        &mut tx,
        "device.enroll",
        actor.user_id,
        device_id,
        &[
            ("targetUserId", json!(pairing.user_id)),
            ("assisted", json!(pairing.assisted)),
        ],
        request_id,
    )
    .await?;
    tx.commit().await?;
    Ok(device_id)
}

/// The starting session cancels its pairing (a confirmed one is 409).
pub async fn cancel(
    core: &Core,
    actor: ManageActor,
    id: Uuid,
    request_id: Option<String>,
) -> Result<(), CloudLoginError> {
    let mut tx = core.pool.begin().await?;
    let cfg = config::read_on(core, &mut tx).await?;
    cfg.require_feature()?;
    cleanup(&mut tx).await?;
    let pairing = find(&mut tx, &cfg.issuer, id, true)
        .await?
        .ok_or(CloudLoginError::Missing)?;
    authorize(core, &mut tx, &cfg, actor, &pairing).await?;
    if pairing.state == "confirmed" {
        return Err(CloudLoginError::Conflict);
    }
    sqlx::query("UPDATE auth.app_pairings SET state = 'cancelled' WHERE id = $1")
        .bind(pairing.id)
        .execute(&mut *tx)
        .await?;
    record(
        &mut tx,
        "pairing.cancel",
        actor.user_id,
        id,
        &[],
        request_id,
    )
    .await?;
    tx.commit().await?;
    Ok(())
}
