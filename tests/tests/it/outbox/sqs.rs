//! End to end with the real SQS API (moto): rows written in a transaction → a wake-up message →
//! the `outbox` function's handler fed that SQS event → live updates in the FIFO queue with the
//! right group and deduplication ids; a pass that fails reports exactly its messages.

use std::sync::Arc;

use aws_sdk_sqs::types::{MessageSystemAttributeName, QueueAttributeName};
use futures::FutureExt;
use futures::future::BoxFuture;
use k2b_core::outbox::live::{LiveOutboxes, SqsLivePublisher, enqueue_live, message_group_id};
use k2b_core::outbox::{
    Drainer, Outbox, OutboxConfig, OutboxError, OutboxRef, OutboxResolver, SqsWakeups, Wakeups,
};
use k2b_tests::lambda::stack::create_queue;
use k2b_tests::{Moto, TestDb};
use serde_json::{Value, json};

/// Receives every message of a queue (with its system attributes).
async fn drain_queue(client: &aws_sdk_sqs::Client, url: &str) -> Vec<aws_sdk_sqs::types::Message> {
    let mut messages = Vec::new();
    for _ in 0..20 {
        let received = client
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .wait_time_seconds(1)
            .send()
            .await
            .expect("receive");
        let batch = received.messages().to_vec();
        if batch.is_empty() {
            break;
        }
        for message in &batch {
            client
                .delete_message()
                .queue_url(url)
                .receipt_handle(message.receipt_handle().expect("handle"))
                .send()
                .await
                .expect("delete");
        }
        messages.extend(batch);
    }
    messages
}

/// The Lambda event SQS would deliver for these messages.
fn sqs_event(messages: &[(String, String)]) -> Value {
    json!({
        "Records": messages.iter().map(|(id, body)| json!({
            "messageId": id,
            "receiptHandle": "handle",
            "body": body,
            "attributes": {},
            "messageAttributes": {},
            "md5OfBody": "",
            "eventSource": "aws:sqs",
            "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:wakeups",
            "awsRegion": "us-east-1"
        })).collect::<Vec<_>>()
    })
}

/// An outbox whose table does not exist: its passes fail on the database.
struct Broken {
    pool: sqlx::PgPool,
}

impl OutboxResolver for Broken {
    fn pass(
        &self,
        target: &OutboxRef,
        deadline: Option<tokio::time::Instant>,
    ) -> Option<BoxFuture<'_, Result<u64, Arc<OutboxError>>>> {
        if target.table != "inventory.missing" {
            return None;
        }
        let outbox = Arc::new(
            Outbox::new(
                self.pool.clone(),
                OutboxConfig::new("inventory.missing", "missing", "item_id", "seq"),
                super::Recorder::new() as Arc<dyn k2b_core::outbox::Publisher>,
            )
            .expect("outbox"),
        );
        Some(async move { outbox.reconcile_until(deadline).await }.boxed())
    }
    fn with_rows(&self) -> BoxFuture<'_, Result<Vec<OutboxRef>, OutboxError>> {
        async { Ok(Vec::new()) }.boxed()
    }
}

#[tokio::test]
async fn wakeups_through_sqs_publish_to_the_fifo_queue_and_failures_are_reported() {
    let db = TestDb::new().await;
    let moto = Moto::start();
    let client = moto.client();
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    let wakeup_url = create_queue(&client, &format!("wakeups-{suffix}"), false).await;
    let live_url = create_queue(&client, &format!("live-{suffix}.fifo"), true).await;
    let wakeups: Arc<dyn Wakeups> =
        Arc::new(SqsWakeups::with_client(wakeup_url.clone(), client.clone()));
    let publisher = Arc::new(SqsLivePublisher::with_client(
        live_url.clone(),
        client.clone(),
    ));
    let live = Arc::new(LiveOutboxes::new(
        db.pool.clone(),
        publisher,
        wakeups.clone(),
    ));
    let drainer = Drainer::new(vec![
        live,
        Arc::new(Broken {
            pool: db.pool.clone(),
        }),
    ]);

    // A writer: rows in one transaction, then the wake-up after commit.
    let mut tx = db.pool.begin().await.expect("begin");
    let mut ids = Vec::new();
    for (key, n) in [("mailbox-1", 1), ("mailbox-2", 2), ("mailbox-1", 3)] {
        ids.push(
            enqueue_live(&mut tx, "mail", key, json!({"n": n}), None)
                .await
                .expect("enqueue"),
        );
    }
    tx.commit().await.expect("commit");
    wakeups.wake(OutboxRef::live("mail")).await;

    let wake_messages = drain_queue(&client, &wakeup_url).await;
    assert_eq!(wake_messages.len(), 1);
    let body = wake_messages[0].body().expect("body").to_string();
    assert_eq!(
        OutboxRef::from_message(&body),
        Some(OutboxRef::live("mail"))
    );

    // The function handler gets the wake-up, a duplicate of it, and one for a broken outbox.
    let broken = OutboxRef {
        table: "inventory.missing".into(),
        filter: Default::default(),
    };
    let event = sqs_event(&[
        ("m-1".into(), body.clone()),
        ("m-2".into(), body),
        ("m-3".into(), broken.to_message()),
        ("m-4".into(), "not a wake-up".into()),
    ]);
    let core = k2b_tests::core_for(&db);
    let response = outbox::handle(&core, &drainer, event, None)
        .await
        .expect("handled");
    assert_eq!(
        response,
        json!({"batchItemFailures": [{"itemIdentifier": "m-3"}]})
    );

    let published = drain_queue(&client, &live_url).await;
    assert_eq!(published.len(), 3);
    let mut by_group: std::collections::HashMap<String, Vec<(String, Value)>> = Default::default();
    for message in &published {
        let attributes = message.attributes().expect("attributes");
        let group = attributes[&MessageSystemAttributeName::MessageGroupId].clone();
        let dedup = attributes[&MessageSystemAttributeName::MessageDeduplicationId].clone();
        let body: Value = serde_json::from_str(message.body().expect("body")).expect("json");
        by_group.entry(group).or_default().push((dedup, body));
    }
    let mailbox1 = &by_group[&message_group_id("mail", "mailbox-1")];
    assert_eq!(
        mailbox1
            .iter()
            .map(|(_, b)| b["d"]["n"].clone())
            .collect::<Vec<_>>(),
        vec![json!(1), json!(3)],
        "order per key"
    );
    assert_eq!(mailbox1[0].0, ids[0].to_string());
    assert_eq!(mailbox1[1].0, ids[2].to_string());
    let mailbox2 = &by_group["mail:mailbox-2"];
    assert_eq!(mailbox2[0].0, ids[1].to_string());
    assert_eq!(
        mailbox2[0].1,
        json!({"v": 1, "k": "mailbox-2", "d": {"n": 2}})
    );
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM events.outbox")
        .fetch_one(&db.pool)
        .await
        .expect("count");
    assert_eq!(left, 0);
}

#[tokio::test]
async fn a_failed_publish_sends_a_delayed_wakeup_and_the_sweep_finds_due_rows() {
    let db = TestDb::new().await;
    let moto = Moto::start();
    let client = moto.client();
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    let wakeup_url = create_queue(&client, &format!("wakeups-{suffix}"), false).await;
    let wakeups: Arc<dyn Wakeups> =
        Arc::new(SqsWakeups::with_client(wakeup_url.clone(), client.clone()));
    // A FIFO queue that does not exist: every publish fails.
    let publisher = Arc::new(SqsLivePublisher::with_client(
        format!("{}/123456789012/missing-{suffix}.fifo", moto.endpoint),
        client.clone(),
    ));
    let live = Arc::new(LiveOutboxes::new(db.pool.clone(), publisher, wakeups));
    let drainer = Drainer::new(vec![live]);
    let mut conn = db.pool.acquire().await.expect("conn");
    enqueue_live(&mut conn, "contacts", "c1", json!({}), None)
        .await
        .expect("enqueue");
    drop(conn);
    let report = outbox::sweep(&drainer, None).await.expect("sweep");
    assert_eq!((report.outboxes, report.drained, report.failed), (1, 1, 0));
    let attempts: i32 = sqlx::query_scalar("SELECT attempts FROM events.outbox")
        .fetch_one(&db.pool)
        .await
        .expect("row");
    assert_eq!(attempts, 1);
    // The delayed wake-up is in the queue, hidden for the backoff (2 s).
    let attributes = client
        .get_queue_attributes()
        .queue_url(&wakeup_url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesDelayed)
        .send()
        .await
        .expect("attributes");
    let delayed = attributes.attributes().expect("map")
        [&QueueAttributeName::ApproximateNumberOfMessagesDelayed]
        .clone();
    assert_eq!(delayed, "1");
}
