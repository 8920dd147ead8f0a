//! One app cannot starve every dashboard nor plant links and routes: the registry refuses
//! entries over the limits or with unsafe links or Core's paths, counts publishes per app and
//! minute, and a stream runs at most 100 widgets.

use std::sync::Arc;

use k2b_core::identity::workload;
use k2b_core::registry::rules::MAX_WIDGETS_PER_ENTRY;
use k2b_core::registry::store::MAX_PUBLISHES_PER_MINUTE;
use k2b_core::widgets::MAX_STREAM_WIDGETS;
use k2b_tests::client::TestClient;
use k2b_tests::{TestDb, core_for};
use serde_json::{Value, json};

use super::{Widgets, ndjson};
use crate::widgets::{Counters, answers, provider, register};

fn entry(id: &str) -> Value {
    json!({
        "id": id, "name": "Reports", "icon": "ti ti-chart-bar", "description": "Reports",
        "baseUrl": format!("http://app-{id}:3000"), "routes": [format!("/app/{id}")]
    })
}

fn widgets(count: usize) -> Value {
    Value::Array(
        (0..count)
            .map(|i| {
                json!({"id": format!("w{i:03}"), "path": format!("/w/{i}"), "title": "W",
                       "sizes": ["small"], "defaultSize": "small"})
            })
            .collect(),
    )
}

/// The registry routes and an app's publishing client.
async fn registry(app: &str) -> (TestDb, k2b_core::Core, TestClient) {
    let db = TestDb::new().await;
    let core = core_for(&db);
    let token = {
        let mut conn = core.pool.acquire().await.expect("conn");
        workload::issue_app_credential(&mut conn, app, &["registry:publish"])
            .await
            .expect("credential")
            .0
    };
    let client = TestClient::serve(registry::router(core.clone()))
        .await
        .with_bearer(token);
    (db, core, client)
}

#[tokio::test]
async fn entries_over_the_limits_or_with_unsafe_links_or_core_paths_are_refused() {
    let (_db, _core, app) = registry("reports").await;
    let path = "/api/registry/v1/apps/reports";
    let publish = |change: Box<dyn FnOnce(&mut Value)>| {
        let app = app.clone();
        async move {
            let mut body = entry("reports");
            change(&mut body);
            app.put_json(path, &body).await
        }
    };
    assert_eq!(publish(Box::new(|_| {})).await.status, 200);
    let at_limit = publish(Box::new(|e| e["widgets"] = widgets(MAX_WIDGETS_PER_ENTRY))).await;
    assert_eq!(at_limit.status, 200, "{}", at_limit.text);

    for (change, message) in [
        (
            Box::new(|e: &mut Value| e["widgets"] = widgets(MAX_WIDGETS_PER_ENTRY + 1))
                as Box<dyn FnOnce(&mut Value)>,
            "widgets must have at most 20 entries (21 given)",
        ),
        (
            Box::new(|e: &mut Value| {
                e["nav"] =
                    json!({"href": "javascript:alert(document.cookie)", "section": "primary"})
            }),
            "nav.href must be a same-origin path or an http(s) URL",
        ),
        (
            Box::new(|e: &mut Value| {
                e["adminNav"] = json!([{"label": "Admin", "links": [
                    {"label": "x", "href": "//evil.example/", "icon": "ti"}]}])
            }),
            "adminNav[0].links[0].href must be a same-origin path or an http(s) URL",
        ),
        (
            Box::new(|e: &mut Value| {
                e["legalLinks"] = json!([{"label": "Terms", "href": "data:text/html,<script>"}])
            }),
            "legalLinks[0].href must be a same-origin path or an http(s) URL",
        ),
        (
            Box::new(|e: &mut Value| e["routes"] = json!(["/app/reports", "/api/auth/pwa/v1"])),
            "routes must not claim Core's path /api/auth",
        ),
        (
            Box::new(|e: &mut Value| e["routes"] = json!(["/.well-known/cloud-session-jwks.json"])),
            "routes must not claim Core's path /.well-known",
        ),
        (
            Box::new(|e: &mut Value| e["routes"] = json!(["/pwa/_auth"])),
            "routes must not claim Core's path /pwa/_auth",
        ),
        (
            Box::new(|e: &mut Value| e["routes"] = json!(["/pwa/inventory"])),
            "routes below /pwa must be the app's own /pwa/reports",
        ),
    ] {
        let reply = publish(change).await;
        assert_eq!(reply.status, 400, "{message}: {}", reply.text);
        assert_eq!(reply.code(), "INVALID_REQUEST");
        assert_eq!(reply.json["message"], message);
    }
}

/// Waits until the current minute has at least `needed` seconds left.
async fn away_from_the_minute_boundary(needed: u32) {
    use chrono::Timelike;
    let second = chrono::Utc::now().second();
    if second + needed >= 60 {
        tokio::time::sleep(std::time::Duration::from_secs(u64::from(61 - second))).await;
    }
}

#[tokio::test]
async fn publishes_are_counted_per_app_and_minute() {
    let (_db, core, reports) = registry("reports").await;
    let inventory_token = {
        let mut conn = core.pool.acquire().await.expect("conn");
        workload::issue_app_credential(&mut conn, "inventory", &["registry:publish"])
            .await
            .expect("credential")
            .0
    };
    let inventory = reports.with_bearer(inventory_token);
    away_from_the_minute_boundary(20).await;
    for i in 0..MAX_PUBLISHES_PER_MINUTE {
        let reply = reports
            .put_json("/api/registry/v1/apps/reports", &entry("reports"))
            .await;
        assert_eq!(reply.status, 200, "publish {i}: {}", reply.text);
    }
    let refused = reports
        .put_json("/api/registry/v1/apps/reports", &entry("reports"))
        .await;
    assert_eq!(refused.status, 429, "{}", refused.text);
    assert_eq!(refused.code(), "RATE_LIMITED");
    assert_eq!(refused.json["limit"], MAX_PUBLISHES_PER_MINUTE);
    let retry: u64 = refused
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .expect("Retry-After");
    assert!((1..=60).contains(&retry), "{retry}");
    // Another app is not affected.
    let other = inventory
        .put_json("/api/registry/v1/apps/inventory", &entry("inventory"))
        .await;
    assert_eq!(other.status, 200, "{}", other.text);
    // A new minute starts a new count.
    sqlx::query(
        "UPDATE registry.publish_rate SET window_start = window_start - interval '1 minute'",
    )
    .execute(&core.pool)
    .await
    .expect("age the window");
    let again = reports
        .put_json("/api/registry/v1/apps/reports", &entry("reports"))
        .await;
    assert_eq!(again.status, 200, "{}", again.text);
}

#[tokio::test]
async fn a_stream_runs_at_most_a_hundred_widgets() {
    let w = Widgets::start(|_| {}).await;
    let counters = Arc::new(Counters::default());
    let app = provider(
        counters.clone(),
        answers(json!({"title": "W", "blocks": []})),
    )
    .await;
    // Six apps of twenty widgets: 120 declared.
    for a in 0..6 {
        register(&w.core, &format!("app-{a}"), &app.origin, widgets(20)).await;
    }
    let reply = w.signed_in.get("/api/widgets/v1").await;
    assert_eq!(reply.status, 200);
    let lines = ndjson(&reply.text);
    let started = lines[0]["widgets"].as_array().expect("start line");
    assert_eq!(started.len(), MAX_STREAM_WIDGETS);
    assert_eq!(started[0], "app-0/w000");
    assert_eq!(started[99], "app-4/w019");
    assert_eq!(Counters::get(&counters.started), MAX_STREAM_WIDGETS);

    let asked: Vec<String> = (0..=MAX_STREAM_WIDGETS)
        .map(|i| format!("widget=app-{}/w{:03}", i / 20, i % 20))
        .collect();
    let too_many = w
        .signed_in
        .get(&format!("/api/widgets/v1?{}", asked.join("&")))
        .await;
    assert_eq!(too_many.status, 400, "{}", too_many.text);
    assert_eq!(too_many.code(), "TOO_MANY_WIDGETS");
    assert_eq!(too_many.json["limit"], MAX_STREAM_WIDGETS);
}
