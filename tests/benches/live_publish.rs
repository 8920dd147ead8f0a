//! Live-update publishing (figures, no assertions): one app's live outbox of 10,000 rows over 100
//! keys, drained once by the batched publisher (`SqsLivePublisher`, `SendMessageBatch`) and once
//! by one `SendMessage` per row (the publisher before batching, kept here for the comparison),
//! each into a fresh FIFO queue of moto (`K2B_TEST_SQS_ENDPOINT`, or one started here). Calls are
//! counted at a proxy in front of moto. A consumer drains the queue during the run: moto's FIFO
//! send scans the queue's messages, so a queue left to grow would slow the later sends.
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

use aws_sdk_sqs::types::DeleteMessageBatchRequestEntry;
use futures::FutureExt;
use futures::future::BoxFuture;
use k2b_core::outbox::live::{LiveEvent, SqsLivePublisher, live_config, message_group_id};
use k2b_core::outbox::{Outbox, OutboxRow, PublishError, Publisher};
use k2b_tests::lambda::stack::create_queue;
use k2b_tests::sqsfault::SqsFaultProxy;
use k2b_tests::{Moto, TestDb};
use uuid::Uuid;

const DEFAULT_ROWS: i64 = 10_000;
const KEYS: i64 = 100;
const APP: &str = "bench";
/// Bound on one publish: far above moto's slowest answer, so no publish is retried.
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(300);
/// The consumer's long poll, in seconds: an empty queue is not polled in a busy loop.
const RECEIVE_WAIT_SECONDS: i32 = 1;

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

/// Receives and deletes messages until `stop` is set and the queue is empty; returns how many.
async fn consume(client: aws_sdk_sqs::Client, url: String, stop: Arc<AtomicBool>) -> usize {
    let mut received = 0;
    loop {
        let stopping = stop.load(Ordering::SeqCst);
        let answer = client
            .receive_message()
            .queue_url(&url)
            .max_number_of_messages(10)
            .wait_time_seconds(RECEIVE_WAIT_SECONDS)
            .send()
            .await
            .expect("receive");
        let messages = answer.messages();
        if messages.is_empty() {
            if stopping {
                return received;
            }
            continue;
        }
        received += messages.len();
        let entries = messages
            .iter()
            .enumerate()
            .map(|(index, message)| {
                DeleteMessageBatchRequestEntry::builder()
                    .id(index.to_string())
                    .receipt_handle(message.receipt_handle().unwrap_or_default())
                    .build()
                    .expect("delete entry")
            })
            .collect::<Vec<_>>();
        client
            .delete_message_batch()
            .queue_url(&url)
            .set_entries(Some(entries))
            .send()
            .await
            .expect("delete");
    }
}

async fn run(db: &TestDb, moto: &Moto, mode: Mode, rows: i64) -> Figures {
    let client = moto.client();
    let suffix = Uuid::new_v4().simple().to_string();
    let queue_url = create_queue(&client, &format!("live-{suffix}.fifo"), true).await;
    let proxy = SqsFaultProxy::start(&moto.endpoint).await;
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
    let consumer = tokio::spawn(consume(client.clone(), queue_url, stop.clone()));

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
    stop.store(true, Ordering::SeqCst);
    let received = consumer.await.expect("consumer");
    if received != rows as usize {
        println!("  (the consumer received {received} messages, not {rows})");
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
