//! The scheduled `maintenance` function against a real database.

use k2b_core::Core;
use k2b_tests::TestDb;
use serde_json::json;

#[tokio::test]
async fn a_run_prunes_long_expired_registry_entries_and_reports_it() {
    let db = TestDb::new().await;
    let core = Core::with_pool(db.config(), db.pool.clone());
    for (id, expires) in [("old", "-1 hour"), ("fresh", "1 minute")] {
        let entry = json!({"id": id, "name": id, "icon": "i", "description": "d",
            "baseUrl": "http://x:1", "routes": ["/x"]});
        sqlx::query(
            "INSERT INTO registry.apps (app_id, entry, updated_at, expires_at)
             VALUES ($1, $2, now() - interval '2 hours', now() + $3::interval)",
        )
        .bind(id)
        .bind(entry)
        .bind(expires)
        .execute(&db.pool)
        .await
        .expect("insert");
    }
    let report = maintenance::run(&core).await.expect("run");
    assert_eq!(report.registry_pruned, 1);
    let report = maintenance::run(&core).await.expect("run");
    assert_eq!(report.registry_pruned, 0, "nothing left to prune");
}
