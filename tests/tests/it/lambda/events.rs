//! The event functions under the events their triggers send: an SQS batch from the wake-up
//! queue's event source mapping (with a malformed message and a pass that fails), and the
//! EventBridge `Scheduled Event` envelopes of every schedule of the template.

use aws_sdk_sqs::types::MessageSystemAttributeName;
use k2b_core::outbox::OutboxRef;
use k2b_core::outbox::live::enqueue_live;
use k2b_core::registry::{APP_REGISTRY_TTL, store};
use k2b_tests::lambda::{scheduled_event, sqs_batch};
use serde_json::{Value, json};

use super::Stack;

/// Writes one live update of `app` and commits it.
async fn enqueue(stack: &Stack, app: &str, key: &str) {
    let mut conn = stack.core.pool.acquire().await.expect("connection");
    enqueue_live(&mut conn, app, key, json!({"n": 1}), None)
        .await
        .expect("enqueue");
}

async fn rows_of(stack: &Stack, app: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM events.outbox WHERE app_id = $1")
        .bind(app)
        .fetch_one(&stack.db.pool)
        .await
        .expect("count")
}

/// The messages in a queue (group ids), received and deleted.
async fn received(stack: &Stack, queue: &str) -> Vec<String> {
    let client = stack.moto.as_ref().expect("queues").client();
    let url = &stack.values[queue];
    let mut groups = Vec::new();
    for _ in 0..5 {
        let batch = client
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .message_system_attribute_names(MessageSystemAttributeName::MessageGroupId)
            .wait_time_seconds(1)
            .send()
            .await
            .expect("receive");
        let messages = batch.messages();
        if messages.is_empty() {
            break;
        }
        for message in messages {
            if let Some(group) = message
                .attributes()
                .and_then(|a| a.get(&MessageSystemAttributeName::MessageGroupId))
            {
                groups.push(group.clone());
            }
            client
                .delete_message()
                .queue_url(url)
                .receipt_handle(message.receipt_handle().unwrap_or_default())
                .send()
                .await
                .expect("delete");
        }
    }
    groups
}

/// A batch naming two outboxes and carrying one unreadable body: the pass of `broken` fails in
/// the database (its rows cannot be deleted), so exactly its message comes back; the malformed
/// one is dropped (it could never succeed), the `good` outbox is published and emptied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sqs_batch_reports_exactly_the_failed_pass() {
    let stack = Stack::with_queues().await;
    let outbox = stack.deployment.function("outbox");
    let trigger = outbox.queues.first().expect("an SQS trigger");
    assert_eq!(trigger.queue, "WakeupQueue");
    assert_eq!(trigger.response_types, ["ReportBatchItemFailures"]);
    // Never more batches at once than the function may run beside its sweeps: a throttled
    // batch goes back to the queue and counts toward the dead-letter queue.
    let reserved = outbox.reserved_concurrency.expect("a reserved concurrency");
    let pollers = trigger.maximum_concurrency.expect("a MaximumConcurrency");
    assert!((2..=reserved).contains(&pollers), "{pollers} of {reserved}");
    let sweeps = outbox.timeout.div_ceil(60);
    assert!(
        pollers + sweeps <= reserved,
        "{pollers} + {sweeps} sweeps > {reserved}"
    );
    sqlx::raw_sql(
        "CREATE FUNCTION public.refuse_delete() RETURNS trigger LANGUAGE plpgsql AS
           $$ BEGIN RAISE EXCEPTION 'this outbox cannot be emptied'; END $$;
         CREATE TRIGGER refuse_broken BEFORE DELETE ON events.outbox
           FOR EACH ROW WHEN (OLD.app_id = 'broken') EXECUTE FUNCTION public.refuse_delete();",
    )
    .execute(&stack.db.pool)
    .await
    .expect("trigger");
    enqueue(&stack, "good", "k1").await;
    enqueue(&stack, "broken", "k1").await;

    let mut function = stack.start("outbox").await;
    let good = OutboxRef::live("good").to_message();
    let broken = OutboxRef::live("broken").to_message();
    let (event, ids) = sqs_batch(
        &trigger.queue,
        &[&good, &broken, "{\"not\": \"an outbox\"}"],
    );
    let response = function.invoke(event).await.response();
    assert_eq!(
        response,
        json!({"batchItemFailures": [{"itemIdentifier": ids[1]}]}),
        "{}",
        function.output()
    );
    assert_eq!(rows_of(&stack, "good").await, 0);
    assert_eq!(rows_of(&stack, "broken").await, 1);
    let groups = received(&stack, "LiveQueue").await;
    assert!(groups.contains(&"good:k1".to_string()), "{groups:?}");
    assert!(
        function
            .output()
            .contains("malformed outbox wake-up ignored")
    );
}

/// Every schedule of the template, as its rule delivers it, runs its function's work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_schedule_runs_its_function() {
    let stack = Stack::with_queues().await;
    // Work for each: a purpose without keys, an expired registry entry, a live update.
    sqlx::query("DELETE FROM auth.signing_keys WHERE purpose = 'oauth'")
        .execute(&stack.db.pool)
        .await
        .expect("delete keys");
    let mut conn = stack.core.pool.acquire().await.expect("connection");
    store::upsert(
        &mut conn,
        &json!({"id": "gone", "name": "Gone", "icon": "ti ti-apps", "description": "Gone",
                "baseUrl": "https://gone.example.test", "routes": ["/app/gone"]}),
        APP_REGISTRY_TTL,
    )
    .await
    .expect("register");
    drop(conn);
    sqlx::query(
        "UPDATE registry.apps SET updated_at = now() - interval '2 hours',
                expires_at = now() - interval '1 hour' WHERE app_id = 'gone'",
    )
    .execute(&stack.db.pool)
    .await
    .expect("expire");
    enqueue(&stack, "good", "k2").await;

    let mut ran = Vec::new();
    for function in stack.deployment.functions.values() {
        for schedule in &function.schedules {
            let event = scheduled_event(schedule);
            assert_eq!(event["detail-type"], "Scheduled Event");
            // The outbox's run is its sweep only here (following is tested on its own).
            let mut process = stack
                .start_overriding(&function.binary, &[("K2B_OUTBOX_FOLLOW_SECONDS", "0")])
                .await;
            let report: Value = process.invoke(event).await.response();
            match function.binary.as_str() {
                "keys" => {
                    assert_eq!(report["failed"], json!([]), "{report}");
                    let purposes = report["purposes"].as_object().expect("purposes");
                    assert_eq!(purposes.len(), 3, "{report}");
                    let active: i64 = sqlx::query_scalar(
                        "SELECT count(*) FROM auth.signing_keys
                         WHERE purpose = 'oauth' AND state = 'active'",
                    )
                    .fetch_one(&stack.db.pool)
                    .await
                    .expect("count");
                    assert_eq!(active, 1, "the first run made an active key");
                }
                "maintenance" => assert_eq!(report["registry_pruned"], 1, "{report}"),
                "outbox" => {
                    assert_eq!(report["drained"], 1, "{report}");
                    assert_eq!(received(&stack, "LiveQueue").await, ["good:k2"]);
                }
                other => panic!("a schedule of {other}, which this test does not know"),
            }
            ran.push(function.binary.clone());
        }
    }
    ran.sort();
    assert_eq!(ran, ["keys", "maintenance", "outbox"]);
}

/// A live update from a writer that only runs SQL (another app's transaction, no wake-up
/// message) reaches the live queue during the schedule's run: the run listens before its sweep
/// and follows the live outboxes afterwards, so the row does not wait for the next minute.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_committed_by_plain_sql_is_published_while_the_run_follows() {
    let stack = Stack::with_queues().await;
    let schedule = stack.deployment.function("outbox").schedules[0].clone();
    // A row for the sweep: once it is gone, the run is following.
    enqueue(&stack, "ext", "before").await;
    let mut function = stack
        .start_overriding("outbox", &[("K2B_OUTBOX_FOLLOW_SECONDS", "8")])
        .await;
    let writer = async {
        let waited = std::time::Instant::now();
        while rows_of(&stack, "ext").await > 0 {
            assert!(waited.elapsed().as_secs() < 20, "the sweep never ran");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        // SQL only, on the test's own connection.
        let mut conn = stack.db.pool.acquire().await.expect("connection");
        sqlx::query(
            "SELECT events.enqueue(gen_random_uuid(), 'ext', 'live', 'after', '{\"n\": 2}'::jsonb)",
        )
        .execute(&mut *conn)
        .await
        .expect("enqueue");
        let committed = std::time::Instant::now();
        let mut groups = Vec::new();
        while !groups.contains(&"ext:after".to_string()) {
            assert!(
                committed.elapsed().as_secs() < 6,
                "not published during the run: {groups:?}"
            );
            groups.extend(received(&stack, "LiveQueue").await);
        }
        (committed.elapsed(), groups)
    };
    let (outcome, (latency, groups)) =
        tokio::join!(function.invoke(scheduled_event(&schedule)), writer);
    let report = outcome.response();
    println!("plain SQL commit -> live queue: {latency:?}");
    assert_eq!(
        report["drained"], 1,
        "the sweep took the first row: {report}"
    );
    let followed = &report["followed"];
    assert!(followed["notifications"].as_u64() >= Some(1), "{report}");
    assert_eq!(
        followed["drained"], 1,
        "the followed pass published the SQL row: {report}"
    );
    assert_eq!(followed["failed"], 0, "{report}");
    assert!(groups.contains(&"ext:before".to_string()), "{groups:?}");
    assert_eq!(rows_of(&stack, "ext").await, 0);
    // Nothing asked for it: no wake-up message was sent.
    assert!(received(&stack, "WakeupQueue").await.is_empty());
}
