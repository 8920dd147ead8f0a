//! Outgoing mail (`outgoing_mail`): apps hand Core their mail over HTTP with their own workload
//! credential; Core accepts it atomically (profiles, quotas, the bulk backlog, idempotency keys),
//! keeps attachments in an object store, and lets an app read the logs other apps granted it.
//! `outgoing_mail.messages` is itself the outbox: a wake-up names a message or a profile, and
//! Postgres decides what is due.

pub mod accept;
pub mod admin;
pub mod attachments;
pub mod delivery;
pub mod locks;
pub mod log;
pub mod objects;
pub mod policy;
pub mod profiles;
pub mod record;
pub mod retention;
pub mod rules;
pub mod settle;
pub mod smtp;
pub mod validate;

use std::borrow::Cow;
use std::path::PathBuf;

use tokio::sync::OnceCell;

use crate::outbox::OutboxRef;

use http::StatusCode;
use serde_json::{Map, Value};

/// The app id Core sends its own mail as; its log is never granted to another app.
pub use crate::config::CORE_APP_ID;
/// The permission an app declares (`platformPermissions`) to send mail.
pub const SEND_PERMISSION: &str = "mail:send";
/// The permission an app declares to read the mail logs other apps granted it.
pub const READ_PERMISSION: &str = "mail:read";

/// The domain error codes of outgoing mail (spec mail §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MailCode {
    BadInput,
    ProfileNotAllowed,
    AppNotAllowed,
    ProfileRequired,
    QuotaExceeded,
    BacklogFull,
    AttachmentsTooLarge,
    AttachmentStorageFull,
    ProfileRemoved,
    AttachmentLost,
    CancelledByAdmin,
    MessageUnknown,
    BatchUnknown,
    MessageNotQueued,
    MailUnavailable,
    MailNotDeclared,
    ProfileUnknown,
    ProfileExists,
    ProfileIsDefault,
    RevisionConflict,
    InvalidProfile,
    SmtpFailed,
}

impl MailCode {
    pub const ALL: [MailCode; 22] = [
        MailCode::BadInput,
        MailCode::ProfileNotAllowed,
        MailCode::AppNotAllowed,
        MailCode::ProfileRequired,
        MailCode::QuotaExceeded,
        MailCode::BacklogFull,
        MailCode::AttachmentsTooLarge,
        MailCode::AttachmentStorageFull,
        MailCode::ProfileRemoved,
        MailCode::AttachmentLost,
        MailCode::CancelledByAdmin,
        MailCode::MessageUnknown,
        MailCode::BatchUnknown,
        MailCode::MessageNotQueued,
        MailCode::MailUnavailable,
        MailCode::MailNotDeclared,
        MailCode::ProfileUnknown,
        MailCode::ProfileExists,
        MailCode::ProfileIsDefault,
        MailCode::RevisionConflict,
        MailCode::InvalidProfile,
        MailCode::SmtpFailed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            MailCode::BadInput => "bad_input",
            MailCode::ProfileNotAllowed => "profile_not_allowed",
            MailCode::AppNotAllowed => "app_not_allowed",
            MailCode::ProfileRequired => "profile_required",
            MailCode::QuotaExceeded => "quota_exceeded",
            MailCode::BacklogFull => "backlog_full",
            MailCode::AttachmentsTooLarge => "attachments_too_large",
            MailCode::AttachmentStorageFull => "attachment_storage_full",
            MailCode::ProfileRemoved => "profile_removed",
            MailCode::AttachmentLost => "attachment_lost",
            MailCode::CancelledByAdmin => "cancelled_by_admin",
            MailCode::MessageUnknown => "message_unknown",
            MailCode::BatchUnknown => "batch_unknown",
            MailCode::MessageNotQueued => "message_not_queued",
            MailCode::MailUnavailable => "mail_unavailable",
            MailCode::MailNotDeclared => "mail_not_declared",
            MailCode::ProfileUnknown => "profile_unknown",
            MailCode::ProfileExists => "profile_exists",
            MailCode::ProfileIsDefault => "profile_is_default",
            MailCode::RevisionConflict => "revision_conflict",
            MailCode::InvalidProfile => "invalid_profile",
            MailCode::SmtpFailed => "smtp_failed",
        }
    }

    /// The code of its name (a stored `error_code`).
    pub fn parse(name: &str) -> Option<MailCode> {
        MailCode::ALL
            .iter()
            .copied()
            .find(|code| code.as_str() == name)
    }

    /// The HTTP status a code answers with (domain errors default to 400).
    pub fn status(self) -> StatusCode {
        match self {
            MailCode::BacklogFull
            | MailCode::ProfileExists
            | MailCode::ProfileIsDefault
            | MailCode::RevisionConflict
            | MailCode::MessageNotQueued => StatusCode::CONFLICT,
            MailCode::MailNotDeclared | MailCode::AppNotAllowed => StatusCode::FORBIDDEN,
            MailCode::MessageUnknown | MailCode::BatchUnknown => StatusCode::NOT_FOUND,
            MailCode::MailUnavailable => StatusCode::INTERNAL_SERVER_ERROR,
            MailCode::SmtpFailed => StatusCode::BAD_GATEWAY,
            _ => StatusCode::BAD_REQUEST,
        }
    }
}

/// A domain error as the caller sees it: a code, a fixed message, and for quotas the figures.
#[derive(Debug, Clone, PartialEq)]
pub struct MailFault {
    pub code: MailCode,
    pub message: Cow<'static, str>,
    pub extra: Map<String, Value>,
}

impl MailFault {
    pub fn new(code: MailCode, message: impl Into<Cow<'static, str>>) -> MailFault {
        MailFault {
            code,
            message: message.into(),
            extra: Map::new(),
        }
    }

    /// `quota_exceeded` with its `limit`, `used` and `requested`.
    pub fn quota(limit: i64, used: i64, requested: i64) -> MailFault {
        let mut fault = MailFault::new(
            MailCode::QuotaExceeded,
            "The daily recipient limit of this mail profile is reached.",
        );
        fault.extra.insert("limit".into(), limit.into());
        fault.extra.insert("used".into(), used.into());
        fault.extra.insert("requested".into(), requested.into());
        fault
    }

    pub fn status(&self) -> StatusCode {
        self.code.status()
    }

    /// `{code, message, status, limit?, used?, requested?}`.
    pub fn body(&self) -> Value {
        let mut body = Map::new();
        body.insert("code".into(), self.code.as_str().into());
        body.insert("message".into(), Value::String(self.message.to_string()));
        body.insert("status".into(), self.status().as_u16().into());
        for (key, value) in &self.extra {
            body.insert(key.clone(), value.clone());
        }
        Value::Object(body)
    }
}

/// The message every failure that is not a domain error answers with: storage internals never
/// reach the caller.
pub const UNAVAILABLE_MESSAGE: &str = "Outgoing mail storage is unavailable.";

/// The outgoing mail area's one error type.
#[derive(Debug, thiserror::Error)]
pub enum MailError {
    /// A domain error, answered as it is.
    #[error("{}: {}", .0.code.as_str(), .0.message)]
    Fault(MailFault),
    #[error("outgoing mail database error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("outgoing mail database error: {0}")]
    Db(#[from] crate::db::DbError),
    #[error("outgoing mail audit error: {0}")]
    Audit(#[from] crate::audit::AuditError),
    #[error("outgoing mail object store error: {0}")]
    Objects(String),
    #[error("outgoing mail settings error: {0}")]
    Settings(#[from] crate::settings::SettingsError),
    #[error("outgoing mail registry error: {0}")]
    Registry(#[from] crate::registry::RegistryError),
}

impl MailError {
    pub fn fault(code: MailCode, message: impl Into<Cow<'static, str>>) -> MailError {
        MailError::Fault(MailFault::new(code, message))
    }

    /// `attachments_too_large`: a call's attachments pass its profile's limit (or an object
    /// the store's).
    pub fn attachments_too_large() -> MailError {
        MailError::fault(
            MailCode::AttachmentsTooLarge,
            "The attachments are larger than this mail profile allows.",
        )
    }

    /// What the caller sees: the domain error, or `mail_unavailable` with a fixed message.
    pub fn to_fault(&self) -> MailFault {
        match self {
            MailError::Fault(fault) => fault.clone(),
            _ => MailFault::new(MailCode::MailUnavailable, UNAVAILABLE_MESSAGE),
        }
    }

    /// The domain code, if this is a domain error.
    pub fn code(&self) -> Option<MailCode> {
        match self {
            MailError::Fault(fault) => Some(fault.code),
            _ => None,
        }
    }
}

impl From<MailFault> for MailError {
    fn from(fault: MailFault) -> MailError {
        MailError::Fault(fault)
    }
}

/// The attachment store of this process: S3 when a bucket is configured, else the local folder.
/// Created on first use (the S3 client reads its configuration from the environment).
pub struct MailObjects {
    bucket: Option<String>,
    dir: PathBuf,
    store: OnceCell<objects::ObjectStore>,
}

impl MailObjects {
    pub fn new(bucket: Option<String>, dir: PathBuf) -> MailObjects {
        MailObjects {
            bucket,
            dir,
            store: OnceCell::new(),
        }
    }

    /// Uses `store` from now on (tests point it at a local S3 API); false if one is in use.
    pub fn install(&self, store: objects::ObjectStore) -> bool {
        self.store.set(store).is_ok()
    }

    /// The store, created on first use.
    pub async fn store(&self) -> &objects::ObjectStore {
        self.store
            .get_or_init(|| async {
                match &self.bucket {
                    Some(bucket) => objects::ObjectStore::s3_from_env(bucket.clone()).await,
                    None => objects::ObjectStore::local(self.dir.clone()),
                }
            })
            .await
    }
}

/// The table whose rows are outgoing mail: a wake-up names one message or one profile's bulk lane.
pub const MESSAGES_TABLE: &str = "outgoing_mail.messages";

/// The wake-up of one immediate message.
pub fn message_wakeup(id: uuid::Uuid) -> OutboxRef {
    OutboxRef {
        table: MESSAGES_TABLE.to_string(),
        filter: [("id".to_string(), id.to_string())].into(),
    }
}

/// The wake-up of one profile's bulk lane.
pub fn profile_wakeup(profile_id: uuid::Uuid) -> OutboxRef {
    OutboxRef {
        table: MESSAGES_TABLE.to_string(),
        filter: [("profile_id".to_string(), profile_id.to_string())].into(),
    }
}
