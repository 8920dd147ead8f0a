//! Renewal: the installed app presents its device key (and its app session, if it still has
//! one) and gets a fresh app session when the current one runs low. The key rotates with every
//! new session; the previous key keeps working for a short grace, so two tabs renewing at once
//! do not sign each other out.

use chrono::Utc;
use uuid::Uuid;

use super::devices::{self, KeyMatch, RevokeBy};
use super::pairing::{Credentials, KeyChange, app_eligible, reissue};
use super::{AppSession, DeviceKey, PwaError, RENEW_WITHIN_SECONDS, ROTATION_GRACE_SECONDS};
use crate::Core;
use crate::approvals;
use crate::auth;
use crate::identity::metrics::Counter;
use crate::identity::{IssueOptions, Purpose, SigningScope};

/// What a renewal found.
#[derive(Clone, PartialEq, Eq)]
pub enum RenewOutcome {
    /// No (well-formed) device key.
    Missing,
    /// The device is gone, revoked, idle, of an older epoch, or the key matches neither hash.
    Ended,
    /// The account cannot use the app right now (category off, legal terms not accepted); the
    /// device stays paired.
    Blocked,
    /// The session is good for a while; nothing to do.
    Current { user_id: Uuid },
    /// A new key and session.
    Renewed {
        user_id: Uuid,
        credentials: Credentials,
    },
}

impl std::fmt::Debug for RenewOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RenewOutcome::Missing => "Missing",
            RenewOutcome::Ended => "Ended",
            RenewOutcome::Blocked => "Blocked",
            RenewOutcome::Current { .. } => "Current",
            RenewOutcome::Renewed { .. } => "Renewed",
        })
    }
}

/// What the app presents.
#[derive(Debug, Clone, Default)]
pub struct RenewRequest {
    pub device_key: Option<DeviceKey>,
    pub app_session: Option<AppSession>,
    pub request_id: Option<String>,
    pub user_agent: Option<String>,
}

/// Renews the app's session if needed.
pub async fn renew(core: &Core, request: RenewRequest) -> Result<RenewOutcome, PwaError> {
    let Some(key) = request.device_key.clone() else {
        return Ok(RenewOutcome::Missing);
    };
    let owner = {
        let mut conn = core.pool.acquire().await?;
        devices::owner_of(&mut conn, key.device_id).await?
    };
    let Some(owner) = owner else {
        return Ok(RenewOutcome::Ended);
    };
    let request = &request;
    let key = &key;
    let outcome = core
        .identity
        .with_active_signer(
            Purpose::Session,
            IssueOptions::timeout(super::ISSUANCE_TIMEOUT_MS),
            |mut scope| async move {
                let result = renew_in_scope(&mut scope, core, request, key, owner).await;
                (scope, result)
            },
        )
        .await;
    // Counted once the new session is committed.
    if matches!(outcome, Ok(RenewOutcome::Renewed { .. })) {
        core.identity.metrics().inc(Counter::SessionRefresh);
    }
    outcome
}

async fn renew_in_scope(
    scope: &mut SigningScope,
    core: &Core,
    request: &RenewRequest,
    key: &DeviceKey,
    owner: Uuid,
) -> Result<RenewOutcome, PwaError> {
    let Some(user) = auth::lock_user(&mut scope.tx, owner).await? else {
        return Ok(RenewOutcome::Ended);
    };
    let Some((device, matched)) = devices::lock_matching(&mut scope.tx, key).await? else {
        return Ok(RenewOutcome::Ended);
    };
    if device.user_id != user.id {
        return Ok(RenewOutcome::Ended);
    }
    if approvals::account_expired(&mut scope.tx, &user).await? {
        // Extending the account later does not revive the device.
        devices::revoke_device(
            &mut scope.tx,
            device.id,
            "account_expired",
            RevokeBy::System,
            request.request_id.clone(),
        )
        .await?;
        return Ok(RenewOutcome::Ended);
    }
    if !app_eligible(&mut scope.tx, core, &user).await? {
        return Ok(RenewOutcome::Blocked);
    }
    let recover = match matched {
        KeyMatch::Current => {
            if device.previous_secret_hash.is_some() {
                sqlx::query(
                    "UPDATE auth.pwa_devices SET previous_secret_hash = NULL WHERE id = $1",
                )
                .bind(device.id)
                .execute(&mut *scope.tx)
                .await?;
            }
            let live = request.app_session.is_some_and(|s| {
                s.device_id == device.id
                    && s.user_id == user.id
                    && (s.expires_at - Utc::now()).num_seconds() > RENEW_WITHIN_SECONDS
            });
            if live {
                sqlx::query(
                    "UPDATE auth.pwa_devices SET last_used_at = now()
                     WHERE id = $1 AND last_used_at < date_trunc('day', now())",
                )
                .bind(device.id)
                .execute(&mut *scope.tx)
                .await?;
                return Ok(RenewOutcome::Current { user_id: user.id });
            }
            false
        }
        KeyMatch::Previous => {
            if device.rotated_seconds_ago < ROTATION_GRACE_SECONDS as f64 {
                return Ok(RenewOutcome::Current { user_id: user.id });
            }
            true
        }
    };
    let change = if recover {
        // The previous key came back: a new current key, the previous one unchanged.
        KeyChange::KeepPrevious
    } else {
        KeyChange::Rotate
    };
    let credentials = reissue(
        scope,
        core,
        (user.id, device.id),
        change,
        recover,
        (request.request_id.clone(), request.user_agent.clone()),
    )
    .await?;
    Ok(RenewOutcome::Renewed {
        user_id: user.id,
        credentials,
    })
}
