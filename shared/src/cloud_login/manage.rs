//! A person's own authenticators (list, rename, revoke), and administrators' view of another
//! person's. These work while Cloud Login is switched off or its app origin is not set, so
//! nobody is left unable to remove a device.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::json;
use sqlx::FromRow;
use uuid::Uuid;

use super::{CloudLoginError, ManageActor, PAGE_SIZE, cleanup, config, recent, record};
use crate::Core;

/// A device as its owner (or an administrator) sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, FromRow, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = CloudLoginDevice)]
pub struct DeviceView {
    pub id: Uuid,
    /// The authenticator's name, 1 to 80 characters.
    pub name: String,
    pub created_at: DateTime<Utc>,
    /// The last accepted signed command; `null` before the first.
    #[schema(required = true)]
    pub last_used_at: Option<DateTime<Utc>>,
    /// When the device was revoked; `null` while it is active.
    #[schema(required = true)]
    pub revoked_at: Option<DateTime<Utc>>,
    /// Whether an administrator enrolled it for the person.
    pub assisted: bool,
}

const VIEW_COLUMNS: &str = "id, name, created_at, last_used_at, revoked_at, assisted";

/// One page of devices, by id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = CloudLoginDevicePage)]
pub struct DevicePage {
    /// At most 20 devices, by id.
    #[schema(max_items = 20)]
    pub items: Vec<DeviceView>,
    /// The `after` of the next page; `null` on the last.
    #[schema(required = true)]
    pub next_cursor: Option<Uuid>,
}

/// The actor's devices after `after`, [`PAGE_SIZE`] at a time.
pub async fn list(
    core: &Core,
    actor: ManageActor,
    after: Option<Uuid>,
) -> Result<DevicePage, CloudLoginError> {
    let mut conn = core.pool.acquire().await?;
    let cfg = config::read_on(core, &mut conn).await?;
    let statement = format!(
        "SELECT {VIEW_COLUMNS} FROM auth.app_devices
          WHERE issuer = $1 AND user_id = $2 AND ($3::uuid IS NULL OR id > $3)
          ORDER BY id LIMIT $4"
    );
    let mut items: Vec<DeviceView> = sqlx::query_as(sqlx::AssertSqlSafe(statement))
        .bind(&cfg.issuer)
        .bind(actor.user_id)
        .bind(after)
        .bind(PAGE_SIZE + 1)
        .fetch_all(&mut *conn)
        .await?;
    let next_cursor = if items.len() as i64 > PAGE_SIZE {
        items.truncate(PAGE_SIZE as usize);
        items.last().map(|d| d.id)
    } else {
        None
    };
    Ok(DevicePage { items, next_cursor })
}

/// A change of one's own device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mutation {
    Rename(String),
    Revoke,
}

/// Renames or revokes one of the actor's devices (a recent web sign-in is needed; another
/// person's device is 404).
pub async fn update(
    core: &Core,
    actor: ManageActor,
    device_id: Uuid,
    mutation: &Mutation,
    request_id: Option<String>,
) -> Result<(), CloudLoginError> {
    let mut tx = core.pool.begin().await?;
    let cfg = config::read_on(core, &mut tx).await?;
    cleanup(&mut tx).await?;
    recent(&mut tx, &core.settings, actor).await?;
    let found: Option<Uuid> = sqlx::query_scalar(
        "SELECT id FROM auth.app_devices WHERE id = $1 AND issuer = $2 AND user_id = $3
            FOR UPDATE",
    )
    .bind(device_id)
    .bind(&cfg.issuer)
    .bind(actor.user_id)
    .fetch_optional(&mut *tx)
    .await?;
    if found.is_none() {
        return Err(CloudLoginError::Missing);
    }
    let action = match mutation {
        Mutation::Rename(name) => {
            sqlx::query("UPDATE auth.app_devices SET name = $2 WHERE id = $1")
                .bind(device_id)
                .bind(name)
                .execute(&mut *tx)
                .await?;
            "device.rename"
        }
        Mutation::Revoke => {
            sqlx::query(
                "UPDATE auth.app_devices
                    SET revoked_at = COALESCE(revoked_at, now()),
                        revocation_reason = COALESCE(revocation_reason, 'user')
                  WHERE id = $1",
            )
            .bind(device_id)
            .execute(&mut *tx)
            .await?;
            "device.revoke"
        }
    };
    let reason = (action == "device.revoke").then(|| ("reason", json!("user")));
    record(
        &mut tx,
        action,
        actor.user_id,
        device_id,
        reason.as_slice(),
        request_id,
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

/// An administrator acting on another person's devices: their id and whether they hold the
/// administrator role right now (an app session never does).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Administrator {
    pub user_id: Uuid,
    pub admin: bool,
}

/// Every device of `user_id` at this issuer (administrators only).
pub async fn admin_list(
    core: &Core,
    admin: Administrator,
    user_id: Uuid,
) -> Result<Vec<DeviceView>, CloudLoginError> {
    if !admin.admin {
        return Err(CloudLoginError::Forbidden);
    }
    let mut conn = core.pool.acquire().await?;
    let cfg = config::read_on(core, &mut conn).await?;
    let statement = format!(
        "SELECT {VIEW_COLUMNS} FROM auth.app_devices WHERE issuer = $1 AND user_id = $2
          ORDER BY created_at, id"
    );
    Ok(sqlx::query_as(sqlx::AssertSqlSafe(statement))
        .bind(&cfg.issuer)
        .bind(user_id)
        .fetch_all(&mut *conn)
        .await?)
}

/// What an administrator's revocation did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[schema(as = CloudLoginAdminRevocation)]
pub struct AdminRevocation {
    /// False when the device was already revoked (nothing changed, nobody is notified again).
    pub revoked: bool,
    pub device: RevokedDevice,
}

/// The revoked device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[schema(as = CloudLoginRevokedDevice)]
pub struct RevokedDevice {
    pub name: String,
}

/// Revokes `device_id` of `user_id` (idempotent; the person's sessions stay valid; the owner
/// is notified once, by the maintenance function). Unknown devices are 404.
pub async fn admin_revoke(
    core: &Core,
    admin: Administrator,
    user_id: Uuid,
    device_id: Uuid,
    request_id: Option<String>,
) -> Result<AdminRevocation, CloudLoginError> {
    if !admin.admin {
        return Err(CloudLoginError::Forbidden);
    }
    let mut tx = core.pool.begin().await?;
    let cfg = config::read_on(core, &mut tx).await?;
    let found: Option<(String, bool)> = sqlx::query_as(
        "SELECT name, revoked_at IS NULL FROM auth.app_devices
          WHERE id = $1 AND issuer = $2 AND user_id = $3
            FOR UPDATE",
    )
    .bind(device_id)
    .bind(&cfg.issuer)
    .bind(user_id)
    .fetch_optional(&mut *tx)
    .await?;
    let Some((name, active)) = found else {
        return Err(CloudLoginError::Missing);
    };
    if active {
        // The owner learns of it by mail (the maintenance function sends one notice).
        sqlx::query(
            "UPDATE auth.app_devices SET revoked_at = now(), revocation_reason = 'admin'
              WHERE id = $1",
        )
        .bind(device_id)
        .execute(&mut *tx)
        .await?;
        record(
            &mut tx,
            "device.revoke",
            admin.user_id,
            device_id,
            &[("reason", json!("admin")), ("targetUserId", json!(user_id))],
            request_id,
        )
        .await?;
    }
    tx.commit().await?;
    Ok(AdminRevocation {
        revoked: active,
        device: RevokedDevice { name },
    })
}
