//! Scheduled housekeeping of pairings and devices, 100 rows per step.

use serde::Serialize;
use uuid::Uuid;

use super::PwaError;
use super::devices::{self, RevokeBy};
use crate::Core;
use crate::approvals;
use crate::auth;

/// Rows handled per step and run.
pub const BATCH: i64 = 100;

/// What one run changed.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct PwaMaintenanceReport {
    pub pairings_deleted: u64,
    pub devices_expired: u64,
    pub devices_purged: u64,
}

/// Deletes expired pairings, revokes devices of expired accounts, and purges devices revoked
/// more than 30 days ago or idle for 180 days once no session family refers to them.
pub async fn run(core: &Core) -> Result<PwaMaintenanceReport, PwaError> {
    let pairings_deleted = sqlx::query(
        "DELETE FROM auth.pwa_pairings WHERE id IN (
           SELECT id FROM auth.pwa_pairings WHERE expires_at < now()
           ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED)",
    )
    .bind(BATCH)
    .execute(&core.pool)
    .await?
    .rows_affected();

    let candidates: Vec<(Uuid, Uuid)> = sqlx::query_as(
        "SELECT d.id, d.user_id FROM auth.pwa_devices d JOIN auth.users u ON u.id = d.user_id
         WHERE d.revoked_at IS NULL AND u.account_expires IS NOT NULL
           AND u.account_expires <= now()
         ORDER BY d.created_at LIMIT $1",
    )
    .bind(BATCH)
    .fetch_all(&core.pool)
    .await?;
    let mut devices_expired = 0;
    for (device_id, user_id) in candidates {
        let mut tx = core.pool.begin().await?;
        let Some(user) = auth::lock_user(&mut tx, user_id).await? else {
            continue;
        };
        if !approvals::account_expired(&mut tx, &user).await? {
            continue;
        }
        if devices::revoke_device(
            &mut tx,
            device_id,
            "account_expired",
            RevokeBy::System,
            None,
        )
        .await?
        {
            devices_expired += 1;
        }
        tx.commit().await?;
    }

    let devices_purged = sqlx::query(
        "DELETE FROM auth.pwa_devices WHERE id IN (
           SELECT d.id FROM auth.pwa_devices d
           WHERE (d.revoked_at < now() - interval '30 days'
                  OR d.rotated_at < now() - interval '180 days')
             AND NOT EXISTS (SELECT 1 FROM auth.session_families f WHERE f.pwa_device_id = d.id)
           LIMIT $1 FOR UPDATE SKIP LOCKED)",
    )
    .bind(BATCH)
    .execute(&core.pool)
    .await?
    .rows_affected();

    Ok(PwaMaintenanceReport {
        pairings_deleted,
        devices_expired,
        devices_purged,
    })
}
