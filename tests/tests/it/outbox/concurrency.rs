//! Three replicas draining one outbox at once.

use std::collections::HashMap;
use std::sync::Arc;

use k2b_core::outbox::{Outbox, OutboxConfig};
use k2b_tests::{TestDb, pool_with_max};

use super::{Recorder, count, create_stock_reports};

/// 10 000 rows on 100 keys, three drainers with their own connections: every row published,
/// per key strictly ascending, no row twice (no claim expired during the run).
#[tokio::test]
async fn three_concurrent_drainers_publish_every_row_once_in_order() {
    let db = TestDb::new().await;
    create_stock_reports(&db.pool).await;
    sqlx::query(
        "INSERT INTO inventory.stock_reports (item_id, delta)
         SELECT 'item-' || (g % 100), g FROM generate_series(1, 10000) g",
    )
    .execute(&db.pool)
    .await
    .expect("rows");
    let shared = Recorder::new();
    let mut drainers = Vec::new();
    for _ in 0..3 {
        let pool = pool_with_max(&db, 4).await;
        let config = OutboxConfig::new(
            "inventory.stock_reports",
            "inventory:stock",
            "item_id",
            "seq",
        );
        let outbox = Arc::new(Outbox::new(pool, config, shared.clone()).expect("outbox"));
        drainers.push(tokio::spawn(async move {
            let mut handled = 0;
            // Keep passing until the table is empty (a replica may find all keys busy).
            for _ in 0..200 {
                handled += outbox.reconcile().await.expect("pass");
                let left: i64 = sqlx::query_scalar("SELECT count(*) FROM inventory.stock_reports")
                    .fetch_one(outbox_pool(&outbox))
                    .await
                    .expect("count");
                if left == 0 {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            handled
        }));
    }
    let mut handled = 0;
    for drainer in drainers {
        handled += drainer.await.expect("join");
    }
    assert_eq!(handled, 10_000, "claims never overlapped");
    let published = shared.published();
    assert_eq!(published.len(), 10_000);
    let mut last: HashMap<String, i64> = HashMap::new();
    for (key, seq) in published {
        if let Some(previous) = last.insert(key.clone(), seq) {
            assert!(seq > previous, "{key}: {previous} then {seq}");
        }
    }
    assert_eq!(last.len(), 100);
    assert_eq!(count(&db.pool, "inventory.stock_reports").await, 0);
}

fn outbox_pool(outbox: &Outbox) -> &sqlx::PgPool {
    outbox.pool()
}
