//! Live updates from a writer outside this bundle (figures, no assertions): the `outbox`
//! function's binary (bench profile) runs its scheduled event under the emulated Runtime API with
//! the template's environment, following the live outboxes for `FOLLOW_SECONDS`; meanwhile a
//! writer that only runs SQL commits `ROWS` live updates, one transaction each, over `KEYS`
//! keys, and a consumer long-polls the live queue (moto). Nothing sends a wake-up message.
//!
//! Figure: commit → received by the consumer, p50 and p99 (goals ≤ 1.5 s and ≤ 3 s). It includes
//! moto's FIFO send and the consumer's long poll, which on AWS take milliseconds too.
//!
//! Run: `cargo bench -p k2b-tests --bench live_follow` (builds the binaries in the bench profile;
//! needs moto like the tests).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use aws_sdk_sqs::types::DeleteMessageBatchRequestEntry;
use k2b_tests::figures::{ms, percentile};
use k2b_tests::lambda::scheduled_event;
use k2b_tests::lambda::stack::Stack;
use serde_json::Value;

const ROWS: i64 = 200;
const KEYS: i64 = 10;
/// Between two commits of the writer.
const INTERVAL: Duration = Duration::from_millis(120);
const FOLLOW_SECONDS: &str = "40";
const P50_GOAL_MS: f64 = 1500.0;
const P99_GOAL_MS: f64 = 3000.0;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    println!(
        "== live follow: {ROWS} rows committed by plain SQL ({} ms apart, {KEYS} keys) while the outbox's scheduled run follows ==",
        INTERVAL.as_millis()
    );
    let stack = Stack::with_queues().await;
    let schedule = stack.deployment.function("outbox").schedules[0].clone();
    let mut function = stack
        .start_overriding("outbox", &[("K2B_OUTBOX_FOLLOW_SECONDS", FOLLOW_SECONDS)])
        .await;
    let client = stack.moto.as_ref().expect("moto").client();
    let live_url = stack.values["LiveQueue"].clone();
    let committed: Mutex<HashMap<i64, Instant>> = Mutex::new(HashMap::new());
    let mut latencies = Vec::new();

    let writer = async {
        // The run is listening once its sweep is done; give it its start.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let mut conn = stack.db.pool.acquire().await.expect("connection");
        for n in 0..ROWS {
            // Just before the commit (autocommit): the row cannot be received earlier.
            committed.lock().expect("lock").insert(n, Instant::now());
            sqlx::query(
                "SELECT events.enqueue(gen_random_uuid(), 'ext', 'live', 'k' || ($1 % $2)::text,
                                       jsonb_build_object('n', $1))",
            )
            .bind(n)
            .bind(KEYS)
            .execute(&mut *conn)
            .await
            .expect("enqueue");
            tokio::time::sleep(INTERVAL).await;
        }
    };
    let consumer = async {
        let started = Instant::now();
        while latencies.len() < ROWS as usize && started.elapsed() < Duration::from_secs(60) {
            let batch = client
                .receive_message()
                .queue_url(&live_url)
                .max_number_of_messages(10)
                .wait_time_seconds(1)
                .send()
                .await
                .expect("receive");
            let received = Instant::now();
            let mut entries = Vec::new();
            for (i, message) in batch.messages().iter().enumerate() {
                let n = message
                    .body()
                    .and_then(|b| serde_json::from_str::<Value>(b).ok())
                    .and_then(|v| v["n"].as_i64());
                if let Some(at) = n.and_then(|n| committed.lock().expect("lock").get(&n).copied()) {
                    latencies.push(ms(received.saturating_duration_since(at)));
                }
                if let Some(handle) = message.receipt_handle() {
                    entries.push(
                        DeleteMessageBatchRequestEntry::builder()
                            .id(i.to_string())
                            .receipt_handle(handle)
                            .build()
                            .expect("entry"),
                    );
                }
            }
            if !entries.is_empty() {
                client
                    .delete_message_batch()
                    .queue_url(&live_url)
                    .set_entries(Some(entries))
                    .send()
                    .await
                    .expect("delete");
            }
        }
    };
    let (outcome, (), ()) = tokio::join!(
        function.invoke(scheduled_event(&schedule)),
        writer,
        consumer
    );
    let report = outcome.response();
    let wakeups = client
        .get_queue_attributes()
        .queue_url(&stack.values["WakeupQueue"])
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages)
        .send()
        .await
        .expect("attributes");
    if latencies.is_empty() {
        println!("no row received: {report}\n{}", function.output());
        return;
    }
    latencies.sort_by(f64::total_cmp);
    let p50 = percentile(&latencies, 50.0);
    let p99 = percentile(&latencies, 99.0);
    println!("received {} of {ROWS} rows", latencies.len());
    println!(
        "commit -> received: p50 {p50:.0} ms (goal <= {P50_GOAL_MS:.0}), p99 {p99:.0} ms (goal <= {P99_GOAL_MS:.0}), max {:.0} ms",
        latencies.last().copied().unwrap_or(f64::NAN)
    );
    println!("run's report: {}", report["followed"]);
    println!(
        "wake-up messages sent: {}",
        wakeups
            .attributes()
            .and_then(
                |a| a.get(&aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages)
            )
            .map(String::as_str)
            .unwrap_or("?")
    );
}
