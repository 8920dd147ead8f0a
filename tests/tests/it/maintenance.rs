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

#[tokio::test]
async fn a_run_deletes_one_help_corpus_not_renewed_for_six_minutes() {
    use k2b_core::help::{compile_help, define_help, store};
    let db = TestDb::new().await;
    let core = Core::with_pool(db.config(), db.pool.clone());
    for (app, age) in [
        ("old", "7 minutes"),
        ("older", "1 day"),
        ("fresh", "5 minutes"),
    ] {
        let definition = define_help(&[&format!("---\nid: start\ntitle: Start\n---\n{app}\n")])
            .expect("definition");
        let help = compile_help(app, None, &definition).expect("compile");
        store::register(&core.pool, &help.corpus)
            .await
            .expect("register");
        sqlx::query(
            "UPDATE help.corpora SET last_seen_at = now() - $2::interval WHERE app_id = $1",
        )
        .bind(app)
        .bind(age)
        .execute(&db.pool)
        .await
        .expect("age");
    }
    let remaining = || async {
        sqlx::query_scalar::<_, String>("SELECT app_id FROM help.corpora ORDER BY app_id")
            .fetch_all(&db.pool)
            .await
            .expect("rows")
    };
    let report = maintenance::run(&core).await.expect("run");
    assert_eq!(report.help_corpora_deleted, 1);
    assert_eq!(remaining().await, ["fresh", "old"], "the oldest goes first");
    let report = maintenance::run(&core).await.expect("run");
    assert_eq!(report.help_corpora_deleted, 1);
    let report = maintenance::run(&core).await.expect("run");
    assert_eq!(report.help_corpora_deleted, 0);
    assert_eq!(remaining().await, ["fresh"]);
    let documents: i64 = sqlx::query_scalar("SELECT count(*) FROM help.documents")
        .fetch_one(&db.pool)
        .await
        .expect("count");
    assert_eq!(documents, 1, "documents go with their corpus");
}

#[tokio::test]
async fn expired_mail_attachment_records_stop_counting_against_the_total() {
    let db = TestDb::new().await;
    let core = k2b_tests::core_for(&db);
    sqlx::query(
        "INSERT INTO outgoing_mail.attachment_objects (object_key, app_id, bytes, expires_at)
         SELECT 'att/inventory/' || n, 'inventory', 1000,
                now() + CASE WHEN n <= 3 THEN interval '-1 minute' ELSE interval '1 hour' END
         FROM generate_series(1, 5) AS n",
    )
    .execute(&db.pool)
    .await
    .expect("objects");
    let report = maintenance::run(&core).await.expect("run");
    assert_eq!(report.mail_objects_forgotten, 3);
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM outgoing_mail.attachment_objects")
        .fetch_one(&db.pool)
        .await
        .expect("count");
    assert_eq!(left, 2, "live objects keep counting");
    let again = maintenance::run(&core).await.expect("run");
    assert_eq!(again.mail_objects_forgotten, 0);
}

#[tokio::test]
async fn a_local_run_removes_attachment_files_past_their_lifetime() {
    use k2b_core::mail::objects::{OBJECT_LIFETIME, ObjectStore};

    let db = TestDb::new().await;
    let core = k2b_tests::core_for(&db);
    let dir = tempfile::tempdir().expect("folder");
    assert!(core.mail_objects.install(ObjectStore::local(dir.path())));
    let store = core.mail_objects.store().await;
    let keys = [uuid::Uuid::new_v4(), uuid::Uuid::new_v4()]
        .map(|id| ObjectStore::key_for("inventory", id));
    for key in &keys {
        store
            .put_bytes(key, bytes::Bytes::from_static(b"attachment"))
            .await
            .expect("put");
    }
    let [old, young] = keys.map(|key| dir.path().join(key));
    std::fs::File::options()
        .write(true)
        .open(&old)
        .expect("open")
        .set_modified(
            std::time::SystemTime::now() - OBJECT_LIFETIME - std::time::Duration::from_secs(60),
        )
        .expect("age");
    let report = maintenance::run(&core).await.expect("run");
    assert_eq!(report.mail_files_purged, 1);
    assert!(!old.exists());
    assert!(young.exists());
}

#[tokio::test]
async fn a_run_forgets_the_rate_limit_counts_of_idle_clients() {
    let db = TestDb::new().await;
    let core = Core::with_pool(db.config(), db.pool.clone());
    sqlx::query(
        "INSERT INTO auth.request_rate (client_key, second, requests)
         SELECT key, floor(extract(epoch FROM now()))::bigint - age, 1
         FROM (VALUES ('web:idle', 61), ('web:recent', 5)) AS c(key, age)",
    )
    .execute(&db.pool)
    .await
    .expect("insert");
    let report = maintenance::run(&core).await.expect("run");
    assert_eq!(report.request_rates_pruned, 1);
    let kept: Vec<String> = sqlx::query_scalar("SELECT client_key FROM auth.request_rate")
        .fetch_all(&db.pool)
        .await
        .expect("read");
    assert_eq!(kept, ["web:recent"]);
}
