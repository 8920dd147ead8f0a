//! Live-update publishing (figures, no assertions): one app's live outbox of 10,000 rows over 100
//! keys, drained once by the batched publisher (`SqsLivePublisher`, `SendMessageBatch`) and once
//! by one `SendMessage` per row (the publisher before batching, kept here for the comparison),
//! each into a fresh FIFO queue of moto (`K2B_TEST_SQS_ENDPOINT`, or one started here). Calls are
//! counted at a proxy in front of moto, and so are the messages the queue accepted. The queue is
//! created as the template creates the live queue (high-throughput FIFO: deduplication and
//! throughput per message group). It is emptied during the run: moto's sends and receives each
//! scan the queue's messages (a receive several times per message it returns), so a queue that
//! grows slows every later call, and receiving consumers fall behind the publisher's concurrent
//! calls for good (seen here: 10 rows/s with eight of them, the queue ever longer). So the drain
//! is moto's `PurgeQueue` every [`PURGE_EVERY`], which moto does at once; a progress line every
//! [`PROGRESS_EVERY`] shows the run moving. Order per group, deduplication by row id and partial
//! batch failures are the tests' (`outbox::sqs_batch`), against moto too.
//!
//! SQS calls per row is the figure that carries over to AWS (calls are what SQS bills and
//! throttles); rows/s is moto's speed on this machine, not SQS's. Moto answers a FIFO send in
//! tens of milliseconds, so the outbox's publish bound is raised here: a publish that timed out
//! would be retried and count extra calls.
//!
//! Run: `cargo bench -p k2b-tests --bench live_publish` (`K2B_BENCH_LIVE_ROWS` changes the
//! 10,000 rows).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use aws_sdk_sqs::types::QueueAttributeName;
use futures::FutureExt;
use futures::future::BoxFuture;
use k2b_core::outbox::live::{LiveEvent, SqsLivePublisher, live_config, message_group_id};
use k2b_core::outbox::{Outbox, OutboxRow, PublishError, Publisher};
use k2b_tests::sqsfault::SqsFaultProxy;
use k2b_tests::{Moto, TestDb};
use uuid::Uuid;

const DEFAULT_ROWS: i64 = 10_000;
const KEYS: i64 = 100;
const APP: &str = "bench";
/// Bound on one publish: far above moto's slowest answer, so no publish is retried.
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(300);
/// How often the queue is emptied during a run.
const PURGE_EVERY: Duration = Duration::from_millis(100);
/// How often a drain prints its progress.
const PROGRESS_EVERY: Duration = Duration::from_secs(30);

fn rows() -> i64 {
    std::env::var("K2B_BENCH_LIVE_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_ROWS)
}

/// One `SendMessage` per row: the live publisher before batching.
struct PerRow {
    client: aws_sdk_sqs::Client,
    queue_url: String,
}

impl Publisher for PerRow {
    fn publish<'a>(&'a self, row: &'a OutboxRow) -> BoxFuture<'a, Result<(), PublishError>> {
        async move {
            let event = LiveEvent::from_row(row)?;
            self.client
                .send_message()
                .queue_url(&self.queue_url)
                .message_body(event.payload.to_string())
                .message_group_id(message_group_id(&event.app_id, &event.ordering_key))
                .message_deduplication_id(event.id.to_string())
                .send()
                .await
                .map_err(|e| {
                    PublishError(aws_sdk_sqs::error::DisplayErrorContext(&e).to_string())
                })?;
            Ok(())
        }
        .boxed()
    }
}

#[derive(Clone, Copy)]
enum Mode {
    Batched,
    PerRow,
}

struct Figures {
    calls_per_row: f64,
    rows_per_second: f64,
}

/// Writes the rows, interleaved over the keys like concurrent writers (one statement).
async fn fill(pool: &sqlx::PgPool, rows: i64) {
    sqlx::query(
        "SELECT events.enqueue(gen_random_uuid(), $1, 'live', 'k' || (i % $3),
                               jsonb_build_object('v', 1, 'k', 'k' || (i % $3),
                                                  'd', jsonb_build_object('n', i / $3)), NULL)
         FROM generate_series(0, $2 - 1) AS i",
    )
    .bind(APP)
    .bind(rows)
    .bind(KEYS)
    .execute(pool)
    .await
    .expect("fill");
}

/// Empties the queue every [`PURGE_EVERY`] until `stop` is set.
async fn purge(client: aws_sdk_sqs::Client, url: String, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::SeqCst) {
        client
            .purge_queue()
            .queue_url(&url)
            .send()
            .await
            .expect("purge");
        tokio::time::sleep(PURGE_EVERY).await;
    }
}

/// Prints how far a drain is every [`PROGRESS_EVERY`] (a long run shows it is moving).
async fn report_progress(pool: sqlx::PgPool, rows: i64, proxy: Arc<SqsFaultProxy>) {
    let started = Instant::now();
    loop {
        tokio::time::sleep(PROGRESS_EVERY).await;
        let left: i64 = sqlx::query_scalar("SELECT count(*) FROM events.outbox")
            .fetch_one(&pool)
            .await
            .unwrap_or(-1);
        println!(
            "  after {:>4.0} s: {} of {rows} rows published, {} messages accepted",
            started.elapsed().as_secs_f64(),
            rows - left,
            proxy.accepted()
        );
    }
}

async fn run(db: &TestDb, moto: &Moto, mode: Mode, rows: i64) -> Figures {
    let client = moto.client();
    let suffix = Uuid::new_v4().simple().to_string();
    let queue_url = client
        .create_queue()
        .queue_name(format!("live-{suffix}.fifo"))
        .attributes(QueueAttributeName::FifoQueue, "true")
        .attributes(QueueAttributeName::DeduplicationScope, "messageGroup")
        .attributes(QueueAttributeName::FifoThroughputLimit, "perMessageGroupId")
        .send()
        .await
        .expect("create queue")
        .queue_url()
        .expect("queue url")
        .to_string();
    let proxy = Arc::new(SqsFaultProxy::start(&moto.endpoint).await);
    let publisher: Arc<dyn Publisher> = match mode {
        Mode::Batched => Arc::new(SqsLivePublisher::with_client(
            queue_url.clone(),
            proxy.client(&client),
        )),
        Mode::PerRow => Arc::new(PerRow {
            client: proxy.client(&client),
            queue_url: queue_url.clone(),
        }),
    };
    let mut config = live_config(APP);
    config.publish_timeout = PUBLISH_TIMEOUT;
    let outbox = Arc::new(Outbox::new(db.pool.clone(), config, publisher).expect("outbox"));
    fill(&db.pool, rows).await;
    let stop = Arc::new(AtomicBool::new(false));
    let purger = tokio::spawn(purge(client.clone(), queue_url, stop.clone()));
    let progress = tokio::spawn(report_progress(db.pool.clone(), rows, proxy.clone()));

    let started = Instant::now();
    let mut handled = 0;
    // A failed publish waits for its retry; the passes repeat until every row is out.
    while handled < rows as u64 {
        handled += outbox.reconcile().await.expect("pass");
        let left: i64 = sqlx::query_scalar("SELECT count(*) FROM events.outbox")
            .fetch_one(&db.pool)
            .await
            .expect("count");
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let seconds = started.elapsed().as_secs_f64();
    progress.abort();
    stop.store(true, Ordering::SeqCst);
    purger.await.expect("purger");
    let accepted = proxy.accepted();
    if accepted != rows as usize {
        println!("  (the queue accepted {accepted} messages, not {rows})");
    }
    let calls = proxy.calls("SendMessageBatch") + proxy.calls("SendMessage");
    Figures {
        calls_per_row: calls as f64 / rows as f64,
        rows_per_second: rows as f64 / seconds,
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let rows = rows();
    println!(
        "== live publish: {rows} rows over {KEYS} keys, one drain each, into a moto FIFO queue =="
    );
    println!(
        "SQS calls per row is the figure that carries over to AWS; rows/s is moto's speed on this machine, not SQS's."
    );
    let db = TestDb::new().await;
    let moto = Moto::start();
    let batched = run(&db, &moto, Mode::Batched, rows).await;
    println!(
        "batched (SendMessageBatch):  {:.3} SQS calls/row, {:.0} rows/s",
        batched.calls_per_row, batched.rows_per_second
    );
    let per_row = run(&db, &moto, Mode::PerRow, rows).await;
    println!(
        "per row (SendMessage):       {:.3} SQS calls/row, {:.0} rows/s",
        per_row.calls_per_row, per_row.rows_per_second
    );
    println!(
        "batched / per row:           calls/row {:.3}, rows/s {:.2}",
        batched.calls_per_row / per_row.calls_per_row,
        batched.rows_per_second / per_row.rows_per_second
    );
}
