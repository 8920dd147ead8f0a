//! A stored message as apps and administrators read it. HTML and custom headers are never
//! listed; the text only to the app that sent it, until retention purges it.

use chrono::{DateTime, Utc};
use serde_json::{Map, Value, json};
use uuid::Uuid;

/// The columns of [`MessageRow`] (without bodies other than the text).
pub const MESSAGE_COLUMNS: &str = "m.id, m.app_id, m.profile_key, m.to_addresses, m.subject, \
     m.batch_id, m.ref_scope, m.ref_id, m.text_body, m.attachments, m.status, m.error_code, \
     m.error_message, m.smtp_response, m.failures, m.attempt_count, m.actor_id, m.actor_name, \
     m.created_at, m.sent_at, m.content_purged_at, m.created_at::text AS created_at_text";

/// The custom headers a message row keeps (`[{name, value}]`), in their order.
pub fn stored_headers(value: Option<&Value>) -> Vec<(String, String)> {
    value
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(|h| {
                    Some((
                        h.get("name")?.as_str()?.to_string(),
                        h.get("value")?.as_str()?.to_string(),
                    ))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// One message row as listed.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct MessageRow {
    pub id: Uuid,
    pub app_id: String,
    pub profile_key: String,
    pub to_addresses: Vec<String>,
    pub subject: String,
    pub batch_id: Option<Uuid>,
    pub ref_scope: Option<String>,
    pub ref_id: Option<String>,
    pub text_body: Option<String>,
    pub attachments: Value,
    pub status: String,
    pub error_code: Option<String>,
    pub error_message: Option<String>,
    pub smtp_response: Option<String>,
    pub failures: Value,
    pub attempt_count: i32,
    pub actor_id: Option<String>,
    pub actor_name: Option<String>,
    pub created_at: DateTime<Utc>,
    pub sent_at: Option<DateTime<Utc>>,
    pub content_purged_at: Option<DateTime<Utc>>,
    /// Postgres's own text of `created_at` (microseconds), the anchor of a cursor.
    pub created_at_text: String,
}

fn iso(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

impl MessageRow {
    fn common(&self) -> Map<String, Value> {
        let mut record = Map::new();
        record.insert("id".into(), json!(self.id));
        record.insert("appId".into(), json!(self.app_id));
        record.insert("profile".into(), json!(self.profile_key));
        record.insert("to".into(), json!(self.to_addresses));
        record.insert("subject".into(), json!(self.subject));
        if let Some(batch) = self.batch_id {
            record.insert("batchId".into(), json!(batch));
        }
        if let (Some(scope), Some(id)) = (&self.ref_scope, &self.ref_id) {
            record.insert("ref".into(), json!({"scope": scope, "id": id}));
        }
        record.insert("attachments".into(), self.attachments.clone());
        record.insert("status".into(), json!(self.status));
        if let Some(message) = &self.error_message {
            record.insert("error".into(), json!(message));
        }
        record.insert("failures".into(), self.failures.clone());
        record.insert("attempts".into(), json!(self.attempt_count));
        if let Some(id) = &self.actor_id {
            let name = self.actor_name.as_ref().unwrap_or(id);
            record.insert("actor".into(), json!({"id": id, "name": name}));
        }
        record.insert("createdAt".into(), json!(iso(self.created_at)));
        if let Some(at) = self.sent_at {
            record.insert("sentAt".into(), json!(iso(at)));
        }
        if let Some(at) = self.content_purged_at {
            record.insert("contentPurgedAt".into(), json!(iso(at)));
        }
        record
    }

    /// The record an app reads: `text` only on its own rows.
    pub fn for_app(&self, caller: &str) -> Value {
        let mut record = self.common();
        if self.app_id == caller
            && let Some(text) = &self.text_body
        {
            record.insert("text".into(), json!(text));
        }
        Value::Object(record)
    }

    /// The record an administrator reads: no text, plus the error code and the SMTP answer.
    pub fn for_admin(&self) -> Value {
        let mut record = self.common();
        if let Some(code) = &self.error_code {
            record.insert("errorCode".into(), json!(code));
        }
        if let Some(response) = &self.smtp_response {
            record.insert("response".into(), json!(response));
        }
        Value::Object(record)
    }
}
