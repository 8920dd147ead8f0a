//! The audit trail (`audit.events`): written in the caller's transaction, so an action and its
//! record commit or roll back together, and a failed audit write fails the action.

use serde::Serialize;
use serde_json::{Map, Value};
use sqlx::PgConnection;
use uuid::Uuid;

/// Longest string kept in metadata, reasons and error messages; longer ones are cut and marked.
pub const MAX_STRING_CHARS: usize = 500;
/// Longest array kept in metadata; the rest is summarised as `"[N more]"`.
pub const MAX_ARRAY_ITEMS: usize = 50;
/// Deepest nesting kept in metadata; deeper values become `"[MAX_DEPTH]"`.
pub const MAX_DEPTH: usize = 8;
/// What a secret-looking value is replaced with.
pub const REDACTED: &str = "[REDACTED]";

/// Labels shown to a person for their own security-relevant actions.
pub const SELF_SERVICE_LABELS: &[(&str, &str)] = &[
    ("accounts.user.change_own_password", "Password changed"),
    ("accounts.user.remove_self", "Account deleted"),
    ("accounts.user.update", "Profile updated"),
    ("accounts.request.create", "Account request submitted"),
    ("accounts.request.withdraw", "Account request withdrawn"),
    ("accounts.user.extend_account", "Account extended"),
    ("service_account_credential.create", "API key created"),
    ("service_account_credential.revoke", "API key revoked"),
    ("service_account_credential.authenticate", "API key used"),
    ("webauthn_credential.create", "Passkey added"),
    ("webauthn_credential.delete", "Passkey removed"),
    ("webauthn_credential.authenticate", "Passkey used"),
    ("auth.pwa.device.enroll", "App paired"),
    ("auth.pwa.device.revoke", "App removed"),
];

/// The self-service label of an action, if it is one a person sees in their own activity.
pub fn self_service_label(action: &str) -> Option<&'static str> {
    SELF_SERVICE_LABELS
        .iter()
        .find(|(name, _)| *name == action)
        .map(|(_, label)| *label)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Allowed,
    Denied,
    Failed,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Allowed => "allowed",
            Outcome::Denied => "denied",
            Outcome::Failed => "failed",
        }
    }
}

/// Who acted. System actions have no actor and say so in their metadata.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditActor {
    pub user_id: Option<Uuid>,
    pub uid: Option<String>,
    pub provider: Option<String>,
    pub roles: Vec<String>,
}

impl AuditActor {
    pub fn user(user_id: Uuid) -> AuditActor {
        AuditActor {
            user_id: Some(user_id),
            ..AuditActor::default()
        }
    }
}

/// What was acted on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditTarget {
    pub kind: Option<String>,
    pub id: Option<String>,
    pub label: Option<String>,
    pub provider: Option<String>,
}

impl AuditTarget {
    pub fn new(kind: &str, id: impl ToString) -> AuditTarget {
        AuditTarget {
            kind: Some(kind.to_string()),
            id: Some(id.to_string()),
            ..AuditTarget::default()
        }
    }
}

/// One audit event to write.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditRecord {
    pub action: String,
    pub outcome: Outcome,
    pub actor: Option<AuditActor>,
    pub target: Option<AuditTarget>,
    pub reason: Option<String>,
    pub error_code: Option<String>,
    pub error_message: Option<String>,
    pub request_id: Option<String>,
    pub metadata: Map<String, Value>,
}

impl AuditRecord {
    pub fn new(action: impl Into<String>, outcome: Outcome) -> AuditRecord {
        AuditRecord {
            action: action.into(),
            outcome,
            actor: None,
            target: None,
            reason: None,
            error_code: None,
            error_message: None,
            request_id: None,
            metadata: Map::new(),
        }
    }
    pub fn actor(mut self, actor: AuditActor) -> Self {
        self.actor = Some(actor);
        self
    }
    pub fn target(mut self, target: AuditTarget) -> Self {
        self.target = Some(target);
        self
    }
    pub fn request_id(mut self, request_id: Option<String>) -> Self {
        self.request_id = request_id;
        self
    }
    pub fn meta(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.metadata.insert(key.to_string(), value.into());
        self
    }
}

/// The audit area's one error type.
#[derive(Debug, thiserror::Error)]
#[error("audit write failed: {0}")]
pub struct AuditError(#[from] sqlx::Error);

/// Writes one event on `conn` (the caller's transaction). Metadata, reason and error message are
/// sanitised first; a failure is logged without the metadata and returned, so the caller's
/// transaction fails with it.
pub async fn record(conn: &mut PgConnection, event: &AuditRecord) -> Result<(), AuditError> {
    let actor = event.actor.clone().unwrap_or_default();
    let target = event.target.clone().unwrap_or_default();
    let mut roles: Vec<String> = Vec::new();
    for role in actor
        .roles
        .iter()
        .map(|r| r.trim())
        .filter(|r| !r.is_empty())
    {
        if !roles.iter().any(|r| r == role) {
            roles.push(role.to_string());
        }
    }
    let metadata = sanitize_metadata(&Value::Object(event.metadata.clone()));
    let result = sqlx::query(
        "INSERT INTO audit.events (action, outcome, actor_user_id, actor_uid, actor_provider,
            actor_roles, target_type, target_id, target_label, target_provider, reason,
            error_code, error_message, request_id, metadata)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)",
    )
    .bind(&event.action)
    .bind(event.outcome.as_str())
    .bind(actor.user_id)
    .bind(non_blank(actor.uid.as_deref()))
    .bind(non_blank(actor.provider.as_deref()))
    .bind(&roles)
    .bind(non_blank(target.kind.as_deref()))
    .bind(non_blank(target.id.as_deref()))
    .bind(non_blank(target.label.as_deref()))
    .bind(non_blank(target.provider.as_deref()))
    .bind(sanitize_text(event.reason.as_deref()))
    .bind(non_blank(event.error_code.as_deref()))
    .bind(sanitize_text(event.error_message.as_deref()))
    .bind(non_blank(event.request_id.as_deref()))
    .bind(metadata)
    .execute(conn)
    .await;
    if let Err(error) = &result {
        tracing::error!(
            action = %event.action,
            outcome = event.outcome.as_str(),
            error = %error,
            "Audit write failed"
        );
    }
    result.map(|_| ()).map_err(AuditError)
}

fn non_blank(value: Option<&str>) -> Option<String> {
    value
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_string)
}

/// Whether a metadata key names something secret: passwords, secrets, tokens, cookies,
/// authorization, API keys, private keys, sessions.
pub fn is_sensitive_key(key: &str) -> bool {
    let lower = key.to_ascii_lowercase();
    [
        "password",
        "secret",
        "token",
        "cookie",
        "authorization",
        "session",
        "apikey",
        "api_key",
        "api-key",
        "privatekey",
        "private_key",
        "private-key",
    ]
    .iter()
    .any(|needle| lower.contains(needle))
}

fn truncate(text: &str) -> String {
    match text.char_indices().nth(MAX_STRING_CHARS) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text.to_string(),
    }
}

/// Metadata as stored: secret-looking keys redacted at any depth, strings cut to 500 characters,
/// arrays to 50 items, nesting to 8 levels.
pub fn sanitize_metadata(value: &Value) -> Value {
    sanitize_at(value, 0)
}

fn sanitize_at(value: &Value, depth: usize) -> Value {
    match value {
        Value::Null | Value::Bool(_) | Value::Number(_) => value.clone(),
        Value::String(text) => Value::String(truncate(text)),
        Value::Array(_) | Value::Object(_) if depth >= MAX_DEPTH => {
            Value::String("[MAX_DEPTH]".into())
        }
        Value::Array(items) => {
            let mut out: Vec<Value> = items
                .iter()
                .take(MAX_ARRAY_ITEMS)
                .map(|item| sanitize_at(item, depth + 1))
                .collect();
            if items.len() > MAX_ARRAY_ITEMS {
                out.push(Value::String(format!(
                    "[{} more]",
                    items.len() - MAX_ARRAY_ITEMS
                )));
            }
            Value::Array(out)
        }
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(key, child)| {
                    let value = if is_sensitive_key(key) {
                        Value::String(REDACTED.into())
                    } else {
                        sanitize_at(child, depth + 1)
                    };
                    (key.clone(), value)
                })
                .collect(),
        ),
    }
}

/// A free-text field as stored: blank becomes nothing, text that mentions a secret-like word is
/// redacted whole, long text is cut.
pub fn sanitize_text(value: Option<&str>) -> Option<String> {
    let text = value.map(str::trim).filter(|t| !t.is_empty())?;
    if is_sensitive_key(text) {
        return Some(REDACTED.into());
    }
    Some(truncate(text))
}

/// One entry of a person's own security activity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SelfServiceActivity {
    pub id: i64,
    pub created_at: String,
    pub action: String,
    pub label: String,
    pub outcome: String,
    pub context: Option<String>,
}

/// A person's own labelled actions of the last `days` days (default 30, at most 365), newest first.
pub async fn list_self_service(
    conn: &mut PgConnection,
    user_id: Uuid,
    days: Option<u32>,
    limit: i64,
) -> Result<Vec<SelfServiceActivity>, AuditError> {
    let days = days.filter(|d| *d > 0).map_or(30, |d| d.min(365)) as i32;
    let actions: Vec<&str> = SELF_SERVICE_LABELS.iter().map(|(a, _)| *a).collect();
    type ActivityRow = (
        i64,
        chrono::DateTime<chrono::Utc>,
        String,
        String,
        Option<String>,
    );
    let rows: Vec<ActivityRow> = sqlx::query_as(
        "SELECT id, created_at, action, outcome, target_label FROM audit.events
             WHERE actor_user_id = $1 AND action = ANY($2)
               AND created_at >= now() - make_interval(days => $3)
             ORDER BY created_at DESC, id DESC LIMIT $4",
    )
    .bind(user_id)
    .bind(&actions)
    .bind(days)
    .bind(limit.clamp(1, 100))
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(
            |(id, created_at, action, outcome, context)| SelfServiceActivity {
                id,
                created_at: created_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
                label: self_service_label(&action).unwrap_or(&action).to_string(),
                action,
                outcome,
                context,
            },
        )
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::testing::TestDb;
    use serde_json::json;

    #[test]
    fn redacts_secret_like_keys_at_any_depth() {
        let input = json!({
            "platform": "ios",
            "password": "hunter2",
            "clientSecret": "s",
            "accessToken": "t",
            "Cookie": "c",
            "authorization": "Bearer x",
            "sessionId": "sid",
            "api_key": "k", "apiKey": "k", "api-key": "k",
            "privateKey": "p", "private_key": "p",
            "ipa_session": "i",
            "nested": {"deviceSecret": "x", "name": "ok"},
            "list": [{"token": "x"}]
        });
        let out = sanitize_metadata(&input);
        assert_eq!(out["platform"], "ios");
        for key in [
            "password",
            "clientSecret",
            "accessToken",
            "Cookie",
            "authorization",
            "sessionId",
            "api_key",
            "apiKey",
            "api-key",
            "privateKey",
            "private_key",
            "ipa_session",
        ] {
            assert_eq!(out[key], REDACTED, "{key}");
        }
        assert_eq!(out["nested"]["deviceSecret"], REDACTED);
        assert_eq!(out["nested"]["name"], "ok");
        assert_eq!(out["list"][0]["token"], REDACTED);
        assert!(!out.to_string().contains("hunter2"));
    }

    #[test]
    fn bounds_strings_arrays_and_depth() {
        let long = "x".repeat(501);
        let out = sanitize_metadata(&json!({"text": long, "exact": "y".repeat(500)}));
        assert_eq!(out["text"].as_str().map(str::len), Some(503));
        assert!(out["text"].as_str().is_some_and(|t| t.ends_with("...")));
        assert_eq!(out["exact"].as_str().map(str::len), Some(500));

        let items: Vec<u32> = (0..60).collect();
        let out = sanitize_metadata(&json!({ "items": items }));
        let array = out["items"].as_array().expect("array");
        assert_eq!(array.len(), 51);
        assert_eq!(array[49], 49);
        assert_eq!(array[50], "[10 more]");

        // Depth: the root object is level 0; nine nested objects exceed the limit of 8.
        let mut deep = json!("leaf");
        for _ in 0..9 {
            deep = json!({ "d": deep });
        }
        let out = sanitize_metadata(&deep);
        let mut cursor = &out;
        for _ in 0..8 {
            cursor = &cursor["d"];
        }
        assert_eq!(*cursor, json!("[MAX_DEPTH]"));
    }

    #[test]
    fn multi_byte_strings_are_cut_on_character_boundaries() {
        let out = sanitize_metadata(&json!({"t": "ü".repeat(600)}));
        assert_eq!(out["t"].as_str().map(|t| t.chars().count()), Some(503));
    }

    #[test]
    fn free_text_fields_are_sanitised() {
        assert_eq!(sanitize_text(Some("  ")), None);
        assert_eq!(
            sanitize_text(Some("wrong code")).as_deref(),
            Some("wrong code")
        );
        assert_eq!(
            sanitize_text(Some("bad token abc")).as_deref(),
            Some(REDACTED)
        );
    }

    #[test]
    fn self_service_labels_include_the_app_pairing_actions() {
        assert_eq!(
            self_service_label("auth.pwa.device.enroll"),
            Some("App paired")
        );
        assert_eq!(
            self_service_label("auth.pwa.device.revoke"),
            Some("App removed")
        );
        assert_eq!(self_service_label("auth.pwa.pairing.start"), None);
    }

    #[tokio::test]
    async fn written_in_the_callers_transaction() {
        let db = TestDb::new().await;
        let user = Uuid::new_v4();
        let event = AuditRecord::new("auth.pwa.device.enroll", Outcome::Allowed)
            .actor(AuditActor::user(user))
            .target(AuditTarget::new("pwa_device", "d1"))
            .meta("platform", "ios")
            .meta("pairingId", "p1")
            .meta("sessionToken", "must-not-be-stored");

        let mut tx = db.pool.begin().await.expect("begin");
        record(&mut tx, &event).await.expect("record");
        tx.rollback().await.expect("rollback");
        let count: i64 = sqlx::query_scalar("SELECT count(*) FROM audit.events")
            .fetch_one(&db.pool)
            .await
            .expect("count");
        assert_eq!(count, 0, "a rolled-back action leaves no audit row");

        let mut tx = db.pool.begin().await.expect("begin");
        record(&mut tx, &event).await.expect("record");
        tx.commit().await.expect("commit");
        let (action, outcome, metadata): (String, String, Value) =
            sqlx::query_as("SELECT action, outcome, metadata FROM audit.events")
                .fetch_one(&db.pool)
                .await
                .expect("row");
        assert_eq!(action, "auth.pwa.device.enroll");
        assert_eq!(outcome, "allowed");
        assert_eq!(
            metadata,
            json!({"platform": "ios", "pairingId": "p1", "sessionToken": REDACTED})
        );

        let mut conn = db.pool.acquire().await.expect("conn");
        let activity = list_self_service(&mut conn, user, None, 20)
            .await
            .expect("list");
        assert_eq!(activity.len(), 1);
        assert_eq!(activity[0].label, "App paired");
    }

    #[tokio::test]
    async fn a_failed_write_fails_the_caller() {
        let db = TestDb::new().await;
        let mut conn = db.pool.acquire().await.expect("conn");
        let err = record(&mut conn, &AuditRecord::new("", Outcome::Allowed)).await;
        assert!(err.is_err(), "an empty action violates the table's check");
    }
}
