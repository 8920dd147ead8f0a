//! A Lambda harness: each function's real binary — the one SAM deploys — as a child process
//! under an emulated Lambda Runtime API, fed events in the shapes AWS sends.
//!
//! - [`Deployment`] is `template.yaml` after the SAM transform (`infra/check_template.py
//!   --describe`): every function's binary, timeout, memory, environment, REST API routes,
//!   other triggers, dependencies and alarms, the custom resources, the API's stage and binary
//!   media types.
//! - [`RuntimeApi`] serves the documented Runtime API (`/2018-06-01/runtime/invocation/next`,
//!   `…/{id}/response` buffered or streamed with the `application/vnd.awslambda.http-integration-response`
//!   prelude, `…/{id}/error`, `/init/error`) to one [`FunctionProcess`].
//! - [`rest`] builds REST (v1) proxy events as API Gateway sends them and reads responses as API
//!   Gateway passes them on (binary conversion by the first `Accept` type).

use std::collections::{BTreeMap, VecDeque};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use http_body_util::BodyExt;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc, oneshot};

pub mod rest;
pub mod stack;

/// The Runtime API's path prefix.
const RUNTIME: &str = "/2018-06-01/runtime";
/// The content type of a streamed HTTP response: a JSON prelude, eight NUL bytes, the body.
pub const HTTP_INTEGRATION_RESPONSE: &str = "application/vnd.awslambda.http-integration-response";

// --- the deployed shape ---------------------------------------------------------------------

/// `template.yaml` after the SAM transform.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Deployment {
    pub stage: String,
    pub binary_media_types: Vec<String>,
    /// By logical id.
    pub functions: BTreeMap<String, FunctionSpec>,
    /// Custom resources by logical id.
    #[serde(default)]
    pub custom_resources: BTreeMap<String, CustomResource>,
}

/// A custom resource of the template.
#[derive(Debug, Clone, Deserialize)]
pub struct CustomResource {
    /// `Custom::…`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The logical id of the function its service token names.
    pub function: Option<String>,
    /// Its properties besides the service token, as the template has them.
    pub properties: BTreeMap<String, Value>,
}

/// One function of the template.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FunctionSpec {
    pub binary: String,
    /// Seconds.
    pub timeout: u64,
    /// MiB.
    pub memory: u64,
    /// `ReservedConcurrentExecutions`, when set.
    #[serde(default)]
    pub reserved_concurrency: Option<u64>,
    /// Values are strings or intrinsics (`{"Ref": "DatabaseUrl"}`), as the template has them.
    pub environment: BTreeMap<String, Value>,
    /// The AWS managed policies of its role (names).
    pub managed_policies: Vec<String>,
    /// What its inline policies allow: `action resource` (a logical id of the template).
    pub allowed: Vec<String>,
    pub routes: Vec<ApiRoute>,
    pub schedules: Vec<Schedule>,
    pub queues: Vec<QueueTrigger>,
    /// The resources CloudFormation creates or updates before it (logical ids).
    #[serde(default)]
    pub depends_on: Vec<String>,
    /// The AWS/Lambda metrics alarms watch for it (`Errors`, `Throttles`).
    #[serde(default)]
    pub alarms: Vec<String>,
}

/// A REST API route of a function.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct ApiRoute {
    /// API Gateway's path (`/branding/{file}`, `/pwa/_auth/{proxy+}`).
    pub path: String,
    /// `GET`, …, or `ANY`.
    pub method: String,
    pub streamed: bool,
}

/// A schedule (an EventBridge rule) targeting a function.
#[derive(Debug, Clone, Deserialize)]
pub struct Schedule {
    pub rule: String,
    pub expression: Option<String>,
    /// The rule's fixed input, when it has one (else the rule sends its event envelope).
    pub input: Option<String>,
}

/// An SQS event source of a function.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueTrigger {
    pub mapping: String,
    pub queue: String,
    pub batch_size: Option<u64>,
    /// `ScalingConfig.MaximumConcurrency`: how many batches Lambda's pollers hand over at once.
    #[serde(default)]
    pub maximum_concurrency: Option<u64>,
    pub response_types: Vec<String>,
}

impl Deployment {
    /// Reads the transformed template (needs `python3` with aws-sam-translator, which comes with
    /// cfn-lint). Read once per process.
    pub fn load() -> Deployment {
        static DEPLOYMENT: std::sync::OnceLock<Deployment> = std::sync::OnceLock::new();
        DEPLOYMENT
            .get_or_init(|| {
                let output = Command::new("python3")
                    .args(["infra/check_template.py", "--describe"])
                    .current_dir(workspace_root())
                    .output()
                    .unwrap_or_else(|e| panic!("run python3 infra/check_template.py: {e}"));
                assert!(
                    output.status.success(),
                    "infra/check_template.py --describe failed (pip install cfn-lint):\n{}",
                    String::from_utf8_lossy(&output.stderr)
                );
                serde_json::from_slice(&output.stdout)
                    .unwrap_or_else(|e| panic!("template description: {e}"))
            })
            .clone()
    }

    /// The function built from `binary`.
    pub fn function(&self, binary: &str) -> &FunctionSpec {
        self.functions
            .values()
            .find(|f| f.binary == binary)
            .unwrap_or_else(|| panic!("no function builds the binary {binary}"))
    }

    /// The function's environment with every intrinsic resolved from `values` (parameter and
    /// resource names); an intrinsic the test did not provide fails the test.
    pub fn environment(
        &self,
        binary: &str,
        values: &BTreeMap<&str, String>,
    ) -> Vec<(String, String)> {
        self.function(binary)
            .environment
            .iter()
            .map(|(name, value)| {
                let value = match value {
                    Value::String(text) => text.clone(),
                    Value::Object(intrinsic) => {
                        let reference = intrinsic
                            .get("Ref")
                            .and_then(Value::as_str)
                            .unwrap_or_else(|| panic!("{binary}: {name} = {value}: only Ref is resolved"));
                        values
                            .get(reference)
                            .cloned()
                            .unwrap_or_else(|| panic!("{binary}: {name} refers to {reference}, which the test did not provide"))
                    }
                    other => other.to_string(),
                };
                (name.clone(), value)
            })
            .collect()
    }
}

/// The workspace's root directory.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap_or_else(|| panic!("tests/ has a parent"))
        .to_path_buf()
}

/// A binary of this build's profile (`target/debug/<name>` in tests, `target/release/<name>` in
/// benchmarks), built first when missing (benchmarks always build, so they never measure a stale
/// binary).
pub fn function_binary(name: &str) -> PathBuf {
    crate::workspace_binary(name)
}

// --- the emulated Runtime API ---------------------------------------------------------------

/// What a function answered for one event.
#[derive(Debug)]
pub enum Outcome {
    /// A buffered response (`…/response`): the JSON document.
    Response(Value),
    /// A streamed HTTP response: the prelude, then the body as it arrives.
    Streamed(StreamedResponse),
    /// `…/error`: the error type header and the error document.
    Error { error_type: String, body: Value },
}

impl Outcome {
    /// The buffered response, or a failed test.
    pub fn response(self) -> Value {
        match self {
            Outcome::Response(value) => value,
            other => panic!("expected a buffered response, got {other:?}"),
        }
    }

    /// The streamed response, or a failed test.
    pub fn streamed(self) -> StreamedResponse {
        match self {
            Outcome::Streamed(streamed) => streamed,
            other => panic!("expected a streamed response, got {other:?}"),
        }
    }
}

/// A response in the streaming mode.
#[derive(Debug)]
pub struct StreamedResponse {
    /// `{statusCode, headers, cookies}`.
    pub prelude: Value,
    /// Body bytes as the function wrote them, each with when it arrived.
    pub chunks: mpsc::UnboundedReceiver<(Instant, Bytes)>,
    /// The error a stream ended with (the `Lambda-Runtime-Function-Error-Type` trailer).
    pub trailer_error: Arc<Mutex<Option<String>>>,
}

impl StreamedResponse {
    /// The next body chunk, waiting at most `wait`.
    pub async fn next_chunk(&mut self, wait: Duration) -> Option<(Instant, Bytes)> {
        tokio::time::timeout(wait, self.chunks.recv())
            .await
            .ok()
            .flatten()
    }

    /// The whole body (waiting at most `wait` for its end).
    pub async fn body(&mut self, wait: Duration) -> Vec<u8> {
        let mut body = Vec::new();
        let deadline = tokio::time::Instant::now() + wait;
        while let Ok(Some((_, chunk))) = tokio::time::timeout_at(deadline, self.chunks.recv()).await
        {
            body.extend_from_slice(&chunk);
        }
        body
    }
}

struct Pending {
    id: String,
    /// The X-Ray header sent as `Lambda-Runtime-Trace-Id`.
    trace: String,
    event: Value,
    deadline_ms: u64,
    answer: oneshot::Sender<Outcome>,
}

#[derive(Default)]
struct Shared {
    queue: Mutex<VecDeque<Pending>>,
    arrived: Notify,
    waiting: Mutex<BTreeMap<String, oneshot::Sender<Outcome>>>,
    /// When the function first asked for an event (its init ended).
    first_next: Mutex<Option<Instant>>,
    /// When the function first answered anything.
    first_answer: Mutex<Option<Instant>>,
    init_error: Mutex<Option<(String, Value)>>,
}

/// The Runtime API of one function process.
pub struct RuntimeApi {
    /// `host:port`, as `AWS_LAMBDA_RUNTIME_API` names it.
    pub address: String,
    shared: Arc<Shared>,
    server: tokio::task::JoinHandle<()>,
}

impl RuntimeApi {
    pub async fn start() -> RuntimeApi {
        let shared = Arc::new(Shared::default());
        let app = Router::new()
            .route(&format!("{RUNTIME}/invocation/next"), get(next))
            .route(
                &format!("{RUNTIME}/invocation/{{id}}/response"),
                post(respond),
            )
            .route(
                &format!("{RUNTIME}/invocation/{{id}}/error"),
                post(invocation_error),
            )
            .route(&format!("{RUNTIME}/init/error"), post(init_error))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("bind the runtime API: {e}"));
        let address = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("runtime API address: {e}"))
            .to_string();
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.ok();
        });
        RuntimeApi {
            address,
            shared,
            server,
        }
    }
}

impl Drop for RuntimeApi {
    fn drop(&mut self) {
        self.server.abort();
    }
}

fn epoch_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or_default()
}

async fn next(State(shared): State<Arc<Shared>>) -> Response {
    if let Ok(mut first) = shared.first_next.lock() {
        first.get_or_insert_with(Instant::now);
    }
    loop {
        let notified = shared.arrived.notified();
        let pending = shared.queue.lock().ok().and_then(|mut q| q.pop_front());
        if let Some(pending) = pending {
            if let Ok(mut waiting) = shared.waiting.lock() {
                waiting.insert(pending.id.clone(), pending.answer);
            }
            let mut response = Json(pending.event).into_response();
            let headers = response.headers_mut();
            for (name, value) in [
                ("lambda-runtime-aws-request-id", pending.id.clone()),
                (
                    "lambda-runtime-deadline-ms",
                    pending.deadline_ms.to_string(),
                ),
                (
                    "lambda-runtime-invoked-function-arn",
                    "arn:aws:lambda:eu-central-1:123456789012:function:k2b-test".to_string(),
                ),
                ("lambda-runtime-trace-id", pending.trace.clone()),
            ] {
                if let Ok(value) = value.parse() {
                    headers.insert(name, value);
                }
            }
            return response;
        }
        notified.await;
    }
}

fn settle(shared: &Shared, id: &str, outcome: Outcome) -> StatusCode {
    if let Ok(mut first) = shared.first_answer.lock() {
        first.get_or_insert_with(Instant::now);
    }
    let sender = shared.waiting.lock().ok().and_then(|mut w| w.remove(id));
    match sender {
        Some(sender) => {
            sender.send(outcome).ok();
            StatusCode::ACCEPTED
        }
        None => StatusCode::BAD_REQUEST,
    }
}

async fn respond(
    State(shared): State<Arc<Shared>>,
    UrlPath(id): UrlPath<String>,
    headers: HeaderMap,
    body: Body,
) -> StatusCode {
    let streaming = headers
        .get("lambda-runtime-function-response-mode")
        .is_some_and(|v| v == "streaming");
    if !streaming {
        let bytes = body
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let value = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        return settle(&shared, &id, Outcome::Response(value));
    }
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let (sender, chunks) = mpsc::unbounded_channel();
    let trailer_error = Arc::new(Mutex::new(None));
    // The invocation settles as soon as the prelude is known, so the test reads the body while
    // the function is still writing it.
    let (prelude_sender, prelude) = oneshot::channel::<Value>();
    {
        let shared = shared.clone();
        let trailer_error = trailer_error.clone();
        tokio::spawn(async move {
            if let Ok(prelude) = prelude.await {
                settle(
                    &shared,
                    &id,
                    Outcome::Streamed(StreamedResponse {
                        prelude,
                        chunks,
                        trailer_error,
                    }),
                );
            }
        });
    }
    let mut prelude_sender = Some(prelude_sender);
    let mut buffer = Vec::new();
    let mut body = body;
    // The prelude ends at eight NUL bytes; everything after is the body, passed on as it comes.
    // A test that drops the response (the reader left) hangs up on the function, as the front
    // door does: its next write to the response stream fails.
    loop {
        let frame = tokio::select! {
            frame = body.frame() => frame,
            () = sender.closed(), if prelude_sender.is_none() => return StatusCode::ACCEPTED,
        };
        let Some(Ok(frame)) = frame else { break };
        match frame.into_data() {
            Ok(data) => {
                if prelude_sender.is_none() {
                    sender.send((Instant::now(), data)).ok();
                    continue;
                }
                buffer.extend_from_slice(&data);
                let split = if content_type == HTTP_INTEGRATION_RESPONSE {
                    buffer.windows(8).position(|w| w == [0u8; 8]).map(|end| {
                        let rest = buffer.split_off(end + 8);
                        let prelude = serde_json::from_slice(&buffer[..end]).unwrap_or(Value::Null);
                        (prelude, rest)
                    })
                } else {
                    Some((json!({}), std::mem::take(&mut buffer)))
                };
                if let Some((prelude, rest)) = split
                    && let Some(waiting) = prelude_sender.take()
                {
                    waiting.send(prelude).ok();
                    if !rest.is_empty() {
                        sender.send((Instant::now(), Bytes::from(rest))).ok();
                    }
                }
            }
            Err(frame) => {
                if let Ok(trailers) = frame.into_trailers()
                    && let Some(kind) = trailers.get("lambda-runtime-function-error-type")
                    && let Ok(mut error) = trailer_error.lock()
                {
                    *error = Some(kind.to_str().unwrap_or_default().to_string());
                }
            }
        }
    }
    if let Some(waiting) = prelude_sender.take() {
        // The body ended before a whole prelude: what there is, for the test to see.
        waiting
            .send(serde_json::from_slice(&buffer).unwrap_or(Value::Null))
            .ok();
    }
    StatusCode::ACCEPTED
}

/// The error type header and the error document a function reported.
async fn reported_error(headers: &HeaderMap, body: Body) -> (String, Value) {
    let error_type = headers
        .get("lambda-runtime-function-error-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let bytes = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    (
        error_type,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

async fn invocation_error(
    State(shared): State<Arc<Shared>>,
    UrlPath(id): UrlPath<String>,
    headers: HeaderMap,
    body: Body,
) -> StatusCode {
    let (error_type, body) = reported_error(&headers, body).await;
    settle(&shared, &id, Outcome::Error { error_type, body })
}

async fn init_error(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Body,
) -> StatusCode {
    let reported = reported_error(&headers, body).await;
    if let Ok(mut slot) = shared.init_error.lock() {
        *slot = Some(reported);
    }
    StatusCode::ACCEPTED
}

// --- a function process ---------------------------------------------------------------------

/// The ids the Runtime API sent with one invocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    /// `Lambda-Runtime-Aws-Request-Id`.
    pub request_id: String,
    /// `Lambda-Runtime-Trace-Id`: `Root=1-<8 hex>-<24 hex>;Parent=<16 hex>;Sampled=1`, a new
    /// trace for every invocation.
    pub trace_header: String,
}

impl Sent {
    /// The X-Ray trace id (`1-<8 hex>-<24 hex>`).
    pub fn trace_id(&self) -> &str {
        self.field("Root")
    }

    /// The parent (span) id of the trace header.
    pub fn parent_id(&self) -> &str {
        self.field("Parent")
    }

    fn field(&self, key: &str) -> &str {
        self.trace_header
            .split(';')
            .find_map(|part| part.strip_prefix(key)?.strip_prefix('='))
            .unwrap_or_default()
    }
}

/// A trace header as Lambda sends it, for a new trace.
fn new_trace_header() -> String {
    let root = uuid::Uuid::new_v4().simple().to_string();
    let parent = uuid::Uuid::new_v4().simple().to_string();
    let epoch = epoch_ms() / 1000;
    format!(
        "Root=1-{epoch:08x}-{};Parent={};Sampled=1",
        &root[..24],
        &parent[..16]
    )
}

/// A function's binary running under its own [`RuntimeApi`], with the environment Lambda gives
/// it: the template's variables and Lambda's own (`AWS_LAMBDA_*`, region), nothing inherited.
pub struct FunctionProcess {
    pub name: String,
    api: RuntimeApi,
    child: Child,
    started: Instant,
    timeout: Duration,
    output: Arc<Mutex<String>>,
    stdout: Arc<Mutex<Vec<String>>>,
    invocations: std::sync::atomic::AtomicU64,
    sent: Mutex<Vec<Sent>>,
}

impl FunctionProcess {
    /// Starts `binary` with `environment` (already resolved), as the function of the template
    /// that builds it (timeout and memory from there).
    pub async fn start(
        deployment: &Deployment,
        binary: &Path,
        name: &str,
        environment: &[(String, String)],
    ) -> FunctionProcess {
        let spec = deployment.function(name);
        let api = RuntimeApi::start().await;
        let mut command = Command::new(binary);
        command
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("LANG", "en_US.UTF-8")
            .env("TZ", ":UTC")
            .env("AWS_LAMBDA_RUNTIME_API", &api.address)
            .env("AWS_LAMBDA_FUNCTION_NAME", format!("k2b-{name}"))
            .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", spec.memory.to_string())
            .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
            .env(
                "AWS_LAMBDA_LOG_GROUP_NAME",
                format!("/aws/lambda/k2b-{name}"),
            )
            .env(
                "AWS_LAMBDA_LOG_STREAM_NAME",
                "2026/12/01/[$LATEST]0123456789abcdef",
            )
            .env("AWS_REGION", "eu-central-1")
            .env("AWS_DEFAULT_REGION", "eu-central-1")
            .env("_HANDLER", "bootstrap")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (key, value) in environment {
            command.env(key, value);
        }
        let started = Instant::now();
        let mut child = command
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", binary.display()));
        let output = Arc::new(Mutex::new(String::new()));
        let stdout = Arc::new(Mutex::new(Vec::new()));
        let origin = crate::logs::Origin::here();
        for (pipe, lines) in [
            (
                child
                    .stdout
                    .take()
                    .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
                Some(stdout.clone()),
            ),
            (
                child
                    .stderr
                    .take()
                    .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
                None,
            ),
        ] {
            let Some(pipe) = pipe else { continue };
            let sink = output.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                    crate::logs::child_line(&origin, &line);
                    if let Ok(mut text) = sink.lock() {
                        text.push_str(&line);
                        text.push('\n');
                    }
                    if let Some(lines) = &lines
                        && let Ok(mut lines) = lines.lock()
                    {
                        lines.push(line);
                    }
                }
            });
        }
        FunctionProcess {
            name: name.to_string(),
            api,
            child,
            started,
            timeout: Duration::from_secs(spec.timeout),
            output,
            stdout,
            invocations: std::sync::atomic::AtomicU64::new(0),
            sent: Mutex::new(Vec::new()),
        }
    }

    /// Sends one event and waits for its outcome (at most the function's timeout plus a margin).
    pub async fn invoke(&mut self, event: Value) -> Outcome {
        let number = self
            .invocations
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let id = format!("{:08x}-0000-4000-8000-{:012x}", std::process::id(), number);
        let trace = new_trace_header();
        if let Ok(mut sent) = self.sent.lock() {
            sent.push(Sent {
                request_id: id.clone(),
                trace_header: trace.clone(),
            });
        }
        let (answer, outcome) = oneshot::channel();
        let pending = Pending {
            id,
            trace,
            event,
            deadline_ms: epoch_ms() + self.timeout.as_millis() as u64,
            answer,
        };
        if let Ok(mut queue) = self.api.shared.queue.lock() {
            queue.push_back(pending);
        }
        self.api.shared.arrived.notify_one();
        let deadline = Instant::now() + self.timeout + Duration::from_secs(10);
        let mut outcome = outcome;
        loop {
            match tokio::time::timeout(Duration::from_millis(100), &mut outcome).await {
                Ok(Ok(outcome)) => return outcome,
                Ok(Err(_)) => panic!("{}: the runtime API dropped the invocation", self.name),
                Err(_) => {}
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "{} exited with {status} before answering; init error: {:?}\n{}",
                    self.name,
                    self.init_error(),
                    self.output()
                );
            }
            assert!(
                Instant::now() < deadline,
                "{} did not answer within its timeout\n{}",
                self.name,
                self.output()
            );
        }
    }

    /// Ends the process at once (SIGKILL), as Lambda does to an environment that timed out or
    /// ran out of memory; returns when it is gone.
    pub fn kill(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }

    /// Waits for the process to end by itself (a refused start), at most `wait`.
    pub async fn exit_status(&mut self, wait: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + wait;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                // Let the output threads catch up.
                tokio::time::sleep(Duration::from_millis(50)).await;
                return Some(status);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    }

    /// What the function reported to `/runtime/init/error`: its error type and document.
    pub fn init_error(&self) -> Option<(String, Value)> {
        self.api
            .shared
            .init_error
            .lock()
            .ok()
            .and_then(|e| e.clone())
    }

    /// Process start → first `/invocation/next` (the init phase).
    pub fn init_duration(&self) -> Option<Duration> {
        let first = self.api.shared.first_next.lock().ok().and_then(|t| *t)?;
        Some(first.duration_since(self.started))
    }

    /// Process start → first answer of any kind.
    pub fn first_answer(&self) -> Option<Duration> {
        let first = self.api.shared.first_answer.lock().ok().and_then(|t| *t)?;
        Some(first.duration_since(self.started))
    }

    /// Peak resident memory so far in KiB (`VmHWM`).
    pub fn peak_rss_kib(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).ok()?;
        let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
        line.split_whitespace().nth(1)?.parse().ok()
    }

    /// Everything the process printed (its logs).
    pub fn output(&self) -> String {
        self.output.lock().map(|o| o.clone()).unwrap_or_default()
    }

    /// The lines the process wrote to stdout so far (JSON logs and metrics lines).
    pub fn stdout_lines(&self) -> Vec<String> {
        self.stdout.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// Waits (at most `wait`) until a line of stdout satisfies `found`, and returns it.
    pub async fn wait_for_stdout(
        &self,
        wait: Duration,
        found: impl Fn(&str) -> bool,
    ) -> Option<String> {
        let deadline = Instant::now() + wait;
        loop {
            if let Some(line) = self.stdout_lines().into_iter().find(|l| found(l)) {
                return Some(line);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The ids sent with each invocation so far, in order.
    pub fn sent(&self) -> Vec<Sent> {
        self.sent.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

impl Drop for FunctionProcess {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}

// --- other event sources --------------------------------------------------------------------

/// The EventBridge event a schedule rule delivers (or its fixed input).
pub fn scheduled_event(schedule: &Schedule) -> Value {
    if let Some(input) = &schedule.input {
        return serde_json::from_str(input).unwrap_or(Value::String(input.clone()));
    }
    json!({
        "version": "0",
        "id": uuid::Uuid::new_v4().to_string(),
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": "123456789012",
        "time": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        "region": "eu-central-1",
        "resources": [format!("arn:aws:events:eu-central-1:123456789012:rule/{}", schedule.rule)],
        "detail": {}
    })
}

/// An SQS batch as the event source mapping delivers it, one record per body.
pub fn sqs_batch(queue: &str, bodies: &[&str]) -> (Value, Vec<String>) {
    let ids: Vec<String> = bodies
        .iter()
        .map(|_| uuid::Uuid::new_v4().to_string())
        .collect();
    let now = epoch_ms().to_string();
    let records: Vec<Value> = bodies
        .iter()
        .zip(&ids)
        .map(|(body, id)| {
            json!({
                "messageId": id,
                "receiptHandle": format!("AQEB{}", id.replace('-', "")),
                "body": body,
                "attributes": {
                    "ApproximateReceiveCount": "1",
                    "SentTimestamp": now,
                    "SenderId": "AROAEXAMPLE:k2b-approvals",
                    "ApproximateFirstReceiveTimestamp": now
                },
                "messageAttributes": {},
                "md5OfBody": hex_md5_placeholder(body),
                "eventSource": "aws:sqs",
                "eventSourceARN": format!("arn:aws:sqs:eu-central-1:123456789012:{queue}"),
                "awsRegion": "eu-central-1"
            })
        })
        .collect();
    (json!({ "Records": records }), ids)
}

/// SQS puts the body's MD5 here; nothing reads it, so any 32 hex characters keep the shape.
fn hex_md5_placeholder(body: &str) -> String {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    body.hash(&mut hasher);
    format!("{:016x}{:016x}", hasher.finish(), body.len())
}
