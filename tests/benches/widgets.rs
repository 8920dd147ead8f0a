//! Widget stream overhead on the local runner (figures, no assertions): 20 widgets per stream
//! on providers that answer at once, 100 streams one after another.
//! - overhead = total stream time (request sent → `done` line) − the slowest widget's own
//!   latency (its `ms`), p50 and p99;
//! - time to the `start` line, p50.
//!
//! Target: p50 overhead ≤ 5 ms.
//!
//! Run: `cargo bench -p k2b-tests --bench widgets` (builds `k2b-local` in the bench profile).

use std::time::Instant;

use k2b_core::identity::{jwt, keys};
use k2b_core::registry::{APP_REGISTRY_TTL, store};
use k2b_tests::figures::{ms, percentile};
use k2b_tests::{LocalRunner, TEST_APP_SECRET, TestDb, serve};
use serde_json::{Value, json};

const WIDGETS: usize = 20;
const RUNS: usize = 100;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    println!("== widget stream benchmark: {WIDGETS} widgets × {RUNS} streams on k2b-local ==");
    let db = TestDb::new().await;
    let url = db.url();
    let env = [
        ("DATABASE_URL", url.as_str()),
        ("APP_SECRET", TEST_APP_SECRET),
        ("RUST_LOG", "warn"),
    ];
    let runner = LocalRunner::start(&env);
    let cookie = k2b_tests::admin_cookie(&env);

    let mut query = Vec::new();
    for i in 0..WIDGETS {
        let app = format!("bench-{i:02}");
        let body = json!({"title": app, "blocks": [{"kind": "stat", "value": i, "label": "n"}]});
        let router = axum::Router::new().fallback(move || {
            let body = body.clone();
            async move { axum::Json(body) }
        });
        let origin = serve(router).await;
        let entry = json!({
            "id": app, "name": app, "icon": "i", "description": "d",
            "baseUrl": origin, "routes": [format!("/app/{app}")],
            "widgets": [{"id": "summary", "path": "/w", "title": "Summary"}]
        });
        let mut conn = db.pool.acquire().await.expect("conn");
        store::upsert(&mut conn, &entry, APP_REGISTRY_TTL)
            .await
            .expect("register");
        query.push(format!("widget={app}/summary"));
    }
    let path = format!("{}/api/widgets/v1?{}", runner.base_url, query.join("&"));
    let client = reqwest::Client::new();

    let mut overheads = Vec::new();
    let mut starts = Vec::new();
    let mut totals = Vec::new();
    for run in 0..(RUNS + 10) {
        let sent = Instant::now();
        let mut response = client
            .get(&path)
            .header("cookie", &cookie)
            .send()
            .await
            .expect("get");
        let mut buffer = Vec::new();
        let mut start_at = None;
        let mut slowest = 0u64;
        let mut done = false;
        while let Some(chunk) = response.chunk().await.expect("body") {
            buffer.extend_from_slice(&chunk);
            while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buffer.drain(..=end).collect();
                let line: Value = serde_json::from_slice(&line).expect("json line");
                match line["type"].as_str() {
                    Some("start") => start_at = Some(sent.elapsed()),
                    Some("widget") => {
                        assert_eq!(line["status"], "ok", "{line}");
                        slowest = slowest.max(line["ms"].as_u64().expect("ms"));
                    }
                    Some("done") => done = true,
                    _ => {}
                }
            }
        }
        let total = sent.elapsed();
        assert!(done, "a stream ended without done");
        if run < 10 {
            continue; // warm-up
        }
        totals.push(ms(total));
        starts.push(ms(start_at.expect("start line")));
        overheads.push(ms(total) - slowest as f64);
    }
    for series in [&mut overheads, &mut starts, &mut totals] {
        series.sort_by(f64::total_cmp);
    }
    println!(
        "total stream time      p50 {:7.2} ms   p99 {:7.2} ms",
        percentile(&totals, 50.0),
        percentile(&totals, 99.0)
    );
    println!(
        "overhead (total − slowest widget's ms)   p50 {:7.2} ms   p99 {:7.2} ms",
        percentile(&overheads, 50.0),
        percentile(&overheads, 99.0)
    );
    println!(
        "time to the start line p50 {:7.2} ms",
        percentile(&starts, 50.0)
    );
    // The part no implementation avoids: one RS256 signature per widget.
    let key = keys::generate().expect("key");
    let signing = keys::import(&key.kid, &key.public, &key.private).expect("import");
    let claims = json!({"aud": "app:bench", "op": "widget.read:summary", "iat": 0, "exp": 30});
    let mut signing_runs = Vec::new();
    for _ in 0..30 {
        let started = Instant::now();
        for _ in 0..WIDGETS {
            jwt::encode(&key.kid, "cloud-invocation+jwt", &claims, &signing).expect("sign");
        }
        signing_runs.push(ms(started.elapsed()));
    }
    signing_runs.sort_by(f64::total_cmp);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "{WIDGETS} RS256 signatures on one core p50 {:7.2} ms ({cores} cores: at least {:.2} ms of \
         any stream's wall time)",
        percentile(&signing_runs, 50.0),
        percentile(&signing_runs, 50.0) / cores as f64
    );
    let p50 = percentile(&overheads, 50.0);
    println!(
        "target (p50 overhead ≤ 5 ms): {}",
        if p50 <= 5.0 { "met" } else { "NOT met" }
    );
    runner.stop();
}
