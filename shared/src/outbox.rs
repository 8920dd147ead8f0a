//! Postgres outboxes: side effects written in the same transaction as the change that causes
//! them, then published in order per key, at least once, and deleted.
//!
//! Writers insert a row (for live updates through `events.enqueue`) and, after commit, send a
//! wake-up naming the outbox ([`Wakeups`]). The `outbox` function (or, locally, an in-process
//! drainer) runs a pass of that outbox; a schedule sweeps every outbox for lost wake-ups and due
//! retries. Postgres stays the source of truth: a wake-up carries no payload.

pub mod batch;
pub mod config;
pub mod drain;
pub mod engine;
pub mod follow;
pub mod live;
pub mod wakeup;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use config::OutboxConfig;
pub use drain::{Drainer, OutboxResolver, PassOutcome};
pub use engine::{Outbox, OutboxRow, PublishError, Publisher, backoff};
pub use follow::{FollowReport, Follower};
pub use wakeup::{LocalWakeups, NoWakeupQueue, SqsWakeups, WakeRequest, Wakeups};

/// The outbox area's one error type.
#[derive(Debug, thiserror::Error)]
pub enum OutboxError {
    #[error("{0}")]
    InvalidConfig(String),
    #[error("outbox database error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("outbox pass was aborted")]
    Aborted,
    #[error("outbox queue error: {0}")]
    Queue(String),
}

/// Names an outbox in a wake-up message: a table and the fixed conditions selecting its rows.
/// Serialised as `{"table":"events.outbox","where":{"app_id":"mail","kind":"live"}}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutboxRef {
    pub table: String,
    #[serde(rename = "where", default)]
    pub filter: BTreeMap<String, String>,
}

impl OutboxRef {
    /// The live-update outbox of one app.
    pub fn live(app_id: &str) -> OutboxRef {
        OutboxRef {
            table: live::LIVE_TABLE.to_string(),
            filter: BTreeMap::from([
                ("app_id".to_string(), app_id.to_string()),
                ("kind".to_string(), "live".to_string()),
            ]),
        }
    }

    /// The wake-up message body.
    pub fn to_message(&self) -> String {
        serde_json::json!({ "outbox": self }).to_string()
    }

    /// Reads a wake-up message body.
    pub fn from_message(body: &str) -> Option<OutboxRef> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Message {
            outbox: OutboxRef,
        }
        serde_json::from_str::<Message>(body).ok().map(|m| m.outbox)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wake_up_messages_round_trip_and_reject_strangers() {
        let target = OutboxRef::live("mail");
        let body = target.to_message();
        assert_eq!(
            body,
            r#"{"outbox":{"table":"events.outbox","where":{"app_id":"mail","kind":"live"}}}"#
        );
        assert_eq!(OutboxRef::from_message(&body), Some(target));
        assert_eq!(OutboxRef::from_message("not json"), None);
        assert_eq!(
            OutboxRef::from_message(r#"{"outbox":{"table":"t"},"x":1}"#),
            None
        );
    }
}
