//! Crash safety: a drainer killed with SIGKILL mid-batch loses nothing.

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use k2b_core::outbox::{Outbox, OutboxConfig};
use k2b_tests::TestDb;

use super::{Recorder, count, create_stock_reports};

#[tokio::test]
async fn a_drainer_killed_mid_batch_loses_nothing() {
    let db = TestDb::new().await;
    create_stock_reports(&db.pool).await;
    sqlx::raw_sql(
        "CREATE TABLE inventory.published (n bigserial, seq bigint, item_id text, drainer text);
         INSERT INTO inventory.stock_reports (item_id, delta)
         SELECT 'item-' || (g % 10), g FROM generate_series(1, 500) g;",
    )
    .execute(&db.pool)
    .await
    .expect("setup");

    let mut victim = Command::new(env!("CARGO_BIN_EXE_drainer"))
        .env("DATABASE_URL", db.url())
        .env("CLAIM_MS", "2000")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start drainer");
    // Let it publish part of its first batch, then kill it without any chance to clean up.
    loop {
        let published: i64 = sqlx::query_scalar("SELECT count(*) FROM inventory.published")
            .fetch_one(&db.pool)
            .await
            .expect("count");
        if published >= 20 {
            break;
        }
        assert!(
            victim.try_wait().expect("status").is_none(),
            "the drainer finished too early"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Command::new("kill")
        .args(["-KILL", &victim.id().to_string()])
        .status()
        .expect("kill");
    victim.wait().expect("reaped");
    let leased: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM inventory.stock_reports WHERE claimed_until > now()",
    )
    .fetch_one(&db.pool)
    .await
    .expect("leased");
    assert!(leased > 0, "the killed drainer left its batch leased");

    // After the lease expires a survivor drains everything.
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let survivor = Recorder::new();
    let mut config = OutboxConfig::new(
        "inventory.stock_reports",
        "inventory:stock",
        "item_id",
        "seq",
    );
    config.claim = Duration::from_secs(30);
    let outbox = Arc::new(Outbox::new(db.pool.clone(), config, survivor.clone()).expect("outbox"));
    outbox.reconcile().await.expect("pass");
    assert_eq!(count(&db.pool, "inventory.stock_reports").await, 0);

    // Every row was published at least once...
    let victim_log: Vec<(i64, String)> =
        sqlx::query_as("SELECT seq, item_id FROM inventory.published ORDER BY n")
            .fetch_all(&db.pool)
            .await
            .expect("log");
    let mut all: Vec<i64> = victim_log
        .iter()
        .map(|(s, _)| *s)
        .chain(survivor.published().into_iter().map(|(_, s)| s))
        .collect();
    all.sort();
    all.dedup();
    assert_eq!(all, (1..=500).collect::<Vec<i64>>());
    // ...and each drainer published each key in ascending order; the survivor started each
    // key where the victim's deletions left off (nothing the victim had not deleted is skipped).
    for log in [
        victim_log.clone(),
        survivor
            .published()
            .into_iter()
            .map(|(k, s)| (s, k))
            .collect(),
    ] {
        let mut last: HashMap<String, i64> = HashMap::new();
        for (seq, key) in log {
            if let Some(previous) = last.insert(key.clone(), seq) {
                assert!(seq > previous, "{key}: {previous} then {seq}");
            }
        }
    }
}
