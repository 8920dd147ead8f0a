//! The widget stream through `k2b-local`: lines leave as widgets settle, and many streams at
//! once all finish and leave the process's memory where it was.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k2b_core::registry::{APP_REGISTRY_TTL, store};
use k2b_tests::{LocalRunner, TEST_APP_SECRET, TestDb, admin_cookie, without_cargo_run_vars};
use serde_json::json;

use super::{Counters, LineReader, answers, lines, provider, summary_widget, widget_lines};

/// The demo app's slow widget takes 2 s: the start line and the three fast widgets arrive
/// before it settles.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lines_stream_through_the_runner_before_the_slow_widget_settles() {
    let db = TestDb::new().await;
    let url = db.url();
    let env = [
        ("DATABASE_URL", url.as_str()),
        ("APP_SECRET", TEST_APP_SECRET),
    ];
    let runner = LocalRunner::start(&env);
    let cookie = admin_cookie(&env);
    let client = reqwest::Client::new();
    let started = Instant::now();
    let response = client
        .get(format!("{}/api/widgets/v1", runner.base_url))
        .header("cookie", &cookie)
        .send()
        .await
        .expect("get");
    assert_eq!(response.status(), 200);
    let mut reader = LineReader::new(response);
    let start = reader.next().await.expect("start");
    assert_eq!(
        start,
        json!({"type": "start", "widgets": ["demo/stock", "demo/empty", "demo/slow", "demo/failing"]})
    );
    let mut fast = Vec::new();
    for _ in 0..3 {
        let line = reader.next().await.expect("a fast line");
        fast.push((
            line["key"].as_str().unwrap_or_default().to_string(),
            line["status"].clone(),
        ));
    }
    let fast_done = started.elapsed();
    fast.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        fast,
        [
            ("demo/empty".to_string(), json!("empty")),
            ("demo/failing".to_string(), json!("error")),
            ("demo/stock".to_string(), json!("ok")),
        ]
    );
    assert!(
        fast_done < Duration::from_millis(1800),
        "the fast widgets waited for the slow one ({fast_done:?})"
    );
    let slow = reader.next().await.expect("slow line");
    assert_eq!(slow["key"], "demo/slow");
    assert_eq!(slow["status"], "ok");
    assert!(slow["ms"].as_u64().expect("ms") >= 2000);
    assert!(started.elapsed() >= Duration::from_secs(2));
    assert_eq!(
        reader.next().await.expect("done"),
        json!({"type": "done", "status": "partial"})
    );
    runner.stop();
}

/// 200 streams of 10 widgets at once: every stream ends with `done` and only the widgets'
/// own answers; afterwards the runner's memory returns to its level (no growth per burst).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_concurrent_streams_finish_and_memory_returns() {
    const STREAMS: usize = 200;
    const WIDGETS: usize = 10;
    let db = TestDb::new().await;
    let url = db.url();
    // 200 requests wait for the runner's 10 connections while the other tests load the same
    // Postgres: the wait may exceed the default 3 s, which would answer 503 (by design) and
    // say nothing about the streams this test is about.
    let env = [
        ("DATABASE_URL", url.as_str()),
        ("APP_SECRET", TEST_APP_SECRET),
        ("RUST_LOG", "warn"),
        ("K2B_DB_ACQUIRE_TIMEOUT_MS", "20000"),
        // The runner's allocator (mimalloc) returns freed pages to the system at once instead
        // of after a delay, so the settled size is what the process keeps.
        ("MIMALLOC_PURGE_DELAY", "0"),
    ];
    let runner = LocalRunner::start(&env);
    let cookie = admin_cookie(&env);

    // Ten apps of our own, one widget each, answering at once.
    let counters = Arc::new(Counters::default());
    let mut query = Vec::new();
    for i in 0..WIDGETS {
        let app = format!("load-{i:02}");
        let served = provider(
            counters.clone(),
            answers(json!({"title": app, "blocks": [{"kind": "stat", "value": i, "label": "n"}]})),
        )
        .await;
        let entry = json!({
            "id": app, "name": app, "icon": "i", "description": "d",
            "baseUrl": served.origin, "routes": [format!("/app/{app}")], "widgets": summary_widget()
        });
        let mut conn = db.pool.acquire().await.expect("conn");
        store::upsert(&mut conn, &entry, APP_REGISTRY_TTL)
            .await
            .expect("register");
        query.push(format!("widget={app}/summary"));
    }
    let path = format!("{}/api/widgets/v1?{}", runner.base_url, query.join("&"));
    // Each burst uses a client of its own, dropped after it: the runner keeps no connection
    // state for the test between bursts.
    let run_streams = |count: usize| {
        let client = reqwest::Client::new();
        let path = path.clone();
        let cookie = cookie.clone();
        async move {
            let tasks: Vec<_> = (0..count)
                .map(|_| {
                    let client = client.clone();
                    let path = path.clone();
                    let cookie = cookie.clone();
                    tokio::spawn(async move {
                        let response = client
                            .get(&path)
                            .header("cookie", cookie)
                            .send()
                            .await
                            .expect("get");
                        assert_eq!(response.status(), 200);
                        lines(response).await
                    })
                })
                .collect();
            let mut all = Vec::new();
            for task in tasks {
                all.push(task.await.expect("stream"));
            }
            all
        }
    };

    let check = |streams: &[Vec<serde_json::Value>]| {
        assert_eq!(streams.len(), STREAMS);
        for stream in streams {
            assert_eq!(
                stream.first().map(|l| l["type"].clone()),
                Some(json!("start"))
            );
            assert_eq!(
                stream.last(),
                Some(&json!({"type": "done", "status": "complete"})),
                "{stream:?}"
            );
            let widgets = widget_lines(stream);
            assert_eq!(widgets.len(), WIDGETS);
            assert!(widgets.iter().all(|l| l["status"] == "ok"), "{widgets:?}");
        }
    };
    // The lowest RSS over a few seconds: what stays once the burst is over.
    let settled = || async {
        let mut lowest = u64::MAX;
        for _ in 0..8 {
            tokio::time::sleep(Duration::from_millis(500)).await;
            lowest = lowest.min(runner.rss_kib().expect("rss"));
        }
        lowest
    };

    for _ in 0..3 {
        run_streams(20).await;
    }
    let idle = settled().await;
    let mut after_burst = Vec::new();
    for burst in 0..5 {
        let started = Instant::now();
        let streams = run_streams(STREAMS).await;
        let elapsed = started.elapsed();
        let peak = runner.rss_kib().expect("rss");
        check(&streams);
        let rest = settled().await;
        println!(
            "burst {burst}: {STREAMS} streams × {WIDGETS} widgets in {elapsed:?}; runner RSS \
             {peak} KiB right after, {rest} KiB settled (idle before any burst: {idle} KiB)"
        );
        after_burst.push(rest);
    }
    // The first burst grows the process once (pooled database and HTTP connections, allocator
    // pages, all reused later); from then on each burst returns to that level: nothing is kept
    // per stream (2 000 widget calls per burst kept would add far more than 6 MiB). A settled
    // size varies by several MiB from burst to burst (which threads' pages stay in use), so the
    // last two bursts' lower figure is held to the first two bursts' higher one: memory kept per
    // burst would put it at least two bursts' worth above.
    assert!(
        after_burst[0] <= idle + 32 * 1024,
        "the first burst left {} KiB (idle {idle} KiB)",
        after_burst[0]
    );
    let level = after_burst[0].max(after_burst[1]);
    let last = after_burst[3].min(after_burst[4]);
    assert!(
        last <= level + 6 * 1024,
        "memory kept growing across bursts: {after_burst:?} KiB"
    );
    let output = runner.stop();
    let errors: Vec<&str> = output
        .lines()
        .filter(|l| l.contains("\"level\":\"ERROR\""))
        .collect();
    assert!(errors.is_empty(), "{errors:?}");
}

/// `cargo lambda watch` with the process group it starts (the function processes), stopped
/// together.
struct LambdaWatch {
    child: std::process::Child,
    base: String,
}

impl LambdaWatch {
    fn start(env: &[(&str, &str)]) -> LambdaWatch {
        use std::os::unix::process::CommandExt;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let mut command = std::process::Command::new("cargo");
        command
            .args([
                "lambda",
                "watch",
                "-A",
                "127.0.0.1",
                "-P",
                &port.to_string(),
            ])
            .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .process_group(0);
        // Cargo's description of this test run would make ring's build script rebuild the
        // TLS, database and SDK crates under `cargo run`.
        without_cargo_run_vars(&mut command);
        for (name, value) in env {
            command.env(name, value);
        }
        let child = command
            .spawn()
            .expect("cargo lambda watch (pip install cargo-lambda)");
        LambdaWatch {
            child,
            base: format!("http://127.0.0.1:{port}/lambda-url/widgets"),
        }
    }
}

impl Drop for LambdaWatch {
    fn drop(&mut self) {
        let group = format!("-{}", self.child.id());
        std::process::Command::new("kill")
            .args(["-TERM", "--", &group])
            .status()
            .ok();
        self.child.wait().ok();
    }
}

/// The same stream through `cargo lambda watch`: the `widgets` binary under the Lambda
/// streaming runtime delivers the fast lines before the slow widget settles, and the
/// single-widget route's body arrives whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lines_stream_through_cargo_lambda_watch() {
    let db = TestDb::new().await;
    let url = db.url();
    let env = [
        ("DATABASE_URL", url.as_str()),
        ("APP_SECRET", TEST_APP_SECRET),
    ];
    let runner = LocalRunner::start(&env);
    let cookie = admin_cookie(&env);
    let watch = LambdaWatch::start(&[
        ("DATABASE_URL", url.as_str()),
        ("APP_SECRET", TEST_APP_SECRET),
        ("K2B_ENV", "local"),
        ("APP_URL", runner.base_url.as_str()),
        ("RUST_LOG", "warn"),
    ]);
    let client = reqwest::Client::new();
    // The first request may wait for the binary to build.
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let probe = client
            .get(format!("{}/api/widgets/v1", watch.base))
            .timeout(Duration::from_secs(600))
            .send()
            .await;
        if probe.is_ok_and(|r| r.status() == 401) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "cargo lambda watch did not serve widgets"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    let started = Instant::now();
    let response = client
        .get(format!("{}/api/widgets/v1", watch.base))
        .header("cookie", &cookie)
        .send()
        .await
        .expect("get");
    assert_eq!(response.status(), 200);
    let mut reader = LineReader::new(response);
    assert_eq!(reader.next().await.expect("start")["type"], "start");
    let mut fast = Vec::new();
    for _ in 0..3 {
        fast.push(reader.next().await.expect("line")["key"].clone());
    }
    let fast_done = started.elapsed();
    assert!(!fast.contains(&json!("demo/slow")), "{fast:?}");
    assert!(
        fast_done < Duration::from_millis(1800),
        "lines were held back until the slow widget ({fast_done:?})"
    );
    assert_eq!(reader.next().await.expect("slow")["key"], "demo/slow");
    assert_eq!(reader.next().await.expect("done")["type"], "done");

    let single = client
        .get(format!(
            "{}/api/widgets/v1/demo/stock?size=medium",
            watch.base
        ))
        .header("cookie", &cookie)
        .send()
        .await
        .expect("get");
    assert_eq!(single.status(), 200);
    let body: serde_json::Value = single.json().await.expect("json");
    assert_eq!(body["title"], "Stock");
    drop(watch);
    runner.stop();
}
