//! An HTTP proxy in front of the local SQS API (moto) that counts the calls it relays and can
//! make chosen `SendMessageBatch` entries fail: the partial batch failure real SQS reports (an
//! entry in `Failed` beside successful ones), which moto itself only produces for invalid
//! entries.
//!
//! The SDK speaks the AWS JSON 1.0 protocol: the operation is in `X-Amz-Target`
//! (`AmazonSQS.SendMessageBatch`), the request and response are JSON. A failing entry is taken
//! out of the forwarded request (so it never reaches the queue) and added to the response's
//! `Failed`. Moto does not check signatures, so rewriting a signed body is fine.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// Request bodies the proxy reads at most (SQS takes at most 256 KiB of message bodies a call).
const MAX_REQUEST_BYTES: usize = 4 * 1024 * 1024;
/// The error code of an injected entry failure.
pub const INJECTED_CODE: &str = "InternalError";

struct Faults {
    /// Entries whose body contains the marker fail, this many more times.
    failing: Vec<(String, usize)>,
    /// Calls relayed, by operation (`SendMessageBatch`).
    calls: HashMap<String, usize>,
    /// Entries failed so far.
    failed: usize,
    /// Messages the queue accepted, by the answers relayed (`SendMessage`, `SendMessageBatch`).
    accepted: usize,
}

struct Shared {
    target: String,
    http: reqwest::Client,
    faults: Mutex<Faults>,
}

/// The proxy: clients made by [`SqsFaultProxy::client`] reach moto through it.
pub struct SqsFaultProxy {
    /// The proxy's base URL.
    pub url: String,
    shared: Arc<Shared>,
}

impl SqsFaultProxy {
    /// Starts a proxy in front of the SQS API at `endpoint`.
    pub async fn start(endpoint: &str) -> SqsFaultProxy {
        let shared = Arc::new(Shared {
            target: endpoint.trim_end_matches('/').to_string(),
            http: reqwest::Client::new(),
            faults: Mutex::new(Faults {
                failing: Vec::new(),
                calls: HashMap::new(),
                failed: 0,
                accepted: 0,
            }),
        });
        let router = axum::Router::new()
            .fallback(relay)
            .with_state(shared.clone());
        let url = crate::serve(router).await;
        SqsFaultProxy { url, shared }
    }

    /// `base` (a client of moto) sending through the proxy instead.
    pub fn client(&self, base: &aws_sdk_sqs::Client) -> aws_sdk_sqs::Client {
        let config = base.config().to_builder().endpoint_url(&self.url).build();
        aws_sdk_sqs::Client::from_conf(config)
    }

    /// The next `times` batch entries whose body contains `marker` fail.
    pub fn fail_bodies_containing(&self, marker: &str, times: usize) {
        self.with_faults(|faults| faults.failing.push((marker.to_string(), times)));
    }

    /// How many calls of `operation` (`SendMessageBatch`, `SendMessage`) the proxy relayed.
    pub fn calls(&self, operation: &str) -> usize {
        self.with_faults(|faults| faults.calls.get(operation).copied().unwrap_or(0))
    }

    /// How many messages the queue accepted (successful `SendMessage` calls and the
    /// `Successful` entries of `SendMessageBatch` answers).
    pub fn accepted(&self) -> usize {
        self.with_faults(|faults| faults.accepted)
    }

    /// How many batch entries the proxy failed.
    pub fn failed(&self) -> usize {
        self.with_faults(|faults| faults.failed)
    }

    fn with_faults<T>(&self, change: impl FnOnce(&mut Faults) -> T) -> T {
        with_faults(&self.shared, change)
    }
}

fn with_faults<T>(shared: &Shared, change: impl FnOnce(&mut Faults) -> T) -> T {
    let mut faults = shared
        .faults
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    change(&mut faults)
}

fn operation(headers: &HeaderMap) -> String {
    headers
        .get("x-amz-target")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("AmazonSQS."))
        .unwrap_or("unknown")
        .to_string()
}

/// Takes the entries to fail out of a `SendMessageBatch` request; returns them as `Failed`
/// entries.
fn take_failing(shared: &Shared, request: &mut Value) -> Vec<Value> {
    let Some(entries) = request.get_mut("Entries").and_then(Value::as_array_mut) else {
        return Vec::new();
    };
    with_faults(shared, |faults| {
        let mut failed = Vec::new();
        entries.retain(|entry| {
            let body = entry["MessageBody"].as_str().unwrap_or_default();
            let rule = faults
                .failing
                .iter_mut()
                .find(|(marker, times)| *times > 0 && body.contains(marker.as_str()));
            let Some((_, times)) = rule else {
                return true;
            };
            *times -= 1;
            failed.push(json!({
                "Id": entry["Id"],
                "SenderFault": false,
                "Code": INJECTED_CODE,
                "Message": "failed by the test proxy",
            }));
            false
        });
        faults.failed += failed.len();
        failed
    })
}

async fn relay(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let Ok(body) = axum::body::to_bytes(body, MAX_REQUEST_BYTES).await else {
        return (StatusCode::BAD_REQUEST, "unreadable body").into_response();
    };
    let operation = operation(&parts.headers);
    let mut body = body.to_vec();
    let mut failed = Vec::new();
    if operation == "SendMessageBatch"
        && let Ok(mut request) = serde_json::from_slice::<Value>(&body)
    {
        failed = take_failing(&shared, &mut request);
        if !failed.is_empty() {
            let left = request["Entries"].as_array().map_or(0, Vec::len);
            if left == 0 {
                // Nothing left to forward: SQS would have answered with every entry failed.
                let answer = json!({"Successful": [], "Failed": failed});
                return json_response(StatusCode::OK, answer.to_string());
            }
            body = request.to_string().into_bytes();
        }
    }
    with_faults(&shared, |faults| {
        *faults.calls.entry(operation.clone()).or_default() += 1;
    });
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut forward = shared
        .http
        .request(parts.method.clone(), format!("{}{path}", shared.target));
    for (name, value) in &parts.headers {
        if !is_hop_header(name) {
            forward = forward.header(name, value);
        }
    }
    let answer = match forward.body(body).send().await {
        Ok(answer) => answer,
        Err(error) => return (StatusCode::BAD_GATEWAY, error.to_string()).into_response(),
    };
    let status = answer.status();
    let headers = answer.headers().clone();
    let Ok(mut text) = answer.text().await else {
        return (StatusCode::BAD_GATEWAY, "unreadable answer").into_response();
    };
    if status.is_success() {
        let accepted = match operation.as_str() {
            "SendMessage" => 1,
            "SendMessageBatch" => serde_json::from_str::<Value>(&text)
                .ok()
                .and_then(|response| response["Successful"].as_array().map(Vec::len))
                .unwrap_or(0),
            _ => 0,
        };
        with_faults(&shared, |faults| faults.accepted += accepted);
    }
    if !failed.is_empty()
        && status.is_success()
        && let Ok(mut response) = serde_json::from_str::<Value>(&text)
    {
        if let Some(list) = response.get_mut("Failed").and_then(Value::as_array_mut) {
            list.extend(failed);
        } else {
            response["Failed"] = Value::Array(failed);
        }
        text = response.to_string();
    }
    let mut response = Response::new(Body::from(text));
    *response.status_mut() = status;
    for (name, value) in &headers {
        if !is_hop_header(name) {
            response.headers_mut().insert(name.clone(), value.clone());
        }
    }
    response
}

fn json_response(status: StatusCode, body: String) -> Response {
    (
        status,
        [("content-type", "application/x-amz-json-1.0")],
        body,
    )
        .into_response()
}

/// Headers the proxy sets itself (a rewritten body has another length).
fn is_hop_header(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "host" | "content-length" | "transfer-encoding" | "connection"
    )
}
