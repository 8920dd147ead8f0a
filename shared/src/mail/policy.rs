//! Who may send with which profile: the calling app's declared permissions (its registry
//! entry's `platformPermissions`), the profile it names or the default, the app's access mode,
//! and the daily recipient quota.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgConnection;
use uuid::Uuid;

use super::{CORE_APP_ID, MailCode, MailError, MailFault, READ_PERMISSION, SEND_PERMISSION};

/// The app behind a call, with what its registry entry declares.
#[derive(Debug, Clone)]
pub struct Caller {
    pub app_id: String,
    /// Whether the app has a live registry entry.
    pub registered: bool,
    pub app_name: Option<String>,
    pub permissions: Vec<String>,
}

impl Caller {
    /// Core itself: it sends its own notices and reads only its own log.
    pub fn core() -> Caller {
        Caller {
            app_id: CORE_APP_ID.to_string(),
            registered: true,
            app_name: None,
            permissions: vec![SEND_PERMISSION.to_string()],
        }
    }

    /// Reads the app's registry entry (an app without one declares nothing).
    pub async fn of_app(pool: &sqlx::PgPool, app_id: &str) -> Result<Caller, MailError> {
        if app_id == CORE_APP_ID {
            return Ok(Caller::core());
        }
        let entry = crate::registry::store::get_app(pool, app_id).await?;
        Ok(match entry {
            Some(entry) => Caller {
                app_id: app_id.to_string(),
                registered: true,
                app_name: Some(entry.name.clone()),
                permissions: entry.platform_permissions.clone().unwrap_or_default(),
            },
            None => Caller {
                app_id: app_id.to_string(),
                registered: false,
                app_name: None,
                permissions: Vec::new(),
            },
        })
    }

    pub fn can_send(&self) -> bool {
        self.permissions.iter().any(|p| p == SEND_PERMISSION)
    }

    pub fn can_read(&self) -> bool {
        self.app_id != CORE_APP_ID && self.permissions.iter().any(|p| p == READ_PERMISSION)
    }

    /// `send`, `enqueue` and `profiles` need `mail:send`.
    pub fn require_send(&self) -> Result<(), MailFault> {
        if self.can_send() {
            return Ok(());
        }
        Err(MailFault::new(
            MailCode::MailNotDeclared,
            "Declare platformPermissions: [\"mail:send\"].",
        ))
    }

    /// `list` and `readableApps` need `mail:send` or `mail:read`.
    pub fn require_send_or_read(&self) -> Result<(), MailFault> {
        if self.can_send() || self.can_read() {
            return Ok(());
        }
        Err(MailFault::new(
            MailCode::MailNotDeclared,
            "Declare \"mail:send\" or \"mail:read\" in platformPermissions.",
        ))
    }
}

/// A profile as acceptance and the administrators see it (the password never leaves the row).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ProfileRow {
    pub id: Uuid,
    pub key: String,
    pub name: String,
    pub from_address: String,
    pub from_name: Option<String>,
    pub smtp_host: String,
    pub smtp_port: i32,
    pub smtp_secure: bool,
    pub smtp_user: Option<String>,
    pub has_password: bool,
    pub pace_per_minute: i32,
    pub daily_recipient_limit: Option<i32>,
    pub max_attachment_bytes: i32,
    pub is_default: bool,
    pub revision: i32,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub updated_by: Option<String>,
}

/// The columns of [`ProfileRow`].
pub const PROFILE_COLUMNS: &str = "id, key, name, from_address, from_name, smtp_host, smtp_port, \
     smtp_secure, smtp_user, smtp_password_encrypted IS NOT NULL AS has_password, pace_per_minute, \
     daily_recipient_limit, max_attachment_bytes, is_default, revision, created_at, updated_at, \
     updated_by";

/// An app's access mode: only the current default profile, or exactly a selected set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Access {
    Default,
    Selected(Vec<Uuid>),
}

/// The access of `app_id`. Core's own mail always uses the default profile.
pub async fn access_of(conn: &mut PgConnection, app_id: &str) -> Result<Access, MailError> {
    if app_id == CORE_APP_ID {
        return Ok(Access::Default);
    }
    let mode: Option<String> =
        sqlx::query_scalar("SELECT mode FROM outgoing_mail.app_access WHERE app_id = $1")
            .bind(app_id)
            .fetch_optional(&mut *conn)
            .await?;
    Ok(match mode.as_deref() {
        Some("selected") => {
            let ids: Vec<Uuid> = sqlx::query_scalar(
                "SELECT profile_id FROM outgoing_mail.app_profiles WHERE app_id = $1",
            )
            .bind(app_id)
            .fetch_all(&mut *conn)
            .await?;
            Access::Selected(ids)
        }
        _ => Access::Default,
    })
}

/// Whether an access lets an app use `profile`.
pub fn allows(access: &Access, profile: &ProfileRow) -> bool {
    match access {
        Access::Default => profile.is_default,
        Access::Selected(ids) => ids.contains(&profile.id),
    }
}

/// Resolves the profile a message names (or the default) and checks the app may use it. Runs
/// inside the acceptance transaction and holds the profile `FOR SHARE`, so an administrator's
/// change waits for the acceptance to commit.
pub async fn resolve_profile(
    conn: &mut PgConnection,
    app_id: &str,
    key: Option<&str>,
) -> Result<ProfileRow, MailError> {
    let access = access_of(conn, app_id).await?;
    resolve_profile_for(conn, &access, key).await
}

/// [`resolve_profile`] with the app's access already read (a call resolving several profiles
/// reads it once).
pub async fn resolve_profile_for(
    conn: &mut PgConnection,
    access: &Access,
    key: Option<&str>,
) -> Result<ProfileRow, MailError> {
    let profile: Option<ProfileRow> =
        match key {
            Some(key) => {
                sqlx::query_as(sqlx::AssertSqlSafe(format!(
                    "SELECT {PROFILE_COLUMNS} FROM outgoing_mail.profiles WHERE key = $1 FOR SHARE"
                )))
                .bind(key)
                .fetch_optional(&mut *conn)
                .await?
            }
            None => sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT {PROFILE_COLUMNS} FROM outgoing_mail.profiles WHERE is_default FOR SHARE"
            )))
            .fetch_optional(&mut *conn)
            .await?,
        };
    let Some(profile) = profile else {
        let any: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM outgoing_mail.profiles)")
            .fetch_one(&mut *conn)
            .await?;
        return Err(match key {
            _ if !any => MailError::fault(
                MailCode::MailUnavailable,
                "No outgoing mail profile is configured.",
            ),
            Some(_) => MailError::fault(MailCode::ProfileUnknown, "Unknown outgoing mail profile."),
            None => MailError::fault(
                MailCode::ProfileRequired,
                "Name an outgoing mail profile: there is no default.",
            ),
        });
    };
    if !allows(access, &profile) {
        return Err(match key {
            Some(_) => MailError::fault(
                MailCode::ProfileNotAllowed,
                "This application may not use this outgoing mail profile.",
            ),
            None => MailError::fault(
                MailCode::ProfileRequired,
                "This application may not use the default outgoing mail profile; name one.",
            ),
        });
    }
    Ok(profile)
}

/// Recipients an app sent through a profile in the last 24 hours (queued and failed count;
/// cancelled do not).
pub async fn quota_used(
    conn: &mut PgConnection,
    app_id: &str,
    profile_id: Uuid,
) -> Result<i64, MailError> {
    let used: i64 = sqlx::query_scalar(
        "SELECT coalesce(sum(recipient_count), 0)::bigint FROM outgoing_mail.messages
         WHERE app_id = $1 AND profile_id = $2 AND status <> 'cancelled'
           AND created_at > now() - interval '24 hours'",
    )
    .bind(app_id)
    .bind(profile_id)
    .fetch_one(conn)
    .await?;
    Ok(used)
}

/// `quota_exceeded` when `requested` more recipients would pass the profile's daily limit.
pub fn check_quota(limit: Option<i32>, used: i64, requested: i64) -> Result<(), MailFault> {
    match limit {
        Some(limit) if used + requested > i64::from(limit) => {
            Err(MailFault::quota(i64::from(limit), used, requested))
        }
        _ => Ok(()),
    }
}

/// A profile as `profiles()` shows it to an app.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = MailUsableProfile)]
pub struct UsableProfile {
    pub key: String,
    pub name: String,
    /// The sender address.
    pub from: String,
    /// Whether it is the default profile (used when a message names none).
    pub default: bool,
    /// The most bytes the attachments of one message may hold together.
    #[schema(minimum = 1, maximum = 26214400)]
    pub max_attachment_bytes: i32,
    pub quota: Quota,
}

/// The app's daily recipient quota on a profile.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = MailQuota)]
pub struct Quota {
    /// Recipients per 24 hours, or `null` for no limit.
    #[schema(required = true, minimum = 1)]
    pub daily_recipients: Option<i32>,
    /// Recipients of the app's messages through the profile in the last 24 hours (cancelled
    /// messages do not count).
    #[schema(minimum = 0)]
    pub used_last24h: i64,
}

/// Every profile: the default first, then by name and key.
pub async fn all_profiles(pool: &sqlx::PgPool) -> Result<Vec<ProfileRow>, MailError> {
    Ok(sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {PROFILE_COLUMNS} FROM outgoing_mail.profiles ORDER BY is_default DESC, name, key"
    )))
    .fetch_all(pool)
    .await?)
}

/// The profiles an app may use: the default first, then by name and key.
pub async fn usable_profiles(
    pool: &sqlx::PgPool,
    app_id: &str,
) -> Result<Vec<UsableProfile>, MailError> {
    let profiles = all_profiles(pool).await?;
    let mut conn = pool.acquire().await?;
    let access = access_of(&mut conn, app_id).await?;
    let used: std::collections::HashMap<Uuid, i64> = sqlx::query_as(
        "SELECT profile_id, coalesce(sum(recipient_count), 0)::bigint FROM outgoing_mail.messages
         WHERE app_id = $1 AND profile_id IS NOT NULL AND status <> 'cancelled'
           AND created_at > now() - interval '24 hours'
         GROUP BY profile_id",
    )
    .bind(app_id)
    .fetch_all(&mut *conn)
    .await?
    .into_iter()
    .collect();
    Ok(profiles
        .into_iter()
        .filter(|p| allows(&access, p))
        .map(|profile| UsableProfile {
            quota: Quota {
                daily_recipients: profile.daily_recipient_limit,
                used_last24h: used.get(&profile.id).copied().unwrap_or(0),
            },
            key: profile.key,
            name: profile.name,
            from: profile.from_address,
            default: profile.is_default,
            max_attachment_bytes: profile.max_attachment_bytes,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quota_counts_the_requested_recipients_on_top_of_the_used_ones() {
        assert!(check_quota(None, 1_000_000, 50).is_ok());
        assert!(check_quota(Some(5), 4, 1).is_ok());
        let fault = check_quota(Some(2), 0, 3).expect_err("over");
        assert_eq!(fault.code, MailCode::QuotaExceeded);
        assert_eq!(fault.body()["limit"], 2);
        assert_eq!(fault.body()["used"], 0);
        assert_eq!(fault.body()["requested"], 3);
    }

    #[test]
    fn permissions_come_from_the_declaration_and_core_reads_only_its_own() {
        let mut caller = Caller {
            app_id: "reader".into(),
            registered: true,
            app_name: None,
            permissions: vec![READ_PERMISSION.into()],
        };
        assert!(caller.require_send().is_err());
        assert!(caller.require_send_or_read().is_ok());
        caller.permissions.clear();
        assert_eq!(
            caller.require_send_or_read().map_err(|f| f.code),
            Err(MailCode::MailNotDeclared)
        );
        assert!(!Caller::core().can_read());
        assert!(Caller::core().can_send());
    }
}
