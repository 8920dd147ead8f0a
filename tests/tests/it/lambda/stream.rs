//! The widget stream in Lambda's streaming mode: the prelude (status and headers), then each
//! NDJSON line as its widget settles — not the whole body at the end.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::Stack;
use crate::widgets::{Counters, answers, behaviour, provider_on, register, summary_widget};

/// How long the slow provider takes.
const SLOW: Duration = Duration::from_millis(1500);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_widget_stream_arrives_line_by_line_in_the_streaming_mode() {
    let stack = Stack::new().await;
    let (_, cookie) = stack.admin().await;
    let counters = Arc::new(Counters::default());
    // The function runs in production mode: its apps listen on this machine's network, which
    // the stack lists in `AppNetworks` (loopback is never reachable there).
    let network = k2b_tests::machine_address();
    let fast = provider_on(
        counters.clone(),
        answers(json!({"title": "Fast", "blocks": []})),
        network,
    )
    .await;
    let slow = provider_on(
        counters.clone(),
        behaviour(|_| async {
            tokio::time::sleep(SLOW).await;
            axum::Json(json!({"title": "Slow", "blocks": []}))
        }),
        network,
    )
    .await;
    register(&stack.core, "fast", &fast.origin, summary_widget()).await;
    register(&stack.core, "slow", &slow.origin, summary_widget()).await;

    let mut widgets = stack.start("widgets").await;
    let route = &stack.deployment.function("widgets").routes;
    assert!(route.iter().all(|r| r.streamed), "{route:?}");
    let request = stack
        .gateway
        .request("GET", "/api/widgets/v1", "/api/widgets/v1")
        .header("Accept", "application/x-ndjson")
        .header("Cookie", &cookie);
    let asked = Instant::now();
    let mut streamed = widgets.invoke(request.event()).await.streamed();
    assert_eq!(streamed.prelude["statusCode"], 200, "{}", widgets.output());
    assert_eq!(
        streamed.prelude["headers"]["content-type"],
        "application/x-ndjson; charset=utf-8"
    );

    // Lines with the time each arrived.
    let mut lines: Vec<(Duration, Value)> = Vec::new();
    let mut pending = String::new();
    while let Some((at, chunk)) = streamed.next_chunk(Duration::from_secs(40)).await {
        pending.push_str(std::str::from_utf8(&chunk).expect("utf-8"));
        while let Some(end) = pending.find('\n') {
            let line: String = pending.drain(..=end).collect();
            lines.push((
                at.duration_since(asked),
                serde_json::from_str(line.trim()).expect("a JSON line"),
            ));
        }
    }
    assert!(pending.is_empty(), "a partial last line: {pending:?}");
    let kinds: Vec<&str> = lines
        .iter()
        .map(|(_, l)| l["type"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(kinds, ["start", "widget", "widget", "done"], "{lines:?}");
    assert_eq!(lines[1].1["key"], "fast/summary");
    assert_eq!(lines[1].1["status"], "ok");
    assert_eq!(lines[2].1["key"], "slow/summary");
    assert_eq!(lines[3].1["status"], "complete");
    // The fast line left while the slow widget was still running.
    let (fast_at, slow_at) = (lines[1].0, lines[2].0);
    assert!(
        slow_at >= fast_at + SLOW / 2,
        "the fast line arrived at {fast_at:?}, the slow one at {slow_at:?}: held back"
    );
    assert!(streamed.trailer_error.lock().expect("trailer").is_none());

    // The single-widget route is streamed too; its body is the widget as JSON.
    let single = stack
        .gateway
        .request(
            "GET",
            "/api/widgets/v1/{appId}/{widgetId}",
            "/api/widgets/v1/fast/summary",
        )
        .header("Accept", "application/json")
        .header("Cookie", &cookie);
    let delivered = stack.send(&mut widgets, &single).await;
    assert_eq!(delivered.status, 200);
    assert_eq!(delivered.json()["title"], "Fast");
}

/// A reader that leaves in the streaming mode: the function notices at its next write to the
/// response stream, cancels the provider calls in flight and starts no more widgets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_leaves_stops_the_stream_at_its_next_write() {
    let stack = Stack::new().await;
    let (_, cookie) = stack.admin().await;
    let counters = Arc::new(Counters::default());
    let network = k2b_tests::machine_address();
    // The first widget settles soon after the reader left; the other nine never answer.
    let quick = provider_on(
        counters.clone(),
        behaviour(|_| async {
            tokio::time::sleep(Duration::from_millis(500)).await;
            axum::Json(json!({"title": "Quick", "blocks": []}))
        }),
        network,
    )
    .await;
    let hangs = provider_on(
        counters.clone(),
        behaviour(|_| async {
            std::future::pending::<()>().await;
            axum::http::StatusCode::OK
        }),
        network,
    )
    .await;
    register(&stack.core, "app-00", &quick.origin, summary_widget()).await;
    for i in 1..10 {
        register(
            &stack.core,
            &format!("app-{i:02}"),
            &hangs.origin,
            summary_widget(),
        )
        .await;
    }

    let mut widgets = stack.start("widgets").await;
    let request = stack
        .gateway
        .request("GET", "/api/widgets/v1", "/api/widgets/v1")
        .header("Accept", "application/x-ndjson")
        .header("Cookie", &cookie);
    let mut streamed = widgets.invoke(request.event()).await.streamed();
    let (_, first) = streamed
        .next_chunk(Duration::from_secs(10))
        .await
        .expect("the start line");
    let start: Value = serde_json::from_slice(first.trim_ascii()).expect("a JSON line");
    assert_eq!(start["type"], "start", "{}", widgets.output());
    assert_eq!(start["widgets"].as_array().map(Vec::len), Some(10));
    // Eight calls run at once (the widgets' concurrency); two wait for a free place.
    let deadline = Instant::now() + Duration::from_secs(10);
    while Counters::get(&counters.started) < 8 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(Counters::get(&counters.started), 8);
    drop(streamed);

    // The quick widget's line is the write that fails: the seven calls in flight are
    // cancelled and the two waiting widgets never start.
    let deadline = Instant::now() + Duration::from_secs(10);
    while Counters::get(&counters.aborted) < 7 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(Counters::get(&counters.finished), 1, "{}", widgets.output());
    assert_eq!(Counters::get(&counters.aborted), 7, "{}", widgets.output());
    assert_eq!(Counters::get(&counters.started), 8, "{}", widgets.output());

    // The function is free for the next invocation.
    let single = stack
        .gateway
        .request(
            "GET",
            "/api/widgets/v1/{appId}/{widgetId}",
            "/api/widgets/v1/app-00/summary",
        )
        .header("Accept", "application/json")
        .header("Cookie", &cookie);
    let delivered = stack.send(&mut widgets, &single).await;
    assert_eq!(delivered.status, 200);
    assert_eq!(delivered.json()["title"], "Quick");
}
