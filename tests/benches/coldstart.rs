//! Cold start and size of every function (figures, no assertions): each function's binary in
//! the bench profile (release code generation) started under the emulated Lambda Runtime API with
//! the template's environment, as a new execution environment, `RUNS` times:
//! - size of the binary;
//! - init: process start → its first `/runtime/invocation/next`;
//! - first answer: process start → the answer to its first event (a representative one per
//!   function), then the same event again in the same process (warm);
//! - peak resident memory after the first answer.
//!
//! Goals: init ≤ 30 ms, first answer ≤ 30 ms (loopback database), binary ≤ 15 MB.
//!
//! Run: `cargo bench -p k2b-tests --bench coldstart` (builds the binaries in the bench profile;
//! needs moto and aws-sam-translator like the tests). `K2B_BENCH_URL_SUFFIX='?sslmode=disable'`
//! appends to every function's `DATABASE_URL`, to tell the TLS handshake's share of a first
//! answer from the rest.

use std::time::Instant;

use k2b_core::outbox::OutboxRef;
use k2b_core::registry::{APP_REGISTRY_TTL, store};
use k2b_tests::figures::{median, ms};
use k2b_tests::lambda::rest::RestRequest;
use k2b_tests::lambda::stack::Stack;
use k2b_tests::lambda::{FunctionProcess, Outcome, function_binary, scheduled_event, sqs_batch};
use k2b_tests::serve;
use serde_json::{Value, json};

const RUNS: usize = 10;
const INIT_GOAL_MS: f64 = 30.0;
const FIRST_ANSWER_GOAL_MS: f64 = 30.0;
const SIZE_GOAL_MB: f64 = 15.0;

/// The first event of a new environment, per function.
enum FirstEvent {
    Http(RestRequest),
    Raw(Value),
}

async fn answer(stack: &Stack, process: &mut FunctionProcess, event: &FirstEvent) -> String {
    match event {
        FirstEvent::Http(request) => {
            let delivered = stack.send(process, request).await;
            delivered.status.to_string()
        }
        FirstEvent::Raw(event) => match process.invoke(event.clone()).await {
            Outcome::Response(_) => "ok".to_string(),
            other => format!("{other:?}"),
        },
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    println!(
        "== cold start: every function's binary (bench profile) under the emulated Runtime API, {RUNS} new environments each =="
    );
    let stack = Stack::with_queues().await;
    let (_, cookie) = stack.admin().await;
    let gateway = &stack.gateway;
    // One app with one instant widget, so the stream signs and calls.
    let provider = serve(
        axum::Router::new()
            .fallback(|| async { axum::Json(json!({"title": "Bench", "blocks": []})) }),
    )
    .await;
    let mut conn = stack.core.pool.acquire().await.expect("connection");
    store::upsert(
        &mut conn,
        &json!({"id": "bench", "name": "Bench", "icon": "i", "description": "d",
                "baseUrl": provider, "routes": ["/app/bench"],
                "widgets": [{"id": "summary", "path": "/w", "title": "Summary"}]}),
        APP_REGISTRY_TTL,
    )
    .await
    .expect("register");
    drop(conn);

    let jwks = "/.well-known/cloud-session-jwks.json";
    let wakeup = OutboxRef::live("bench").to_message();
    // CloudFormation's pre-signed response URL, for the migrate function's answers.
    let cloudformation =
        serve(axum::Router::new().route("/response", axum::routing::put(|| async { "" }))).await;
    let mut rows = Vec::new();
    for (name, function) in &stack.deployment.functions {
        let binary = function.binary.as_str();
        let event = match binary {
            "registry" => FirstEvent::Http(
                gateway
                    .request("GET", jwks, jwks)
                    .header("Accept", "application/json"),
            ),
            "icons" => FirstEvent::Http(
                gateway
                    .request("GET", "/branding/{file}", "/branding/pwa-icon-192.png")
                    .header("Accept", "image/avif,image/webp,*/*"),
            ),
            "manifest" => FirstEvent::Http(
                gateway
                    .request(
                        "GET",
                        "/pwa/manifest.webmanifest",
                        "/pwa/manifest.webmanifest",
                    )
                    .header("Accept", "*/*"),
            ),
            "approvals" => FirstEvent::Http(
                gateway
                    .request(
                        "GET",
                        "/api/auth/pwa/v1/{proxy+}",
                        "/api/auth/pwa/v1/devices",
                    )
                    .header("Accept", "application/json")
                    .header("Cookie", &cookie),
            ),
            "widgets" => FirstEvent::Http(
                gateway
                    .request("GET", "/api/widgets/v1", "/api/widgets/v1")
                    .header("Accept", "application/x-ndjson")
                    .header("Cookie", &cookie),
            ),
            "help" => FirstEvent::Http(
                gateway
                    .request(
                        "GET",
                        "/api/help/v1/{appId}/search",
                        "/api/help/v1/bench/search",
                    )
                    .query("q", "summary")
                    .header("Accept", "application/json")
                    .header("Cookie", &cookie),
            ),
            "outbox" => FirstEvent::Raw(sqs_batch("WakeupQueue", &[&wakeup]).0),
            "keys" | "maintenance" => FirstEvent::Raw(scheduled_event(
                function.schedules.first().expect("a schedule"),
            )),
            "mail" => FirstEvent::Http(
                gateway
                    .request(
                        "GET",
                        "/api/admin/core/outgoing-mail/apps",
                        "/api/admin/core/outgoing-mail/apps",
                    )
                    .header("Accept", "application/json")
                    .header("Cookie", &cookie),
            ),
            "admin" => FirstEvent::Raw(json!({"command": ["keys", "status"]})),
            // A Delete never touches the database; its answer goes to the response URL.
            "migrate" => FirstEvent::Raw(json!({
                "RequestType": "Delete",
                "ResponseURL": format!("{cloudformation}/response"),
                "StackId": "arn:aws:cloudformation:eu-central-1:123456789012:stack/bench/1",
                "RequestId": "bench",
                "ResourceType": "Custom::SchemaMigration",
                "LogicalResourceId": "SchemaMigration",
                "PhysicalResourceId": "k2b-schema",
                "ResourceProperties": {}
            })),
            other => panic!("no first event for {other} ({name})"),
        };
        let path = function_binary(binary);
        let size_mb = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0) as f64 / 1e6;
        let (mut init, mut first, mut warm, mut rss) = (vec![], vec![], vec![], vec![]);
        let mut status = String::new();
        for _ in 0..RUNS {
            let mut environment = stack.environment(binary);
            if let Ok(extra) = std::env::var("K2B_BENCH_URL_SUFFIX") {
                for (name, value) in environment.iter_mut() {
                    if name == "DATABASE_URL" {
                        value.push_str(&extra);
                    }
                }
            }
            let mut process = stack.start_with(binary, &environment).await;
            status = answer(&stack, &mut process, &event).await;
            init.push(ms(process.init_duration().expect("asked for an event")));
            first.push(ms(process.first_answer().expect("answered")));
            rss.push(process.peak_rss_kib().unwrap_or(0) as f64 / 1024.0);
            let again = Instant::now();
            answer(&stack, &mut process, &event).await;
            warm.push(ms(again.elapsed()));
        }
        rows.push((
            binary.to_string(),
            size_mb,
            median(&init),
            median(&first),
            median(&warm),
            median(&rss),
            status,
        ));
    }
    println!(
        "{:<12} {:>9} {:>10} {:>14} {:>10} {:>10}  answer",
        "function", "size MB", "init ms", "1st answer ms", "warm ms", "peak MiB"
    );
    for (binary, size, init, first, warm, rss, status) in &rows {
        let mut misses = Vec::new();
        if *size > SIZE_GOAL_MB {
            misses.push("size");
        }
        if *init > INIT_GOAL_MS {
            misses.push("init");
        }
        if *first > FIRST_ANSWER_GOAL_MS {
            misses.push("first answer");
        }
        println!(
            "{binary:<12} {size:>9.1} {init:>10.1} {first:>14.1} {warm:>10.1} {rss:>10.1}  {status}{}",
            if misses.is_empty() {
                String::new()
            } else {
                format!("   over the goal: {}", misses.join(", "))
            }
        );
    }
    println!(
        "goals: init ≤ {INIT_GOAL_MS} ms, first answer ≤ {FIRST_ANSWER_GOAL_MS} ms, binary ≤ {SIZE_GOAL_MB} MB (medians of {RUNS})"
    );
}
