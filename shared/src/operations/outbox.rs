//! How the outboxes stand: depth, the oldest waiting row and the keys that keep failing.
//!
//! Two kinds of outbox drain here: the live updates of each app (`events.outbox`, one outbox per
//! app) and outgoing mail (`outgoing_mail.messages`, one lane each for immediate and bulk mail).
//! A row is *due* when its next attempt time has come; the *oldest due row age* is how long the
//! oldest due row has existed, so a row that keeps failing and coming back grows older on every
//! attempt while a row merely scheduled for later does not count.

use serde::Serialize;
use sqlx::{FromRow, PgPool};

use super::OperationsError;

/// Failing keys listed per outbox at most (the count is always complete).
pub const FAILING_KEYS_SHOWN: i64 = 20;

/// The bulk lane sends at its pace for as long as a large send takes: its age does not count
/// towards [`oldest_due_age_seconds`], which alarms.
pub const BULK_MAIL_OUTBOX: &str = "mail:bulk";

/// One outbox.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OutboxStatus {
    /// `live:<app id>`, `mail:immediate` or `mail:bulk`.
    pub name: String,
    /// Rows waiting (due or not).
    pub depth: i64,
    /// Rows whose attempt is due now.
    pub due: i64,
    /// Age of the oldest row, seconds.
    pub oldest_age_seconds: Option<f64>,
    /// Age of the oldest due row, seconds.
    pub oldest_due_age_seconds: Option<f64>,
    /// Ordering keys (mail: sending profiles) with a row that failed at least once.
    pub failing_key_count: i64,
    /// The first [`FAILING_KEYS_SHOWN`] of them.
    pub failing_keys: Vec<FailingKey>,
}

/// A key whose first row failed and waits for its retry.
#[derive(Debug, Clone, PartialEq, Serialize, FromRow)]
#[serde(rename_all = "camelCase")]
pub struct FailingKey {
    pub key: String,
    pub attempts: i32,
    /// Seconds until the next attempt (negative: due).
    pub retry_in_seconds: f64,
    pub last_error: Option<String>,
}

#[derive(FromRow)]
struct Totals {
    name: String,
    depth: i64,
    due: i64,
    oldest_age_seconds: Option<f64>,
    oldest_due_age_seconds: Option<f64>,
    failing_key_count: i64,
}

/// Every outbox with rows, live updates by app first, then the mail lanes.
pub async fn status(pool: &PgPool) -> Result<Vec<OutboxStatus>, OperationsError> {
    let live: Vec<Totals> = sqlx::query_as(
        "SELECT 'live:' || app_id AS name, count(*) AS depth,
                count(*) FILTER (WHERE next_attempt_at <= now()) AS due,
                EXTRACT(EPOCH FROM now() - min(created_at))::float8 AS oldest_age_seconds,
                EXTRACT(EPOCH FROM now() - min(created_at) FILTER (WHERE next_attempt_at <= now()))::float8
                    AS oldest_due_age_seconds,
                count(DISTINCT ordering_key) FILTER (WHERE attempts > 0) AS failing_key_count
         FROM events.outbox WHERE kind = 'live' GROUP BY app_id ORDER BY app_id",
    )
    .fetch_all(pool)
    .await?;
    let mail: Vec<Totals> = sqlx::query_as(
        "SELECT 'mail:' || lane AS name, count(*) AS depth,
                count(*) FILTER (WHERE coalesce(next_attempt_at, created_at) <= now()) AS due,
                EXTRACT(EPOCH FROM now() - min(created_at))::float8 AS oldest_age_seconds,
                EXTRACT(EPOCH FROM now() - min(created_at)
                    FILTER (WHERE coalesce(next_attempt_at, created_at) <= now()))::float8
                    AS oldest_due_age_seconds,
                count(DISTINCT profile_key) FILTER (WHERE attempt_count > 0) AS failing_key_count
         FROM outgoing_mail.messages WHERE status IN ('queued', 'sending')
         GROUP BY lane ORDER BY lane DESC",
    )
    .fetch_all(pool)
    .await?;
    let mut report = Vec::with_capacity(live.len() + mail.len());
    for totals in live.into_iter().chain(mail) {
        let failing_keys = if totals.failing_key_count == 0 {
            Vec::new()
        } else {
            failing_keys(pool, &totals.name).await?
        };
        report.push(OutboxStatus {
            name: totals.name,
            depth: totals.depth,
            due: totals.due,
            oldest_age_seconds: totals.oldest_age_seconds,
            oldest_due_age_seconds: totals.oldest_due_age_seconds,
            failing_key_count: totals.failing_key_count,
            failing_keys,
        });
    }
    Ok(report)
}

async fn failing_keys(pool: &PgPool, name: &str) -> Result<Vec<FailingKey>, OperationsError> {
    if let Some(app_id) = name.strip_prefix("live:") {
        // A key's first row is the one that blocks it.
        return Ok(sqlx::query_as(
            "SELECT key, attempts, retry_in_seconds, last_error FROM (
               SELECT DISTINCT ON (ordering_key) ordering_key AS key, attempts,
                      EXTRACT(EPOCH FROM next_attempt_at - now())::float8 AS retry_in_seconds,
                      last_error
               FROM events.outbox WHERE kind = 'live' AND app_id = $1 AND attempts > 0
               ORDER BY ordering_key, seq) first
             ORDER BY attempts DESC, key LIMIT $2",
        )
        .bind(app_id)
        .bind(FAILING_KEYS_SHOWN)
        .fetch_all(pool)
        .await?);
    }
    let lane = name.strip_prefix("mail:").unwrap_or(name);
    Ok(sqlx::query_as(
        "SELECT key, attempts, retry_in_seconds, last_error FROM (
           SELECT DISTINCT ON (profile_key) 'profile ' || profile_key AS key,
                  attempt_count AS attempts,
                  EXTRACT(EPOCH FROM coalesce(next_attempt_at, created_at) - now())::float8
                      AS retry_in_seconds,
                  coalesce(error_code || ': ', '') || coalesce(error_message, '') AS last_error
           FROM outgoing_mail.messages
           WHERE status IN ('queued', 'sending') AND lane = $1 AND attempt_count > 0
           ORDER BY profile_key, attempt_count DESC, created_at) first
         ORDER BY attempts DESC, key LIMIT $2",
    )
    .bind(lane)
    .bind(FAILING_KEYS_SHOWN)
    .fetch_all(pool)
    .await?)
}

/// The oldest due row age over every outbox except the bulk mail lane, seconds (0 when nothing
/// is due): what the outbox alarm watches.
pub fn oldest_due_age_seconds(report: &[OutboxStatus]) -> f64 {
    report
        .iter()
        .filter(|outbox| outbox.name != BULK_MAIL_OUTBOX)
        .filter_map(|outbox| outbox.oldest_due_age_seconds)
        .fold(0.0, f64::max)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outbox(name: &str, due_age: Option<f64>) -> OutboxStatus {
        OutboxStatus {
            name: name.into(),
            depth: 1,
            due: 1,
            oldest_age_seconds: due_age,
            oldest_due_age_seconds: due_age,
            failing_key_count: 0,
            failing_keys: Vec::new(),
        }
    }

    #[test]
    fn the_alarmed_age_is_the_oldest_due_row_outside_the_bulk_lane() {
        assert_eq!(oldest_due_age_seconds(&[]), 0.0);
        let report = [
            outbox("live:a", Some(12.0)),
            outbox("live:b", None),
            outbox("mail:immediate", Some(40.0)),
            outbox(BULK_MAIL_OUTBOX, Some(4000.0)),
        ];
        assert_eq!(oldest_due_age_seconds(&report), 40.0);
    }
}
