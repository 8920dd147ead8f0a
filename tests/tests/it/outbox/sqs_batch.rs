//! Live updates published in `SendMessageBatch` calls, against the real SQS API (moto) behind a
//! proxy that counts calls and fails chosen batch entries: order per group, exactly one message
//! per row, deduplication by row id, and a partial batch failure retried without reordering.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use aws_sdk_sqs::types::{DeleteMessageBatchRequestEntry, MessageSystemAttributeName};
use k2b_core::outbox::live::{LiveOutboxes, SqsLivePublisher, enqueue_live, message_group_id};
use k2b_core::outbox::{LocalWakeups, Outbox, OutboxRef};
use k2b_tests::lambda::stack::create_queue;
use k2b_tests::sqsfault::{INJECTED_CODE, SqsFaultProxy};
use k2b_tests::{Moto, TestDb};
use serde_json::{Value, json};
use uuid::Uuid;

const APP: &str = "mail";

/// A live outbox publishing to a fresh FIFO queue through the proxy.
struct Setup {
    db: TestDb,
    _moto: Moto,
    client: aws_sdk_sqs::Client,
    proxy: SqsFaultProxy,
    queue_url: String,
    live: LiveOutboxes,
}

impl Setup {
    async fn new() -> Setup {
        let db = TestDb::new().await;
        let moto = Moto::start();
        let client = moto.client();
        let suffix = Uuid::new_v4().simple().to_string();
        let queue_url = create_queue(&client, &format!("live-{suffix}.fifo"), true).await;
        let proxy = SqsFaultProxy::start(&moto.endpoint).await;
        let publisher = Arc::new(SqsLivePublisher::with_client(
            queue_url.clone(),
            proxy.client(&client),
        ));
        let live = LiveOutboxes::new(
            db.pool.clone(),
            publisher,
            Arc::new(LocalWakeups::default()),
        );
        Setup {
            db,
            _moto: moto,
            client,
            proxy,
            queue_url,
            live,
        }
    }

    fn outbox(&self) -> Arc<Outbox> {
        self.live
            .resolve(&OutboxRef::live(APP))
            .expect("the app's live outbox")
    }

    /// Writes `(key, data)` rows in one transaction; returns their ids.
    async fn enqueue(&self, rows: &[(String, Value)]) -> Vec<Uuid> {
        let mut tx = self.db.pool.begin().await.expect("begin");
        let mut ids = Vec::new();
        for (key, data) in rows {
            ids.push(
                enqueue_live(&mut tx, APP, key, data.clone(), None)
                    .await
                    .expect("enqueue"),
            );
        }
        tx.commit().await.expect("commit");
        ids
    }

    async fn rows_left(&self) -> i64 {
        super::count(&self.db.pool, "events.outbox").await
    }

    /// Every message of the queue, received and deleted until it is empty, as (group, dedup id,
    /// `d.n`) in the order received (a FIFO queue hands out each group's messages in order).
    async fn read_queue(&self) -> Vec<(String, String, i64)> {
        let mut messages = Vec::new();
        loop {
            let received = self
                .client
                .receive_message()
                .queue_url(&self.queue_url)
                .max_number_of_messages(10)
                .message_system_attribute_names(MessageSystemAttributeName::All)
                .send()
                .await
                .expect("receive");
            let batch = received.messages();
            if batch.is_empty() {
                return messages;
            }
            let mut deletes = Vec::new();
            for (index, message) in batch.iter().enumerate() {
                let attributes = message.attributes().expect("attributes");
                let body: Value =
                    serde_json::from_str(message.body().expect("body")).expect("json body");
                messages.push((
                    attributes[&MessageSystemAttributeName::MessageGroupId].clone(),
                    attributes[&MessageSystemAttributeName::MessageDeduplicationId].clone(),
                    body["d"]["n"].as_i64().expect("n"),
                ));
                deletes.push(
                    DeleteMessageBatchRequestEntry::builder()
                        .id(index.to_string())
                        .receipt_handle(message.receipt_handle().expect("handle"))
                        .build()
                        .expect("delete entry"),
                );
            }
            self.client
                .delete_message_batch()
                .queue_url(&self.queue_url)
                .set_entries(Some(deletes))
                .send()
                .await
                .expect("delete");
        }
    }
}

/// `rows_per_key` rows for each of `keys` keys, interleaved like concurrent writers: row `i` is
/// key `k{i % keys}` with `d.n = i / keys`.
fn interleaved(keys: usize, rows_per_key: usize) -> Vec<(String, Value)> {
    (0..keys * rows_per_key)
        .map(|i| (format!("k{}", i % keys), json!({"n": i / keys})))
        .collect()
}

/// Asserts every row arrived exactly once and every group's messages are in enqueue order.
fn assert_in_order_exactly_once(
    messages: &[(String, String, i64)],
    ids: &[Uuid],
    keys: usize,
    rows_per_key: usize,
) {
    let dedup_ids: Vec<&str> = messages.iter().map(|(_, d, _)| d.as_str()).collect();
    let distinct: BTreeSet<&str> = dedup_ids.iter().copied().collect();
    assert_eq!(distinct.len(), dedup_ids.len(), "a row arrived twice");
    let expected: BTreeSet<String> = ids.iter().map(Uuid::to_string).collect();
    let arrived: BTreeSet<String> = distinct.iter().map(|d| d.to_string()).collect();
    assert_eq!(arrived, expected, "every row arrives, as its own id");
    let mut by_group: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
    for (group, _, n) in messages {
        by_group.entry(group.as_str()).or_default().push(*n);
    }
    assert_eq!(by_group.len(), keys);
    let in_order: Vec<i64> = (0..rows_per_key as i64).collect();
    for key in 0..keys {
        let group = message_group_id(APP, &format!("k{key}"));
        assert_eq!(by_group[group.as_str()], in_order, "order of {group}");
    }
}

#[tokio::test]
async fn rows_of_thirty_keys_arrive_once_in_order_per_group_in_few_batch_calls() {
    let setup = Setup::new().await;
    let (keys, rows_per_key) = (30, 10);
    let ids = setup.enqueue(&interleaved(keys, rows_per_key)).await;

    let handled = setup.outbox().reconcile().await.expect("pass");
    assert_eq!(handled, 300);
    assert_eq!(setup.rows_left().await, 0);

    let messages = setup.read_queue().await;
    assert_eq!(messages.len(), 300);
    assert_in_order_exactly_once(&messages, &ids, keys, rows_per_key);
    let batches = setup.proxy.calls("SendMessageBatch");
    assert_eq!(setup.proxy.calls("SendMessage"), 0);
    assert_eq!(setup.proxy.accepted(), 300);
    // Ten entries a call at best (30); the engine's waves leave some calls short.
    assert!(
        (30..=60).contains(&batches),
        "{batches} SendMessageBatch calls for 300 rows"
    );
}

#[tokio::test]
async fn a_row_published_twice_is_one_message_in_the_queue() {
    let setup = Setup::new().await;
    let ids = setup.enqueue(&[("k0".to_string(), json!({"n": 0}))]).await;
    let outbox = setup.outbox();
    let rows = outbox.claim(1).await.expect("claim");
    assert_eq!(rows.len(), 1);

    outbox.dispatch_one(&rows[0]).await.expect("first publish");
    outbox.dispatch_one(&rows[0]).await.expect("second publish");

    // Both publishes reached SQS and were accepted; its deduplication by row id kept one message.
    assert_eq!(setup.proxy.calls("SendMessageBatch"), 2);
    assert_eq!(setup.proxy.accepted(), 2);
    let messages = setup.read_queue().await;
    assert_eq!(
        messages,
        vec![(message_group_id(APP, "k0"), ids[0].to_string(), 0)]
    );
}

#[tokio::test]
async fn a_refused_batch_entry_is_retried_without_reordering_its_group() {
    let setup = Setup::new().await;
    let (keys, rows_per_key) = (5, 3);
    let mut rows = interleaved(keys, rows_per_key);
    // k2's second row: SQS refuses it once, inside a batch whose other entries succeed.
    let refused = rows
        .iter()
        .position(|(key, data)| key == "k2" && data["n"] == 1)
        .expect("k2's second row");
    rows[refused].1["tag"] = json!("refuse-once");
    setup.proxy.fail_bodies_containing("refuse-once", 1);
    let ids = setup.enqueue(&rows).await;
    let outbox = setup.outbox();

    outbox.reconcile().await.expect("first pass");
    assert_eq!(setup.proxy.failed(), 1);
    // Every row but the refused one and the row of its key behind it.
    assert_eq!(setup.proxy.accepted(), keys * rows_per_key - 2);
    // The refused row waits for its retry, with SQS's code; k2's third row waits behind it.
    let waiting: Vec<(Uuid, i32, Option<String>)> =
        sqlx::query_as("SELECT id, attempts, last_error FROM events.outbox ORDER BY seq")
            .fetch_all(&setup.db.pool)
            .await
            .expect("rows");
    assert_eq!(waiting.len(), 2, "{waiting:?}");
    assert_eq!((waiting[0].0, waiting[0].1), (ids[refused], 1));
    assert!(
        waiting[0]
            .2
            .as_deref()
            .is_some_and(|e| e.contains(INJECTED_CODE)),
        "{waiting:?}"
    );
    assert_eq!(waiting[1].1, 0);

    sqlx::query("UPDATE events.outbox SET next_attempt_at = now()")
        .execute(&setup.db.pool)
        .await
        .expect("make the retry due");
    outbox.reconcile().await.expect("second pass");
    assert_eq!(setup.rows_left().await, 0);
    assert_eq!(setup.proxy.accepted(), keys * rows_per_key);

    let messages = setup.read_queue().await;
    assert_eq!(messages.len(), keys * rows_per_key);
    assert_in_order_exactly_once(&messages, &ids, keys, rows_per_key);
}
