//! The live outbox (`events.outbox`): scenarios 10–12 and 18 of spec/outbox.md §5.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::FutureExt;
use futures::future::BoxFuture;
use k2b_core::outbox::live::{
    MemoryLivePublisher, enqueue_access_change, enqueue_live, live_config,
};
use k2b_core::outbox::{Outbox, OutboxRow, PublishError, Publisher};
use k2b_tests::{TestDb, core_for};
use serde_json::{Value, json};

use super::{Recorder, count};

fn live(db: &TestDb, app: &str, publisher: Arc<dyn Publisher>) -> Arc<Outbox> {
    Arc::new(Outbox::new(db.pool.clone(), live_config(app), publisher).expect("outbox"))
}

async fn enqueue(db: &TestDb, app: &str, key: &str, n: i64) {
    let mut conn = db.pool.acquire().await.expect("conn");
    enqueue_live(&mut conn, app, key, json!({ "n": n }), None)
        .await
        .expect("enqueue");
}

/// Scenario 10: claims return a prefix of each key in sequence order; a failing key keeps its
/// rows and their attempts; recovery publishes in order.
#[tokio::test]
async fn scenario_10_claim_order_failure_and_recovery() {
    let db = TestDb::new().await;
    enqueue(&db, "contacts", "k", 1).await;
    enqueue(&db, "contacts", "k", 2).await;
    enqueue(&db, "contacts", "other", 3).await;
    let recorder = Recorder::new();
    let outbox = live(&db, "contacts", recorder.clone());
    let claimed = outbox.claim(100).await.expect("claim");
    assert_eq!(
        claimed.iter().map(|r| r.key.as_str()).collect::<Vec<_>>(),
        vec!["k", "k", "other"]
    );
    sqlx::query("UPDATE events.outbox SET claimed_until = NULL")
        .execute(&db.pool)
        .await
        .expect("clear");
    recorder.fail("k", "topic unavailable");
    outbox.reconcile().await.expect("pass");
    assert_eq!(
        recorder
            .published()
            .iter()
            .map(|(_, s)| *s)
            .collect::<Vec<_>>(),
        vec![3]
    );
    let pending: Vec<(String, i32)> =
        sqlx::query_as("SELECT ordering_key, attempts FROM events.outbox ORDER BY seq")
            .fetch_all(&db.pool)
            .await
            .expect("pending");
    assert_eq!(pending, vec![("k".to_string(), 1), ("k".to_string(), 0)]);
    recorder.heal();
    sqlx::query("UPDATE events.outbox SET next_attempt_at = now() - interval '1 second'")
        .execute(&db.pool)
        .await
        .expect("due");
    outbox.reconcile().await.expect("pass");
    assert_eq!(
        recorder
            .published()
            .iter()
            .map(|(_, s)| *s)
            .collect::<Vec<_>>(),
        vec![3, 1, 2]
    );
    assert_eq!(count(&db.pool, "events.outbox").await, 0);
}

/// Publishes, then reports failure once: the delivery happened but was not observed.
struct Uncertain {
    inner: Arc<MemoryLivePublisher>,
    calls: AtomicUsize,
}

impl Publisher for Uncertain {
    fn publish<'a>(&'a self, row: &'a OutboxRow) -> BoxFuture<'a, Result<(), PublishError>> {
        async move {
            self.inner.publish(row).await?;
            if self.calls.fetch_add(1, Ordering::SeqCst) == 0 {
                return Err(PublishError("connection reset after publish".into()));
            }
            Ok(())
        }
        .boxed()
    }
}

/// Scenario 11: an unobserved success is retried, and the receiver keeps the event once.
#[tokio::test]
async fn scenario_11_uncertain_publish_is_retried_and_deduplicated() {
    let db = TestDb::new().await;
    enqueue(&db, "mail", "mailbox-1", 1).await;
    let memory = Arc::new(MemoryLivePublisher::default());
    let outbox = live(
        &db,
        "mail",
        Arc::new(Uncertain {
            inner: memory.clone(),
            calls: AtomicUsize::new(0),
        }),
    );
    outbox.reconcile().await.expect("pass");
    let attempts: i32 = sqlx::query_scalar("SELECT attempts FROM events.outbox")
        .fetch_one(&db.pool)
        .await
        .expect("row");
    assert_eq!(attempts, 1);
    sqlx::query("UPDATE events.outbox SET next_attempt_at = now() - interval '1 second'")
        .execute(&db.pool)
        .await
        .expect("due");
    outbox.reconcile().await.expect("pass");
    assert_eq!(
        memory.events().len(),
        1,
        "the receiver deduplicates by row id"
    );
    assert_eq!(
        memory.events()[0].payload,
        json!({"v": 1, "k": "mailbox-1", "d": {"n": 1}})
    );
    assert_eq!(count(&db.pool, "events.outbox").await, 0);
}

/// Scenario 12: concurrent claims never share a key; two dispatchers drain everything in order.
#[tokio::test]
async fn scenario_12_parallel_claims_never_share_a_key() {
    let db = TestDb::new().await;
    sqlx::query(
        "SELECT events.enqueue(gen_random_uuid(), 'grids', 'live', 'key-' || (g % 5), jsonb_build_object('n', g))
         FROM generate_series(1, 1000) g",
    )
    .execute(&db.pool)
    .await
    .expect("rows");
    let first = live(&db, "grids", Recorder::new());
    let second = live(&db, "grids", Recorder::new());
    for _ in 0..20 {
        let (a, b) = tokio::join!(first.claim(100), second.claim(100));
        let a: std::collections::HashSet<String> =
            a.expect("claim").into_iter().map(|r| r.key).collect();
        let b: std::collections::HashSet<String> =
            b.expect("claim").into_iter().map(|r| r.key).collect();
        assert!(a.is_disjoint(&b), "{a:?} / {b:?}");
        sqlx::query("UPDATE events.outbox SET claimed_until = NULL")
            .execute(&db.pool)
            .await
            .expect("clear");
    }
    // Both dispatchers record into one log, in the order publishes succeed.
    let shared = Recorder::new();
    let (replica1, replica2) = (
        live(&db, "grids", shared.clone()),
        live(&db, "grids", shared.clone()),
    );
    let (r1, r2) = tokio::join!(replica1.reconcile(), replica2.reconcile());
    r1.expect("pass");
    r2.expect("pass");
    let published = shared.published();
    assert_eq!(published.len(), 1000, "every row exactly once");
    let mut last: HashMap<String, i64> = HashMap::new();
    for (key, seq) in published {
        if let Some(previous) = last.insert(key.clone(), seq) {
            assert!(seq > previous, "{key}: strictly ascending, no duplicates");
        }
    }
    assert_eq!(count(&db.pool, "events.outbox").await, 0);
}

/// Scenario 18: coalescing within one transaction, and the reload hint for oversized payloads.
#[tokio::test]
async fn scenario_18_coalescing_and_reload_hints() {
    let db = TestDb::new().await;
    let mut tx = db.pool.begin().await.expect("begin");
    enqueue_live(&mut tx, "mail", "mb", json!({"n": 1}), Some("mb:c1"))
        .await
        .expect("enqueue");
    enqueue_live(&mut tx, "mail", "mb", json!({"n": 2}), Some("mb:c1"))
        .await
        .expect("enqueue");
    tx.commit().await.expect("commit");
    let mut tx = db.pool.begin().await.expect("begin");
    enqueue_live(&mut tx, "mail", "mb", json!({"n": 3}), Some("mb:c1"))
        .await
        .expect("enqueue");
    tx.commit().await.expect("commit");
    let payloads: Vec<Value> = sqlx::query_scalar("SELECT payload FROM events.outbox ORDER BY seq")
        .fetch_all(&db.pool)
        .await
        .expect("rows");
    assert_eq!(
        payloads,
        vec![
            json!({"v": 1, "k": "mb", "d": {"n": 2}}),
            json!({"v": 1, "k": "mb", "d": {"n": 3}})
        ]
    );
    sqlx::query("DELETE FROM events.outbox")
        .execute(&db.pool)
        .await
        .expect("clear");

    let mut conn = db.pool.acquire().await.expect("conn");
    enqueue_live(&mut conn, "mail", "big", json!("x".repeat(40_000)), None)
        .await
        .expect("enqueue");
    enqueue_access_change(&mut conn, "mail", "big")
        .await
        .expect("access");
    drop(conn);
    let memory = Arc::new(MemoryLivePublisher::default());
    live(&db, "mail", memory.clone())
        .reconcile()
        .await
        .expect("pass");
    let published: Vec<Value> = memory.events().into_iter().map(|e| e.payload).collect();
    assert_eq!(
        published,
        vec![
            json!({"v": 1, "k": "big", "r": true}),
            json!({"v": 1, "k": "big", "a": true})
        ]
    );
    // Events (non-live) never coalesce and stay small.
    let oversized_event =
        sqlx::query("SELECT events.enqueue(gen_random_uuid(), 'mail', 'event', 'k', $1)")
            .bind(json!("x".repeat(5_000)))
            .execute(&db.pool)
            .await;
    assert!(oversized_event.is_err());
}

/// Writers wake the app's outbox after commit; locally the wake-up is delivered in process.
#[tokio::test]
async fn a_wake_up_after_commit_drains_the_app_outbox_in_process() {
    let db = TestDb::new().await;
    let core = core_for(&db);
    let mut wakeups = core.local_wakeups.as_ref().expect("local").subscribe();
    let mut tx = db.pool.begin().await.expect("begin");
    enqueue_live(&mut tx, "contacts", "c1", json!({"changed": true}), None)
        .await
        .expect("enqueue");
    tx.commit().await.expect("commit");
    core.wakeups
        .wake(k2b_core::outbox::OutboxRef::live("contacts"))
        .await;
    let request = wakeups.recv().await.expect("wake-up");
    assert_eq!(
        request.target,
        k2b_core::outbox::OutboxRef::live("contacts")
    );
    let outcomes = core.drainer().run([request.target], None).await;
    assert_eq!(outcomes.len(), 1);
    assert_eq!(*outcomes[0].result.as_ref().expect("pass"), 1);
    let events = core.memory_live.as_ref().expect("memory").events();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].app_id, "contacts");
    assert_eq!(events[0].ordering_key, "c1");
    // A wake-up naming something that is not a live outbox is ignored.
    let stranger = k2b_core::outbox::OutboxRef {
        table: "auth.users".into(),
        filter: Default::default(),
    };
    assert!(core.drainer().run([stranger], None).await.is_empty());
}

/// A follower (the local runner's, and the scheduled run's) hears a live row committed by a
/// writer that only runs SQL, sends no wake-up and uses no code of this bundle, and publishes it.
#[tokio::test]
async fn a_follower_publishes_a_row_committed_by_plain_sql() {
    let db = TestDb::new().await;
    let core = core_for(&db);
    let drainer = core.drainer();
    let follower = k2b_core::outbox::Follower::listen(&db.pool)
        .await
        .expect("listen");
    let until = tokio::time::Instant::now() + std::time::Duration::from_secs(3);
    let writer = async {
        let mut tx = db.pool.begin().await.expect("begin");
        for n in 0..3 {
            sqlx::query(
                "SELECT events.enqueue(gen_random_uuid(), 'crm', 'live', 'deal:1', jsonb_build_object('n', $1::int))",
            )
            .bind(n)
            .execute(&mut *tx)
            .await
            .expect("enqueue");
        }
        tx.commit().await.expect("commit");
        // Another app's outbox in its own transaction.
        sqlx::query(
            "SELECT events.enqueue(gen_random_uuid(), 'notes', 'live', 'n:1', '{}'::jsonb)",
        )
        .execute(&db.pool)
        .await
        .expect("enqueue");
    };
    let (report, ()) = tokio::join!(follower.follow(&drainer, Some(until), None), writer);
    // One notification per transaction and app (Postgres folds identical ones).
    assert_eq!(report.notifications, 2, "{report:?}");
    assert_eq!(report.drained, 4, "{report:?}");
    assert_eq!(report.failed, 0, "{report:?}");
    assert_eq!(count(&db.pool, "events.outbox").await, 0);
    let events = core.memory_live.as_ref().expect("memory").events();
    let mut apps: Vec<_> = events.iter().map(|e| e.app_id.clone()).collect();
    apps.sort();
    assert_eq!(apps, ["crm", "crm", "crm", "notes"]);
}
