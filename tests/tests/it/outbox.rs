//! The outbox engine, the live outbox and the `outbox` function against a real Postgres (and the
//! SQS API of a local moto server).

mod concurrency;
mod crash;
mod engine;
mod live;
mod sqs;
mod sqs_batch;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::FutureExt;
use futures::future::BoxFuture;
use k2b_core::outbox::{OutboxRow, PublishError, Publisher};
use sqlx::Row;
use tokio::sync::watch;

/// Creates the example table of the platform's documentation (stock reports for an ERP, ordered
/// per item) and the item rows writers lock.
pub async fn create_stock_reports(pool: &sqlx::PgPool) {
    sqlx::raw_sql(
        "CREATE SCHEMA inventory;
         CREATE TABLE inventory.items (id text PRIMARY KEY);
         INSERT INTO inventory.items VALUES ('A'), ('B');
         CREATE TABLE inventory.stock_reports (
           seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
           id uuid NOT NULL UNIQUE DEFAULT gen_random_uuid(),
           item_id text NOT NULL,
           delta integer NOT NULL,
           attempts integer NOT NULL DEFAULT 0,
           next_attempt_at timestamptz NOT NULL DEFAULT now(),
           claimed_until timestamptz,
           last_error text);
         CREATE INDEX stock_reports_busy ON inventory.stock_reports (item_id)
           WHERE claimed_until IS NOT NULL OR attempts > 0;",
    )
    .execute(pool)
    .await
    .expect("create stock_reports");
}

/// Records what it publishes; can fail chosen keys and hold every publish behind a gate.
pub struct Recorder {
    /// (key, seq) in publish-start order.
    pub started: Mutex<Vec<(String, i64)>>,
    /// (key, seq) in publish-success order.
    pub published: Mutex<Vec<(String, i64)>>,
    failing: Mutex<HashMap<String, String>>,
    gate: watch::Receiver<bool>,
    gate_control: watch::Sender<bool>,
    pub delay: std::time::Duration,
}

impl Recorder {
    pub fn new() -> Arc<Recorder> {
        let (control, gate) = watch::channel(true);
        Arc::new(Recorder {
            started: Mutex::new(Vec::new()),
            published: Mutex::new(Vec::new()),
            failing: Mutex::new(HashMap::new()),
            gate,
            gate_control: control,
            delay: std::time::Duration::ZERO,
        })
    }
    pub fn with_delay(delay: std::time::Duration) -> Arc<Recorder> {
        let (control, gate) = watch::channel(true);
        Arc::new(Recorder {
            started: Mutex::new(Vec::new()),
            published: Mutex::new(Vec::new()),
            failing: Mutex::new(HashMap::new()),
            gate,
            gate_control: control,
            delay,
        })
    }
    pub fn fail(&self, key: &str, message: &str) {
        self.failing
            .lock()
            .expect("lock")
            .insert(key.into(), message.into());
    }
    pub fn heal(&self) {
        self.failing.lock().expect("lock").clear();
    }
    pub fn close_gate(&self) {
        self.gate_control.send(false).ok();
    }
    pub fn open_gate(&self) {
        self.gate_control.send(true).ok();
    }
    pub fn started(&self) -> Vec<(String, i64)> {
        self.started.lock().expect("lock").clone()
    }
    pub fn published(&self) -> Vec<(String, i64)> {
        self.published.lock().expect("lock").clone()
    }
    /// The sequence numbers published for `key`, in order.
    pub fn published_of(&self, key: &str) -> Vec<i64> {
        self.published()
            .into_iter()
            .filter(|(k, _)| k == key)
            .map(|(_, s)| s)
            .collect()
    }
}

impl Publisher for Recorder {
    fn publish<'a>(&'a self, row: &'a OutboxRow) -> BoxFuture<'a, Result<(), PublishError>> {
        async move {
            let seq: i64 = row
                .row
                .try_get("seq")
                .map_err(|e| PublishError(e.to_string()))?;
            self.started
                .lock()
                .expect("lock")
                .push((row.key.clone(), seq));
            let mut gate = self.gate.clone();
            while !*gate.borrow() {
                if gate.changed().await.is_err() {
                    break;
                }
            }
            if !self.delay.is_zero() {
                tokio::time::sleep(self.delay).await;
            }
            if let Some(message) = self.failing.lock().expect("lock").get(&row.key).cloned() {
                return Err(PublishError(message));
            }
            self.published
                .lock()
                .expect("lock")
                .push((row.key.clone(), seq));
            Ok(())
        }
        .boxed()
    }
}

/// Rows left in a table.
pub async fn count(pool: &sqlx::PgPool, table: &str) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT count(*) FROM {table}")))
        .fetch_one(pool)
        .await
        .expect("count")
}
