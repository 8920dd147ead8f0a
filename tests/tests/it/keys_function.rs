//! The scheduled `keys` function.

use k2b_core::identity::Purpose;
use k2b_tests::{TestDb, core_for};
use tokio::sync::OnceCell;

#[tokio::test]
async fn first_run_initialises_then_runs_rotate_and_prune() {
    let db = TestDb::new().await;
    let core = core_for(&db);
    let initialized = OnceCell::new();
    let report = keys::run(&core, &initialized).await.expect("run");
    assert!(report.failed.is_empty());
    assert!(initialized.initialized());
    for purpose in Purpose::ALL {
        let active: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM auth.signing_keys WHERE purpose = $1 AND state = 'active'",
        )
        .bind(purpose.as_str())
        .fetch_one(&db.pool)
        .await
        .expect("count");
        assert_eq!(active, 1, "{purpose}");
    }
    // Backdated active keys get successors on the next run.
    sqlx::query("UPDATE auth.signing_keys SET created_at = created_at - interval '31 days'")
        .execute(&db.pool)
        .await
        .expect("backdate");
    let report = keys::run(&core, &initialized).await.expect("run");
    for purpose in ["session", "invocation", "oauth"] {
        assert!(report.purposes[purpose].created_pending, "{purpose}");
    }
}

#[tokio::test]
async fn maintenance_raises_session_windows_and_prunes_old_families() {
    let db = TestDb::new().await;
    let core = core_for(&db);
    let user = k2b_tests::create_user(&core, "ada", false).await;
    let issued = core
        .identity
        .issue_session(
            &core.settings,
            k2b_core::identity::session::SessionRequest::web(user.id),
            k2b_core::identity::IssueOptions::default(),
        )
        .await
        .expect("session");
    // A family that outlives its key's window, and one long expired.
    sqlx::query(
        "UPDATE auth.session_families SET expires_at = now() + interval '400 days' WHERE sid = $1",
    )
    .bind(issued.sid)
    .execute(&db.pool)
    .await
    .expect("extend");
    let old = core
        .identity
        .issue_session(
            &core.settings,
            k2b_core::identity::session::SessionRequest::web(user.id),
            k2b_core::identity::IssueOptions::default(),
        )
        .await
        .expect("session");
    sqlx::query(
        "UPDATE auth.session_families SET issued_at = now() - interval '3 days', expires_at = now() - interval '2 days' WHERE sid = $1",
    )
    .bind(old.sid)
    .execute(&db.pool)
    .await
    .expect("age");
    let report = core
        .identity
        .run_key_maintenance()
        .await
        .expect("maintenance");
    assert_eq!(report.windows_raised, 1);
    assert_eq!(report.families_pruned, 1);
    let covered: bool = sqlx::query_scalar(
        "SELECT k.verify_until >= f.expires_at + interval '630 seconds'
         FROM auth.session_families f JOIN auth.signing_keys k ON k.kid = f.signing_kid WHERE f.sid = $1",
    )
    .bind(issued.sid)
    .fetch_one(&db.pool)
    .await
    .expect("window");
    assert!(covered);
}
