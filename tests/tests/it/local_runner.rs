//! `k2b-local` as a newcomer uses it: start, health, restart, bad configuration, admin commands.

use k2b_tests::{LocalRunner, LogCapture, TEST_APP_SECRET, TestDb, admin_cookie, run_local};
use serde_json::Value;

fn fresh_database_url(db: &TestDb) -> (String, String) {
    let name = format!("k2b_local_{}", uuid::Uuid::new_v4().simple());
    let url = db.url_for(&name);
    (name, url)
}

#[tokio::test]
async fn first_start_creates_migrates_and_seeds_and_a_restart_keeps_the_data() {
    let db = TestDb::new().await;
    let (name, url) = fresh_database_url(&db);
    let env = [("DATABASE_URL", url.as_str())];

    let runner = LocalRunner::start(&env);
    let health: Value = reqwest::get(format!("{}/healthz", runner.base_url))
        .await
        .expect("healthz")
        .json()
        .await
        .expect("json");
    let latest = k2b_core::db::latest_known_migration().expect("migrations");
    assert_eq!(
        health,
        serde_json::json!({"status": "ok", "database": "ok", "migration": latest})
    );
    let first = runner.stop();
    assert!(first.contains("created the database"), "{first}");
    assert!(first.contains("applied"), "{first}");
    assert!(first.contains("local mode"), "local mode says so: {first}");

    let set = run_local(&env, &["setting", "set", "app.name", "Kept Cloud"], None);
    assert!(set.status.success(), "{set:?}");

    let runner = LocalRunner::start(&env);
    let response = reqwest::get(format!("{}/healthz", runner.base_url))
        .await
        .expect("healthz");
    assert_eq!(response.status(), 200);
    let second = runner.stop();
    assert!(
        second.contains(&format!("database is up to date (migration {latest})")),
        "{second}"
    );
    assert!(!second.contains("created the database"), "{second}");

    let get = run_local(&env, &["setting", "get", "app.name"], None);
    assert_eq!(String::from_utf8_lossy(&get.stdout).trim(), "Kept Cloud");
    let pool = sqlx::PgPool::connect(&url).await.expect("connect");
    let admins: i64 =
        sqlx::query_scalar("SELECT count(*) FROM auth.users WHERE uid = 'admin' AND admin")
            .fetch_one(&pool)
            .await
            .expect("count");
    assert_eq!(admins, 1, "seeded once, kept on restart");
    let demo: i64 = sqlx::query_scalar("SELECT count(*) FROM registry.apps WHERE app_id = 'demo'")
        .fetch_one(&pool)
        .await
        .expect("count");
    assert_eq!(demo, 1, "the demo app is registered");
    pool.close().await;
    db.drop_database(&name).await;
}

#[tokio::test]
async fn bad_configuration_exits_non_zero_with_one_line_naming_the_variable() {
    let db = TestDb::new().await;
    let url = db.url();
    let logs = LogCapture::start();
    let output = run_local(
        &[
            ("K2B_ENV", "production"),
            ("DATABASE_URL", url.as_str()),
            ("APP_SECRET", "too-short"),
        ],
        &["serve", "--listen", "127.0.0.1:0"],
        None,
    );
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].contains("APP_SECRET must be at least 32 characters"),
        "{stderr}"
    );
    // What the runner printed on either stream, and what this process logged meanwhile.
    let own = logs.own_text();
    assert!(
        own.contains("APP_SECRET must be at least 32 characters"),
        "the capture holds the runner's output: {own}"
    );
    assert!(
        !logs.text().contains("too-short"),
        "the secret is never echoed"
    );

    let output = run_local(&[("K2B_DB_MAX_CONNECTIONS", "lots")], &["migrate"], None);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("K2B_DB_MAX_CONNECTIONS must be"));
}

#[tokio::test]
async fn settings_round_trip_through_the_cli_and_are_stored_encrypted() {
    let db = TestDb::new().await;
    let url = db.url();
    let env = [
        ("DATABASE_URL", url.as_str()),
        ("APP_SECRET", TEST_APP_SECRET),
    ];

    let set = run_local(&env, &["setting", "set", "app.name", "Example Cloud"], None);
    assert!(set.status.success(), "{set:?}");
    let get = run_local(&env, &["setting", "get", "app.name"], None);
    assert!(get.status.success());
    assert_eq!(String::from_utf8_lossy(&get.stdout), "Example Cloud\n");

    let stored: String =
        sqlx::query_scalar("SELECT value FROM settings.entries WHERE key = 'app.name'")
            .fetch_one(&db.pool)
            .await
            .expect("row");
    assert!(
        stored.starts_with("v1.") && !stored.contains("Example"),
        "{stored}"
    );

    // Flip one character of the ciphertext: the read fails instead of returning garbage.
    let mut bytes = stored.into_bytes();
    let last = bytes.len() - 1;
    bytes[last] = if bytes[last] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(bytes).expect("ascii");
    sqlx::query("UPDATE settings.entries SET value = $1 WHERE key = 'app.name'")
        .bind(&tampered)
        .execute(&db.pool)
        .await
        .expect("tamper");
    let get = run_local(&env, &["setting", "get", "app.name"], None);
    assert!(!get.status.success());
    assert!(get.stdout.is_empty());
    assert!(String::from_utf8_lossy(&get.stderr).contains("does not decrypt"));

    // Another APP_SECRET cannot read values written under this one.
    let ok = run_local(&env, &["setting", "set", "app.locale", "de-ch"], None);
    assert!(ok.status.success());
    let other = [
        ("DATABASE_URL", url.as_str()),
        ("APP_SECRET", "another-secret-that-is-long-enough-0000"),
    ];
    let get = run_local(&other, &["setting", "get", "app.locale"], None);
    assert!(!get.status.success());
    let get = run_local(&env, &["setting", "get", "app.locale"], None);
    assert_eq!(String::from_utf8_lossy(&get.stdout), "de-CH\n");

    let bad = run_local(
        &env,
        &["setting", "set", "user.category.guest.enabled", "maybe"],
        None,
    );
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("must be true or false"));
}

#[tokio::test]
async fn a_setting_value_can_come_from_standard_input() {
    let db = TestDb::new().await;
    let url = db.url();
    let env = [
        ("DATABASE_URL", url.as_str()),
        ("APP_SECRET", TEST_APP_SECRET),
    ];
    let logo = format!("data:image/png;base64,{}\n", "A".repeat(3 * 1024 * 1024));
    let set = run_local(&env, &["setting", "set", "app.logo", "-"], Some(&logo));
    assert!(
        set.status.success(),
        "{:?}",
        String::from_utf8_lossy(&set.stderr)
    );
    let get = run_local(&env, &["setting", "get", "app.logo"], None);
    assert_eq!(String::from_utf8_lossy(&get.stdout), logo);
}

#[tokio::test]
async fn users_and_apps_are_created_by_admin_commands() {
    let db = TestDb::new().await;
    let url = db.url();
    let env = [
        ("DATABASE_URL", url.as_str()),
        ("APP_SECRET", TEST_APP_SECRET),
    ];
    let created = run_local(
        &env,
        &[
            "user",
            "create",
            "grace",
            "--name",
            "Grace Example",
            "--guest",
        ],
        None,
    );
    assert!(created.status.success(), "{created:?}");
    let id = String::from_utf8_lossy(&created.stdout).trim().to_string();
    let (uid, profile): (String, String) =
        sqlx::query_as("SELECT uid, profile FROM auth.users WHERE id = $1::uuid")
            .bind(&id)
            .fetch_one(&db.pool)
            .await
            .expect("user");
    assert_eq!((uid.as_str(), profile.as_str()), ("grace", "guest"));
    let again = run_local(&env, &["user", "create", "grace"], None);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("already exists"));

    let entry = serde_json::json!({
        "id": "inventory", "name": "Inventory", "icon": "ti ti-box", "description": "Stock",
        "baseUrl": "http://127.0.0.1:4000", "routes": ["/app/inventory"]
    })
    .to_string();
    let registered = run_local(&env, &["app", "register", "-"], Some(&entry));
    assert!(registered.status.success(), "{registered:?}");
    let apps = k2b_core::registry::list_apps(&db.pool).await.expect("list");
    assert_eq!(
        apps.iter().map(|a| a.id.as_str()).collect::<Vec<_>>(),
        vec!["inventory"]
    );
    let invalid = run_local(&env, &["app", "register", "-"], Some(r#"{"id":"x"}"#));
    assert!(!invalid.status.success());
    assert!(String::from_utf8_lossy(&invalid.stderr).contains("must be a non-empty string"));
}

#[tokio::test]
async fn sessions_and_app_credentials_from_the_cli_work_against_the_runner() {
    let db = TestDb::new().await;
    let url = db.url();
    let env = [
        ("DATABASE_URL", url.as_str()),
        ("APP_SECRET", TEST_APP_SECRET),
    ];
    let runner = LocalRunner::start(&env);

    let issued = run_local(&env, &["session", "issue", "--user", "admin"], None);
    assert!(issued.status.success(), "{issued:?}");
    let cookie = String::from_utf8_lossy(&issued.stdout).trim().to_string();
    assert!(cookie.starts_with("session_token=ey"), "{cookie}");
    let unknown = run_local(&env, &["session", "issue", "--user", "nobody"], None);
    assert!(!unknown.status.success());
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("no account with uid `nobody`"));

    // The cookie verifies against the runner's published session keys.
    let token = cookie.trim_start_matches("session_token=");
    let jwks = format!("{}/.well-known/cloud-session-jwks.json", runner.base_url);
    let verifier = k2b_core::identity::remote::RemoteVerifier::new(
        jwks,
        runner.base_url.clone(),
        std::sync::Arc::new(k2b_core::identity::Metrics::default()),
    );
    assert!(verifier.verify_session(token).await.is_some());

    let credential = run_local(&env, &["app", "credential", "issue", "reports"], None);
    assert!(credential.status.success(), "{credential:?}");
    let token = String::from_utf8_lossy(&credential.stdout)
        .trim()
        .to_string();
    assert!(token.starts_with("cld_"));
    let entry = serde_json::json!({
        "id": "reports", "name": "Reports", "icon": "i", "description": "d",
        "baseUrl": "http://127.0.0.1:4000", "routes": ["/app/reports"]
    });
    let client = reqwest::Client::new();
    let published = client
        .put(format!("{}/api/registry/v1/apps/reports", runner.base_url))
        .bearer_auth(&token)
        .json(&entry)
        .send()
        .await
        .expect("put");
    assert_eq!(published.status(), 200);
    let forbidden = client
        .put(format!("{}/api/registry/v1/apps/demo", runner.base_url))
        .bearer_auth(&token)
        .json(&entry)
        .send()
        .await
        .expect("put");
    assert_eq!(forbidden.status(), 403);
    runner.stop();
}

#[tokio::test]
async fn live_updates_are_visible_locally_without_aws() {
    let db = TestDb::new().await;
    let url = db.url();
    let env = [
        ("DATABASE_URL", url.as_str()),
        ("APP_SECRET", TEST_APP_SECRET),
    ];
    let runner = LocalRunner::start(&env);
    // A writer that only runs SQL: the runner hears the commit and publishes without a sweep.
    sqlx::query("SELECT events.enqueue(gen_random_uuid(), 'demo', 'live', 'board-1', '{\"v\":1,\"k\":\"board-1\",\"d\":{\"n\":1}}'::jsonb)")
        .execute(&db.pool)
        .await
        .expect("enqueue");
    let client = reqwest::Client::new();
    let live_events = || async {
        let events: Value = client
            .get(format!("{}/_local/live-events", runner.base_url))
            .send()
            .await
            .expect("events")
            .json()
            .await
            .expect("json");
        events["events"].as_array().expect("events").clone()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut events = live_events().await;
    while events.is_empty() && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        events = live_events().await;
    }
    assert_eq!(events.len(), 1, "published without a sweep: {events:?}");
    assert_eq!(events[0]["appId"], "demo");
    assert_eq!(events[0]["orderingKey"], "board-1");
    assert_eq!(events[0]["payload"]["d"]["n"], 1);
    // A sweep now finds nothing more, and nothing is published twice.
    let swept: Value = client
        .post(format!("{}/_local/outbox/sweep", runner.base_url))
        .send()
        .await
        .expect("sweep")
        .json()
        .await
        .expect("json");
    assert_eq!(swept["drained"], 0);
    assert_eq!(live_events().await.len(), 1);
    // The runner's own routes answer only to a loopback Host (a rebinding page sends its own).
    let port = runner
        .base_url
        .rsplit(':')
        .next()
        .expect("port")
        .to_string();
    for (host, status) in [
        ("attacker.example".to_string(), 403),
        (format!("attacker.example:{port}"), 403),
        (format!("127.0.0.1.nip.io:{port}"), 403),
        (format!("localhost:{port}"), 200),
        (format!("[::1]:{port}"), 200),
    ] {
        let reply = client
            .get(format!("{}/_local/live-events", runner.base_url))
            .header("host", &host)
            .send()
            .await
            .expect("live events");
        assert_eq!(reply.status().as_u16(), status, "Host {host}");
    }
    runner.stop();
}

#[tokio::test]
async fn the_runners_own_routes_exist_only_on_a_loopback_listener() {
    let db = TestDb::new().await;
    let url = db.url();
    let env = [
        ("DATABASE_URL", url.as_str()),
        ("APP_SECRET", TEST_APP_SECRET),
        ("K2B_LOCAL_SMTP_SINK", "off"),
    ];
    let runner = LocalRunner::start_on(&env, "0.0.0.0:0");
    let port = runner
        .base_url
        .rsplit(':')
        .next()
        .expect("port")
        .to_string();
    let client = reqwest::Client::new();
    let health = client
        .get(format!("http://127.0.0.1:{port}/healthz"))
        .send()
        .await
        .expect("health");
    assert_eq!(health.status().as_u16(), 200);
    for path in ["/_local/mail", "/_local/live-events"] {
        let reply = client
            .get(format!("http://127.0.0.1:{port}{path}"))
            .send()
            .await
            .expect("local route");
        assert_eq!(reply.status().as_u16(), 404, "{path}");
    }
    runner.stop();
}

#[tokio::test]
async fn the_demo_apps_help_answers_right_after_start() {
    let db = TestDb::new().await;
    let url = db.url();
    let env = [
        ("DATABASE_URL", url.as_str()),
        ("APP_SECRET", TEST_APP_SECRET),
    ];
    let runner = LocalRunner::start(&env);
    let cookie = admin_cookie(&env);
    let client = reqwest::Client::new();
    let get = |path: &str, locale: &str| {
        client
            .get(format!("{}{path}", runner.base_url))
            .header("cookie", &cookie)
            .header("x-cloud-locale", locale)
            .send()
    };
    let found: Value = get("/api/help/v1/demo/search?q=widget", "en")
        .await
        .expect("search")
        .json()
        .await
        .expect("json");
    assert_eq!(
        found,
        serde_json::json!({"locale": "en", "ids": ["widgets", "getting-started"]})
    );
    let everywhere: Value = get("/api/help/v1/search?q=widget", "en")
        .await
        .expect("search")
        .json()
        .await
        .expect("json");
    assert_eq!(everywhere["documents"][0]["appId"], "demo");
    assert_eq!(everywhere["documents"][0]["documentId"], "widgets");
    let german: Value = get("/api/help/v1/demo/documents/getting-started", "de-DE")
        .await
        .expect("read")
        .json()
        .await
        .expect("json");
    assert_eq!(german["locale"], "de");
    assert_eq!(german["title"], "Erste Schritte");
    assert!(
        german["html"]
            .as_str()
            .expect("html")
            .contains("<span class=\"k2b-sr-only\">Notiz: </span>")
    );
    let untranslated: Value = get("/api/help/v1/demo/documents/widgets", "de")
        .await
        .expect("read")
        .json()
        .await
        .expect("json");
    assert_eq!(untranslated["locale"], "en");
    let manifest = get("/api/help/v1/demo/manifest", "en")
        .await
        .expect("manifest");
    assert_eq!(manifest.status(), 200);
    let anonymous = client
        .get(format!(
            "{}/api/help/v1/demo/search?q=stock",
            runner.base_url
        ))
        .send()
        .await
        .expect("search");
    assert_eq!(anonymous.status(), 401);
    runner.stop();
}

/// The README's mail walk-through: the demo app sends with its credential, and `reports` reads
/// the demo app's log through its grant, without the text; attachments land in the data folder.
#[tokio::test]
async fn the_demo_app_sends_mail_and_reports_reads_its_log() {
    let db = TestDb::new().await;
    let url = db.url();
    let data = tempfile::tempdir().expect("data dir");
    let data_dir = data.path().to_string_lossy().to_string();
    let env = [
        ("DATABASE_URL", url.as_str()),
        ("APP_SECRET", TEST_APP_SECRET),
        ("K2B_DATA_DIR", data_dir.as_str()),
    ];
    let runner = LocalRunner::start(&env);
    let credential = |app: &str| {
        let issued = run_local(&env, &["app", "credential", "issue", app], None);
        assert!(issued.status.success(), "{issued:?}");
        String::from_utf8_lossy(&issued.stdout).trim().to_string()
    };
    let demo = credential("demo");
    let reports = credential("reports");
    let client = reqwest::Client::new();
    let sent: Value = client
        .post(format!("{}/api/mail/v1/send", runner.base_url))
        .bearer_auth(&demo)
        .header("prefer", "wait=0")
        .json(&serde_json::json!({
            "to": ["ann@example.org"], "subject": "Hello", "text": "Sent from the demo app.",
            "attachments": [{"filename": "a.txt", "contentType": "text/plain", "content": "aGk="}]
        }))
        .send()
        .await
        .expect("send")
        .json()
        .await
        .expect("json");
    assert_eq!(sent["status"], "queued", "{sent}");
    assert_eq!(sent["profile"], "local");
    assert_eq!(sent["attachments"][0]["size"], 2);
    let files: Vec<_> = walk(&data.path().join("mail"));
    assert_eq!(files.len(), 1, "{files:?}");

    let own: Value = client
        .get(format!("{}/api/mail/v1/messages?q=hello", runner.base_url))
        .bearer_auth(&demo)
        .send()
        .await
        .expect("list")
        .json()
        .await
        .expect("json");
    assert_eq!(own["total"], 1);
    assert_eq!(own["items"][0]["text"], "Sent from the demo app.");
    let granted: Value = client
        .get(format!(
            "{}/api/mail/v1/messages?apps=demo",
            runner.base_url
        ))
        .bearer_auth(&reports)
        .send()
        .await
        .expect("list")
        .json()
        .await
        .expect("json");
    assert_eq!(granted["total"], 1, "{granted}");
    assert_eq!(granted["items"][0]["subject"], "Hello");
    assert!(granted["items"][0].get("text").is_none());
    // `reports` declares only `mail:read`: it may not send.
    let refused = client
        .post(format!("{}/api/mail/v1/send", runner.base_url))
        .bearer_auth(&reports)
        .json(&serde_json::json!({"to": ["a@example.org"], "subject": "x", "text": "y"}))
        .send()
        .await
        .expect("send");
    assert_eq!(refused.status(), 403);
    runner.stop();
}

/// Every file below `dir`.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}

/// The run command needs no running Postgres: with `DATABASE_URL` unset and nothing on the
/// local default (moved to a free port with `PGPORT`, so the machine's own server is left
/// alone), the runner starts a private cluster from the installed server binaries, says so in
/// one line, stops it when it stops, and finds its data again on the next run; an admin command
/// in between does the same.
#[tokio::test]
async fn without_a_database_the_runner_starts_a_private_cluster_and_keeps_it() {
    use std::os::unix::fs::PermissionsExt;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port()
        .to_string();
    let data = tempfile::tempdir_in("/tmp").expect("data dir");
    // The server may run as another account (as root: `postgres`), which must reach the folder.
    std::fs::set_permissions(data.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let data_dir = data.path().to_string_lossy().to_string();
    let cluster = data.path().join("postgres");
    let env = [
        ("PGPORT", port.as_str()),
        ("K2B_DATA_DIR", data_dir.as_str()),
        ("APP_SECRET", TEST_APP_SECRET),
        ("K2B_LOCAL_SMTP_SINK", "off"),
    ];

    let runner = LocalRunner::start(&env);
    let health: Value = reqwest::get(format!("{}/healthz", runner.base_url))
        .await
        .expect("healthz")
        .json()
        .await
        .expect("json");
    assert_eq!(health["database"], "ok", "{health}");
    assert!(cluster.join("postmaster.pid").is_file(), "running");
    let first = runner.stop();
    let said: Vec<&str> = first
        .lines()
        .filter(|line| line.contains("private cluster"))
        .collect();
    assert_eq!(
        said,
        vec![format!(
            "no PostgreSQL on 127.0.0.1:{port}: created and started the private cluster in {} (PostgreSQL {}, stopped with the runner)",
            cluster.display(),
            std::fs::read_to_string(cluster.join("PG_VERSION"))
                .expect("PG_VERSION")
                .trim()
        )],
        "{first}"
    );
    assert!(first.contains("created the database"), "{first}");
    assert!(
        !cluster.join("postmaster.pid").exists(),
        "stopped with the runner"
    );

    let set = run_local(&env, &["setting", "set", "app.name", "Private Cloud"], None);
    assert!(set.status.success(), "{set:?}");
    assert!(
        String::from_utf8_lossy(&set.stderr).contains(": started the private cluster"),
        "{set:?}"
    );
    assert!(!cluster.join("postmaster.pid").exists(), "stopped again");

    let runner = LocalRunner::start(&env);
    let response = reqwest::get(format!("{}/healthz", runner.base_url))
        .await
        .expect("healthz");
    assert_eq!(response.status(), 200);
    let get = run_local(&env, &["setting", "get", "app.name"], None);
    assert_eq!(String::from_utf8_lossy(&get.stdout).trim(), "Private Cloud");
    assert!(
        String::from_utf8_lossy(&get.stderr).contains(": using the private cluster in"),
        "the runner's cluster, left running: {get:?}"
    );
    assert!(cluster.join("postmaster.pid").is_file(), "still running");
    let second = runner.stop();
    assert!(
        second.contains(": started the private cluster in"),
        "{second}"
    );
    assert!(!second.contains("created the database"), "{second}");
    assert!(!cluster.join("postmaster.pid").exists());
}

/// `security.rate_limit_per_second` holds for the installation: two runners on one database
/// (two execution environments) share one allowance per client and second.
#[tokio::test]
async fn the_rate_limit_holds_across_two_runners_sharing_a_database() {
    const LIMIT: usize = 4;
    let db = TestDb::new().await;
    let url = db.url();
    let env = [
        ("DATABASE_URL", url.as_str()),
        ("APP_SECRET", TEST_APP_SECRET),
    ];
    let set = run_local(
        &env,
        &[
            "setting",
            "set",
            "security.rate_limit_per_second",
            &LIMIT.to_string(),
        ],
        None,
    );
    assert!(set.status.success(), "{set:?}");
    let first = LocalRunner::start(&env);
    let second = LocalRunner::start(&env);
    let client = reqwest::Client::new();
    let database_second = || async {
        sqlx::query_as::<_, (i64, f64)>(
            "SELECT floor(extract(epoch FROM clock_timestamp()))::bigint,
                    (extract(epoch FROM clock_timestamp()) % 1)::float8",
        )
        .fetch_one(&db.pool)
        .await
        .expect("clock")
    };
    // A burst of requests spread over both runners inside one second of the database's clock.
    let mut measured = None;
    for _ in 0..5 {
        let (_, fraction) = database_second().await;
        tokio::time::sleep(std::time::Duration::from_secs_f64(1.05 - fraction)).await;
        let (start, _) = database_second().await;
        let burst = (0..3 * LIMIT).map(|i| {
            let base = if i % 2 == 0 {
                &first.base_url
            } else {
                &second.base_url
            };
            client.get(format!("{base}/api/auth/pwa/v1/devices")).send()
        });
        let statuses: Vec<u16> = futures::future::join_all(burst)
            .await
            .into_iter()
            .map(|response| response.expect("request").status().as_u16())
            .collect();
        let (end, _) = database_second().await;
        if start == end {
            measured = Some(statuses);
            break;
        }
    }
    let statuses = measured.expect("a burst within one second");
    let allowed = statuses.iter().filter(|status| **status != 429).count();
    assert_eq!(allowed, LIMIT, "{statuses:?}");
    // The others reach the route, which refuses a caller without a session.
    assert!(
        statuses.iter().all(|s| (400..500).contains(s)),
        "{statuses:?}"
    );
    first.stop();
    second.stop();
}
