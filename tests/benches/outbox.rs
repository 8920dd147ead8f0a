//! Outbox drain throughput (figures, no assertions), beside the SQL-only ceiling measured in the
//! same run on the same database and the same rows by `infra/bench/outbox_ceiling.sql`: the
//! claim's turn and lease (per-key order, busy keys skipped) and the delete, as plain SQL, plus a
//! bare claim-and-delete for reference. Publishing is a no-op.
//!
//! Shapes: (a) 100 000 rows over 1 000 keys; (b) one hot key of 10 000 rows. Drainers stand for
//! concurrent `outbox` invocations: each is woken, runs one pass (claims until a claim comes back
//! empty) and ends; the wake-ups repeat while rows are left. Two drainers are compared with two
//! ceiling connections driven the same way. Every figure is the median of `K2B_BENCH_RUNS` runs
//! (default 5); each ratio is the median of the ratios within each run. Every measurement starts
//! after a fresh fill and a checkpoint. Goals: engine >= 0.80 of the ceiling; two drainers >= one
//! drainer on every shape.
//!
//! Run: `cargo bench -p k2b-tests --bench outbox`.

use std::sync::Arc;
use std::time::Instant;

use futures::FutureExt;
use futures::future::BoxFuture;
use k2b_core::outbox::{Outbox, OutboxConfig, OutboxRow, PublishError, Publisher};
use k2b_tests::figures::median;
use k2b_tests::{TestDb, pool_with_max};
use sqlx::{PgPool, Row};
use uuid::Uuid;

struct NoOp;

impl Publisher for NoOp {
    fn publish<'a>(&'a self, _: &'a OutboxRow) -> BoxFuture<'a, Result<(), PublishError>> {
        async { Ok(()) }.boxed()
    }
}

const TABLE: &str = "bench.outbox";
const BATCH: i64 = 100;
const LEASE_SECONDS: f64 = 30.0;
const CEILING_SQL: &str = include_str!("../../infra/bench/outbox_ceiling.sql");

/// The ceiling's statements, by their `-- @name` sections.
struct Ceiling {
    turn: String,
    lease: String,
    delete: String,
    bare: String,
}

impl Ceiling {
    fn parse() -> Ceiling {
        let mut sections: Vec<(String, String)> = Vec::new();
        for line in CEILING_SQL.lines() {
            if let Some(name) = line.strip_prefix("-- @") {
                let name = name
                    .split(':')
                    .next()
                    .unwrap_or_default()
                    .trim()
                    .to_string();
                sections.push((name, String::new()));
            } else if !line.trim_start().starts_with("--")
                && let Some((_, text)) = sections.last_mut()
            {
                text.push_str(line);
                text.push('\n');
            }
        }
        let take = |name: &str| -> String {
            let text = sections
                .iter()
                .find(|(section, _)| section == name)
                .map(|(_, text)| text.trim().trim_end_matches(';').to_string())
                .unwrap_or_else(|| panic!("outbox_ceiling.sql has no @{name} section"));
            text.replace("{table}", TABLE)
        };
        Ceiling {
            turn: take("turn"),
            lease: take("lease"),
            delete: take("delete"),
            bare: take("bare"),
        }
    }
}

async fn fill(pool: &PgPool, rows: i64, keys: i64) {
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

/// Fills the outbox and writes the fill out to disk, so no measurement meets a checkpoint of
/// another's writes. `CHECKPOINT` needs a superuser or `pg_checkpoint`; without either the
/// measurement goes on as it is.
async fn settle(pool: &PgPool, rows: i64, keys: i64) {
    fill(pool, rows, keys).await;
    if let Err(error) = sqlx::query("CHECKPOINT").execute(pool).await {
        eprintln!("no CHECKPOINT before the measurement: {error}");
    }
}

async fn left(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM bench.outbox")
        .fetch_one(pool)
        .await
        .expect("count")
}

/// One ceiling pass on one connection: batches until a lease comes back empty.
async fn ceiling_pass(pool: PgPool, ceiling: Arc<Ceiling>) -> u64 {
    let mut conn = pool.acquire().await.expect("connection");
    let mut deleted = 0u64;
    loop {
        let mut tx = sqlx::Connection::begin(&mut *conn).await.expect("begin");
        sqlx::query(sqlx::AssertSqlSafe(ceiling.turn.clone()))
            .execute(&mut *tx)
            .await
            .expect("turn");
        let rows = sqlx::query(sqlx::AssertSqlSafe(ceiling.lease.clone()))
            .bind(BATCH)
            .bind(LEASE_SECONDS)
            .fetch_all(&mut *tx)
            .await
            .expect("lease");
        tx.commit().await.expect("commit");
        if rows.is_empty() {
            return deleted;
        }
        let ids: Vec<Uuid> = rows.iter().map(|row| row.get("id")).collect();
        deleted += sqlx::query(sqlx::AssertSqlSafe(ceiling.delete.clone()))
            .bind(&ids)
            .execute(&mut *conn)
            .await
            .expect("delete")
            .rows_affected();
    }
}

/// One engine pass of a drainer of its own (its own pass state, as its own invocation).
async fn engine_pass(outbox: Arc<Outbox>) -> u64 {
    outbox.reconcile().await.expect("pass")
}

/// Wakes `workers` passes at once, again while rows are left; returns rows/s.
async fn rounds<F, Fut>(pool: &PgPool, rows: i64, workers: usize, pass: F) -> f64
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = u64> + Send + 'static,
{
    let started = Instant::now();
    let mut handled = 0u64;
    loop {
        let tasks: Vec<_> = (0..workers)
            .map(|worker| tokio::spawn(pass(worker)))
            .collect();
        for task in tasks {
            handled += task.await.expect("join");
        }
        if left(pool).await == 0 {
            break;
        }
    }
    assert_eq!(handled as i64, rows, "every row handled once");
    rows as f64 / started.elapsed().as_secs_f64()
}

async fn bare(pool: &PgPool, rows: i64, ceiling: &Ceiling) -> f64 {
    let mut conn = pool.acquire().await.expect("connection");
    let started = Instant::now();
    let mut deleted = 0u64;
    loop {
        let result = sqlx::query(sqlx::AssertSqlSafe(ceiling.bare.clone()))
            .execute(&mut *conn)
            .await
            .expect("bare delete");
        if result.rows_affected() == 0 {
            break;
        }
        deleted += result.rows_affected();
    }
    assert_eq!(deleted as i64, rows);
    rows as f64 / started.elapsed().as_secs_f64()
}

async fn setting(pool: &PgPool, name: &str) -> String {
    sqlx::query_scalar("SELECT current_setting($1)")
        .bind(name)
        .fetch_one(pool)
        .await
        .expect("setting")
}

fn main() {
    let runs: usize = std::env::var("K2B_BENCH_RUNS")
        .ok()
        .and_then(|value| value.parse().ok())
        .filter(|runs| *runs > 0)
        .unwrap_or(5);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let db = TestDb::new().await;
        let pool = pool_with_max(&db, 6).await;
        sqlx::raw_sql(
            "CREATE SCHEMA bench;
             CREATE TABLE bench.outbox (
               seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
               id uuid NOT NULL UNIQUE DEFAULT gen_random_uuid(),
               ordering_key text NOT NULL,
               payload jsonb NOT NULL DEFAULT '{\"type\":\"bench\"}',
               created_at timestamptz NOT NULL DEFAULT now(),
               attempts integer NOT NULL DEFAULT 0,
               next_attempt_at timestamptz NOT NULL DEFAULT now(),
               claimed_until timestamptz,
               last_error text);
             CREATE INDEX outbox_busy ON bench.outbox (ordering_key)
               WHERE claimed_until IS NOT NULL OR attempts > 0;",
        )
        .execute(&pool)
        .await
        .expect("schema");
        let ceiling = Arc::new(Ceiling::parse());
        let drainers: Vec<Arc<Outbox>> = (0..2)
            .map(|_| {
                Arc::new(
                    Outbox::new(
                        pool.clone(),
                        OutboxConfig::new(TABLE, "bench", "ordering_key", "seq"),
                        Arc::new(NoOp),
                    )
                    .expect("outbox"),
                )
            })
            .collect();

        println!("== outbox drain benchmarks (no-op publish, one process) ==");
        println!(
            "server: {}; fsync={}, synchronous_commit={}; {} cores; median of {runs} runs",
            setting(&pool, "server_version").await,
            setting(&pool, "fsync").await,
            setting(&pool, "synchronous_commit").await,
            std::thread::available_parallelism().map_or(0, |n| n.get()),
        );
        for (label, rows, keys) in [
            ("(a) 100000 rows over 1000 keys", 100_000i64, 1_000i64),
            ("(b) one hot key of 10000 rows", 10_000, 1),
        ] {
            // Figures by slot: bare, ceiling with 1 and 2 connections, engine with 1 and 2
            // drainers.
            let mut figures: [Vec<f64>; 5] = Default::default();
            for run in 0..runs {
                settle(&pool, rows, keys).await;
                figures[0].push(bare(&pool, rows, &ceiling).await);
                // The four cases take turns at going first, each engine case beside the ceiling
                // case it is compared with, so no case gains from the others' effect on the
                // server (its caches, its WAL, autovacuum).
                let mut order = [1usize, 3, 2, 4];
                order.rotate_left(run % 4);
                if run % 2 == 1 {
                    order.reverse();
                }
                for slot in order {
                    settle(&pool, rows, keys).await;
                    let (engine, workers) = (slot > 2, (slot - 1) % 2 + 1);
                    let figure = if !engine {
                        let (pool_for, ceiling_for) = (pool.clone(), ceiling.clone());
                        rounds(&pool, rows, workers, move |_| {
                            ceiling_pass(pool_for.clone(), ceiling_for.clone())
                        })
                        .await
                    } else {
                        let drainers = drainers.clone();
                        rounds(&pool, rows, workers, move |worker| {
                            engine_pass(drainers[worker].clone())
                        })
                        .await
                    };
                    figures[slot].push(figure);
                }
            }
            // Ratios are taken within each run, between figures measured seconds apart,
            // and their median printed: the server's speed drifts between runs more than the
            // cases differ.
            let paired = |top: usize, bottom: usize| -> f64 {
                median(
                    &figures[top]
                        .iter()
                        .zip(&figures[bottom])
                        .map(|(top, bottom)| top / bottom)
                        .collect::<Vec<_>>(),
                )
            };
            let (engine1_ratio, engine2_ratio, concurrency) =
                (paired(3, 1), paired(4, 2), paired(4, 3));
            let ceiling_concurrency = paired(2, 1);
            let [bare, ceiling1, ceiling2, engine1, engine2] = figures.map(|values| median(&values));
            println!("{label}:");
            println!("  bare claim+delete (reference), 1 connection: {bare:>8.0} rows/s");
            println!("  honest ceiling, 1 connection:                {ceiling1:>8.0} rows/s");
            println!(
                "  honest ceiling, 2 connections:               {ceiling2:>8.0} rows/s  (2 / 1: {ceiling_concurrency:.2})"
            );
            println!(
                "  outbox engine, 1 drainer:                    {engine1:>8.0} rows/s  (ratio {engine1_ratio:.2} of the 1-connection ceiling; goal >= 0.80)"
            );
            println!(
                "  outbox engine, 2 drainers:                   {engine2:>8.0} rows/s  (ratio {engine2_ratio:.2} of the 2-connection ceiling; goal >= 0.80)"
            );
            println!("  2 drainers / 1 drainer: {concurrency:.2} (goal >= 1.00)");
        }
    });
}
