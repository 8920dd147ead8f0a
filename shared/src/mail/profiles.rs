//! SMTP profiles as administrators keep them: optimistic revisions, passwords kept, cleared or
//! replaced (stored encrypted with the settings key), exactly one default.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sqlx::PgPool;
use utoipa::ToSchema;
use uuid::Uuid;

use super::locks::{self, MailLock, Mode};
use super::policy::{PROFILE_COLUMNS, ProfileRow};
use super::validate::{is_valid_address, is_valid_profile_key};
use super::{MailCode, MailError};
use crate::audit::{self, AuditActor, AuditRecord, AuditTarget, Outcome};
use crate::settings::Settings;

/// The administrator behind a change.
#[derive(Debug, Clone)]
pub struct AdminActor {
    pub user_id: Uuid,
    pub uid: String,
    pub request_id: Option<String>,
}

impl AdminActor {
    pub fn audit(&self) -> AuditActor {
        AuditActor {
            user_id: Some(self.user_id),
            uid: Some(self.uid.clone()),
            roles: vec!["admin".into()],
            ..AuditActor::default()
        }
    }
}

/// A password change: `None` keeps the stored one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PasswordChange {
    Keep,
    Clear,
    Replace(String),
}

/// A profile as an administrator writes it (`PUT /profiles/{key}`).
#[derive(Debug, Clone)]
pub struct ProfileInput {
    pub name: String,
    pub from: String,
    pub from_name: Option<String>,
    pub smtp_host: String,
    pub smtp_port: i32,
    pub smtp_secure: bool,
    pub smtp_user: Option<String>,
    pub password: PasswordChange,
    pub pace_per_minute: i32,
    pub daily_recipient_limit: Option<i32>,
    pub max_attachment_bytes: i32,
    pub revision: Option<i32>,
}

/// A profile as an administrator writes it. Strict: unknown fields are refused; any failure is
/// `invalid_profile` "<path>: <issue>". Creating a profile takes no `revision`; replacing one
/// takes its current `revision` (missing: `profile_exists`, stale: `revision_conflict`).
#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schema(as = MailProfileInput)]
pub struct RawProfile {
    /// 1–120 characters on one line once surrounding whitespace is trimmed.
    #[schema(pattern = r"^\s*[^\s\u0000](?:[^\r\n\u0000]{0,118}[^\s\u0000])?\s*$")]
    name: String,
    /// The sender address: an HTML5 "valid e-mail address" of at most 320 characters.
    #[schema(
        max_length = 320,
        pattern = r"^[a-zA-Z0-9.!#$%&'*+/=?^_`{|}~-]+@[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)*$"
    )]
    from_address: String,
    /// The sender's display name: 1–120 characters on one line once surrounding whitespace is
    /// trimmed; `null` or absent for the profile's name.
    #[serde(default)]
    #[schema(pattern = r"^\s*[^\s\u0000](?:[^\r\n\u0000]{0,118}[^\s\u0000])?\s*$")]
    from_name: Option<String>,
    /// The SMTP server's host name: at most 253 bytes without whitespace, `/`, `@` or NUL
    /// (surrounding whitespace trimmed).
    #[schema(pattern = r"^\s*[^\s/@\u0000]{1,253}\s*$")]
    smtp_host: String,
    #[schema(minimum = 1, maximum = 65535)]
    smtp_port: i64,
    /// `true`: implicit TLS; `false`: STARTTLS when the server offers it.
    smtp_secure: bool,
    /// The SMTP user (empty or `null`: no authentication): at most 320 characters on one line.
    #[serde(default)]
    #[schema(max_length = 320, pattern = r"^[^\r\n\u0000]*$")]
    smtp_user: Option<String>,
    /// Absent: keep the stored password; `null`: clear it; a string: replace it (at most 16384
    /// characters, no NUL). A new `smtpHost` needs it again when a password is stored.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>, max_length = 16384, pattern = r"^[^\u0000]*$")]
    smtp_password: Option<Option<String>>,
    /// Messages per minute of the bulk lane (default 60).
    #[serde(default)]
    #[schema(minimum = 1, maximum = 6000)]
    pace_per_minute: Option<i64>,
    /// Recipients per app and 24 hours; absent or `null` for no limit.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 2147483647)]
    daily_recipient_limit: Option<i64>,
    /// The most bytes the attachments of one message may hold together (default 15728640).
    #[serde(default)]
    #[schema(minimum = 1, maximum = 26214400)]
    max_attachment_bytes: Option<i64>,
    /// The revision being replaced.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 2147483647)]
    revision: Option<i64>,
}

/// Tells an absent field (outer `None`) from an explicit `null` (`Some(None)`).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

/// The longest profile name and display name.
const MAX_NAME_CHARS: usize = 120;
/// The longest SMTP user name.
const MAX_USER_CHARS: usize = 320;
/// The longest SMTP password (long enough for API tokens used as passwords).
const MAX_PASSWORD_CHARS: usize = 16384;

fn invalid(message: impl Into<String>) -> MailError {
    MailError::fault(MailCode::InvalidProfile, message.into())
}

fn plain(value: &str) -> bool {
    !value.contains(['\r', '\n', '\0'])
}

impl ProfileInput {
    /// Parses and checks a body; errors are `invalid_profile` "<path>: <issue>".
    pub fn parse(value: &Value) -> Result<ProfileInput, MailError> {
        let raw: RawProfile = serde_json::from_value(value.clone())
            .map_err(|error| invalid(format!("body: {error}")))?;
        let name = raw.name.trim().to_string();
        if name.is_empty() || name.chars().count() > MAX_NAME_CHARS || !plain(&name) {
            return Err(invalid("name: 1–120 characters on one line"));
        }
        if !is_valid_address(&raw.from_address) {
            return Err(invalid("fromAddress: a valid email address"));
        }
        let from_name = raw.from_name.map(|n| n.trim().to_string());
        if let Some(from_name) = &from_name
            && (from_name.is_empty()
                || from_name.chars().count() > MAX_NAME_CHARS
                || !plain(from_name))
        {
            return Err(invalid("fromName: 1–120 characters on one line, or null"));
        }
        let host = raw.smtp_host.trim().to_string();
        if host.is_empty()
            || host.len() > 253
            || host.contains(|c: char| c.is_whitespace() || matches!(c, '/' | '@' | '\0'))
        {
            return Err(invalid("smtpHost: an SMTP host name"));
        }
        if !(1..=65535).contains(&raw.smtp_port) {
            return Err(invalid("smtpPort: 1–65535"));
        }
        let user = raw.smtp_user.filter(|u| !u.is_empty());
        if user
            .as_ref()
            .is_some_and(|u| u.chars().count() > MAX_USER_CHARS || !plain(u))
        {
            return Err(invalid("smtpUser: at most 320 characters on one line"));
        }
        let password = match raw.smtp_password {
            None => PasswordChange::Keep,
            Some(None) => PasswordChange::Clear,
            Some(Some(p)) if p.chars().count() <= MAX_PASSWORD_CHARS && !p.contains('\0') => {
                PasswordChange::Replace(p)
            }
            Some(Some(_)) => return Err(invalid("smtpPassword: at most 16384 characters")),
        };
        let ranged = |value: Option<i64>, default: i64, min: i64, max: i64, path: &str| {
            let value = value.unwrap_or(default);
            if (min..=max).contains(&value) {
                Ok(value as i32)
            } else {
                Err(invalid(format!("{path}: {min}–{max}")))
            }
        };
        let daily = match raw.daily_recipient_limit {
            None => None,
            Some(limit) if (1..=i64::from(i32::MAX)).contains(&limit) => Some(limit as i32),
            Some(_) => return Err(invalid("dailyRecipientLimit: a positive whole number")),
        };
        let revision = match raw.revision {
            None => None,
            Some(r) if (1..=i64::from(i32::MAX)).contains(&r) => Some(r as i32),
            Some(_) => return Err(invalid("revision: a positive whole number")),
        };
        Ok(ProfileInput {
            name,
            from: raw.from_address,
            from_name,
            smtp_host: host,
            smtp_port: raw.smtp_port as i32,
            smtp_secure: raw.smtp_secure,
            smtp_user: user,
            password,
            pace_per_minute: ranged(raw.pace_per_minute, 60, 1, 6000, "pacePerMinute")?,
            daily_recipient_limit: daily,
            max_attachment_bytes: ranged(
                raw.max_attachment_bytes,
                15_728_640,
                1,
                26_214_400,
                "maxAttachmentBytes",
            )?,
            revision,
        })
    }
}

/// A profile as administrators read it: never the password, only whether one is stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = MailAdminProfile)]
pub struct AdminProfile {
    pub key: String,
    pub name: String,
    pub from_address: String,
    #[schema(required = true)]
    pub from_name: Option<String>,
    pub smtp_host: String,
    #[schema(minimum = 1, maximum = 65535)]
    pub smtp_port: i32,
    pub smtp_secure: bool,
    #[schema(required = true)]
    pub smtp_user: Option<String>,
    pub has_password: bool,
    #[schema(minimum = 1, maximum = 6000)]
    pub pace_per_minute: i32,
    #[schema(required = true, minimum = 1)]
    pub daily_recipient_limit: Option<i32>,
    #[schema(minimum = 1, maximum = 26214400)]
    pub max_attachment_bytes: i32,
    pub is_default: bool,
    /// Bumped by every change; a replacement names the revision it replaces.
    #[schema(minimum = 1)]
    pub revision: i32,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// The uid of the administrator who changed it last.
    #[schema(required = true)]
    pub updated_by: Option<String>,
    /// How many apps have it among their selected profiles.
    #[schema(minimum = 0)]
    pub app_count: i64,
}

/// A profile as administrators read it, with how many apps have it among their selected
/// profiles.
pub fn admin_view(profile: &ProfileRow, app_count: i64) -> AdminProfile {
    AdminProfile {
        key: profile.key.clone(),
        name: profile.name.clone(),
        from_address: profile.from_address.clone(),
        from_name: profile.from_name.clone(),
        smtp_host: profile.smtp_host.clone(),
        smtp_port: profile.smtp_port,
        smtp_secure: profile.smtp_secure,
        smtp_user: profile.smtp_user.clone(),
        has_password: profile.has_password,
        pace_per_minute: profile.pace_per_minute,
        daily_recipient_limit: profile.daily_recipient_limit,
        max_attachment_bytes: profile.max_attachment_bytes,
        is_default: profile.is_default,
        revision: profile.revision,
        created_at: profile.created_at,
        updated_at: profile.updated_at,
        updated_by: profile.updated_by.clone(),
        app_count,
    }
}

/// How many apps have each profile among their selected profiles.
pub async fn app_counts(pool: &PgPool) -> Result<HashMap<Uuid, i64>, MailError> {
    let rows: Vec<(Uuid, i64)> = sqlx::query_as(
        "SELECT profile_id, count(*) FROM outgoing_mail.app_profiles GROUP BY profile_id",
    )
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().collect())
}

/// One profile by key.
pub async fn get(pool: &PgPool, key: &str) -> Result<Option<ProfileRow>, MailError> {
    Ok(sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {PROFILE_COLUMNS} FROM outgoing_mail.profiles WHERE key = $1"
    )))
    .bind(key)
    .fetch_optional(pool)
    .await?)
}

fn unknown() -> MailError {
    MailError::fault(MailCode::ProfileUnknown, "Unknown outgoing mail profile.")
}

/// The label a profile's password is sealed under (a ciphertext cannot move to another profile).
pub fn password_label(profile_id: Uuid) -> String {
    format!("outgoing_mail.profile.{profile_id}.smtp_password")
}

/// Creates a profile (the first becomes the default) or replaces one at its current revision.
/// Returns the profile and whether it was created.
pub async fn put(
    pool: &PgPool,
    settings: &Settings,
    key: &str,
    input: ProfileInput,
    admin: &AdminActor,
) -> Result<(ProfileRow, bool), MailError> {
    if !is_valid_profile_key(key) {
        return Err(invalid("key: lowercase letters, digits and hyphens (1–63)"));
    }
    let mut tx = pool.begin().await?;
    locks::take(&mut tx, MailLock::Policy, Mode::Exclusive).await?;
    let existing: Option<(Uuid, i32, String, bool)> = sqlx::query_as(
        "SELECT id, revision, smtp_host, smtp_password_encrypted IS NOT NULL
         FROM outgoing_mail.profiles WHERE key = $1 FOR UPDATE",
    )
    .bind(key)
    .fetch_optional(&mut *tx)
    .await?;
    let seal = |id: Uuid, password: &str| settings.seal(&password_label(id), password);
    let created = existing.is_none();
    let id = match existing {
        // A revision names a profile that was there: it was deleted meanwhile.
        None if input.revision.is_some() => {
            return Err(MailError::fault(
                MailCode::RevisionConflict,
                "The profile was changed meanwhile; reload it and try again.",
            ));
        }
        None => {
            let id = Uuid::new_v4();
            let password = match &input.password {
                PasswordChange::Replace(p) => Some(seal(id, p)?),
                _ => None,
            };
            sqlx::query(
                "INSERT INTO outgoing_mail.profiles (id, key, name, from_address, from_name,
                     smtp_host, smtp_port, smtp_secure, smtp_user, smtp_password_encrypted,
                     pace_per_minute, daily_recipient_limit, max_attachment_bytes, is_default,
                     updated_by)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13,
                     NOT EXISTS (SELECT 1 FROM outgoing_mail.profiles), $14)",
            )
            .bind(id)
            .bind(key)
            .bind(&input.name)
            .bind(&input.from)
            .bind(&input.from_name)
            .bind(&input.smtp_host)
            .bind(input.smtp_port)
            .bind(input.smtp_secure)
            .bind(&input.smtp_user)
            .bind(password)
            .bind(input.pace_per_minute)
            .bind(input.daily_recipient_limit)
            .bind(input.max_attachment_bytes)
            .bind(&admin.uid)
            .execute(&mut *tx)
            .await?;
            id
        }
        Some((id, revision, host, has_password)) => {
            match input.revision {
                None => {
                    return Err(MailError::fault(
                        MailCode::ProfileExists,
                        "A profile with this key exists; send its revision to replace it.",
                    ));
                }
                Some(given) if given != revision => {
                    return Err(MailError::fault(
                        MailCode::RevisionConflict,
                        "The profile was changed meanwhile; reload it and try again.",
                    ));
                }
                Some(_) => {}
            }
            let host_changed = !host.trim().eq_ignore_ascii_case(input.smtp_host.trim());
            if host_changed && has_password && input.password == PasswordChange::Keep {
                return Err(invalid(
                    "smtpPassword: a new host needs the password again (or null to clear it)",
                ));
            }
            let (set_password, password) = match &input.password {
                PasswordChange::Keep => (false, None),
                PasswordChange::Clear => (true, None),
                PasswordChange::Replace(p) => (true, Some(seal(id, p)?)),
            };
            sqlx::query(
                "UPDATE outgoing_mail.profiles SET name = $2, from_address = $3, from_name = $4,
                     smtp_host = $5, smtp_port = $6, smtp_secure = $7, smtp_user = $8,
                     smtp_password_encrypted = CASE WHEN $9 THEN $10 ELSE smtp_password_encrypted END,
                     pace_per_minute = $11, daily_recipient_limit = $12,
                     max_attachment_bytes = $13, revision = revision + 1, updated_at = now(),
                     updated_by = $14
                 WHERE id = $1",
            )
            .bind(id)
            .bind(&input.name)
            .bind(&input.from)
            .bind(&input.from_name)
            .bind(&input.smtp_host)
            .bind(input.smtp_port)
            .bind(input.smtp_secure)
            .bind(&input.smtp_user)
            .bind(set_password)
            .bind(password)
            .bind(input.pace_per_minute)
            .bind(input.daily_recipient_limit)
            .bind(input.max_attachment_bytes)
            .bind(&admin.uid)
            .execute(&mut *tx)
            .await?;
            id
        }
    };
    let action = if created {
        "outgoing_mail.profile.create"
    } else {
        "outgoing_mail.profile.update"
    };
    let password = match input.password {
        PasswordChange::Keep => "kept",
        PasswordChange::Clear => "cleared",
        PasswordChange::Replace(_) => "replaced",
    };
    let event = AuditRecord::new(action, Outcome::Allowed)
        .actor(admin.audit())
        .target(AuditTarget::new("outgoing_mail.profile", key))
        .request_id(admin.request_id.clone())
        .meta("profileId", id.to_string())
        .meta("smtpHost", input.smtp_host.clone())
        .meta("password", password);
    audit::record(&mut tx, &event).await?;
    let row: ProfileRow = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {PROFILE_COLUMNS} FROM outgoing_mail.profiles WHERE id = $1"
    )))
    .bind(id)
    .fetch_one(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok((row, created))
}

/// Deletes a profile that is not the default. Its queued messages are cancelled by delivery
/// (`profile_removed`).
pub async fn delete(pool: &PgPool, key: &str, admin: &AdminActor) -> Result<(), MailError> {
    let mut tx = pool.begin().await?;
    locks::take(&mut tx, MailLock::Policy, Mode::Exclusive).await?;
    let found: Option<(Uuid, bool)> = sqlx::query_as(
        "SELECT id, is_default FROM outgoing_mail.profiles WHERE key = $1 FOR UPDATE",
    )
    .bind(key)
    .fetch_optional(&mut *tx)
    .await?;
    let Some((id, is_default)) = found else {
        return Err(unknown());
    };
    if is_default {
        return Err(MailError::fault(
            MailCode::ProfileIsDefault,
            "The default profile cannot be deleted; make another profile the default first.",
        ));
    }
    sqlx::query("DELETE FROM outgoing_mail.profiles WHERE id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    let event = AuditRecord::new("outgoing_mail.profile.delete", Outcome::Allowed)
        .actor(admin.audit())
        .target(AuditTarget::new("outgoing_mail.profile", key))
        .request_id(admin.request_id.clone());
    audit::record(&mut tx, &event).await?;
    tx.commit().await?;
    Ok(())
}

/// Records an administrator's test send through a profile (before it is attempted; never the
/// recipient).
pub async fn audit_test(pool: &PgPool, key: &str, admin: &AdminActor) -> Result<(), MailError> {
    let event = AuditRecord::new("outgoing_mail.profile.test", Outcome::Allowed)
        .actor(admin.audit())
        .target(AuditTarget::new("outgoing_mail.profile", key))
        .request_id(admin.request_id.clone());
    let mut conn = pool.acquire().await?;
    audit::record(&mut conn, &event).await?;
    Ok(())
}

/// Makes a profile the default.
pub async fn make_default(
    pool: &PgPool,
    key: &str,
    admin: &AdminActor,
) -> Result<ProfileRow, MailError> {
    let mut tx = pool.begin().await?;
    locks::take(&mut tx, MailLock::Policy, Mode::Exclusive).await?;
    let id: Option<Uuid> =
        sqlx::query_scalar("SELECT id FROM outgoing_mail.profiles WHERE key = $1 FOR UPDATE")
            .bind(key)
            .fetch_optional(&mut *tx)
            .await?;
    let Some(id) = id else {
        return Err(unknown());
    };
    sqlx::query(
        "UPDATE outgoing_mail.profiles SET is_default = false, revision = revision + 1,
             updated_at = now(), updated_by = $2
         WHERE is_default AND id <> $1",
    )
    .bind(id)
    .bind(&admin.uid)
    .execute(&mut *tx)
    .await?;
    sqlx::query(
        "UPDATE outgoing_mail.profiles SET is_default = true, revision = revision + 1,
             updated_at = now(), updated_by = $2
         WHERE id = $1 AND NOT is_default",
    )
    .bind(id)
    .bind(&admin.uid)
    .execute(&mut *tx)
    .await?;
    let event = AuditRecord::new("outgoing_mail.profile.default", Outcome::Allowed)
        .actor(admin.audit())
        .target(AuditTarget::new("outgoing_mail.profile", key))
        .request_id(admin.request_id.clone());
    audit::record(&mut tx, &event).await?;
    let row: ProfileRow = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {PROFILE_COLUMNS} FROM outgoing_mail.profiles WHERE id = $1"
    )))
    .bind(id)
    .fetch_one(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(row)
}
