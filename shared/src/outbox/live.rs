//! Live updates: the platform outbox `events.outbox` (rows of kind `live`), one outbox per app,
//! published to an SQS FIFO queue (or, locally, kept in memory).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use futures::FutureExt;
use futures::future::BoxFuture;
use serde::Serialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use sqlx::{PgConnection, PgPool, Row};
use uuid::Uuid;

pub use super::batch::sqs_client_from_env;
use super::batch::{BatchMessage, SqsBatcher};
use super::config::OutboxConfig;
use super::engine::{Outbox, OutboxRow, PublishError, Publisher};
use super::{OutboxError, OutboxRef, Wakeups};
use crate::registry::is_valid_app_id;

/// The platform outbox table.
pub const LIVE_TABLE: &str = "events.outbox";
/// Events the local memory publisher keeps.
pub const MEMORY_EVENTS: usize = 200;
/// SQS's limit on a FIFO message group id.
const MAX_GROUP_ID_CHARS: usize = 128;

/// The configuration of one app's live outbox.
pub fn live_config(app_id: &str) -> OutboxConfig {
    OutboxConfig::new(
        LIVE_TABLE,
        &format!("events:live:{app_id}"),
        "ordering_key",
        "seq",
    )
    .filter("kind", "live")
    .filter("app_id", app_id)
}

/// Writes a live update in the caller's transaction: envelope `{v:1, k:key, d:data}`. Rows
/// with the same `coalesce` key in one transaction merge (last data wins). Wake the app's outbox
/// after commit.
pub async fn enqueue_live(
    conn: &mut PgConnection,
    app_id: &str,
    ordering_key: &str,
    data: Value,
    coalesce: Option<&str>,
) -> Result<Uuid, OutboxError> {
    let id = Uuid::new_v4();
    sqlx::query("SELECT events.enqueue($1, $2, 'live', $3, $4, $5)")
        .bind(id)
        .bind(app_id)
        .bind(ordering_key)
        .bind(json!({"v": 1, "k": ordering_key, "d": data}))
        .bind(coalesce)
        .execute(conn)
        .await?;
    Ok(id)
}

/// Writes an access change of `ordering_key` (`{v:1, k:key, a:true}`) as its own row.
pub async fn enqueue_access_change(
    conn: &mut PgConnection,
    app_id: &str,
    ordering_key: &str,
) -> Result<Uuid, OutboxError> {
    let id = Uuid::new_v4();
    sqlx::query("SELECT events.enqueue($1, $2, 'live', $3, $4, NULL)")
        .bind(id)
        .bind(app_id)
        .bind(ordering_key)
        .bind(json!({"v": 1, "k": ordering_key, "a": true}))
        .execute(conn)
        .await?;
    Ok(id)
}

/// The live publisher of a deployed function that holds no live queue: every publish fails (and
/// is retried by the outbox), never kept in a memory nobody reads.
pub struct NoLiveQueue;

impl Publisher for NoLiveQueue {
    fn publish<'a>(&'a self, _row: &'a OutboxRow) -> BoxFuture<'a, Result<(), PublishError>> {
        async {
            Err(PublishError(
                "this function holds no K2B_LIVE_QUEUE_URL".to_string(),
            ))
        }
        .boxed()
    }
}

/// A published live update.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LiveEvent {
    pub id: Uuid,
    pub app_id: String,
    pub ordering_key: String,
    pub payload: Value,
}

impl LiveEvent {
    pub fn from_row(row: &OutboxRow) -> Result<LiveEvent, PublishError> {
        let read = |e: sqlx::Error| PublishError(format!("unreadable outbox row: {e}"));
        Ok(LiveEvent {
            id: row.id,
            app_id: row.row.try_get("app_id").map_err(read)?,
            ordering_key: row.row.try_get("ordering_key").map_err(read)?,
            payload: row.row.try_get("payload").map_err(read)?,
        })
    }
}

/// The FIFO message group of an app's key: `<app_id>:<ordering_key>`, or, when that is longer
/// than SQS allows or holds characters SQS refuses, `<app_id>:#<SHA-256 of the key>` (the same
/// key always maps to the same group, so order per key holds).
pub fn message_group_id(app_id: &str, ordering_key: &str) -> String {
    let plain = format!("{app_id}:{ordering_key}");
    let allowed = plain.chars().all(|c| c.is_ascii_graphic());
    if allowed && plain.chars().count() <= MAX_GROUP_ID_CHARS {
        return plain;
    }
    let digest = hex::encode(Sha256::digest(ordering_key.as_bytes()));
    format!("{app_id}:#{digest}")
}

/// Publishes live updates to an SQS FIFO queue: body = the payload, group = app and key,
/// deduplication id = the row id (a re-publish within SQS's window is dropped). Publishes that
/// meet share `SendMessageBatch` calls ([`SqsBatcher`]).
pub struct SqsLivePublisher {
    batcher: SqsBatcher,
}

impl SqsLivePublisher {
    /// A publisher whose SQS client is made from the environment on first use.
    pub fn new(queue_url: impl Into<String>) -> SqsLivePublisher {
        SqsLivePublisher {
            batcher: SqsBatcher::new(queue_url, None),
        }
    }

    /// A publisher that sends with `client`.
    pub fn with_client(
        queue_url: impl Into<String>,
        client: aws_sdk_sqs::Client,
    ) -> SqsLivePublisher {
        SqsLivePublisher {
            batcher: SqsBatcher::new(queue_url, Some(client)),
        }
    }
}

impl Publisher for SqsLivePublisher {
    fn publish<'a>(&'a self, row: &'a OutboxRow) -> BoxFuture<'a, Result<(), PublishError>> {
        async move {
            let event = LiveEvent::from_row(row)?;
            self.batcher
                .send(BatchMessage {
                    row_id: event.id,
                    body: event.payload.to_string(),
                    group_id: message_group_id(&event.app_id, &event.ordering_key),
                    deduplication_id: event.id.to_string(),
                })
                .await
        }
        .boxed()
    }
}

/// Keeps the last published live updates in memory (the local runner shows them).
#[derive(Default)]
pub struct MemoryLivePublisher {
    events: Mutex<VecDeque<LiveEvent>>,
}

impl MemoryLivePublisher {
    /// The kept events, oldest first.
    pub fn events(&self) -> Vec<LiveEvent> {
        self.events
            .lock()
            .map(|e| e.iter().cloned().collect())
            .unwrap_or_default()
    }
}

impl Publisher for MemoryLivePublisher {
    fn publish<'a>(&'a self, row: &'a OutboxRow) -> BoxFuture<'a, Result<(), PublishError>> {
        async move {
            let event = LiveEvent::from_row(row)?;
            if let Ok(mut events) = self.events.lock() {
                // A repeated delivery of one row is kept once, like the FIFO queue would.
                if !events.iter().any(|e| e.id == event.id) {
                    if events.len() == MEMORY_EVENTS {
                        events.pop_front();
                    }
                    events.push_back(event);
                }
            }
            Ok(())
        }
        .boxed()
    }
}

/// The live outboxes of this process: one [`Outbox`] per app (so concurrent passes join),
/// resolved from wake-up messages and enumerated for sweeps.
pub struct LiveOutboxes {
    pool: PgPool,
    publisher: Arc<dyn Publisher>,
    wakeups: Arc<dyn Wakeups>,
    outboxes: Mutex<HashMap<String, Arc<Outbox>>>,
}

impl LiveOutboxes {
    pub fn new(
        pool: PgPool,
        publisher: Arc<dyn Publisher>,
        wakeups: Arc<dyn Wakeups>,
    ) -> LiveOutboxes {
        LiveOutboxes {
            pool,
            publisher,
            wakeups,
            outboxes: Mutex::new(HashMap::new()),
        }
    }

    /// The outbox a wake-up names, if it is a live outbox of a valid app id.
    pub fn resolve(&self, target: &OutboxRef) -> Option<Arc<Outbox>> {
        if target.table != LIVE_TABLE
            || target.filter.len() != 2
            || target.filter.get("kind").map(String::as_str) != Some("live")
        {
            return None;
        }
        let app_id = target
            .filter
            .get("app_id")
            .filter(|id| is_valid_app_id(id))?;
        let mut outboxes = self.outboxes.lock().ok()?;
        if let Some(outbox) = outboxes.get(app_id) {
            return Some(outbox.clone());
        }
        let outbox = Outbox::new(
            self.pool.clone(),
            live_config(app_id),
            self.publisher.clone(),
        )
        .ok()?
        .with_delayed_wakeups(self.wakeups.clone(), OutboxRef::live(app_id));
        let outbox = Arc::new(outbox);
        outboxes.insert(app_id.clone(), outbox.clone());
        Some(outbox)
    }

    /// Every live outbox that has rows (for the scheduled sweep).
    pub async fn with_rows(&self) -> Result<Vec<OutboxRef>, OutboxError> {
        let apps: Vec<String> = sqlx::query_scalar(
            "SELECT DISTINCT app_id FROM events.outbox WHERE kind = 'live' ORDER BY app_id",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(apps.iter().map(|app| OutboxRef::live(app)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_ids_fit_sqs_and_stay_stable_per_key() {
        assert_eq!(message_group_id("mail", "mailbox-1"), "mail:mailbox-1");
        let long = "k".repeat(600);
        let group = message_group_id("mail", &long);
        assert!(group.starts_with("mail:#") && group.len() <= 128, "{group}");
        assert_eq!(group, message_group_id("mail", &long));
        assert_ne!(group, message_group_id("mail", &"k".repeat(599)));
        let spaced = message_group_id("mail", "two words");
        assert!(spaced.starts_with("mail:#"));
        assert!(message_group_id("mail", "ümlaut").starts_with("mail:#"));
    }

    #[test]
    fn live_config_matches_the_platform_lock_key() {
        assert_eq!(
            live_config("mail").lock_key(),
            r#"events.outbox:{"kind":"live","app_id":"mail"}"#
        );
    }
}
