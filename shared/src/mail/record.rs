//! A stored message as apps and administrators read it. HTML and custom headers are never
//! listed; the text only to the app that sent it, until retention purges it.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;
use uuid::Uuid;

use super::attachments::AttachmentMeta;
use super::validate::{MailRef, MailStatus};

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

/// What every reader of a message's record sees (apps and administrators).
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = MailRecordBase)]
pub struct RecordBase {
    pub id: Uuid,
    /// The app that sent it.
    pub app_id: String,
    /// The key of the profile it was accepted with.
    pub profile: String,
    pub to: Vec<String>,
    pub subject: String,
    /// The batch of an `enqueue`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch_id: Option<Uuid>,
    /// The app's `ref`, when it gave both parts.
    #[serde(rename = "ref", skip_serializing_if = "Option::is_none")]
    pub reference: Option<MailRef>,
    /// What was stored of each attachment (the bytes are deleted once delivery ends).
    #[schema(value_type = Vec<AttachmentMeta>)]
    pub attachments: Value,
    #[schema(value_type = MailStatus)]
    pub status: String,
    /// The message of the last error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The recipients the server refused individually.
    #[schema(value_type = Vec<MailFailure>)]
    pub failures: Value,
    /// Delivery attempts so far.
    #[schema(minimum = 0)]
    pub attempts: i32,
    /// Who asked the app to send.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actor: Option<RecordActor>,
    #[schema(value_type = chrono::DateTime<Utc>)]
    pub created_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<chrono::DateTime<Utc>>)]
    pub sent_at: Option<String>,
    /// When retention purged the text, HTML and headers.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<chrono::DateTime<Utc>>)]
    pub content_purged_at: Option<String>,
}

/// The actor of a record: its id, and its name (the id when none was given).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[schema(as = MailRecordActor)]
pub struct RecordActor {
    pub id: String,
    pub name: String,
}

/// A recipient the server refused while it accepted the message for others.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[schema(as = MailFailure)]
pub struct MailFailure {
    pub recipient: String,
    /// The server's reply, or "Recipient rejected.".
    pub reason: String,
    #[schema(value_type = chrono::DateTime<Utc>)]
    pub at: String,
}

/// A record as an app reads it: the text only on its own rows, until retention purges it.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = MailRecord)]
pub struct AppRecord {
    #[serde(flatten)]
    pub record: RecordBase,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

/// A record as an administrator reads it: no text, plus the error code and the SMTP answer.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = MailAdminRecord)]
pub struct AdminRecord {
    #[serde(flatten)]
    pub record: RecordBase,
    /// The code of the last error (`smtp_failed`, `profile_removed`, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_code: Option<String>,
    /// The server's last answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response: Option<String>,
}

impl MessageRow {
    fn common(&self) -> RecordBase {
        let reference = match (&self.ref_scope, &self.ref_id) {
            (Some(scope), Some(id)) => Some(MailRef {
                scope: scope.clone(),
                id: id.clone(),
            }),
            _ => None,
        };
        RecordBase {
            id: self.id,
            app_id: self.app_id.clone(),
            profile: self.profile_key.clone(),
            to: self.to_addresses.clone(),
            subject: self.subject.clone(),
            batch_id: self.batch_id,
            reference,
            attachments: self.attachments.clone(),
            status: self.status.clone(),
            error: self.error_message.clone(),
            failures: self.failures.clone(),
            attempts: self.attempt_count,
            actor: self.actor_id.as_ref().map(|id| RecordActor {
                id: id.clone(),
                name: self.actor_name.as_ref().unwrap_or(id).clone(),
            }),
            created_at: iso(self.created_at),
            sent_at: self.sent_at.map(iso),
            content_purged_at: self.content_purged_at.map(iso),
        }
    }

    /// The record an app reads: `text` only on its own rows.
    pub fn for_app(&self, caller: &str) -> AppRecord {
        AppRecord {
            record: self.common(),
            text: (self.app_id == caller)
                .then(|| self.text_body.clone())
                .flatten(),
        }
    }

    /// The record an administrator reads: no text, plus the error code and the SMTP answer.
    pub fn for_admin(&self) -> AdminRecord {
        AdminRecord {
            record: self.common(),
            error_code: self.error_code.clone(),
            response: self.smtp_response.clone(),
        }
    }
}
