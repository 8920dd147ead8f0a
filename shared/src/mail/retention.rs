//! Retention (spec mail §10): once a day, from 00:00 UTC, message records older than the record
//! retention are deleted (with any objects left), and the content of older than the content
//! retention is purged (text, HTML and headers; the record stays). Batches of the oldest rows,
//! skipping rows others hold, for at most [`RUN_BUDGET`].

use std::time::Duration;

use serde_json::Value;
use sqlx::PgPool;
use tokio::time::Instant;

use super::admin::Retention;
use super::objects::ObjectStore;
use super::{MailError, attachments};

/// Rows one step deletes or purges at most.
pub const BATCH: i64 = 1000;
/// How long one daily run works at most; what is left waits for the next day.
pub const RUN_BUDGET: Duration = Duration::from_secs(5 * 60);

/// What a step or a run did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Removed {
    pub deleted: u64,
    pub purged: u64,
}

/// Whether today's (UTC) run is still to do; exactly one caller a day is told yes.
pub async fn claim_today(pool: &PgPool) -> Result<bool, MailError> {
    let claimed: Option<String> = sqlx::query_scalar(
        "INSERT INTO outgoing_mail.daily_runs (task, last_day)
         VALUES ('retention', (now() AT TIME ZONE 'UTC')::date)
         ON CONFLICT (task) DO UPDATE SET last_day = EXCLUDED.last_day
          WHERE outgoing_mail.daily_runs.last_day < EXCLUDED.last_day
         RETURNING task",
    )
    .fetch_optional(pool)
    .await?;
    Ok(claimed.is_some())
}

/// One batch of each kind: deletes up to [`BATCH`] rows past the record retention (a
/// deletion frees the row's idempotency key), then purges up to [`BATCH`] rows past the content
/// retention. A shorter record retention wins: its rows are deleted, never purged first.
pub async fn step(
    pool: &PgPool,
    store: &ObjectStore,
    retention: Retention,
) -> Result<Removed, MailError> {
    let deleted: Vec<Option<Value>> = sqlx::query_scalar(
        "DELETE FROM outgoing_mail.messages
          WHERE id IN (SELECT id FROM outgoing_mail.messages
                        WHERE created_at < now() - make_interval(days => $1)
                        ORDER BY created_at, id LIMIT $2 FOR UPDATE SKIP LOCKED)
         RETURNING attachment_refs",
    )
    .bind(i32::try_from(retention.record_days).unwrap_or(i32::MAX))
    .bind(BATCH)
    .fetch_all(pool)
    .await?;
    let refs: Vec<String> = deleted
        .iter()
        .flat_map(|refs| attachments::refs_of(refs.as_ref()))
        .collect();
    attachments::release(pool, store, &refs).await;
    let purged = sqlx::query(
        "UPDATE outgoing_mail.messages
            SET text_body = NULL, html_body = NULL, headers = NULL, content_purged_at = now()
          WHERE id IN (SELECT id FROM outgoing_mail.messages
                        WHERE created_at < now() - make_interval(days => $1)
                          AND content_purged_at IS NULL
                          AND status NOT IN ('queued', 'sending')
                        ORDER BY created_at, id LIMIT $2 FOR UPDATE SKIP LOCKED)",
    )
    .bind(i32::try_from(retention.content_days).unwrap_or(i32::MAX))
    .bind(BATCH)
    .execute(pool)
    .await?
    .rows_affected();
    Ok(Removed {
        deleted: deleted.len() as u64,
        purged,
    })
}

/// Steps until nothing is left or the budget is spent.
pub async fn run(
    pool: &PgPool,
    store: &ObjectStore,
    retention: Retention,
) -> Result<Removed, MailError> {
    let until = Instant::now() + RUN_BUDGET;
    let mut total = Removed::default();
    loop {
        let removed = step(pool, store, retention).await?;
        total.deleted += removed.deleted;
        total.purged += removed.purged;
        let more = removed.deleted == BATCH as u64 || removed.purged == BATCH as u64;
        if !more || Instant::now() >= until {
            break;
        }
    }
    if total != Removed::default() {
        tracing::info!(
            deleted = total.deleted,
            purged = total.purged,
            "outgoing mail retention"
        );
    }
    Ok(total)
}
