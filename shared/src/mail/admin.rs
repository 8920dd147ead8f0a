//! What administrators do with outgoing mail besides profiles: retention, reading and
//! cancelling messages, and each app's profile access and log grants.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sqlx::PgPool;
use utoipa::ToSchema;
use uuid::Uuid;

use super::locks::{self, MailLock, Mode};
use super::log::log_apps_for;
use super::objects::ObjectStore;
use super::profiles::AdminActor;
use super::{CORE_APP_ID, MailCode, MailError, READ_PERMISSION, SEND_PERMISSION, attachments};
use crate::audit::{self, AuditRecord, AuditTarget, Outcome};
use crate::settings::Settings;

/// The retention settings.
pub const CONTENT_RETENTION: &str = "outgoing_mail.content_retention_days";
pub const RECORD_RETENTION: &str = "outgoing_mail.record_retention_days";
/// The most grants one reader may hold.
pub const MAX_LOG_GRANTS: usize = 100;

fn bad(message: impl Into<String>) -> MailError {
    MailError::fault(MailCode::BadInput, message.into())
}

/// `{contentDays, recordDays}`: how long message content and message records are kept. Strict:
/// both fields, nothing else, and records kept at least as long as content (`recordDays` ≥
/// `contentDays`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schema(as = MailRetention)]
pub struct Retention {
    /// Days until a message's text, HTML and headers are purged: a whole number from 1 to
    /// 36500.
    #[schema(minimum = 1, maximum = 36500)]
    pub content_days: i64,
    /// Days until a message's record is deleted: a whole number from 1 to 36500, at least
    /// `contentDays`.
    #[schema(minimum = 1, maximum = 36500)]
    pub record_days: i64,
}

impl Retention {
    pub fn to_json(self) -> Value {
        json!({"contentDays": self.content_days, "recordDays": self.record_days})
    }

    /// Strict: both fields, whole numbers 1–36500, records kept at least as long as content.
    pub fn parse(value: &Value) -> Result<Retention, MailError> {
        let Some(object) = value.as_object() else {
            return Err(bad("body: an object {contentDays, recordDays}"));
        };
        if let Some(extra) = object
            .keys()
            .find(|k| !matches!(k.as_str(), "contentDays" | "recordDays"))
        {
            return Err(bad(format!("{extra}: unknown field")));
        }
        // A whole number, however JSON writes it (`30` or `30.0`).
        let whole = |value: &Value| {
            value.as_i64().or_else(|| {
                value
                    .as_f64()
                    .filter(|f| f.fract() == 0.0 && f.abs() < 1e15)
                    .map(|f| f as i64)
            })
        };
        let days = |name: &str| match object.get(name).and_then(whole) {
            Some(days) if (1..=36500).contains(&days) => Ok(days),
            _ => Err(bad(format!(
                "{name}: a whole number of days from 1 to 36500"
            ))),
        };
        let retention = Retention {
            content_days: days("contentDays")?,
            record_days: days("recordDays")?,
        };
        if retention.record_days < retention.content_days {
            return Err(bad("recordDays: at least contentDays"));
        }
        Ok(retention)
    }
}

fn as_days(
    value: Result<Value, crate::settings::SettingsError>,
    default: i64,
) -> Result<i64, MailError> {
    Ok(value?.as_f64().map_or(default, |d| d as i64))
}

pub async fn retention(settings: &Settings) -> Result<Retention, MailError> {
    Ok(Retention {
        content_days: as_days(settings.get(CONTENT_RETENTION).await, 90)?,
        record_days: as_days(settings.get(RECORD_RETENTION).await, 365)?,
    })
}

/// Stores both retention settings and audits old and new in one transaction.
pub async fn set_retention(
    pool: &PgPool,
    settings: &Settings,
    new: Retention,
    admin: &AdminActor,
) -> Result<Retention, MailError> {
    let old = retention(settings).await?;
    let mut tx = pool.begin().await?;
    settings
        .set_in(&mut tx, CONTENT_RETENTION, json!(new.content_days))
        .await?;
    settings
        .set_in(&mut tx, RECORD_RETENTION, json!(new.record_days))
        .await?;
    let event = AuditRecord::new("outgoing_mail.retention.update", Outcome::Allowed)
        .actor(admin.audit())
        .request_id(admin.request_id.clone())
        .meta("old", old.to_json())
        .meta("new", new.to_json());
    audit::record(&mut tx, &event).await?;
    tx.commit().await?;
    settings.invalidate(CONTENT_RETENTION);
    settings.invalidate(RECORD_RETENTION);
    Ok(new)
}

/// A message's content as an administrator reads it: purged by retention, or kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(untagged)]
#[schema(as = MailMessageContent)]
pub enum MessageContent {
    Purged(PurgedContent),
    Kept(KeptContent),
}

/// Retention purged the content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = MailPurgedContent)]
pub struct PurgedContent {
    /// Always `true`.
    #[schema(schema_with = always_true)]
    pub purged: bool,
    pub content_purged_at: DateTime<Utc>,
}

/// The content as it was accepted (the HTML sanitised).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = MailKeptContent)]
pub struct KeptContent {
    /// Always `false`.
    #[schema(schema_with = always_false)]
    pub purged: bool,
    #[schema(required = true)]
    pub text: Option<String>,
    #[schema(required = true)]
    pub html: Option<String>,
    /// The custom headers by name.
    pub headers: BTreeMap<String, String>,
}

fn always_true() -> utoipa::openapi::schema::Object {
    boolean_of(true)
}

fn always_false() -> utoipa::openapi::schema::Object {
    boolean_of(false)
}

fn boolean_of(value: bool) -> utoipa::openapi::schema::Object {
    utoipa::openapi::schema::ObjectBuilder::new()
        .schema_type(utoipa::openapi::schema::Type::Boolean)
        .enum_values(Some([value]))
        .build()
}

/// A message's content for an administrator (the read is audited).
pub async fn content(
    pool: &PgPool,
    id: Uuid,
    admin: &AdminActor,
) -> Result<MessageContent, MailError> {
    let mut tx = pool.begin().await?;
    type Row = (
        String,
        Option<String>,
        Option<String>,
        Option<Value>,
        Option<chrono::DateTime<chrono::Utc>>,
    );
    let row: Option<Row> = sqlx::query_as(
        "SELECT app_id, text_body, html_body, headers, content_purged_at
         FROM outgoing_mail.messages WHERE id = $1",
    )
    .bind(id)
    .fetch_optional(&mut *tx)
    .await?;
    let Some((app_id, text, html, headers, purged_at)) = row else {
        return Err(unknown_message());
    };
    let event = AuditRecord::new("outgoing_mail.message.read", Outcome::Allowed)
        .actor(admin.audit())
        .target(AuditTarget::new("outgoing_mail.message", id))
        .request_id(admin.request_id.clone())
        .meta("appId", app_id);
    audit::record(&mut tx, &event).await?;
    tx.commit().await?;
    Ok(match purged_at {
        Some(at) => MessageContent::Purged(PurgedContent {
            purged: true,
            content_purged_at: at,
        }),
        None => MessageContent::Kept(KeptContent {
            purged: false,
            text,
            html,
            headers: super::record::stored_headers(headers.as_ref())
                .into_iter()
                .collect(),
        }),
    })
}

fn unknown_message() -> MailError {
    MailError::fault(MailCode::MessageUnknown, "Unknown outgoing mail message.")
}

/// Cancels one queued message and deletes its attachments.
pub async fn cancel_message(
    pool: &PgPool,
    objects: &ObjectStore,
    id: Uuid,
    admin: &AdminActor,
) -> Result<(), MailError> {
    let mut tx = pool.begin().await?;
    let found: Option<(String, String, Option<Value>)> = sqlx::query_as(
        "SELECT status, app_id, attachment_refs FROM outgoing_mail.messages
         WHERE id = $1 FOR UPDATE",
    )
    .bind(id)
    .fetch_optional(&mut *tx)
    .await?;
    let Some((status, app_id, refs)) = found else {
        return Err(unknown_message());
    };
    if status != "queued" {
        return Err(MailError::fault(
            MailCode::MessageNotQueued,
            "Only a queued message can be cancelled.",
        ));
    }
    cancel_rows(&mut tx, &[id]).await?;
    let event = AuditRecord::new("outgoing_mail.message.cancel", Outcome::Allowed)
        .actor(admin.audit())
        .target(AuditTarget::new("outgoing_mail.message", id))
        .request_id(admin.request_id.clone())
        .meta("app", app_id);
    audit::record(&mut tx, &event).await?;
    // A send waiting for this message learns of it now.
    super::settle::notify(&mut tx, id).await?;
    tx.commit().await?;
    attachments::release(pool, objects, &attachments::refs_of(refs.as_ref())).await;
    Ok(())
}

async fn cancel_rows(conn: &mut sqlx::PgConnection, ids: &[Uuid]) -> Result<(), MailError> {
    sqlx::query(
        "UPDATE outgoing_mail.messages SET status = 'cancelled', error_code = $2,
             error_message = 'Cancelled by an administrator.', attachment_refs = NULL,
             next_attempt_at = NULL, updated_at = now()
         WHERE id = ANY($1) AND status = 'queued'",
    )
    .bind(ids)
    .bind(MailCode::CancelledByAdmin.as_str())
    .execute(conn)
    .await?;
    Ok(())
}

/// Cancels the queued messages of a batch; returns how many.
pub async fn cancel_batch(
    pool: &PgPool,
    objects: &ObjectStore,
    batch_id: Uuid,
    admin: &AdminActor,
) -> Result<u64, MailError> {
    let mut tx = pool.begin().await?;
    let known: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM outgoing_mail.messages WHERE batch_id = $1)",
    )
    .bind(batch_id)
    .fetch_one(&mut *tx)
    .await?;
    if !known {
        return Err(MailError::fault(
            MailCode::BatchUnknown,
            "Unknown outgoing mail batch.",
        ));
    }
    let queued: Vec<(Uuid, String, Option<Value>)> = sqlx::query_as(
        "SELECT id, app_id, attachment_refs FROM outgoing_mail.messages
         WHERE batch_id = $1 AND status = 'queued' ORDER BY id FOR UPDATE",
    )
    .bind(batch_id)
    .fetch_all(&mut *tx)
    .await?;
    let ids: Vec<Uuid> = queued.iter().map(|(id, _, _)| *id).collect();
    cancel_rows(&mut tx, &ids).await?;
    let mut apps: Vec<String> = queued.iter().map(|(_, app, _)| app.clone()).collect();
    apps.sort();
    apps.dedup();
    let event = AuditRecord::new("outgoing_mail.batch.cancel", Outcome::Allowed)
        .actor(admin.audit())
        .target(AuditTarget::new("outgoing_mail.batch", batch_id))
        .request_id(admin.request_id.clone())
        .meta("appIds", json!(apps))
        .meta("count", ids.len());
    audit::record(&mut tx, &event).await?;
    tx.commit().await?;
    let refs: Vec<String> = queued
        .into_iter()
        .flat_map(|(_, _, refs)| attachments::refs_of(refs.as_ref()))
        .collect();
    attachments::release(pool, objects, &refs).await;
    Ok(ids.len() as u64)
}

/// An app's profile access mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
#[schema(as = MailAccessMode)]
pub enum AccessMode {
    /// Only the current default profile.
    Default,
    /// Exactly the selected profiles (none blocks sending).
    Selected,
}

/// An app as the administrators' mail page shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = MailAdminApp)]
pub struct MailApp {
    pub app_id: String,
    /// The registry's name of the app (its id when it is not registered).
    pub name: String,
    /// Whether the app has a registry entry (Core always has).
    pub registered: bool,
    /// Whether it declares `mail:send`.
    pub declared: bool,
    pub mode: AccessMode,
    /// The keys of its selected profiles, sorted.
    pub profiles: Vec<String>,
    /// Whether it declares `mail:read` (never for Core).
    pub read_declared: bool,
    /// The apps whose mail logs it may read, sorted.
    pub log_apps: Vec<String>,
}

/// Every app of the mail page, and the default profile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = MailAdminApps)]
pub struct MailApps {
    /// The key of the default profile, `null` when there is none.
    #[schema(required = true)]
    pub default_profile: Option<String>,
    /// Sorted by name (ignoring case), then id.
    pub items: Vec<MailApp>,
}

/// An app as the administrators' mail page shows it, as JSON.
pub async fn admin_app(pool: &PgPool, app_id: &str) -> Result<Value, MailError> {
    let app = mail_app(pool, app_id).await?;
    Ok(serde_json::to_value(app).unwrap_or_default())
}

/// An app as the administrators' mail page shows it.
pub async fn mail_app(pool: &PgPool, app_id: &str) -> Result<MailApp, MailError> {
    let entry = if app_id == CORE_APP_ID {
        None
    } else {
        crate::registry::store::get_app(pool, app_id).await?
    };
    let permissions = entry
        .as_ref()
        .and_then(|e| e.platform_permissions.clone())
        .unwrap_or_default();
    let mode: Option<String> =
        sqlx::query_scalar("SELECT mode FROM outgoing_mail.app_access WHERE app_id = $1")
            .bind(app_id)
            .fetch_optional(pool)
            .await?;
    let profiles: Vec<String> = sqlx::query_scalar(
        "SELECT p.key FROM outgoing_mail.app_profiles ap
         JOIN outgoing_mail.profiles p ON p.id = ap.profile_id
         WHERE ap.app_id = $1 ORDER BY p.key",
    )
    .bind(app_id)
    .fetch_all(pool)
    .await?;
    let is_core = app_id == CORE_APP_ID;
    Ok(MailApp {
        app_id: app_id.to_string(),
        name: entry
            .as_ref()
            .map_or(app_id, |e| e.name.as_str())
            .to_string(),
        registered: is_core || entry.is_some(),
        declared: is_core || permissions.iter().any(|p| p == SEND_PERMISSION),
        // Core's own mail always uses the default profile.
        mode: match mode.as_deref() {
            Some("selected") if !is_core => AccessMode::Selected,
            _ => AccessMode::Default,
        },
        profiles,
        read_declared: !is_core && permissions.iter().any(|p| p == READ_PERMISSION),
        log_apps: log_apps_for(pool, app_id).await?,
    })
}

/// Every app the mail page lists: registered apps, Core, and every holder of a policy or a
/// grant, sorted by name, then id.
pub async fn admin_apps(pool: &PgPool) -> Result<MailApps, MailError> {
    let mut ids: Vec<String> = crate::registry::store::list_apps(pool)
        .await?
        .into_iter()
        .map(|entry| entry.id)
        .collect();
    let holders: Vec<String> = sqlx::query_scalar(
        "SELECT app_id FROM outgoing_mail.app_access
         UNION SELECT app_id FROM outgoing_mail.app_profiles
         UNION SELECT app_id FROM outgoing_mail.app_log_access",
    )
    .fetch_all(pool)
    .await?;
    ids.extend(holders);
    ids.push(CORE_APP_ID.to_string());
    ids.sort();
    ids.dedup();
    let mut items = Vec::with_capacity(ids.len());
    for id in ids {
        items.push(mail_app(pool, &id).await?);
    }
    items.sort_by(|a, b| {
        let key = |app: &MailApp| (app.name.to_lowercase(), app.app_id.clone());
        key(a).cmp(&key(b))
    });
    let default: Option<String> =
        sqlx::query_scalar("SELECT key FROM outgoing_mail.profiles WHERE is_default")
            .fetch_optional(pool)
            .await?;
    Ok(MailApps {
        default_profile: default,
        items,
    })
}

/// The body of `PUT /api/admin/core/outgoing-mail/apps/{appId}` (checked by
/// [`AccessInput::parse`]; any failure is `invalid_profile`).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(tag = "mode", rename_all = "lowercase", deny_unknown_fields)]
#[schema(as = MailAppAccessInput)]
pub enum AccessBody {
    /// Only the current default profile.
    Default {},
    /// Exactly these profiles.
    Selected {
        /// At most 100 distinct profile keys (an unknown one is `profile_unknown`).
        #[schema(max_items = 100)]
        profiles: BTreeSet<String>,
    },
}

/// The body of `PUT /api/admin/core/outgoing-mail/apps/{appId}/log-access` (checked by
/// [`parse_log_access`]; any failure is `bad_input`).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = MailLogAccessInput)]
pub struct LogAccessBody {
    /// The apps whose logs the app may read from now on (its grants are replaced): at most 100
    /// distinct app ids of 1–200 characters, neither `core` nor the app itself.
    #[schema(
        max_items = 100,
        min_length = 1,
        max_length = 200,
        pattern = "^(?!core$)[^\\u0000]*$"
    )]
    pub apps: BTreeSet<String>,
}

/// An app's profile access: `{mode: "default"}` or `{mode: "selected", profiles: [keys]}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AccessInput {
    Default,
    Selected(Vec<String>),
}

impl AccessInput {
    pub fn parse(value: &Value) -> Result<AccessInput, MailError> {
        let invalid = |m: &str| MailError::fault(MailCode::InvalidProfile, m.to_string());
        let object = value
            .as_object()
            .ok_or_else(|| invalid("body: an object {mode, profiles?}"))?;
        match object.get("mode").and_then(Value::as_str) {
            Some("default") if object.len() == 1 => Ok(AccessInput::Default),
            Some("selected") => {
                if object.keys().any(|k| k != "mode" && k != "profiles") {
                    return Err(invalid("body: only mode and profiles"));
                }
                let keys: Option<Vec<String>> = object
                    .get("profiles")
                    .and_then(Value::as_array)
                    .and_then(|items| {
                        items
                            .iter()
                            .map(|k| k.as_str().map(str::to_string))
                            .collect()
                    });
                let mut keys = keys.ok_or_else(|| invalid("profiles: an array of profile keys"))?;
                keys.sort();
                let len = keys.len();
                keys.dedup();
                if keys.len() != len || keys.len() > 100 {
                    return Err(invalid("profiles: at most 100 distinct profile keys"));
                }
                Ok(AccessInput::Selected(keys))
            }
            Some("default") => Err(invalid("body: only mode")),
            _ => Err(invalid("mode: \"default\" or \"selected\"")),
        }
    }
}

/// Sets an app's profile access (Core's cannot change).
pub async fn set_access(
    pool: &PgPool,
    app_id: &str,
    input: AccessInput,
    admin: &AdminActor,
) -> Result<MailApp, MailError> {
    if app_id == CORE_APP_ID || app_id.is_empty() || app_id.chars().count() > 200 {
        return Err(MailError::fault(
            MailCode::InvalidProfile,
            "appId: Core's outgoing mail access cannot be changed",
        ));
    }
    let mut tx = pool.begin().await?;
    locks::take(&mut tx, MailLock::Policy, Mode::Exclusive).await?;
    let (mode, keys) = match &input {
        AccessInput::Default => ("default", Vec::new()),
        AccessInput::Selected(keys) => ("selected", keys.clone()),
    };
    let ids: Vec<Uuid> =
        sqlx::query_scalar("SELECT id FROM outgoing_mail.profiles WHERE key = ANY($1)")
            .bind(&keys)
            .fetch_all(&mut *tx)
            .await?;
    if ids.len() != keys.len() {
        return Err(MailError::fault(
            MailCode::ProfileUnknown,
            "Unknown outgoing mail profile.",
        ));
    }
    sqlx::query(
        "INSERT INTO outgoing_mail.app_access (app_id, mode, updated_at, updated_by)
         VALUES ($1, $2, now(), $3)
         ON CONFLICT (app_id) DO UPDATE SET mode = EXCLUDED.mode, updated_at = now(),
             updated_by = EXCLUDED.updated_by",
    )
    .bind(app_id)
    .bind(mode)
    .bind(&admin.uid)
    .execute(&mut *tx)
    .await?;
    sqlx::query("DELETE FROM outgoing_mail.app_profiles WHERE app_id = $1")
        .bind(app_id)
        .execute(&mut *tx)
        .await?;
    sqlx::query(
        "INSERT INTO outgoing_mail.app_profiles (app_id, profile_id)
         SELECT $1, unnest($2::uuid[])",
    )
    .bind(app_id)
    .bind(&ids)
    .execute(&mut *tx)
    .await?;
    let event = AuditRecord::new("outgoing_mail.app_access.update", Outcome::Allowed)
        .actor(admin.audit())
        .target(AuditTarget::new("cloud.app", app_id))
        .request_id(admin.request_id.clone())
        .meta("mode", mode)
        .meta("profiles", json!(keys));
    audit::record(&mut tx, &event).await?;
    tx.commit().await?;
    mail_app(pool, app_id).await
}

/// Checks a grant body `{apps: [...]}` for `reader`.
pub fn parse_log_access(reader: &str, value: &Value) -> Result<Vec<String>, MailError> {
    if reader == CORE_APP_ID {
        return Err(bad("appId: Core's log access cannot be changed"));
    }
    if reader.is_empty() || reader.chars().count() > 200 || reader.contains('\0') {
        return Err(bad("appId: 1–200 characters, no NUL"));
    }
    let object = value
        .as_object()
        .ok_or_else(|| bad("body: an object {apps}"))?;
    if let Some(extra) = object.keys().find(|k| k.as_str() != "apps") {
        return Err(bad(format!("{extra}: unknown field")));
    }
    let apps: Vec<String> = object
        .get("apps")
        .and_then(Value::as_array)
        .and_then(|items| {
            items
                .iter()
                .map(|a| a.as_str().map(str::to_string))
                .collect::<Option<Vec<String>>>()
        })
        .ok_or_else(|| bad("apps: an array of app ids"))?;
    if apps.len() > MAX_LOG_GRANTS {
        return Err(bad(format!("apps: at most {MAX_LOG_GRANTS} apps")));
    }
    let mut sorted = apps.clone();
    sorted.sort();
    sorted.dedup();
    if sorted.len() != apps.len() {
        return Err(bad("apps: each app once"));
    }
    // App ids are free strings, but text in Postgres cannot hold NUL.
    if sorted.iter().any(|a| a.contains('\0')) {
        return Err(bad("apps: an app id contains NUL"));
    }
    if let Some(wrong) = sorted
        .iter()
        .find(|a| a.is_empty() || a.chars().count() > 200 || *a == CORE_APP_ID || *a == reader)
    {
        return Err(bad(format!(
            "apps: \"{wrong}\" cannot be granted (empty, Core, or the reader itself)"
        )));
    }
    Ok(sorted)
}

/// Replaces the apps whose logs `reader` may read.
pub async fn set_log_access(
    pool: &PgPool,
    reader: &str,
    apps: Vec<String>,
    admin: &AdminActor,
) -> Result<MailApp, MailError> {
    let mut tx = pool.begin().await?;
    locks::take(&mut tx, MailLock::Policy, Mode::Exclusive).await?;
    sqlx::query("DELETE FROM outgoing_mail.app_log_access WHERE app_id = $1")
        .bind(reader)
        .execute(&mut *tx)
        .await?;
    sqlx::query(
        "INSERT INTO outgoing_mail.app_log_access (app_id, source_app_id, created_by)
         SELECT $1, unnest($2::text[]), $3",
    )
    .bind(reader)
    .bind(&apps)
    .bind(&admin.uid)
    .execute(&mut *tx)
    .await?;
    let event = AuditRecord::new("outgoing_mail.app_log_access.update", Outcome::Allowed)
        .actor(admin.audit())
        .target(AuditTarget::new("cloud.app", reader))
        .request_id(admin.request_id.clone())
        .meta("apps", json!(apps));
    audit::record(&mut tx, &event).await?;
    tx.commit().await?;
    mail_app(pool, reader).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn refused(reader: &str, body: Value) -> bool {
        matches!(
            parse_log_access(reader, &body).map_err(|e| e.code()),
            Err(Some(MailCode::BadInput))
        )
    }

    /// Scenario 41 and the text Postgres can store: ids are free strings without NUL.
    #[test]
    fn log_access_ids_are_free_strings_without_nul() {
        assert_eq!(
            parse_log_access("reader", &json!({"apps": ["ERP", "erp_v2"]})).ok(),
            Some(vec!["ERP".to_string(), "erp_v2".to_string()])
        );
        assert!(refused("reader", json!({"apps": ["erp\u{0}v2"]})));
        assert!(refused("read\u{0}er", json!({"apps": ["erp"]})));
        assert!(refused("reader", json!({"apps": [""]})));
        assert!(refused("reader", json!({"apps": ["core"]})));
        assert!(refused("reader", json!({"apps": ["reader"]})));
        assert!(refused("core", json!({"apps": ["erp"]})));
    }
}
