//! Paired devices: the active-device rule, key matching, revocation (which ends the device's
//! app sessions), the owner's list, renaming and unpairing, and the administrator's list and
//! revoke.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{FromRow, PgConnection};
use uuid::Uuid;

use super::{DEVICES_PER_ACCOUNT, DeviceKey, IDLE_DAYS, NAME_MAX_LENGTH, PwaError, WebActor};
use crate::Core;
use crate::approvals::secret_matches;
use crate::audit::{self, AuditActor, AuditRecord, AuditTarget, Outcome};
use crate::auth;

/// A device row with the facts the rules need.
#[derive(Debug, Clone, FromRow)]
pub struct DeviceRow {
    pub id: Uuid,
    pub user_id: Uuid,
    pub name: String,
    pub platform: String,
    pub secret_hash: String,
    pub previous_secret_hash: Option<String>,
    pub created_at: DateTime<Utc>,
    pub last_used_at: DateTime<Utc>,
    /// Not revoked, renewed within 150 days, and in the user's current epoch.
    pub active: bool,
    /// Seconds since the last key rotation.
    pub rotated_seconds_ago: f64,
}

/// Which of a device's hashes a key matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyMatch {
    Current,
    Previous,
}

impl DeviceRow {
    pub fn key_match(&self, key: &DeviceKey) -> Option<KeyMatch> {
        if key.device_id != self.id {
            return None;
        }
        if secret_matches(&key.secret, &self.secret_hash) {
            return Some(KeyMatch::Current);
        }
        self.previous_secret_hash
            .as_deref()
            .filter(|hash| secret_matches(&key.secret, hash))
            .map(|_| KeyMatch::Previous)
    }
}

fn device_select(condition: &str, lock: bool) -> String {
    format!(
        "SELECT d.id, d.user_id, d.name, d.platform, d.secret_hash, d.previous_secret_hash,
                d.created_at, d.last_used_at,
                (d.revoked_at IS NULL AND d.rotated_at > now() - make_interval(days => {IDLE_DAYS})
                 AND d.auth_epoch = u.auth_epoch) AS active,
                extract(epoch FROM now() - d.rotated_at)::float8 AS rotated_seconds_ago
         FROM auth.pwa_devices d JOIN auth.users u ON u.id = d.user_id
         WHERE {condition}{}",
        if lock { " FOR UPDATE OF d" } else { "" }
    )
}

async fn device_by_id(
    conn: &mut PgConnection,
    id: Uuid,
    lock: bool,
) -> Result<Option<DeviceRow>, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(device_select("d.id = $1", lock)))
        .bind(id)
        .fetch_optional(conn)
        .await
}

/// The device a request presents: its key is well formed, the device active and the key matches
/// its current or previous hash. Read without locks; callers recheck under locks.
pub async fn presented(
    conn: &mut PgConnection,
    key: &DeviceKey,
) -> Result<Option<DeviceRow>, sqlx::Error> {
    Ok(device_by_id(conn, key.device_id, false)
        .await?
        .filter(|d| d.active && d.key_match(key).is_some()))
}

/// The presented device, locked, if it is still active and the key still matches.
pub async fn lock_matching(
    conn: &mut PgConnection,
    key: &DeviceKey,
) -> Result<Option<(DeviceRow, KeyMatch)>, sqlx::Error> {
    Ok(device_by_id(conn, key.device_id, true)
        .await?
        .filter(|d| d.active)
        .and_then(|d| d.key_match(key).map(|m| (d, m))))
}

/// The device `id`, locked, if it is active.
pub async fn lock_active(
    conn: &mut PgConnection,
    id: Uuid,
) -> Result<Option<DeviceRow>, sqlx::Error> {
    Ok(device_by_id(conn, id, true).await?.filter(|d| d.active))
}

/// The owner of device `id` (any state).
pub async fn owner_of(conn: &mut PgConnection, id: Uuid) -> Result<Option<Uuid>, sqlx::Error> {
    sqlx::query_scalar("SELECT user_id FROM auth.pwa_devices WHERE id = $1")
        .bind(id)
        .fetch_optional(conn)
        .await
}

/// How many active devices the account has.
pub async fn count_active(conn: &mut PgConnection, user_id: Uuid) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT count(*) FROM auth.pwa_devices d JOIN auth.users u ON u.id = d.user_id
         WHERE d.user_id = $1 AND d.revoked_at IS NULL
           AND d.rotated_at > now() - make_interval(days => {IDLE_DAYS})
           AND d.auth_epoch = u.auth_epoch"
    )))
    .bind(user_id)
    .fetch_one(conn)
    .await
}

/// Ends every live app session of a device.
pub async fn revoke_families(
    conn: &mut PgConnection,
    device_id: Uuid,
    reason: &str,
) -> Result<u64, sqlx::Error> {
    Ok(sqlx::query(
        "UPDATE auth.session_families SET revoked_at = now(), revocation_reason = $2
         WHERE pwa_device_id = $1 AND revoked_at IS NULL",
    )
    .bind(device_id)
    .bind(reason)
    .execute(conn)
    .await?
    .rows_affected())
}

/// Who revokes a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RevokeBy {
    /// The device's owner.
    Owner,
    /// Another person (an administrator).
    User(Uuid),
    /// The platform itself (expired account, sign out everywhere).
    System,
}

/// Revokes a device that is not revoked yet, ends its app sessions and writes the audit row.
/// Returns whether this call revoked it.
pub async fn revoke_device(
    conn: &mut PgConnection,
    device_id: Uuid,
    reason: &str,
    by: RevokeBy,
    request_id: Option<String>,
) -> Result<bool, PwaError> {
    let owner: Option<Uuid> = sqlx::query_scalar(
        "UPDATE auth.pwa_devices SET revoked_at = now(), revocation_reason = $2
         WHERE id = $1 AND revoked_at IS NULL RETURNING user_id",
    )
    .bind(device_id)
    .bind(reason)
    .fetch_optional(&mut *conn)
    .await?;
    let Some(owner) = owner else {
        return Ok(false);
    };
    revoke_families(conn, device_id, "app_device_revoked").await?;
    let mut record = AuditRecord::new("auth.pwa.device.revoke", Outcome::Allowed)
        .target(AuditTarget::new("pwa_device", device_id))
        .request_id(request_id)
        .meta("reason", reason);
    record = match by {
        RevokeBy::Owner => record.actor(AuditActor::user(owner)),
        RevokeBy::User(actor) if actor == owner => record.actor(AuditActor::user(owner)),
        RevokeBy::User(actor) => record
            .actor(AuditActor::user(actor))
            .meta("targetUserId", owner.to_string()),
        RevokeBy::System => record.meta("provenance", "system"),
    };
    audit::record(conn, &record).await?;
    Ok(true)
}

/// A device as lists show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = PwaDevice)]
pub struct DeviceItem {
    pub id: Uuid,
    /// The device's name, 1 to 80 characters.
    pub name: String,
    #[schema(value_type = super::Platform)]
    pub platform: String,
    pub created_at: DateTime<Utc>,
    pub last_used_at: DateTime<Utc>,
    /// Whether this is the device of the app session the request also carries.
    pub current: bool,
}

/// The account's active devices, oldest first, at most 20; `current` marks `current_device`.
pub async fn list_active(
    conn: &mut PgConnection,
    user_id: Uuid,
    current_device: Option<Uuid>,
) -> Result<Vec<DeviceItem>, sqlx::Error> {
    let statement = device_select(
        &format!(
            "d.user_id = $1 AND d.revoked_at IS NULL
             AND d.rotated_at > now() - make_interval(days => {IDLE_DAYS})
             AND d.auth_epoch = u.auth_epoch
             ORDER BY d.created_at, d.id LIMIT {DEVICES_PER_ACCOUNT}"
        ),
        false,
    );
    let rows: Vec<DeviceRow> = sqlx::query_as(sqlx::AssertSqlSafe(statement))
        .bind(user_id)
        .fetch_all(conn)
        .await?;
    Ok(rows
        .into_iter()
        .map(|d| DeviceItem {
            current: current_device == Some(d.id),
            id: d.id,
            name: d.name,
            platform: d.platform,
            created_at: d.created_at,
            last_used_at: d.last_used_at,
        })
        .collect())
}

/// The web user's own devices.
pub async fn list_own(
    core: &Core,
    actor: WebActor,
    current_device: Option<Uuid>,
) -> Result<Vec<DeviceItem>, PwaError> {
    let mut conn = core.pool.acquire().await?;
    Ok(list_active(&mut conn, actor.user_id, current_device).await?)
}

/// The web user revokes one of their devices (204 even when it was already revoked).
pub async fn revoke_own(
    core: &Core,
    actor: WebActor,
    device_id: Uuid,
    request_id: Option<String>,
) -> Result<(), PwaError> {
    let mut tx = core.pool.begin().await?;
    auth::lock_user(&mut tx, actor.user_id).await?;
    let owned: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM auth.pwa_devices WHERE id = $1 AND user_id = $2)",
    )
    .bind(device_id)
    .bind(actor.user_id)
    .fetch_one(&mut *tx)
    .await?;
    if !owned {
        return Err(PwaError::NotFound);
    }
    revoke_device(&mut tx, device_id, "user", RevokeBy::Owner, request_id).await?;
    tx.commit().await?;
    Ok(())
}

/// The phone renames itself: an active device whose key matches (rechecked under locks).
pub async fn rename(
    core: &Core,
    key: Option<&DeviceKey>,
    name: &str,
    request_id: Option<String>,
) -> Result<(), PwaError> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > NAME_MAX_LENGTH {
        return Err(PwaError::InvalidRequest);
    }
    let key = key.ok_or(PwaError::Unpaired)?;
    let mut tx = core.pool.begin().await?;
    let owner = owner_of(&mut tx, key.device_id)
        .await?
        .ok_or(PwaError::Unpaired)?;
    auth::lock_user(&mut tx, owner).await?;
    let (device, _) = lock_matching(&mut tx, key)
        .await?
        .ok_or(PwaError::Unpaired)?;
    sqlx::query("UPDATE auth.pwa_devices SET name = $2 WHERE id = $1")
        .bind(device.id)
        .bind(name)
        .execute(&mut *tx)
        .await?;
    audit::record(
        &mut tx,
        &AuditRecord::new("auth.pwa.device.rename", Outcome::Allowed)
            .actor(AuditActor::user(owner))
            .target(AuditTarget::new("pwa_device", device.id))
            .request_id(request_id),
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

/// The phone unpairs itself: a valid key revokes its device (`unpaired`); anything else is a
/// no-op. Idempotent.
pub async fn unpair(
    core: &Core,
    key: Option<&DeviceKey>,
    request_id: Option<String>,
) -> Result<(), PwaError> {
    let Some(key) = key else {
        return Ok(());
    };
    let mut tx = core.pool.begin().await?;
    let Some(owner) = owner_of(&mut tx, key.device_id).await? else {
        return Ok(());
    };
    auth::lock_user(&mut tx, owner).await?;
    if let Some((device, _)) = lock_matching(&mut tx, key).await? {
        revoke_device(&mut tx, device.id, "unpaired", RevokeBy::Owner, request_id).await?;
    }
    tx.commit().await?;
    Ok(())
}

/// An administrator acting on another person's devices; `admin` is the actor's *current* role
/// (an app session never has it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceAdministrator {
    pub user_id: Uuid,
    pub admin: bool,
}

/// The target user's active devices (`current` is always false here).
pub async fn admin_list(
    core: &Core,
    admin: DeviceAdministrator,
    target_user_id: Uuid,
) -> Result<Vec<DeviceItem>, PwaError> {
    if !admin.admin {
        return Err(PwaError::Forbidden);
    }
    let mut conn = core.pool.acquire().await?;
    if auth::find_user(&mut conn, target_user_id).await?.is_none() {
        return Err(PwaError::NotFound);
    }
    Ok(list_active(&mut conn, target_user_id, None).await?)
}

/// Revokes a device of the target user; `true` only for the call that revoked it.
pub async fn admin_revoke(
    core: &Core,
    admin: DeviceAdministrator,
    target_user_id: Uuid,
    device_id: Uuid,
    request_id: Option<String>,
) -> Result<bool, PwaError> {
    if !admin.admin {
        return Err(PwaError::Forbidden);
    }
    let mut tx = core.pool.begin().await?;
    auth::lock_user(&mut tx, target_user_id)
        .await?
        .ok_or(PwaError::NotFound)?;
    let owner = owner_of(&mut tx, device_id).await?;
    if owner != Some(target_user_id) {
        return Err(PwaError::NotFound);
    }
    let revoked = revoke_device(
        &mut tx,
        device_id,
        "admin",
        RevokeBy::User(admin.user_id),
        request_id,
    )
    .await?;
    tx.commit().await?;
    Ok(revoked)
}

/// Signs the account out everywhere: the epoch moves on (which ends every session, pairing and
/// device made before), live session families are revoked, and every paired device is revoked
/// with reason `sign_out_everywhere`, audited as `actor`'s act (the owner or an administrator;
/// `None` for the platform itself). Runs in the caller's transaction; returns how many devices
/// were revoked.
pub async fn sign_out_everywhere(
    conn: &mut PgConnection,
    user_id: Uuid,
    actor: Option<Uuid>,
    request_id: Option<String>,
) -> Result<u64, PwaError> {
    let by = actor.map_or(RevokeBy::System, RevokeBy::User);
    if auth::lock_user(conn, user_id).await?.is_none() {
        return Ok(0);
    }
    sqlx::query(
        "UPDATE auth.users SET auth_epoch = auth_epoch + 1, updated_at = now() WHERE id = $1",
    )
    .bind(user_id)
    .execute(&mut *conn)
    .await?;
    sqlx::query(
        "UPDATE auth.session_families SET revoked_at = now(), revocation_reason = 'sign_out_everywhere'
         WHERE user_id = $1 AND revoked_at IS NULL",
    )
    .bind(user_id)
    .execute(&mut *conn)
    .await?;
    let devices: Vec<Uuid> = sqlx::query_scalar(
        "SELECT id FROM auth.pwa_devices WHERE user_id = $1 AND revoked_at IS NULL ORDER BY id",
    )
    .bind(user_id)
    .fetch_all(&mut *conn)
    .await?;
    let mut revoked = 0;
    for device in devices {
        let done =
            revoke_device(conn, device, "sign_out_everywhere", by, request_id.clone()).await?;
        revoked += u64::from(done);
    }
    Ok(revoked)
}
