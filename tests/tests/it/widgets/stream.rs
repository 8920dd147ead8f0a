//! `GET /api/widgets/v1`, the NDJSON stream (scenarios 13–21).

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode as AxumStatus;
use k2b_tests::LogCapture;
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::sync::Notify;
use widgets::WidgetsOptions;

use super::{
    ActorKind, Behaviour, Counters, LineReader, Setup, answers, behaviour, key, lines, register,
    warnings, widget_lines,
};

fn summary(i: usize) -> Behaviour {
    answers(json!({"title": format!("app-{i:02}"), "blocks": []}))
}

fn hangs() -> Behaviour {
    behaviour(|_| async {
        std::future::pending::<()>().await;
        AxumStatus::OK
    })
}

async fn eventually(what: &str, check: impl Fn() -> bool) {
    for _ in 0..200 {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("timed out waiting for {what}");
}

/// Scenario 13: lines arrive as widgets settle, not in registry order; the slow one last.
#[tokio::test]
async fn scenario_13_lines_arrive_as_widgets_settle() {
    let setup = Setup::new(WidgetsOptions::default()).await;
    let release = Arc::new(Notify::new());
    let gate = release.clone();
    let blocked = behaviour(move |_| {
        let gate = gate.clone();
        async move {
            gate.notified().await;
            axum::Json(json!({"title": "app-00", "blocks": []}))
        }
    });
    setup.apps(vec![blocked, summary(1), summary(2)]).await;
    let response = setup.get("/api/widgets/v1").send().await.expect("get");
    assert_eq!(response.status(), StatusCode::OK);
    let content_type = response.headers()["content-type"].to_str().expect("ascii");
    assert!(
        content_type.starts_with("application/x-ndjson"),
        "{content_type}"
    );
    assert_eq!(
        response.headers()["cache-control"],
        "no-store, no-transform"
    );
    assert_eq!(response.headers()["x-accel-buffering"], "no");

    let mut reader = LineReader::new(response);
    assert_eq!(
        reader.next().await.expect("start"),
        json!({"type": "start", "widgets": [key(0), key(1), key(2)]})
    );
    let mut fast = vec![
        reader.next().await.expect("line")["key"].clone(),
        reader.next().await.expect("line")["key"].clone(),
    ];
    fast.sort_by_key(|k| k.to_string());
    assert_eq!(fast, [json!(key(1)), json!(key(2))]);
    // app-00 still waits: nothing more arrives meanwhile.
    assert!(
        reader
            .next_within(Duration::from_millis(300))
            .await
            .is_none()
    );
    release.notify_one();
    let slow = reader.next().await.expect("app-00");
    assert_eq!(slow["key"], key(0));
    assert_eq!(slow["status"], "ok");
    assert_eq!(slow["widget"], json!({"title": "app-00", "blocks": []}));
    assert!(slow["ms"].as_u64().expect("ms") >= 300);
    assert_eq!(
        reader.next().await.expect("done"),
        json!({"type": "done", "status": "complete"})
    );
    assert!(reader.next().await.is_none());
}

/// Scenario 14: every outcome maps to its status; a failure makes the stream partial.
#[tokio::test]
async fn scenario_14_outcomes_and_a_partial_stream() {
    let setup = Setup::new(WidgetsOptions {
        timeout: Duration::from_millis(500),
        ..WidgetsOptions::default()
    })
    .await;
    setup
        .apps(vec![
            hangs(),
            behaviour(|_| async { (AxumStatus::INTERNAL_SERVER_ERROR, "boom") }),
            behaviour(|_| async { AxumStatus::FORBIDDEN }),
            behaviour(|_| async { AxumStatus::NO_CONTENT }),
        ])
        .await;
    let log = LogCapture::start();
    let response = setup.get("/api/widgets/v1").send().await.expect("get");
    let all = lines(response).await;
    let statuses: std::collections::HashMap<String, String> = widget_lines(&all)
        .iter()
        .map(|l| {
            (
                l["key"].as_str().expect("key").to_string(),
                l["status"].as_str().expect("status").to_string(),
            )
        })
        .collect();
    assert_eq!(statuses[&key(0)], "timeout");
    assert_eq!(statuses[&key(1)], "error");
    assert_eq!(statuses[&key(2)], "forbidden");
    assert_eq!(statuses[&key(3)], "empty");
    assert_eq!(
        all.last(),
        Some(&json!({"type": "done", "status": "partial"}))
    );
    for line in widget_lines(&all) {
        assert!(line.get("widget").is_none());
        assert!(line["ms"].is_u64());
    }
    let timeout_line = widget_lines(&all)
        .into_iter()
        .find(|l| l["key"] == key(0))
        .expect("timeout line");
    assert!(timeout_line["ms"].as_u64().expect("ms") >= 500);
    // One warning each for the timeout and the error; none for forbidden or empty.
    let logged = warnings(&log.own_text());
    let mut reasons: Vec<String> = logged
        .iter()
        .map(|l| {
            l["fields"]["reason"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    reasons.sort();
    assert_eq!(reasons, ["deadline_exceeded", "upstream_status"]);
    // The hanging call was aborted at its budget.
    eventually("the hanging call to end", || {
        Counters::get(&setup.counters.aborted) == 1
    })
    .await;
}

/// Scenario 15: requested keys in registry order, each asked once; unknown keys ignored.
#[tokio::test]
async fn scenario_15_selection_follows_registry_order() {
    let setup = Setup::new(WidgetsOptions::default()).await;
    let providers = setup
        .apps(vec![summary(0), summary(1), summary(2), summary(3)])
        .await;
    let response = setup
        .get(&format!(
            "/api/widgets/v1?widget={}&widget={}&widget={}&widget=missing/summary",
            key(3),
            key(1),
            key(3)
        ))
        .send()
        .await
        .expect("get");
    let all = lines(response).await;
    assert_eq!(
        all[0],
        json!({"type": "start", "widgets": [key(1), key(3)]})
    );
    assert_eq!(widget_lines(&all).len(), 2);
    let calls: Vec<usize> = providers.iter().map(|p| p.requests().len()).collect();
    assert_eq!(calls, [0, 1, 0, 1]);
    // Parameters that match nothing ask nothing.
    let response = setup
        .get("/api/widgets/v1?widget=missing/summary")
        .send()
        .await
        .expect("get");
    assert_eq!(
        lines(response).await,
        [
            json!({"type": "start", "widgets": []}),
            json!({"type": "done", "status": "complete"})
        ]
    );
}

/// Scenario 16: sizes from `@size`, fitted to what each widget offers; legacy ids with `@`.
#[tokio::test]
async fn scenario_16_requested_sizes_are_fitted() {
    let setup = Setup::new(WidgetsOptions::default()).await;
    let providers = setup.apps(vec![summary(0), summary(1), summary(2)]).await;
    let weather = setup
        .provider(answers(json!({"title": "W", "blocks": []})))
        .await;
    register(
        &setup.core,
        "weather",
        &weather.origin,
        json!([{"id": "current", "path": "/w", "sizes": ["small", "medium"], "defaultSize": "small"}]),
    )
    .await;
    let response = setup
        .get(&format!(
            "/api/widgets/v1?widget={}@large&widget={}&widget={}@huge&widget=weather/current@large",
            key(0),
            key(1),
            key(2)
        ))
        .send()
        .await
        .expect("get");
    let all = lines(response).await;
    assert_eq!(
        all[0],
        json!({"type": "start", "widgets": [key(0), key(1), "weather/current"]})
    );
    let asked = |p: &super::Provider| p.requests().first().map(|s| s.uri.clone());
    assert_eq!(
        asked(&providers[0]).as_deref(),
        Some("/api/_internal/widgets/v1/summary?size=large")
    );
    assert_eq!(
        asked(&providers[1]).as_deref(),
        Some("/api/_internal/widgets/v1/summary?size=medium")
    );
    assert_eq!(asked(&providers[2]), None);
    assert_eq!(
        asked(&weather).as_deref(),
        Some("/api/_internal/widgets/v1/current?size=small")
    );

    // A legacy id that itself ends in a size suffix is that widget.
    let legacy = setup
        .provider(answers(json!({"title": "L", "blocks": []})))
        .await;
    register(
        &setup.core,
        "legacy",
        &legacy.origin,
        json!([{"id": "stats@small", "path": "/s"}]),
    )
    .await;
    let response = setup
        .get("/api/widgets/v1?widget=legacy/stats@small")
        .send()
        .await
        .expect("get");
    let all = lines(response).await;
    assert_eq!(
        all[0],
        json!({"type": "start", "widgets": ["legacy/stats@small"]})
    );
    assert_eq!(widget_lines(&all).len(), 1);
}

/// Scenario 17: twenty widgets, at most eight in flight, one signer guard, twenty signatures.
#[tokio::test]
async fn scenario_17_concurrency_is_bounded_and_signing_guarded_once() {
    let setup = Setup::new(WidgetsOptions::default()).await;
    let sleepy = |i: usize| {
        behaviour(move |_| async move {
            tokio::time::sleep(Duration::from_millis(5)).await;
            axum::Json(json!({"title": format!("app-{i:02}"), "blocks": []}))
        })
    };
    setup.apps((0..20).map(sleepy).collect()).await;
    let before = setup.metrics();
    let response = setup.get("/api/widgets/v1").send().await.expect("get");
    let all = lines(response).await;
    let widgets = widget_lines(&all);
    assert_eq!(widgets.len(), 20);
    assert!(widgets.iter().all(|l| l["status"] == "ok"));
    assert_eq!(
        all.last(),
        Some(&json!({"type": "done", "status": "complete"}))
    );
    assert_eq!(Counters::get(&setup.counters.peak), 8);
    let after = setup.metrics();
    assert_eq!(after.signer_guards - before.signer_guards, 1);
    assert_eq!(after.sign_success - before.sign_success, 20);
}

/// Scenario 18: unsafe answers fail alone; extras are stripped; every call carries the
/// invocation and the locale and never the cookie.
#[tokio::test]
async fn scenario_18_each_answer_is_checked_and_calls_carry_no_cookie() {
    let setup = Setup::new(WidgetsOptions::default()).await;
    let providers = setup
        .apps(vec![
            answers(json!({"title": "A", "href": "javascript:alert(1)", "blocks": []})),
            answers(json!({"title": "B", "extra": true, "blocks": []})),
        ])
        .await;
    let response = setup
        .get("/api/widgets/v1")
        .header("x-cloud-locale", "de-CH")
        .send()
        .await
        .expect("get");
    let all = lines(response).await;
    let by_key = |k: String| {
        widget_lines(&all)
            .into_iter()
            .find(|l| l["key"] == k)
            .cloned()
            .expect("line")
    };
    assert_eq!(by_key(key(0))["status"], "error");
    let ok = by_key(key(1));
    assert_eq!(ok["status"], "ok");
    assert_eq!(ok["widget"], json!({"title": "B", "blocks": []}));
    for provider in &providers {
        let seen = provider.requests().pop().expect("called");
        assert!(seen.header("cookie").is_none());
        assert!(
            seen.header("authorization")
                .is_some_and(|a| a.starts_with("Bearer ey"))
        );
        assert_eq!(seen.header("x-cloud-locale"), Some("de-CH"));
    }
}

/// Scenario 19: a client that goes away aborts the calls in flight, starts no more, and
/// leaves no warnings.
#[tokio::test]
async fn scenario_19_a_client_leaving_aborts_everything_quietly() {
    let setup = Setup::new(WidgetsOptions::default()).await;
    setup.apps((0..10).map(|_| hangs()).collect()).await;
    let log = LogCapture::start();
    let response = setup.get("/api/widgets/v1").send().await.expect("get");
    let mut reader = LineReader::new(response);
    assert_eq!(reader.next().await.expect("start")["type"], "start");
    eventually("eight providers to start", || {
        Counters::get(&setup.counters.started) == 8
    })
    .await;
    drop(reader);
    eventually("eight aborted calls", || {
        Counters::get(&setup.counters.aborted) == 8
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(Counters::get(&setup.counters.started), 8);
    assert_eq!(Counters::get(&setup.counters.aborted), 8);
    assert!(warnings(&log.own_text()).is_empty(), "{}", log.own_text());
}

/// Scenario 20: a signer guard that fails is a 503 and no stream.
#[tokio::test]
async fn scenario_20_a_failing_signer_guard_is_unavailable() {
    let setup = Setup::with_actor(WidgetsOptions::default(), Some(ActorKind::Session)).await;
    let providers = setup.apps(vec![summary(0)]).await;
    // The signer is prepared, but its key can no longer be checked: the guard fails (the
    // registry, a different table, still reads).
    sqlx::query("ALTER TABLE auth.signing_keys RENAME TO signing_keys_unavailable")
        .execute(&setup.core.pool)
        .await
        .expect("rename");
    let log = LogCapture::start();
    let response = setup.get("/api/widgets/v1").send().await.expect("get");
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body: Value = response.json().await.expect("json");
    assert_eq!(
        body["message"],
        "Widget invocation authority is currently unavailable"
    );
    assert!(providers[0].requests().is_empty());
    let logged = warnings(&log.own_text());
    assert_eq!(
        logged[0]["fields"]["message"],
        "Widget invocation authority unavailable"
    );
    assert_eq!(logged[0]["fields"]["reason"], "operation_failed");
}

/// Scenario 21: an OAuth credential with only `write` is refused before the registry is read.
#[tokio::test]
async fn scenario_21_oauth_without_read_is_refused_first() {
    let setup = Setup::with_actor(
        WidgetsOptions::default(),
        Some(ActorKind::OAuth(vec!["write"])),
    )
    .await;
    setup.apps(vec![summary(0)]).await;
    sqlx::query("ALTER TABLE registry.apps RENAME TO apps_unavailable")
        .execute(&setup.core.pool)
        .await
        .expect("rename");
    let response = setup.get("/api/widgets/v1").send().await.expect("get");
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    let body: Value = response.json().await.expect("json");
    assert_eq!(body["message"], "OAuth scope read or admin is required");
}

/// An unreadable registry is a 503 before any stream.
#[tokio::test]
async fn an_unreadable_registry_is_unavailable() {
    let setup = Setup::new(WidgetsOptions::default()).await;
    sqlx::query("ALTER TABLE registry.apps RENAME TO apps_unavailable")
        .execute(&setup.core.pool)
        .await
        .expect("rename");
    let log = LogCapture::start();
    let response = setup.get("/api/widgets/v1").send().await.expect("get");
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body: Value = response.json().await.expect("json");
    assert_eq!(body["message"], "Widget registry is currently unavailable");
    let logged = warnings(&log.own_text());
    assert_eq!(
        logged[0]["fields"]["message"],
        "Widget registry unavailable"
    );
    assert_eq!(logged[0]["fields"]["reason"], "operation_failed");
}

/// The stream deadline settles what is still running or queued as `timeout`, never starts the
/// queued ones, and logs each once.
#[tokio::test]
async fn the_stream_deadline_settles_the_rest_as_timeouts() {
    let setup = Setup::new(WidgetsOptions {
        stream_deadline: Duration::from_millis(800),
        concurrency: 2,
        ..WidgetsOptions::default()
    })
    .await;
    setup
        .apps(vec![summary(0), hangs(), hangs(), summary(3)])
        .await;
    let log = LogCapture::start();
    let response = setup.get("/api/widgets/v1").send().await.expect("get");
    let all = lines(response).await;
    let widgets = widget_lines(&all);
    assert_eq!(widgets.len(), 4);
    let status = |k: String| {
        widgets
            .iter()
            .find(|l| l["key"] == k)
            .map(|l| l["status"].as_str().unwrap_or_default().to_string())
    };
    assert_eq!(status(key(0)).as_deref(), Some("ok"));
    assert_eq!(status(key(1)).as_deref(), Some("timeout"));
    assert_eq!(status(key(2)).as_deref(), Some("timeout"));
    // app-03 waited behind the two hanging ones and was never started.
    assert_eq!(status(key(3)).as_deref(), Some("timeout"));
    assert_eq!(Counters::get(&setup.counters.started), 3);
    assert_eq!(
        all.last(),
        Some(&json!({"type": "done", "status": "partial"}))
    );
    let logged = warnings(&log.own_text());
    assert_eq!(logged.len(), 3, "{logged:?}");
    assert!(logged.iter().all(
        |l| l["fields"]["phase"] == "provider" && l["fields"]["reason"] == "deadline_exceeded"
    ));
}
