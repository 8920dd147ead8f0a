//! Outbox drain throughput (figures, no assertions), next to the SQL-only ceiling measured in
//! the same run on the same database by `infra/bench/outbox_ceiling.sql` (one client, one
//! round trip per batch of 100):
//! (a) 100 000 rows over 1 000 keys; (b) one hot key of 10 000 rows. Publishing is a no-op.
//! Target for (a): at least half of the ceiling.
//!
//! Run: `cargo bench -p k2b-tests --bench outbox`.

use std::sync::Arc;
use std::time::Instant;

use futures::FutureExt;
use futures::future::BoxFuture;
use k2b_core::outbox::{Outbox, OutboxConfig, OutboxRow, PublishError, Publisher};
use k2b_tests::TestDb;

struct NoOp;

impl Publisher for NoOp {
    fn publish<'a>(&'a self, _: &'a OutboxRow) -> BoxFuture<'a, Result<(), PublishError>> {
        async { Ok(()) }.boxed()
    }
}

const TABLE: &str = "bench.outbox";

async fn fill(pool: &sqlx::PgPool, rows: i64, keys: i64) {
    sqlx::query("TRUNCATE bench.outbox")
        .execute(pool)
        .await
        .expect("truncate");
    sqlx::query(
        "INSERT INTO bench.outbox (ordering_key) SELECT 'key-' || (g % $2) FROM generate_series(1, $1) g",
    )
    .bind(rows)
    .bind(keys)
    .execute(pool)
    .await
    .expect("fill");
    sqlx::query("VACUUM ANALYZE bench.outbox")
        .execute(pool)
        .await
        .expect("analyze");
}

/// Drains with `drainers` independent drainers (like concurrent `outbox` invocations: they take
/// turns claiming, and publish and delete in parallel), until the table is empty.
async fn drain(pool: &sqlx::PgPool, rows: i64, drainers: usize) -> f64 {
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..drainers {
        let outbox = Arc::new(
            Outbox::new(
                pool.clone(),
                OutboxConfig::new(TABLE, "bench", "ordering_key", "seq"),
                Arc::new(NoOp),
            )
            .expect("outbox"),
        );
        let pool = pool.clone();
        tasks.push(tokio::spawn(async move {
            let mut handled = 0u64;
            loop {
                handled += outbox.reconcile().await.expect("pass");
                let left: i64 = sqlx::query_scalar("SELECT count(*) FROM bench.outbox")
                    .fetch_one(&pool)
                    .await
                    .expect("count");
                if left == 0 {
                    return handled;
                }
            }
        }));
    }
    let mut handled = 0;
    for task in tasks {
        handled += task.await.expect("join");
    }
    assert_eq!(handled as i64, rows);
    rows as f64 / started.elapsed().as_secs_f64()
}

async fn ceiling(pool: &sqlx::PgPool, rows: i64) -> f64 {
    let statement = CEILING_SQL
        .lines()
        .filter(|line| !line.trim_start().starts_with("--"))
        .collect::<Vec<_>>()
        .join("\n")
        .replace("{table}", TABLE);
    let mut conn = pool.acquire().await.expect("connection");
    let started = Instant::now();
    let mut deleted = 0u64;
    loop {
        let result = sqlx::query(sqlx::AssertSqlSafe(statement.clone()))
            .execute(&mut *conn)
            .await
            .expect("ceiling");
        if result.rows_affected() == 0 {
            break;
        }
        deleted += result.rows_affected();
    }
    assert_eq!(deleted as i64, rows);
    rows as f64 / started.elapsed().as_secs_f64()
}

const CEILING_SQL: &str = include_str!("../../infra/bench/outbox_ceiling.sql");

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let db = TestDb::new().await;
        sqlx::raw_sql(
            "CREATE SCHEMA bench;
             CREATE TABLE bench.outbox (
               seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
               id uuid NOT NULL UNIQUE DEFAULT gen_random_uuid(),
               ordering_key text NOT NULL,
               attempts integer NOT NULL DEFAULT 0,
               next_attempt_at timestamptz NOT NULL DEFAULT now(),
               claimed_until timestamptz,
               last_error text);
             CREATE INDEX outbox_busy ON bench.outbox (ordering_key)
               WHERE claimed_until IS NOT NULL OR attempts > 0;",
        )
        .execute(&db.pool)
        .await
        .expect("schema");

        println!("== outbox drain benchmarks (no-op publish, one process) ==");
        for (label, rows, keys) in [("(a) 100000 rows over 1000 keys", 100_000, 1_000), ("(b) one hot key of 10000 rows", 10_000, 1)] {
            fill(&db.pool, rows, keys).await;
            let sql_ceiling = ceiling(&db.pool, rows).await;
            println!("{label}:");
            println!("  SQL-only claim+delete, 1 client:   {sql_ceiling:>9.0} rows/s");
            for drainers in [1, 2] {
                fill(&db.pool, rows, keys).await;
                let engine = drain(&db.pool, rows, drainers).await;
                println!(
                    "  outbox engine, {drainers} drainer(s):        {engine:>9.0} rows/s  (ratio {:.2}; target for (a): >= 0.50)",
                    engine / sql_ceiling
                );
            }
        }
    });
}
