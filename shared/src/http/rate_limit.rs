//! A per-client request limiter for the whole installation: at most `limit` requests per client
//! key in each second of the database's clock, counted in Postgres (`auth.request_rate`), so
//! that every execution environment draws on the same allowance. One statement per request.

use std::time::Duration;

use sqlx::PgPool;

/// Keys longer than this are cut (an address and a router name are far shorter).
const MAX_KEY_CHARS: usize = 200;

/// The rate limiter's one error type.
#[derive(Debug, thiserror::Error)]
#[error("rate limit database error: {0}")]
pub struct RateLimitError(#[from] sqlx::Error);

/// Counts one request of `key` in the current second; false when the key already made `limit`
/// requests in it.
pub async fn allow(pool: &PgPool, key: &str, limit: u32) -> Result<bool, RateLimitError> {
    let key: String = key.chars().take(MAX_KEY_CHARS).collect();
    let requests: i32 = sqlx::query_scalar(
        "INSERT INTO auth.request_rate AS r (client_key, second, requests)
         VALUES ($1, floor(extract(epoch FROM now()))::bigint, 1)
         ON CONFLICT (client_key) DO UPDATE SET
           requests = CASE WHEN r.second = EXCLUDED.second
                           THEN least(r.requests, 2147483646) + 1 ELSE 1 END,
           second = EXCLUDED.second
         RETURNING requests",
    )
    .bind(&key)
    .fetch_one(pool)
    .await?;
    Ok(i64::from(requests) <= i64::from(limit))
}

/// Forgets clients that made no request for `idle`, at most `batch` of them; returns how many.
pub async fn prune(pool: &PgPool, idle: Duration, batch: i64) -> Result<u64, RateLimitError> {
    let result = sqlx::query(
        "DELETE FROM auth.request_rate WHERE client_key IN (
           SELECT client_key FROM auth.request_rate
           WHERE second < floor(extract(epoch FROM now()))::bigint - $1
           LIMIT $2 FOR UPDATE SKIP LOCKED)",
    )
    .bind(i64::try_from(idle.as_secs()).unwrap_or(i64::MAX))
    .bind(batch)
    .execute(pool)
    .await?;
    Ok(result.rows_affected())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::testing::TestDb;

    async fn requests_of(db: &TestDb, key: &str) -> Option<(i64, i32)> {
        sqlx::query_as("SELECT second, requests FROM auth.request_rate WHERE client_key = $1")
            .bind(key)
            .fetch_optional(&db.pool)
            .await
            .expect("read")
    }

    /// The second is the database's: a row of the current second counts on, one of an earlier
    /// second starts over, and keys are separate.
    #[tokio::test]
    async fn counts_each_key_per_second_of_the_database_clock() {
        let db = TestDb::new().await;
        // The key has used its allowance in the current second.
        sqlx::query(
            "INSERT INTO auth.request_rate VALUES ('web:a', floor(extract(epoch FROM now()))::bigint, 2)",
        )
        .execute(&db.pool)
        .await
        .expect("seed");
        let refused = allow(&db.pool, "web:a", 2).await.expect("allow");
        let (second, requests) = requests_of(&db, "web:a").await.expect("row");
        let now: i64 = sqlx::query_scalar("SELECT floor(extract(epoch FROM now()))::bigint")
            .fetch_one(&db.pool)
            .await
            .expect("now");
        if second == now {
            assert!(!refused, "the third request of the second is refused");
            assert_eq!(requests, 3);
        }
        assert!(
            allow(&db.pool, "web:b", 2).await.expect("allow"),
            "keys are separate"
        );
        // A new second starts over.
        sqlx::query("UPDATE auth.request_rate SET second = second - 1, requests = 50 WHERE client_key = 'web:a'")
            .execute(&db.pool)
            .await
            .expect("age");
        assert!(allow(&db.pool, "web:a", 2).await.expect("allow"));
        assert_eq!(requests_of(&db, "web:a").await.map(|r| r.1), Some(1));
        // Counting stops short of the column's range.
        sqlx::query(
            "UPDATE auth.request_rate SET requests = 2147483647 WHERE client_key = 'web:b'",
        )
        .execute(&db.pool)
        .await
        .expect("saturate");
        let _ = allow(&db.pool, "web:b", 2).await.expect("no overflow");
    }

    #[tokio::test]
    async fn idle_clients_are_forgotten() {
        let db = TestDb::new().await;
        assert!(allow(&db.pool, "web:old", 5).await.expect("allow"));
        assert!(allow(&db.pool, "web:new", 5).await.expect("allow"));
        sqlx::query(
            "UPDATE auth.request_rate SET second = second - 120 WHERE client_key = 'web:old'",
        )
        .execute(&db.pool)
        .await
        .expect("age");
        assert_eq!(
            prune(&db.pool, Duration::from_secs(60), 100)
                .await
                .expect("prune"),
            1
        );
        assert!(requests_of(&db, "web:old").await.is_none());
        assert!(requests_of(&db, "web:new").await.is_some());
    }
}
