//! Metrics and tracing of the deployed functions: each invocation writes exactly one CloudWatch
//! EMF line to stdout with what happened in it; its log lines carry its request and trace ids;
//! and the apps it calls receive its trace context.

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use k2b_core::outbox::OutboxRef;
use k2b_core::outbox::live::enqueue_live;
use k2b_tests::lambda::{FunctionProcess, Sent, sqs_batch};
use serde_json::{Value, json};

use super::Stack;
use crate::widgets::{
    Counters, Provider, answers, behaviour, provider_on, register, summary_widget,
};

/// How long a line may take to reach the harness after its invocation answered.
const LINE_WAIT: Duration = Duration::from_secs(5);

/// The EMF lines of the process so far.
fn emf_lines(function: &FunctionProcess) -> Vec<Value> {
    function
        .stdout_lines()
        .iter()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|line| line.get("_aws").is_some())
        .collect()
}

/// The one EMF line of an invocation (waiting for it), failing the test when there is none or
/// more than one.
async fn emf_line_of(function: &FunctionProcess, sent: &Sent) -> Value {
    let id = sent.request_id.clone();
    function
        .wait_for_stdout(LINE_WAIT, |line| {
            line.starts_with('{') && line.contains("\"_aws\"") && line.contains(&id)
        })
        .await
        .unwrap_or_else(|| {
            panic!(
                "no metrics line for invocation {id}:\n{}",
                function.output()
            )
        });
    let lines: Vec<Value> = emf_lines(function)
        .into_iter()
        .filter(|line| line["requestId"] == sent.request_id.as_str())
        .collect();
    assert_eq!(lines.len(), 1, "one metrics line per invocation: {lines:?}");
    let line = lines.into_iter().next().unwrap_or_default();
    assert_valid_emf(&line);
    assert_eq!(line["traceId"], sent.trace_id(), "{line}");
    line
}

/// What CloudWatch requires of an EMF document, and the shape every line of ours has.
fn assert_valid_emf(line: &Value) {
    let aws = &line["_aws"];
    let timestamp = aws["Timestamp"].as_u64().expect("a millisecond timestamp");
    let now_ms = chrono::Utc::now().timestamp_millis() as u64;
    assert!(
        timestamp <= now_ms && now_ms - timestamp < 60_000,
        "timestamp {timestamp} is not in milliseconds of now ({now_ms})"
    );
    let directives = aws["CloudWatchMetrics"].as_array().expect("directives");
    assert!(!directives.is_empty(), "{line}");
    for directive in directives {
        assert_eq!(directive["Namespace"], "K2BCloud", "{line}");
        assert_eq!(directive["Dimensions"], json!([["FunctionName"]]), "{line}");
        for set in directive["Dimensions"].as_array().into_iter().flatten() {
            for key in set.as_array().into_iter().flatten() {
                let key = key.as_str().expect("a dimension name");
                assert!(line[key].is_string(), "dimension {key} missing: {line}");
            }
        }
        let metrics = directive["Metrics"].as_array().expect("metric definitions");
        assert!(!metrics.is_empty() && metrics.len() <= 100, "{line}");
        for metric in metrics {
            let name = metric["Name"].as_str().expect("a metric name");
            let unit = metric["Unit"].as_str().expect("a unit");
            assert!(
                ["Count", "Milliseconds", "Seconds"].contains(&unit),
                "{name}: unit {unit}"
            );
            match &line[name] {
                Value::Number(_) => {}
                Value::Array(values) => {
                    assert!(!values.is_empty() && values.len() <= 100, "{name}");
                    assert!(values.iter().all(Value::is_number), "{name}: {values:?}");
                }
                other => panic!("metric {name} is {other} in {line}"),
            }
        }
    }
}

/// The JSON log lines (not metrics lines) of the process that carry `request_id`.
fn log_lines_of(function: &FunctionProcess, request_id: &str) -> Vec<Value> {
    function
        .output()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|line| line.get("_aws").is_none() && line["requestId"] == request_id)
        .collect()
}

/// A widget that fails with a 500, one that answers, and one that is empty.
async fn three_widgets(stack: &Stack) -> Vec<Provider> {
    let counters = Arc::new(Counters::default());
    let network = k2b_tests::machine_address();
    let ok = provider_on(
        counters.clone(),
        answers(json!({"title": "Fine", "blocks": []})),
        network,
    )
    .await;
    let empty = provider_on(
        counters.clone(),
        behaviour(|_| async { StatusCode::NO_CONTENT }),
        network,
    )
    .await;
    let broken = provider_on(
        counters,
        behaviour(|_| async { (StatusCode::INTERNAL_SERVER_ERROR, "down") }),
        network,
    )
    .await;
    register(&stack.core, "fine", &ok.origin, summary_widget()).await;
    register(&stack.core, "hollow", &empty.origin, summary_widget()).await;
    register(&stack.core, "broken", &broken.origin, summary_widget()).await;
    vec![ok, empty, broken]
}

/// Reads a widget stream to its end: each widget line's status and `ms`.
async fn stream_lines(
    stack: &Stack,
    function: &mut FunctionProcess,
    cookie: &str,
    traceparent: Option<&str>,
) -> Vec<Value> {
    let mut request = stack
        .gateway
        .request("GET", "/api/widgets/v1", "/api/widgets/v1")
        .header("Accept", "application/x-ndjson")
        .header("Cookie", cookie);
    if let Some(traceparent) = traceparent {
        request = request.header("traceparent", traceparent);
    }
    let delivered = stack.send(function, &request).await;
    assert_eq!(delivered.status, 200, "{}", function.output());
    String::from_utf8(delivered.body)
        .expect("utf-8")
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect()
}

fn sorted(mut values: Vec<f64>) -> Vec<f64> {
    values.sort_by(f64::total_cmp);
    values
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_widget_stream_writes_one_metrics_line_with_its_outcomes() {
    let stack = Stack::new().await;
    let (_, cookie) = stack.admin().await;
    let _providers = three_widgets(&stack).await;
    let mut widgets = stack.start("widgets").await;

    for invocation in 0..2 {
        let lines = stream_lines(&stack, &mut widgets, &cookie, None).await;
        let widget_lines: Vec<&Value> = lines.iter().filter(|l| l["type"] == "widget").collect();
        let statuses: Vec<&str> = widget_lines
            .iter()
            .map(|l| l["status"].as_str().unwrap_or_default())
            .collect();
        assert_eq!(statuses.len(), 3, "{lines:?}");
        for status in ["ok", "empty", "error"] {
            assert!(statuses.contains(&status), "{statuses:?}");
        }
        let sent = widgets.sent()[invocation].clone();
        let line = emf_line_of(&widgets, &sent).await;
        assert_eq!(line["FunctionName"], "k2b-widgets", "{line}");
        assert_eq!(line["Function"], "widgets");
        assert_eq!(line["WidgetOk"], 1, "{line}");
        assert_eq!(line["WidgetEmpty"], 1, "{line}");
        assert_eq!(line["WidgetError"], 1, "{line}");
        assert!(line.get("WidgetTimeout").is_none(), "{line}");
        // The latencies are the `ms` of the stream's widget lines.
        let latencies: Vec<f64> = line["WidgetLatency"]
            .as_array()
            .expect("latencies")
            .iter()
            .filter_map(Value::as_f64)
            .collect();
        let streamed: Vec<f64> = widget_lines
            .iter()
            .filter_map(|l| l["ms"].as_f64())
            .collect();
        assert_eq!(sorted(latencies), sorted(streamed), "{line}");
        // One invocation token per widget.
        assert_eq!(line["IdentityTokensIssued"], 3, "{line}");
        if invocation == 0 {
            assert_eq!(line["ColdStart"], 1, "{line}");
        } else {
            assert!(line.get("ColdStart").is_none(), "only the first: {line}");
        }
    }
    assert_eq!(emf_lines(&widgets).len(), 2, "{}", widgets.output());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apps_and_log_lines_carry_the_invocations_trace() {
    let stack = Stack::new().await;
    let (_, cookie) = stack.admin().await;
    let providers = three_widgets(&stack).await;
    let mut widgets = stack.start("widgets").await;

    // Without a traceparent of the caller's, one is derived from the X-Ray header.
    stream_lines(&stack, &mut widgets, &cookie, None).await;
    let first = widgets.sent()[0].clone();
    let root_hex = first.trace_id()[2..].replace('-', "");
    assert_eq!(root_hex.len(), 32);
    for provider in &providers {
        let seen = provider.requests().pop().expect("called");
        assert_eq!(
            seen.header("x-amzn-trace-id"),
            Some(first.trace_header.as_str())
        );
        assert_eq!(
            seen.header("traceparent"),
            Some(format!("00-{root_hex}-{}-01", first.parent_id()).as_str())
        );
        assert_eq!(seen.header("x-request-id"), Some(first.request_id.as_str()));
        assert_eq!(seen.claims()["request_id"], first.request_id.as_str());
    }

    // The caller's own traceparent goes on to the apps, with the invocation's X-Ray header.
    let incoming = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    stream_lines(&stack, &mut widgets, &cookie, Some(incoming)).await;
    let second = widgets.sent()[1].clone();
    assert_ne!(second.trace_id(), first.trace_id());
    for provider in &providers {
        let seen = provider.requests().pop().expect("called");
        assert_eq!(seen.header("traceparent"), Some(incoming));
        assert_eq!(
            seen.header("x-amzn-trace-id"),
            Some(second.trace_header.as_str())
        );
        assert_eq!(
            seen.header("x-request-id"),
            Some(second.request_id.as_str())
        );
    }

    // The broken widget's warning, written by the stream's own task, carries its invocation.
    emf_line_of(&widgets, &second).await;
    for (sent, cold) in [(&first, true), (&second, false)] {
        let lines = log_lines_of(&widgets, &sent.request_id);
        let rejected = lines
            .iter()
            .find(|l| l["message"] == "Widget proxy rejected response")
            .unwrap_or_else(|| {
                panic!("no rejection of {}:\n{}", sent.request_id, widgets.output())
            });
        assert_eq!(rejected["app_id"], "broken");
        assert_eq!(rejected["traceId"], sent.trace_id());
        assert_eq!(rejected["level"], "WARN");
        if cold {
            assert_eq!(rejected["coldStart"], true, "{rejected}");
        } else {
            assert!(rejected.get("coldStart").is_none(), "{rejected}");
        }
    }
    // Every line of an invocation names the traceparent its calls carried.
    let derived = format!("00-{root_hex}-{}-01", first.parent_id());
    for (sent, traceparent) in [(&first, derived.as_str()), (&second, incoming)] {
        let lines = log_lines_of(&widgets, &sent.request_id);
        assert!(
            lines.iter().all(|l| l["traceparent"] == traceparent),
            "{lines:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outbox_batch_counts_what_it_published() {
    let stack = Stack::with_queues().await;
    for key in ["k1", "k2", "k3"] {
        let mut conn = stack.core.pool.acquire().await.expect("connection");
        enqueue_live(&mut conn, "good", key, json!({"n": 1}), None)
            .await
            .expect("enqueue");
    }
    let queue = &stack.deployment.function("outbox").queues[0].queue;
    let mut outbox = stack.start("outbox").await;

    let (event, _) = sqs_batch(queue, &[&OutboxRef::live("good").to_message()]);
    let response = outbox.invoke(event).await.response();
    assert_eq!(
        response,
        json!({"batchItemFailures": []}),
        "{}",
        outbox.output()
    );
    let first = outbox.sent()[0].clone();
    let line = emf_line_of(&outbox, &first).await;
    assert_eq!(line["FunctionName"], "k2b-outbox", "{line}");
    assert_eq!(line["OutboxPublished"], 3, "{line}");
    assert_eq!(line["ColdStart"], 1, "{line}");
    assert_eq!(
        line["OutboxPassDuration"].as_array().map(Vec::len),
        Some(1),
        "one pass: {line}"
    );
    let age = line["OutboxOldestDueAgeSeconds"]
        .as_f64()
        .expect("the oldest due row's age");
    assert!((0.0..60.0).contains(&age), "{age}");
    assert!(line.get("OutboxFailed").is_none(), "{line}");

    // A pass over an empty outbox publishes nothing and is no cold start.
    let (event, _) = sqs_batch(queue, &[&OutboxRef::live("good").to_message()]);
    outbox.invoke(event).await.response();
    let second = outbox.sent()[1].clone();
    let line = emf_line_of(&outbox, &second).await;
    assert!(line.get("OutboxPublished").is_none(), "{line}");
    assert!(line.get("ColdStart").is_none(), "{line}");
    assert_eq!(line["OutboxPassDuration"].as_array().map(Vec::len), Some(1));
    assert_eq!(emf_lines(&outbox).len(), 2, "{}", outbox.output());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_buffered_answer_writes_its_line_and_an_idle_invocation_none() {
    let stack = Stack::new().await;
    let mut icons = stack.start("icons").await;
    let request = stack
        .gateway
        .request("GET", "/branding/{file}", "/branding/pwa-icon-192.png")
        .header("Accept", "image/png");
    let drawn = stack.send(&mut icons, &request).await;
    assert_eq!(drawn.status, 200, "{}", icons.output());
    let line = emf_line_of(&icons, &icons.sent()[0]).await;
    assert_eq!(line["IconRenders"], 1, "{line}");
    assert_eq!(line["ColdStart"], 1, "{line}");
    assert_eq!(line["IconRenderDuration"].as_array().map(Vec::len), Some(1));
    assert!(line.get("IconCacheHits").is_none(), "{line}");

    // The same logo again: answered from the held run.
    let again = stack.send(&mut icons, &request).await;
    assert_eq!(again.status, 200);
    let line = emf_line_of(&icons, &icons.sent()[1]).await;
    assert_eq!(line["IconCacheHits"], 1, "{line}");
    assert!(line.get("IconRenders").is_none(), "{line}");
    assert!(line.get("ColdStart").is_none(), "{line}");

    // A revalidation records nothing, so it writes no line at all.
    let etag = drawn.header("etag").expect("an etag").to_string();
    let revalidated = stack
        .send(&mut icons, &request.clone().header("If-None-Match", &etag))
        .await;
    assert_eq!(revalidated.status, 304);
    let third = icons.sent()[2].request_id.clone();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        emf_lines(&icons)
            .iter()
            .all(|line| line["requestId"] != third.as_str()),
        "{}",
        icons.output()
    );
    assert_eq!(emf_lines(&icons).len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maintenance_reports_the_oldest_due_outbox_row_every_minute() {
    let stack = Stack::with_queues().await;
    let schedule = stack.deployment.function("maintenance").schedules[0].clone();
    let mut maintenance = stack.start("maintenance").await;
    // Nothing waits: the alarm's series still gets its zero.
    maintenance
        .invoke(k2b_tests::lambda::scheduled_event(&schedule))
        .await
        .response();
    let first = maintenance.sent()[0].clone();
    let line = emf_line_of(&maintenance, &first).await;
    assert_eq!(line["FunctionName"], "k2b-maintenance", "{line}");
    assert_eq!(line["OutboxOldestDueAgeSeconds"], 0.0, "{line}");

    // A live update due for seven minutes (its publishes keep failing).
    sqlx::query(
        "INSERT INTO events.outbox (id, app_id, kind, ordering_key, payload, attempts,
                                    next_attempt_at, last_error, created_at)
         VALUES (gen_random_uuid(), 'crm', 'live', 'deal:1', '{}', 4, now(), 'refused',
                 now() - interval '7 minutes')",
    )
    .execute(&stack.db.pool)
    .await
    .expect("a stuck row");
    let report = maintenance
        .invoke(k2b_tests::lambda::scheduled_event(&schedule))
        .await
        .response();
    let second = maintenance.sent()[1].clone();
    let line = emf_line_of(&maintenance, &second).await;
    let age = line["OutboxOldestDueAgeSeconds"].as_f64().expect("age");
    assert!((420.0..480.0).contains(&age), "{line}");
    assert_eq!(
        line["_aws"]["CloudWatchMetrics"][0]["Namespace"],
        "K2BCloud"
    );
    assert_eq!(
        report["outbox_oldest_due_age_seconds"], age as u64,
        "{report}"
    );
}
