//! Scenarios 2–6 and 13–17 of spec/outbox.md §5, on the documented example table.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k2b_core::outbox::{Outbox, OutboxConfig};
use k2b_tests::TestDb;

use super::{Recorder, count, create_stock_reports};

const TABLE: &str = "inventory.stock_reports";

fn config() -> OutboxConfig {
    OutboxConfig::new(TABLE, "inventory:stock", "item_id", "seq")
}

fn outbox(db: &TestDb, recorder: &Arc<Recorder>) -> Arc<Outbox> {
    Arc::new(Outbox::new(db.pool.clone(), config(), recorder.clone()).expect("outbox"))
}

async fn insert(conn: &mut sqlx::PgConnection, item: &str, delta: i32) -> i64 {
    sqlx::query_scalar(
        "INSERT INTO inventory.stock_reports (item_id, delta) VALUES ($1, $2) RETURNING seq",
    )
    .bind(item)
    .bind(delta)
    .fetch_one(conn)
    .await
    .expect("insert")
}

/// Scenario 2: only committed rows exist; one pass publishes them per key in order and deletes them.
#[tokio::test]
async fn scenario_2_commit_then_publish_in_order_per_key() {
    let db = TestDb::new().await;
    create_stock_reports(&db.pool).await;
    let mut tx = db.pool.begin().await.expect("begin");
    insert(&mut tx, "A", 1).await;
    tx.rollback().await.expect("rollback");
    assert_eq!(count(&db.pool, TABLE).await, 0);
    let mut tx = db.pool.begin().await.expect("begin");
    let a2 = insert(&mut tx, "A", 2).await;
    let b3 = insert(&mut tx, "B", 3).await;
    let a4 = insert(&mut tx, "A", 4).await;
    tx.commit().await.expect("commit");
    let recorder = Recorder::new();
    assert_eq!(outbox(&db, &recorder).reconcile().await.expect("pass"), 3);
    assert_eq!(recorder.published_of("A"), vec![a2, a4]);
    assert_eq!(recorder.published_of("B"), vec![b3]);
    assert_eq!(count(&db.pool, TABLE).await, 0);
}

/// Scenario 3: a failing key waits with backoff and holds back only itself.
#[tokio::test]
async fn scenario_3_failures_retry_with_backoff_and_block_only_their_key() {
    let db = TestDb::new().await;
    create_stock_reports(&db.pool).await;
    let mut tx = db.pool.begin().await.expect("begin");
    let a5 = insert(&mut tx, "A", 5).await;
    let a6 = insert(&mut tx, "A", 6).await;
    let b7 = insert(&mut tx, "B", 7).await;
    tx.commit().await.expect("commit");
    let recorder = Recorder::new();
    recorder.fail("A", "ERP answered 503");
    let outbox = outbox(&db, &recorder);
    let before: chrono::DateTime<chrono::Utc> = sqlx::query_scalar("SELECT now()")
        .fetch_one(&db.pool)
        .await
        .expect("now");
    outbox.reconcile().await.expect("pass");
    assert_eq!(recorder.published(), vec![("B".to_string(), b7)]);
    #[derive(sqlx::FromRow)]
    struct Left {
        seq: i64,
        attempts: i32,
        last_error: Option<String>,
        next_attempt_at: chrono::DateTime<chrono::Utc>,
        claimed_until: Option<chrono::DateTime<chrono::Utc>>,
    }
    let rows: Vec<Left> =
        sqlx::query_as("SELECT seq, attempts, last_error, next_attempt_at, claimed_until FROM inventory.stock_reports ORDER BY seq")
            .fetch_all(&db.pool)
            .await
            .expect("rows");
    assert_eq!(rows.len(), 2);
    assert_eq!(
        (rows[0].seq, rows[0].attempts, rows[0].last_error.as_deref()),
        (a5, 1, Some("ERP answered 503"))
    );
    assert!(rows[0].next_attempt_at >= before + chrono::Duration::seconds(2));
    assert_eq!((rows[1].seq, rows[1].attempts), (a6, 0));
    assert!(
        rows[1].claimed_until.is_none(),
        "the rest of the failed key was released"
    );

    sqlx::query("UPDATE inventory.stock_reports SET next_attempt_at = now() + interval '1 hour' WHERE seq = $1")
        .bind(a5)
        .execute(&db.pool)
        .await
        .expect("push out");
    outbox.reconcile().await.expect("pass");
    assert_eq!(recorder.published().len(), 1, "nothing due: A is busy");

    recorder.heal();
    sqlx::query("UPDATE inventory.stock_reports SET next_attempt_at = now() - interval '1 second'")
        .execute(&db.pool)
        .await
        .expect("due");
    outbox.reconcile().await.expect("pass");
    assert_eq!(
        recorder
            .published()
            .into_iter()
            .map(|(_, s)| s)
            .collect::<Vec<_>>(),
        vec![b7, a5, a6]
    );
    assert_eq!(count(&db.pool, TABLE).await, 0);
}

/// Scenario 4: commit order versus sequence order, with and without the writers' item lock.
#[tokio::test]
async fn scenario_4_writers_locking_the_item_keep_commit_order() {
    let db = TestDb::new().await;
    create_stock_reports(&db.pool).await;
    let recorder = Recorder::new();
    let outbox = outbox(&db, &recorder);

    // With the item lock: writer 2 waits for writer 1; the pass in between sees nothing.
    let mut writer1 = db.pool.begin().await.expect("begin");
    sqlx::query("UPDATE inventory.items SET id = id WHERE id = 'A'")
        .execute(&mut *writer1)
        .await
        .expect("lock");
    let first = insert(&mut writer1, "A", 1).await;
    let pool = db.pool.clone();
    let writer2 = tokio::spawn(async move {
        let mut tx = pool.begin().await.expect("begin");
        sqlx::query("UPDATE inventory.items SET id = id WHERE id = 'A'")
            .execute(&mut *tx)
            .await
            .expect("lock");
        let seq = insert(&mut tx, "A", 2).await;
        tx.commit().await.expect("commit");
        seq
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(outbox.reconcile().await.expect("pass"), 0);
    writer1.commit().await.expect("commit");
    let second = writer2.await.expect("join");
    outbox.reconcile().await.expect("pass");
    assert_eq!(recorder.published_of("A"), vec![first, second]);

    // Without it, the later sequence number can commit (and publish) first: the documented limit.
    let recorder = Recorder::new();
    let outbox = self::outbox(&db, &recorder);
    let mut early = db.pool.begin().await.expect("begin");
    let low = insert(&mut early, "A", 3).await;
    let mut late = db.pool.begin().await.expect("begin");
    let high = insert(&mut late, "A", 4).await;
    late.commit().await.expect("commit");
    outbox.reconcile().await.expect("pass");
    early.commit().await.expect("commit");
    outbox.reconcile().await.expect("pass");
    assert_eq!(recorder.published_of("A"), vec![high, low]);
    assert_eq!(count(&db.pool, TABLE).await, 0);
}

/// Scenario 5: a batch that outlives its lease publishes nothing more and releases nothing;
/// the replica that re-claimed the rows finishes them.
#[tokio::test]
async fn scenario_5_lease_expiry_hands_rows_to_another_replica() {
    let db = TestDb::new().await;
    create_stock_reports(&db.pool).await;
    let mut tx = db.pool.begin().await.expect("begin");
    let a1 = insert(&mut tx, "A", 1).await;
    let a2 = insert(&mut tx, "A", 2).await;
    let b3 = insert(&mut tx, "B", 3).await;
    let b4 = insert(&mut tx, "B", 4).await;
    tx.commit().await.expect("commit");

    let first = Recorder::new();
    first.close_gate();
    let mut short = config();
    short.claim = Duration::from_millis(200);
    let replica1 = Arc::new(Outbox::new(db.pool.clone(), short, first.clone()).expect("outbox"));
    let pass1 = tokio::spawn({
        let replica1 = replica1.clone();
        async move { replica1.reconcile().await }
    });
    while first.started().len() < 2 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Wait until the lease ran out.
    loop {
        let live: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM inventory.stock_reports WHERE claimed_until > now()",
        )
        .fetch_one(&db.pool)
        .await
        .expect("leases");
        if live == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let second = Recorder::new();
    second.close_gate();
    let replica2 = outbox(&db, &second);
    let pass2 = tokio::spawn({
        let replica2 = replica2.clone();
        async move { replica2.reconcile().await }
    });
    while second.started().len() < 2 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Replica 1 now finishes A1 and fails B3, long after its lease.
    first.fail("B", "late failure");
    first.open_gate();
    pass1.await.expect("join").expect("pass 1");
    let mut started1 = first.started();
    started1.sort();
    assert_eq!(started1, vec![("A".to_string(), a1), ("B".to_string(), b3)]);
    let leased: Vec<i64> = sqlx::query_scalar(
        "SELECT seq FROM inventory.stock_reports WHERE claimed_until > now() ORDER BY seq",
    )
    .fetch_all(&db.pool)
    .await
    .expect("leased");
    assert_eq!(
        leased,
        vec![a2, b4],
        "replica 1 released nothing past its deadline"
    );

    second.open_gate();
    pass2.await.expect("join").expect("pass 2");
    assert_eq!(second.published_of("A"), vec![a1, a2]);
    assert_eq!(second.published_of("B"), vec![b3, b4]);
    assert_eq!(count(&db.pool, TABLE).await, 0);
}

/// Scenario 6: waiting for the pass in flight; a missing table fails the pass, not `notify`.
#[tokio::test]
async fn scenario_6_waiting_for_the_pass_in_flight_and_missing_tables() {
    let db = TestDb::new().await;
    create_stock_reports(&db.pool).await;
    let mut conn = db.pool.acquire().await.expect("conn");
    let b8 = insert(&mut conn, "B", 8).await;
    drop(conn);
    let recorder = Recorder::new();
    recorder.close_gate();
    let outbox = outbox(&db, &recorder);
    let started = tokio::spawn({
        let outbox = outbox.clone();
        async move { outbox.notify().await }
    });
    while recorder.started().is_empty() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // A second caller joins the pass in flight and resolves only once it is done.
    let joined = tokio::spawn({
        let outbox = outbox.clone();
        async move { outbox.reconcile().await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!joined.is_finished());
    recorder.open_gate();
    joined.await.expect("join").expect("pass");
    started.await.expect("join");
    assert_eq!(recorder.published_of("B"), vec![b8]);
    assert_eq!(count(&db.pool, TABLE).await, 0);

    let missing = Arc::new(
        Outbox::new(
            db.pool.clone(),
            OutboxConfig::new("inventory.missing", "missing", "item_id", "seq"),
            Recorder::new(),
        )
        .expect("outbox"),
    );
    assert!(missing.reconcile().await.is_err());
    missing.notify().await;
}

/// Scenario 13: order is by sequence, never by time.
#[tokio::test]
async fn scenario_13_sequence_not_time_decides_order() {
    let db = TestDb::new().await;
    create_stock_reports(&db.pool).await;
    let mut conn = db.pool.acquire().await.expect("conn");
    let first = insert(&mut conn, "late", 1).await;
    for i in 0..150 {
        insert(&mut conn, &format!("other-{i}"), i).await;
    }
    let second = insert(&mut conn, "late", 2).await;
    sqlx::query(
        "UPDATE inventory.stock_reports SET next_attempt_at = CASE
           WHEN seq = $1 THEN now() - interval '1 second'
           WHEN seq = $2 THEN now() - interval '3 seconds'
           ELSE now() - interval '2 seconds' END",
    )
    .bind(first)
    .bind(second)
    .execute(&mut *conn)
    .await
    .expect("times");
    drop(conn);
    let recorder = Recorder::new();
    outbox(&db, &recorder).reconcile().await.expect("pass");
    assert_eq!(recorder.published_of("late"), vec![first, second]);
    assert_eq!(count(&db.pool, TABLE).await, 0);
}

/// Scenario 14: many keys with a 1 ms publish: every row, in order per key. The rate is printed
/// here and measured properly by the outbox benchmark.
#[tokio::test]
async fn scenario_14_many_keys_drain_in_order() {
    let db = TestDb::new().await;
    create_stock_reports(&db.pool).await;
    sqlx::query(
        "INSERT INTO inventory.stock_reports (item_id, delta)
         SELECT 'item-' || (g % 1000), g FROM generate_series(1, 4000) g",
    )
    .execute(&db.pool)
    .await
    .expect("rows");
    let recorder = Recorder::with_delay(Duration::from_millis(1));
    let started = Instant::now();
    assert_eq!(
        outbox(&db, &recorder).reconcile().await.expect("pass"),
        4000
    );
    let elapsed = started.elapsed();
    println!(
        "scenario 14: 4000 rows over 1000 keys in {elapsed:?} ({:.0} rows/s)",
        4000.0 / elapsed.as_secs_f64()
    );
    let published = recorder.published();
    assert_eq!(published.len(), 4000);
    let mut last: std::collections::HashMap<String, i64> = std::collections::HashMap::new();
    for (key, seq) in published {
        if let Some(previous) = last.insert(key, seq) {
            assert!(seq > previous, "order per key");
        }
    }
    assert_eq!(count(&db.pool, TABLE).await, 0);
}

/// Scenario 15: a hot key drains in batches, not one row per claim.
#[tokio::test]
async fn scenario_15_hot_key_drains_a_batch_per_claim() {
    let db = TestDb::new().await;
    create_stock_reports(&db.pool).await;
    sqlx::raw_sql(
        "INSERT INTO inventory.stock_reports (item_id, delta)
         SELECT 'hot', g FROM generate_series(1, 10000) g;
         INSERT INTO inventory.stock_reports (item_id, delta)
         SELECT 'key-' || (g % 1000), g FROM generate_series(1, 2000) g",
    )
    .execute(&db.pool)
    .await
    .expect("rows");
    let recorder = Recorder::new();
    let outbox = outbox(&db, &recorder);
    let first = outbox.claim(100).await.expect("claim");
    assert_eq!(first.len(), 100);
    assert!(first.iter().all(|row| row.key == "hot"));
    sqlx::query("UPDATE inventory.stock_reports SET claimed_until = NULL")
        .execute(&db.pool)
        .await
        .expect("release");
    let started = Instant::now();
    assert_eq!(outbox.reconcile().await.expect("pass"), 12_000);
    println!(
        "scenario 15: 12000 rows (10000 on one key) drained in {:?}",
        started.elapsed()
    );
    let hot = recorder.published_of("hot");
    assert_eq!(hot.len(), 10_000);
    assert!(hot.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(count(&db.pool, TABLE).await, 0);
}

/// Scenario 16: after an outage, a claim finds due rows past a large backlog of waiting ones
/// quickly, whenever statistics were gathered. Reduced size by default (20 000 rows); the
/// reference size (200 000 rows) with `K2B_OUTBOX_FULL_SCALE=1`.
#[tokio::test]
async fn scenario_16_claims_stay_fast_after_an_outage() {
    let scale: i64 = if std::env::var("K2B_OUTBOX_FULL_SCALE").is_ok_and(|v| v == "1") {
        10
    } else {
        1
    };
    let waiting = 10_000 * scale;
    let sharing = 2_000 * scale;
    let total = 20_000 * scale;
    for analyze_before in [true, false] {
        let db = TestDb::new().await;
        create_stock_reports(&db.pool).await;
        // Rows 1..=waiting wait for a retry; the next `sharing` rows share their keys; the rest
        // have keys of their own.
        sqlx::query(
            "INSERT INTO inventory.stock_reports (item_id, delta, attempts, next_attempt_at)
             SELECT CASE WHEN g <= $1 OR g > $1 + $2 THEN 'k' || g ELSE 'k' || (g - $1) END, g,
                    CASE WHEN g <= $1 THEN 1 ELSE 0 END,
                    CASE WHEN g <= $1 THEN now() + interval '1 hour' ELSE now() END
             FROM generate_series(1, $3) g",
        )
        .bind(waiting)
        .bind(sharing)
        .bind(total)
        .execute(&db.pool)
        .await
        .expect("rows");
        if analyze_before {
            sqlx::query("ANALYZE inventory.stock_reports")
                .execute(&db.pool)
                .await
                .expect("analyze");
        }
        let outbox = outbox(&db, &Recorder::new());
        if !analyze_before {
            // Statistics gathered during the outage, after the rows went busy.
            sqlx::query("ANALYZE inventory.stock_reports")
                .execute(&db.pool)
                .await
                .expect("analyze");
        }
        let started = Instant::now();
        let rows = outbox.claim(100).await.expect("claim");
        println!(
            "scenario 16 ({total} rows, statistics {}): claim of {} rows in {:?}",
            if analyze_before { "before" } else { "during" },
            rows.len(),
            started.elapsed()
        );
        assert_eq!(rows.len(), 100);
        for row in &rows {
            let key_number: i64 = row.key.trim_start_matches('k').parse().expect("number");
            assert!(key_number > waiting + sharing, "key {} is busy", row.key);
            assert_eq!(row.attempts, 0);
        }
    }
}

/// Scenario 17: the claim runs under the claim period's statement and idle timeouts.
#[tokio::test]
async fn scenario_17_claim_statements_are_bounded_by_the_claim_period() {
    let db = TestDb::new().await;
    create_stock_reports(&db.pool).await;
    sqlx::raw_sql(
        "CREATE TABLE inventory.seen (statement_timeout text, idle_timeout text);
         CREATE FUNCTION inventory.record_timeouts() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           INSERT INTO inventory.seen VALUES (current_setting('statement_timeout'),
                                              current_setting('idle_in_transaction_session_timeout'));
           RETURN NULL;
         END $$;
         CREATE TRIGGER record_timeouts AFTER UPDATE ON inventory.stock_reports
           FOR EACH STATEMENT EXECUTE FUNCTION inventory.record_timeouts();
         INSERT INTO inventory.stock_reports (item_id, delta) VALUES ('A', 1);",
    )
    .execute(&db.pool)
    .await
    .expect("trigger");
    let rows = outbox(&db, &Recorder::new())
        .claim(100)
        .await
        .expect("claim");
    assert_eq!(rows.len(), 1);
    let seen: Vec<(String, String)> = sqlx::query_as("SELECT * FROM inventory.seen")
        .fetch_all(&db.pool)
        .await
        .expect("seen");
    assert_eq!(seen, vec![("30s".to_string(), "30s".to_string())]);
    let after: String = sqlx::query_scalar("SHOW statement_timeout")
        .fetch_one(&db.pool)
        .await
        .expect("show");
    assert_eq!(after, "0", "transaction-local");
}

/// The claim's lock wait is bounded too: a claim stuck behind another holder gives up.
#[tokio::test]
async fn a_claim_waiting_on_the_lock_gives_up_after_the_claim_period() {
    let db = TestDb::new().await;
    create_stock_reports(&db.pool).await;
    let mut short = config();
    short.claim = Duration::from_millis(300);
    let outbox = Outbox::new(db.pool.clone(), short.clone(), Recorder::new()).expect("outbox");
    let mut holder = db.pool.begin().await.expect("begin");
    k2b_core::db::advisory_xact_lock(&mut holder, &short.lock_key())
        .await
        .expect("hold");
    let started = Instant::now();
    assert!(outbox.claim(10).await.is_err());
    assert!(started.elapsed() < Duration::from_secs(5));
    holder.rollback().await.expect("release");
    assert!(outbox.claim(10).await.expect("claim").is_empty());
}

/// A pass with less than a claim period (plus margin) left before its hard deadline claims
/// nothing; with enough time it drains, and its leases never outlive the deadline.
#[tokio::test]
async fn passes_stop_claiming_near_the_invocation_deadline() {
    let db = TestDb::new().await;
    create_stock_reports(&db.pool).await;
    let mut conn = db.pool.acquire().await.expect("conn");
    let seq = insert(&mut conn, "A", 1).await;
    drop(conn);
    let recorder = Recorder::new();
    let outbox = outbox(&db, &recorder);
    let soon = tokio::time::Instant::now() + Duration::from_secs(20);
    assert_eq!(outbox.reconcile_until(Some(soon)).await.expect("pass"), 0);
    assert_eq!(
        count(&db.pool, TABLE).await,
        1,
        "nothing claimed with 20 s left"
    );
    let later = tokio::time::Instant::now() + Duration::from_secs(60);
    assert_eq!(outbox.reconcile_until(Some(later)).await.expect("pass"), 1);
    assert_eq!(recorder.published_of("A"), vec![seq]);
}
