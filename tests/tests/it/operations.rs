//! The operator's commands: the doctor on a healthy and on deliberately broken installations,
//! key rotation and revocation, outbox status, and the `k2b-admin` binary itself.

use std::process::{Command, Output};

use k2b_core::Core;
use k2b_core::config::{Config, Mode};
use k2b_core::operations::doctor::{self, DoctorReport, Verdict};
use k2b_tests::{TEST_APP_SECRET, TestDb, core_for, workspace_binary};
use serde_json::json;

/// A key-encryption key other than the local default the test installation seals with.
const OTHER_KEK: &str = "0202020202020202020202020202020202020202020202020202020202020202";

/// A healthy local installation: keys for every purpose and the PWA shell registered.
async fn healthy(db: &TestDb) -> Core {
    let core = core_for(db);
    core.identity.initialize().await.expect("initialise keys");
    k2b_tests::register_pwa_shell(&db.pool).await;
    core
}

fn verdict(report: &DoctorReport, name: &str) -> Verdict {
    report
        .check(name)
        .unwrap_or_else(|| panic!("no check {name}: {:#?}", report.lines()))
        .verdict
}

fn failed(report: &DoctorReport) -> Vec<String> {
    report
        .checks
        .iter()
        .filter(|c| c.verdict == Verdict::Fail)
        .map(|c| c.name.clone())
        .collect()
}

#[tokio::test]
async fn the_doctor_passes_a_healthy_installation_check_by_check() {
    let db = TestDb::new().await;
    let core = healthy(&db).await;
    let report = doctor::run(&core).await;
    assert!(report.healthy(), "{:#?}", report.lines());
    for name in [
        "database",
        "migrations",
        "key-encryption",
        "signing-keys:session",
        "signing-keys:invocation",
        "signing-keys:oauth",
        "queue:wakeup",
        "queue:live",
        "app-url",
        "pwa-shell",
        "registry",
        "clock",
    ] {
        assert_eq!(verdict(&report, name), Verdict::Ok, "{:#?}", report.lines());
    }
    let lines = report.lines();
    assert_eq!(lines.len(), report.checks.len(), "one line per check");
    assert!(lines.iter().all(|l| l.starts_with("ok ")), "{lines:#?}");
}

#[tokio::test]
async fn a_wrong_key_encryption_key_is_named_with_the_keys_it_cannot_open() {
    let db = TestDb::new().await;
    healthy(&db).await;
    let url = db.url();
    let data = std::env::temp_dir().join(format!("{}-wrong-kek", db.name));
    let config = Config::from_lookup(Mode::Local, |name| match name {
        "DATABASE_URL" => Some(url.clone()),
        "K2B_DATA_DIR" => Some(data.display().to_string()),
        "APP_SECRET" => Some(TEST_APP_SECRET.to_string()),
        "APP_URL" => Some("https://cloud.example.test".to_string()),
        "CLOUD_IDENTITY_KEY_ENCRYPTION_KEY" => Some(OTHER_KEK.to_string()),
        _ => None,
    })
    .expect("config");
    let core = Core::with_pool(config, db.pool.clone());
    let report = doctor::run(&core).await;
    assert_eq!(failed(&report), ["key-encryption"], "{:#?}", report.lines());
    let check = report.check("key-encryption").expect("check");
    let kids: Vec<String> = sqlx::query_scalar("SELECT kid FROM auth.signing_keys")
        .fetch_all(&db.pool)
        .await
        .expect("kids");
    assert_eq!(kids.len(), 3);
    for kid in &kids {
        assert!(check.detail.contains(kid.as_str()), "{}", check.detail);
    }
    assert!(
        check
            .fix
            .as_deref()
            .is_some_and(|f| f.contains("CLOUD_IDENTITY_PREVIOUS_KEY")),
        "{check:?}"
    );
    std::fs::remove_dir_all(data).ok();
}

#[tokio::test]
async fn a_missing_migration_and_a_newer_schema_are_named() {
    let db = TestDb::new().await;
    let core = healthy(&db).await;
    let latest = k2b_core::db::latest_known_migration().expect("migrations");
    sqlx::query("DELETE FROM _sqlx_migrations WHERE version = $1")
        .bind(latest)
        .execute(&db.pool)
        .await
        .expect("forget the latest migration");
    let report = doctor::run(&core).await;
    assert_eq!(failed(&report), ["migrations"], "{:#?}", report.lines());
    let check = report.check("migrations").expect("check");
    assert_eq!(check.detail, format!("migration {latest} not applied"));
    // `migrate` applies it again, and the doctor is satisfied.
    let migrated = admin::execute(&core, command(&["migrate"]))
        .await
        .expect("migrate");
    assert!(migrated.ok, "{:?}", migrated.lines);
    assert_eq!(migrated.value["applied"], json!([latest]));
    assert!(doctor::run(&core).await.healthy());

    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time)
         VALUES (999999, 'from a later release', true, '\\x00', 1)",
    )
    .execute(&db.pool)
    .await
    .expect("a later release's migration");
    let report = doctor::run(&core).await;
    assert_eq!(failed(&report), ["migrations"]);
    assert!(
        report
            .check("migrations")
            .expect("check")
            .detail
            .contains("999999"),
        "{:#?}",
        report.lines()
    );
    let refused = admin::execute(&core, command(&["migrate"]))
        .await
        .expect("migrate");
    assert!(
        !refused.ok,
        "an older release must not migrate a newer schema"
    );
}

#[tokio::test]
async fn a_purpose_without_an_active_key_is_named_and_rotate_repairs_it() {
    let db = TestDb::new().await;
    let core = healthy(&db).await;
    sqlx::query(
        "UPDATE auth.signing_keys SET state = 'retired', retired_at = now() WHERE purpose = 'oauth'",
    )
    .execute(&db.pool)
    .await
    .expect("retire the oauth key");
    let report = doctor::run(&core).await;
    assert_eq!(
        failed(&report),
        ["signing-keys:oauth"],
        "{:#?}",
        report.lines()
    );
    let check = report.check("signing-keys:oauth").expect("check");
    assert!(check.detail.contains("no active oauth key"), "{check:?}");
    assert!(
        check
            .fix
            .as_deref()
            .is_some_and(|f| f.contains("keys rotate --purpose oauth")),
        "{check:?}"
    );
    let rotated = admin::execute(&core, command(&["keys", "rotate", "--purpose", "oauth"]))
        .await
        .expect("rotate");
    assert_eq!(rotated.value["rotation"]["outcome"], "createdActive");
    assert!(doctor::run(&core).await.healthy());
}

#[tokio::test]
async fn a_key_due_for_a_successor_fails_until_one_is_published() {
    let db = TestDb::new().await;
    let core = healthy(&db).await;
    sqlx::query(
        "UPDATE auth.signing_keys SET created_at = created_at - interval '31 days'
         WHERE purpose = 'session'",
    )
    .execute(&db.pool)
    .await
    .expect("age the session key");
    let report = doctor::run(&core).await;
    assert_eq!(
        failed(&report),
        ["signing-keys:session"],
        "{:#?}",
        report.lines()
    );
    let rotate = || command(&["keys", "rotate", "--purpose", "session"]);
    let first = admin::execute(&core, rotate()).await.expect("rotate");
    assert_eq!(first.value["rotation"]["outcome"], "scheduled");
    let kid = first.value["rotation"]["kid"].clone();
    // A second rotation does not pile up successors.
    let second = admin::execute(&core, rotate()).await.expect("rotate");
    assert_eq!(second.value["rotation"]["outcome"], "alreadyScheduled");
    assert_eq!(second.value["rotation"]["kid"], kid);
    let pending: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM auth.signing_keys WHERE purpose = 'session' AND state = 'pending'",
    )
    .fetch_one(&db.pool)
    .await
    .expect("count");
    assert_eq!(pending, 1);
    let report = doctor::run(&core).await;
    assert!(report.healthy(), "{:#?}", report.lines());
    assert!(
        report
            .check("signing-keys:session")
            .expect("check")
            .detail
            .contains(kid.as_str().unwrap_or("?"))
    );
}

#[tokio::test]
async fn a_missing_shell_and_a_stale_registry_entry_are_named() {
    let db = TestDb::new().await;
    let core = healthy(&db).await;
    sqlx::query(
        "UPDATE registry.apps SET updated_at = now() - interval '10 minutes',
                expires_at = now() - interval '5 minutes' WHERE app_id = 'pwa'",
    )
    .execute(&db.pool)
    .await
    .expect("let the shell's entry go stale");
    let report = doctor::run(&core).await;
    assert_eq!(
        failed(&report),
        ["pwa-shell", "registry"],
        "{:#?}",
        report.lines()
    );
    assert!(
        report
            .check("registry")
            .expect("check")
            .detail
            .contains("pwa (expired")
    );
}

fn command(words: &[&str]) -> admin::Command {
    admin::parse(words).expect("command").command
}

#[tokio::test]
async fn outbox_status_shows_depth_age_and_the_failing_keys() {
    let db = TestDb::new().await;
    let core = core_for(&db);
    let empty = admin::execute(&core, command(&["outbox", "status"]))
        .await
        .expect("status");
    assert_eq!(empty.value["outboxes"], json!([]));
    assert_eq!(empty.value["oldestDueAgeSeconds"], 0.0);
    sqlx::query(
        "INSERT INTO events.outbox (id, app_id, kind, ordering_key, payload, attempts,
                                    next_attempt_at, last_error, created_at)
         VALUES (gen_random_uuid(), 'crm', 'live', 'deal:1', '{}', 3, now() - interval '1 second',
                 'queue refused', now() - interval '7 minutes'),
                (gen_random_uuid(), 'crm', 'live', 'deal:1', '{}', 0, now(), NULL, now()),
                (gen_random_uuid(), 'crm', 'live', 'deal:2', '{}', 0, now() + interval '1 hour',
                 NULL, now() - interval '1 hour')",
    )
    .execute(&db.pool)
    .await
    .expect("outbox rows");
    let status = admin::execute(&core, command(&["outbox", "status"]))
        .await
        .expect("status");
    let crm = &status.value["outboxes"][0];
    assert_eq!(crm["name"], "live:crm");
    assert_eq!(crm["depth"], 3);
    assert_eq!(crm["due"], 2);
    assert_eq!(crm["failingKeyCount"], 1);
    assert_eq!(crm["failingKeys"][0]["key"], "deal:1");
    assert_eq!(crm["failingKeys"][0]["attempts"], 3);
    assert_eq!(crm["failingKeys"][0]["lastError"], "queue refused");
    // The hour-old row is not due: the oldest due row is the 7-minute one.
    let oldest = crm["oldestAgeSeconds"].as_f64().expect("age");
    let due = crm["oldestDueAgeSeconds"].as_f64().expect("age");
    assert!((3590.0..3700.0).contains(&oldest), "{oldest}");
    assert!((415.0..500.0).contains(&due), "{due}");
    assert_eq!(status.value["oldestDueAgeSeconds"].as_f64(), Some(due));
    assert!(
        status
            .lines
            .iter()
            .any(|l| l.contains("failing deal:1 after 3 attempts") && l.ends_with("queue refused")),
        "{:#?}",
        status.lines
    );
}

#[tokio::test]
async fn revocation_needs_a_known_key_and_a_reason() {
    let db = TestDb::new().await;
    let core = healthy(&db).await;
    let kid: String = sqlx::query_scalar(
        "SELECT kid FROM auth.signing_keys WHERE purpose = 'session' AND state = 'active'",
    )
    .fetch_one(&db.pool)
    .await
    .expect("kid");
    let revoked = admin::execute(
        &core,
        command(&["keys", "revoke", &kid, "--reason", "leaked in a log"]),
    )
    .await
    .expect("revoke");
    assert!(revoked.ok);
    let (state, reason): (String, Option<String>) =
        sqlx::query_as("SELECT state, revoke_reason FROM auth.signing_keys WHERE kid = $1")
            .bind(&kid)
            .fetch_one(&db.pool)
            .await
            .expect("row");
    assert_eq!(state, "revoked");
    assert_eq!(reason.as_deref(), Some("leaked in a log"));
    let again = admin::execute(
        &core,
        command(&["keys", "revoke", &kid, "--reason", "again"]),
    )
    .await
    .expect("revoke");
    assert!(!again.ok, "a key already revoked is not revoked twice");
    assert!(
        admin::execute(&core, command(&["keys", "revoke", &kid, "--reason", " "]))
            .await
            .is_err()
    );
    // The successor signs: the doctor sees an active session key.
    assert!(doctor::run(&core).await.healthy());
}

// --- the binary -------------------------------------------------------------------------------

fn k2b_admin(env: &[(&str, String)], args: &[&str]) -> Output {
    let mut command = Command::new(workspace_binary("k2b-admin"));
    for name in [
        "K2B_ENV",
        "DATABASE_URL",
        "APP_SECRET",
        "APP_URL",
        "RUST_LOG",
        "CLOUD_IDENTITY_KEY_ENCRYPTION_KEY",
        "K2B_WAKEUP_QUEUE_URL",
        "K2B_LIVE_QUEUE_URL",
    ] {
        command.env_remove(name);
    }
    for (name, value) in env {
        command.env(name, value);
    }
    command
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run k2b-admin: {e}"))
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[tokio::test]
async fn the_command_line_exits_non_zero_on_a_failed_check_and_names_it() {
    let db = TestDb::new().await;
    healthy(&db).await;
    let local = |kek: Option<&str>| {
        let mut env = vec![
            ("K2B_ENV", "local".to_string()),
            ("DATABASE_URL", db.url()),
            ("APP_SECRET", TEST_APP_SECRET.to_string()),
            ("APP_URL", "https://cloud.example.test".to_string()),
        ];
        if let Some(kek) = kek {
            env.push(("CLOUD_IDENTITY_KEY_ENCRYPTION_KEY", kek.to_string()));
        }
        env
    };
    let ok = k2b_admin(&local(None), &["doctor"]);
    assert_eq!(ok.status.code(), Some(0), "{}", stdout(&ok));
    assert!(
        stdout(&ok)
            .lines()
            .last()
            .is_some_and(|l| l.ends_with("all passed"))
    );

    let broken = k2b_admin(&local(Some(OTHER_KEK)), &["doctor"]);
    assert_eq!(broken.status.code(), Some(1), "{}", stdout(&broken));
    let text = stdout(&broken);
    assert!(
        text.lines()
            .any(|l| l.starts_with("FAIL key-encryption") && l.contains("— fix:")),
        "{text}"
    );
    assert!(
        text.lines().last().is_some_and(|l| l.ends_with("1 failed")),
        "{text}"
    );

    let status = k2b_admin(&local(None), &["--json", "keys", "status"]);
    assert_eq!(status.status.code(), Some(0));
    let value: serde_json::Value = serde_json::from_slice(&status.stdout).expect("json");
    assert_eq!(value["keys"].as_array().map(Vec::len), Some(3));

    let usage = k2b_admin(&local(None), &["keys", "revoke", "some-kid"]);
    assert_eq!(
        usage.status.code(),
        Some(2),
        "a revocation without a reason is bad usage"
    );
}

#[tokio::test]
async fn in_production_the_doctor_wants_https_and_the_queues() {
    let db = TestDb::new().await;
    healthy(&db).await;
    // The production configuration: the installation's key-encryption key (the local default
    // is what sealed the test keys), a plain-http public URL and no queue URLs.
    let kek = "6b32622d6c6f63616c2d6465762d6b656b2d6e6f742d666f722d70726f642121";
    let env = vec![
        ("K2B_ENV", "production".to_string()),
        ("DATABASE_URL", db.url()),
        ("APP_SECRET", TEST_APP_SECRET.to_string()),
        ("APP_URL", "http://cloud.example.test".to_string()),
        ("CLOUD_IDENTITY_KEY_ENCRYPTION_KEY", kek.to_string()),
    ];
    let output = k2b_admin(&env, &["doctor"]);
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(1), "{text}");
    let failed: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("FAIL "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(failed, ["queue:wakeup", "queue:live", "app-url"], "{text}");
}
