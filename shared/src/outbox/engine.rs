//! The outbox engine: claim, dispatch, reconcile.
//!
//! Claims of one outbox take turns on an advisory lock (a concurrent claim would skip the first
//! claim's locked rows and take later rows of the same keys); each claim leases up to a batch of
//! due rows whose key is not busy. Keys are published concurrently, rows of one key in sequence
//! order; a failed row is retried with backoff and holds back only its own key. Published rows
//! are deleted in one statement at the end of the batch.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use sqlx::postgres::PgRow;
use sqlx::{PgPool, Row};
use tokio::time::Instant;
use tracing::Instrument;
use uuid::Uuid;

use super::config::OutboxConfig;
use super::{OutboxError, OutboxRef, Wakeups};
use crate::telemetry::metrics::{self, Unit};

/// A claimed row: its id, the attempts read at claim, its ordering key, and the whole row.
pub struct OutboxRow {
    pub id: Uuid,
    pub attempts: i32,
    pub key: String,
    pub row: PgRow,
}

impl std::fmt::Debug for OutboxRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "OutboxRow({} key={} attempts={})",
            self.id, self.key, self.attempts
        )
    }
}

/// Why a publish failed (retried later; the text is kept in `last_error`, cut to 1000 chars).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PublishError(pub String);

/// Delivers one row to the world. Resolving means delivered; an error means "retry later".
/// Receivers deduplicate by row id: a row may be delivered more than once.
pub trait Publisher: Send + Sync {
    fn publish<'a>(&'a self, row: &'a OutboxRow) -> BoxFuture<'a, Result<(), PublishError>>;
}

/// The retry delay after the `attempts`-th failure: `min(300, 2^min(attempts, 8))` seconds.
pub fn backoff(attempts: i32) -> Duration {
    let exponent = attempts.clamp(0, 8) as u32;
    Duration::from_secs(2u64.pow(exponent).min(300))
}

type PassFuture = Shared<BoxFuture<'static, Result<u64, Arc<OutboxError>>>>;

struct PassState {
    active: Option<PassFuture>,
    requested: bool,
}

struct Statements {
    lock_key: String,
    claim: String,
    retry: String,
    release: String,
    delete: String,
}

/// One outbox in this process. Keep one instance per outbox so concurrent passes join.
pub struct Outbox {
    config: OutboxConfig,
    statements: Statements,
    pool: PgPool,
    publisher: Arc<dyn Publisher>,
    wakeups: Option<(Arc<dyn Wakeups>, OutboxRef)>,
    pass: Mutex<PassState>,
}

/// Extra margin kept before a hard deadline (the Lambda's end) when claiming.
pub const DEADLINE_MARGIN: Duration = Duration::from_secs(5);

impl Outbox {
    /// Builds an outbox; identifiers are validated here, before any query.
    pub fn new(
        pool: PgPool,
        config: OutboxConfig,
        publisher: Arc<dyn Publisher>,
    ) -> Result<Outbox, OutboxError> {
        config.validate()?;
        let filter = |alias: &str, first_param: usize| -> String {
            config
                .filter
                .iter()
                .enumerate()
                .map(|(i, (column, _))| format!(" AND {alias}.{column} = ${}", first_param + i))
                .collect()
        };
        let table = &config.table;
        let key = &config.order_by;
        let seq = &config.sequence;
        // $1 = limit, $2 = claim seconds, $3.. = filter values.
        // The busy keys are read once per claim, from the partial busy index (claimed rows and
        // rows waiting for a retry: at most the batches in flight plus one head row per failed
        // key), and probed through a hash: a claim beside one hot key of thousands of leased
        // rows then costs one scan of the candidates instead of one index probe per candidate.
        // The hash is sized by the busy rows alone, which the claim's `work_mem` covers.
        // The candidates carry their tuple ids: the lease update then reaches each locked row
        // directly instead of through the id index.
        let claim = format!(
            "WITH busy AS MATERIALIZED (
               SELECT b.{key} AS busy_key FROM {table} b
               WHERE (b.claimed_until > now() OR (b.attempts > 0 AND b.next_attempt_at > now()))
                 AND b.{key} IS NOT NULL{filter_b}),
             candidates AS MATERIALIZED (
               SELECT o.ctid AS row_ctid FROM {table} o
               WHERE (o.attempts = 0 OR o.next_attempt_at <= now())
                 AND (o.claimed_until IS NULL OR o.claimed_until <= now()){filter_o}
                 AND (o.{key} IS NULL OR o.{key} NOT IN (SELECT busy_key FROM busy))
               ORDER BY o.{seq}
               LIMIT $1
               FOR UPDATE OF o SKIP LOCKED),
             claimed AS (
               UPDATE {table} t SET claimed_until = now() + make_interval(secs => $2)
               FROM candidates c WHERE t.ctid = c.row_ctid
               RETURNING t.*)
             SELECT claimed.*, claimed.{key}::text AS outbox_key_text FROM claimed ORDER BY claimed.{seq}",
            filter_o = filter("o", 3),
            filter_b = filter("b", 3),
        );
        let retry = format!(
            "UPDATE {table} SET attempts = attempts + 1,
                next_attempt_at = now() + make_interval(secs => $3),
                claimed_until = NULL, last_error = left($4, 1000)
             WHERE id = $1 AND attempts = $2"
        );
        let release = format!("UPDATE {table} SET claimed_until = NULL WHERE id = ANY($1)");
        let delete = format!("DELETE FROM {table} WHERE id = ANY($1)");
        Ok(Outbox {
            statements: Statements {
                lock_key: config.lock_key(),
                claim,
                retry,
                release,
                delete,
            },
            config,
            pool,
            publisher,
            wakeups: None,
            pass: Mutex::new(PassState {
                active: None,
                requested: false,
            }),
        })
    }

    /// After a failed publish, also send a wake-up for when the retry is due.
    pub fn with_delayed_wakeups(mut self, wakeups: Arc<dyn Wakeups>, target: OutboxRef) -> Outbox {
        self.wakeups = Some((wakeups, target));
        self
    }

    pub fn config(&self) -> &OutboxConfig {
        &self.config
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Leases up to `limit` (clamped to 1..=batch size) due rows whose key is not busy, in
    /// sequence order. Claims of this outbox take turns on its advisory lock, and the claim's
    /// statements, its lock wait and its idle time are all bounded by the claim period.
    pub async fn claim(&self, limit: i64) -> Result<Vec<OutboxRow>, OutboxError> {
        let cap = limit.clamp(1, self.config.batch_size);
        let claim_ms = self.config.claim.as_millis().to_string();
        let mut tx = self.pool.begin().await?;
        // The timeouts are set before the lock is requested (the inner query runs first), so
        // lock_timeout bounds the wait for the turn; statement_timeout, armed when a statement
        // starts, bounds the claim statement that follows.
        sqlx::query(
            "SELECT pg_advisory_xact_lock(hashtextextended($2, 0))
             FROM (SELECT set_config('statement_timeout', $1, true),
                          set_config('lock_timeout', $1, true),
                          set_config('idle_in_transaction_session_timeout', $1, true),
                          set_config('work_mem', '64MB', true)) timeouts",
        )
        .bind(&claim_ms)
        .bind(&self.statements.lock_key)
        .execute(&mut *tx)
        .await?;
        let mut query = sqlx::query(sqlx::AssertSqlSafe(self.statements.claim.clone()))
            .bind(cap)
            .bind(self.config.claim.as_secs_f64());
        for (_, value) in &self.config.filter {
            query = query.bind(value);
        }
        let rows = query.fetch_all(&mut *tx).await?;
        tx.commit().await?;
        // Claimed rows are due: the oldest of them tells how far behind this outbox is.
        let oldest = rows
            .iter()
            .filter_map(|row| row.try_get::<DateTime<Utc>, _>("created_at").ok())
            .min();
        if let Some(oldest) = oldest {
            let age = (Utc::now() - oldest).num_milliseconds().max(0) as f64 / 1000.0;
            metrics::gauge("OutboxOldestDueAgeSeconds", Unit::Seconds, age);
        }
        rows.into_iter()
            .map(|row| {
                Ok(OutboxRow {
                    id: row.try_get("id")?,
                    attempts: row.try_get("attempts")?,
                    key: row.try_get("outbox_key_text")?,
                    row,
                })
            })
            .collect::<Result<Vec<_>, sqlx::Error>>()
            .map_err(OutboxError::from)
    }

    /// Marks a failed row for a retry after its backoff (only if nobody touched it since the
    /// claim: `attempts` must still be what the claim read).
    async fn retry_later(&self, row: &OutboxRow, error: &PublishError) -> Result<(), OutboxError> {
        let delay = backoff(row.attempts + 1);
        metrics::count("OutboxRetried", 1);
        tracing::warn!(
            outbox = %self.config.name,
            outbox_id = %row.id,
            attempts = row.attempts + 1,
            error = %error.0.chars().take(200).collect::<String>(),
            "Outbox delivery failed"
        );
        sqlx::query(sqlx::AssertSqlSafe(self.statements.retry.clone()))
            .bind(row.id)
            .bind(row.attempts)
            .bind(delay.as_secs_f64())
            .bind(&error.0)
            .execute(&self.pool)
            .await?;
        if let Some((wakeups, target)) = &self.wakeups {
            wakeups.wake_later(target.clone(), delay).await;
        }
        Ok(())
    }

    /// Publishes one key's rows in order; returns the delivered ids.
    async fn run_key(
        &self,
        rows: Vec<OutboxRow>,
        claim_ends: Instant,
    ) -> (Vec<Uuid>, Result<(), OutboxError>) {
        let mut delivered = Vec::new();
        let publish_bound = self.config.publish_timeout;
        for (index, row) in rows.iter().enumerate() {
            if Instant::now() >= claim_ends {
                // The lease is over: publish nothing more; the rows are re-claimed later.
                break;
            }
            let outcome =
                match tokio::time::timeout(publish_bound, self.publisher.publish(row)).await {
                    Ok(outcome) => outcome,
                    Err(_) => Err(PublishError("publish did not finish in time".into())),
                };
            match outcome {
                Ok(()) => delivered.push(row.id),
                Err(error) => {
                    if let Err(db) = self.retry_later(row, &error).await {
                        return (delivered, Err(db));
                    }
                    let later: Vec<Uuid> = rows[index + 1..].iter().map(|r| r.id).collect();
                    // Free the key's later rows so they follow as soon as the retry is due —
                    // but only inside the lease: afterwards another replica may own them.
                    if !later.is_empty() && Instant::now() < claim_ends {
                        let released =
                            sqlx::query(sqlx::AssertSqlSafe(self.statements.release.clone()))
                                .bind(&later)
                                .execute(&self.pool)
                                .await;
                        if let Err(db) = released {
                            return (delivered, Err(db.into()));
                        }
                    }
                    break;
                }
            }
        }
        (delivered, Ok(()))
    }

    /// Publishes a claimed batch: keys concurrently, each key's rows in order, no publish after
    /// `claim_ends`. Then one statement deletes every delivered row, and only after that the
    /// first failure of a key (a database error) is returned.
    pub async fn dispatch_batch(
        &self,
        rows: Vec<OutboxRow>,
        claim_ends: Instant,
    ) -> Result<(), OutboxError> {
        let mut groups: Vec<(String, Vec<OutboxRow>)> = Vec::new();
        for row in rows {
            match groups.iter_mut().find(|(key, _)| *key == row.key) {
                Some((_, group)) => group.push(row),
                None => groups.push((row.key.clone(), vec![row])),
            }
        }
        let results = futures::future::join_all(
            groups
                .into_iter()
                .map(|(_, rows)| self.run_key(rows, claim_ends)),
        )
        .await;
        let mut delivered = Vec::new();
        let mut first_error = None;
        for (ids, result) in results {
            delivered.extend(ids);
            if let Err(error) = result
                && first_error.is_none()
            {
                first_error = Some(error);
            }
        }
        if !delivered.is_empty() {
            sqlx::query(sqlx::AssertSqlSafe(self.statements.delete.clone()))
                .bind(&delivered)
                .execute(&self.pool)
                .await?;
            metrics::count("OutboxPublished", delivered.len() as u64);
        }
        match first_error {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }

    /// One pass: claim and dispatch while rows come back or a new request arrived during the
    /// pass. A pass already running in this process is joined (and asked to loop once more).
    /// Returns the number of rows handled (failed ones included).
    pub async fn reconcile(self: &Arc<Self>) -> Result<u64, Arc<OutboxError>> {
        self.reconcile_until(None).await
    }

    /// [`Outbox::reconcile`] that stops claiming when less than a claim period (plus a margin)
    /// is left before `hard_deadline`, and never lets a lease outlive it.
    pub async fn reconcile_until(
        self: &Arc<Self>,
        hard_deadline: Option<Instant>,
    ) -> Result<u64, Arc<OutboxError>> {
        let pass = self.with_pass(|state| {
            state.requested = true;
            match &state.active {
                Some(pass) => pass.clone(),
                None => {
                    let outbox = self.clone();
                    // Logged under the invocation that started the pass.
                    let task = tokio::spawn(
                        async move { outbox.run_pass(hard_deadline).await }.in_current_span(),
                    );
                    let pass: PassFuture = async move {
                        match task.await {
                            Ok(result) => result.map_err(Arc::new),
                            Err(_) => Err(Arc::new(OutboxError::Aborted)),
                        }
                    }
                    .boxed()
                    .shared();
                    state.active = Some(pass.clone());
                    pass
                }
            }
        });
        pass.await
    }

    async fn run_pass(&self, hard_deadline: Option<Instant>) -> Result<u64, OutboxError> {
        let mut total = 0u64;
        loop {
            self.with_pass(|state| state.requested = false);
            let now = Instant::now();
            let mut claim_ends = now + self.config.claim;
            if let Some(deadline) = hard_deadline {
                if deadline.saturating_duration_since(now) < self.config.claim + DEADLINE_MARGIN {
                    self.with_pass(|state| state.active = None);
                    return Ok(total);
                }
                claim_ends = claim_ends.min(deadline - DEADLINE_MARGIN);
            }
            let claimed = match self.claim_and_dispatch(claim_ends).await {
                Ok(claimed) => claimed,
                Err(error) => {
                    self.with_pass(|state| state.active = None);
                    return Err(error);
                }
            };
            total += claimed;
            // Deciding to stop and leaving the slot happen under one lock: a request that
            // arrives before makes the pass loop again; one that arrives after starts a new pass.
            let done = self.with_pass(|state| {
                let done = claimed == 0 && !state.requested;
                if done {
                    state.active = None;
                }
                done
            });
            if done {
                return Ok(total);
            }
        }
    }

    async fn claim_and_dispatch(&self, claim_ends: Instant) -> Result<u64, OutboxError> {
        let rows = self.claim(self.config.batch_size).await?;
        let claimed = rows.len() as u64;
        self.dispatch_batch(rows, claim_ends).await?;
        Ok(claimed)
    }

    fn with_pass<T>(&self, change: impl FnOnce(&mut PassState) -> T) -> T {
        let mut state = match self.pass.lock() {
            Ok(state) => state,
            Err(poisoned) => poisoned.into_inner(),
        };
        change(&mut state)
    }

    /// [`Outbox::reconcile`] with errors logged instead of returned.
    pub async fn notify(self: &Arc<Self>) {
        if let Err(error) = self.reconcile().await {
            tracing::warn!(outbox = %self.config.name, error = %error, "Outbox reconcile failed");
        }
    }

    /// Publishes one row outside key order and deletes it if nobody re-claimed it meanwhile
    /// (a test seam and an operator tool).
    pub async fn dispatch_one(&self, row: &OutboxRow) -> Result<(), OutboxError> {
        match self.publisher.publish(row).await {
            Ok(()) => {
                let statement = format!(
                    "DELETE FROM {} WHERE id = $1 AND attempts = $2",
                    self.config.table
                );
                sqlx::query(sqlx::AssertSqlSafe(statement))
                    .bind(row.id)
                    .bind(row.attempts)
                    .execute(&self.pool)
                    .await?;
                metrics::count("OutboxPublished", 1);
                Ok(())
            }
            Err(error) => self.retry_later(row, &error).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_256_seconds() {
        let seconds: Vec<u64> = (1..=10).map(|n| backoff(n).as_secs()).collect();
        assert_eq!(seconds, vec![2, 4, 8, 16, 32, 64, 128, 256, 256, 256]);
    }
}
