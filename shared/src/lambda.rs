//! How every function starts on Lambda: one bootstrap, so a new function cannot forget a step.
//!
//! A function names itself and what it holds ([`Function`]); the bootstrap reads only that part
//! of the configuration (refusing to start with one line naming a bad or missing variable),
//! starts logging, builds the [`Core`] with the database limits of its kind, and runs the
//! handler under the Lambda runtime:
//!
//! - HTTP functions ([`serve_http`], [`serve_http_streaming`]) serve their [`Routes`] behind
//!   [`front_door`]: REST API (v1) events are routed by their path without the stage, HTTP API
//!   (v2), Function URL and ALB events by their own path; anything no route matches is the JSON
//!   `ROUTE_NOT_FOUND` 404; and every route answers its head within [`ROUTE_BUDGET`], with its
//!   own 503 rather than API Gateway's 504.
//! - Event functions ([`serve_events`]) receive the raw payload (an SQS batch, an EventBridge
//!   `Scheduled Event` envelope, a ScheduleV2 input) with the invocation's deadline.
//!
//! Every invocation runs inside the [`INVOCATION_SPAN`] (its request id, X-Ray trace id and, on
//! an environment's first invocation, `coldStart`, on every log line) with its
//! [`TraceContext`] current, and ends with one [`metrics::flush`]: an event function's when its
//! handler returns, an HTTP function's when its response body has been sent or is dropped (a
//! streamed body after its last line).

use std::convert::Infallible;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Poll;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::{MatchedPath, Request};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use http::{HeaderValue, Uri, header};
use lambda_http::request::RequestContext;
use lambda_runtime::{LambdaEvent, service_fn};
use serde_json::Value;
use tower::ServiceExt;
use tracing::Instrument;

use crate::Core;
use crate::config::{Config, Mode, Needs};
use crate::db::{self, DbLimits};
use crate::http::ApiError;
use crate::http::routes::Routes;
use crate::telemetry::INVOCATION_SPAN;
use crate::telemetry::metrics;
use crate::telemetry::trace::{self, TraceContext};

/// What a function is, for its bootstrap.
#[derive(Debug, Clone, Copy)]
pub struct Function {
    /// The binary's name, as `template.yaml` builds it.
    pub name: &'static str,
    /// What it holds besides its database (see [`Needs`]).
    pub needs: Needs,
}

/// How long an HTTP route has to answer (its head, for a streamed route). API Gateway ends a
/// REST integration after 29 s with its own 504; every route's own deadlines (database limits,
/// issuance, provider calls) end well inside this budget, and the budget itself is the backstop
/// that still answers with the route's 503.
pub const ROUTE_BUDGET: Duration = Duration::from_secs(20);

/// The bootstrap's one error type (what a failed start reports to the Lambda Runtime API).
pub type Error = lambda_runtime::Error;

/// Starts a buffered HTTP function.
pub fn serve_http(function: Function, routes: impl FnOnce(Core) -> Routes) -> Result<(), Error> {
    runtime()?.block_on(async move {
        let core = start(function, DbLimits::HTTP)?;
        lambda_http::run(invocations(front_door(routes(core)))).await
    })
}

/// Starts an HTTP function whose responses stream (lines leave as they are written).
pub fn serve_http_streaming(
    function: Function,
    routes: impl FnOnce(Core) -> Routes,
) -> Result<(), Error> {
    runtime()?.block_on(async move {
        let core = start(function, DbLimits::HTTP)?;
        lambda_http::run_with_streaming_response(invocations(front_door(routes(core)))).await
    })
}

/// One invocation of an event function.
#[derive(Debug)]
pub struct Invocation {
    /// The event as Lambda delivered it.
    pub payload: Value,
    /// When the invocation is ended by Lambda.
    pub deadline: tokio::time::Instant,
}

/// What an event handler returns.
pub type EventFuture = futures::future::BoxFuture<'static, Result<Value, Error>>;

/// Starts an event function: `handler` is built once from the [`Core`] and called per event;
/// its value is the invocation's result, its error the invocation's error.
pub fn serve_events<H, F>(function: Function, handler: impl FnOnce(Core) -> H) -> Result<(), Error>
where
    H: Fn(Invocation) -> F,
    F: Future<Output = Result<Value, Error>>,
{
    runtime()?.block_on(async move {
        let core = start(function, DbLimits::EVENTS)?;
        let handler = handler(core);
        lambda_runtime::run(service_fn(|event: LambdaEvent<Value>| {
            let context = TraceContext::new(
                Some(event.context.request_id.clone()),
                event
                    .context
                    .xray_trace_id
                    .clone()
                    .or_else(trace::xray_from_env),
                None,
            );
            let span = begin_invocation(&context);
            let invocation = Invocation {
                deadline: deadline_of(event.context.deadline),
                payload: event.payload,
            };
            let work = span.in_scope(|| handler(invocation));
            async move {
                // Success, error or a dropped future: the invocation's metrics leave either way.
                let _flush = FlushOnDrop;
                trace::scope(context, work).instrument(span).await
            }
        }))
        .await
    })
}

fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
}

/// Configuration (or exit with one line naming the variable), logging, and the core.
fn start(function: Function, limits: DbLimits) -> Result<Core, Error> {
    let config = match Config::from_env_for(Mode::Production, function.needs) {
        Ok(config) => config,
        Err(error) => {
            let line = format!("configuration error: {error}");
            eprintln!("{line}");
            report_init_error(&line);
            std::process::exit(2);
        }
    };
    crate::telemetry::init(config.log_format);
    metrics::set_function(function.name);
    if let Some(notice) = config.local_mode_notice() {
        tracing::warn!(function = function.name, "{notice}");
    }
    // The environment holds the function's secrets: no other process of the same user (a
    // render worker, say) may read it.
    crate::sandbox::forbid_inspection();
    let pool = db::lazy_pool_with(&config, limits)?;
    Ok(Core::with_pool(config, pool))
}

/// Whether this execution environment has not served an invocation yet.
static FIRST_INVOCATION: AtomicBool = AtomicBool::new(true);

/// Starts the bookkeeping of one invocation: the `ColdStart` count on the environment's first,
/// the request and trace ids of its metrics line, and its span. The span is at `ERROR` level so
/// that it is enabled (and its fields are on the log lines) whatever `RUST_LOG` lets through.
fn begin_invocation(context: &TraceContext) -> tracing::Span {
    let cold = FIRST_INVOCATION.swap(false, Ordering::SeqCst);
    metrics::begin_invocation(
        context.request_id.clone(),
        context.trace_id().map(str::to_string),
    );
    if cold {
        metrics::count("ColdStart", 1);
    }
    let span = tracing::error_span!(
        INVOCATION_SPAN,
        requestId = tracing::field::Empty,
        traceId = tracing::field::Empty,
        traceparent = tracing::field::Empty,
        coldStart = tracing::field::Empty,
    );
    if let Some(id) = &context.request_id {
        span.record("requestId", id.as_str());
    }
    if let Some(trace_id) = context.trace_id() {
        span.record("traceId", trace_id);
    }
    if let Some(traceparent) = &context.traceparent {
        span.record("traceparent", traceparent.as_str());
    }
    if cold {
        span.record("coldStart", true);
    }
    span
}

/// Flushes the invocation's metrics when dropped.
struct FlushOnDrop;

impl Drop for FlushOnDrop {
    fn drop(&mut self) {
        metrics::flush();
    }
}

/// The HTTP function as the Lambda runtime calls it: each request is one invocation (see the
/// module documentation) whose metrics are flushed once its response body ended or was dropped.
fn invocations(
    router: Router,
) -> impl tower::Service<
    lambda_http::Request,
    Response = Response,
    Error = Infallible,
    Future = impl Future<Output = Result<Response, Infallible>> + Send,
> + Clone {
    tower::service_fn(move |request: lambda_http::Request| http_invocation(router.clone(), request))
}

async fn http_invocation(
    router: Router,
    request: lambda_http::Request,
) -> Result<Response, Infallible> {
    use lambda_http::RequestExt;
    let lambda = request.lambda_context_ref();
    let context = TraceContext::new(
        lambda.map(|context| context.request_id.clone()),
        lambda
            .and_then(|context| context.xray_trace_id.clone())
            .or_else(trace::xray_from_env),
        request
            .headers()
            .get(trace::TRACEPARENT_HEADER)
            .and_then(|value| value.to_str().ok()),
    );
    let span = begin_invocation(&context);
    let response = trace::scope(context, router.oneshot(request))
        .instrument(span)
        .await?;
    Ok(response.map(flush_when_done))
}

/// The body, flushing the invocation's metrics after its last chunk (or when it is dropped
/// before that: a client gone, a buffered body collected).
fn flush_when_done(body: axum::body::Body) -> axum::body::Body {
    let mut flush = Some(FlushOnDrop);
    let end = futures::stream::poll_fn(move |_| {
        drop(flush.take());
        Poll::Ready(None::<Result<bytes::Bytes, axum::Error>>)
    });
    axum::body::Body::from_stream(futures::StreamExt::chain(body.into_data_stream(), end))
}

/// The error type Lambda shows for a function that refused its configuration.
const CONFIG_ERROR_TYPE: &str = "Runtime.ConfigError";

/// Tells the Lambda Runtime API why the function cannot start (`/runtime/init/error`), so the
/// failed invocation names the variable too, not only the log. Best effort: the process exits
/// anyway.
fn report_init_error(message: &str) {
    use std::io::{Read, Write};
    let Ok(api) = std::env::var("AWS_LAMBDA_RUNTIME_API") else {
        return;
    };
    let body =
        serde_json::json!({"errorType": CONFIG_ERROR_TYPE, "errorMessage": message}).to_string();
    let request = format!(
        "POST /2018-06-01/runtime/init/error HTTP/1.1\r\nHost: {api}\r\n\
         Lambda-Runtime-Function-Error-Type: {CONFIG_ERROR_TYPE}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    if let Ok(mut stream) = std::net::TcpStream::connect(&api) {
        stream.set_read_timeout(Some(Duration::from_secs(2))).ok();
        if stream.write_all(request.as_bytes()).is_ok() {
            let mut answer = Vec::new();
            stream.read_to_end(&mut answer).ok();
        }
    }
}

/// The runtime's deadline (epoch milliseconds) as an instant of this process's clock.
fn deadline_of(epoch_ms: u64) -> tokio::time::Instant {
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or_default();
    tokio::time::Instant::now() + Duration::from_millis(epoch_ms.saturating_sub(now_ms))
}

/// The router as the front door reaches it: requests routed by their path without the stage,
/// the `ROUTE_NOT_FOUND` fallback, and the [`ROUTE_BUDGET`].
pub fn front_door(routes: Routes) -> Router {
    let router = routes
        .into_router()
        .layer(middleware::from_fn(within_route_budget));
    // The path is fixed before routing: an outer router whose only job is to hand the request,
    // rewritten, to the function's router.
    Router::new().fallback_service(
        tower::ServiceBuilder::new()
            .map_request(routed_path)
            .service(router),
    )
}

/// The request with the path API Gateway routed it by.
///
/// `lambda_http` puts the stage in front of a REST (v1) event's path (`/live/branding/…`), so
/// the path becomes the event's own `path` again, which a REST API delivers without the stage.
/// An HTTP API (v2) with a named stage carries the stage in its raw path: it is removed. Function
/// URLs (`$default`), ALB events and plain HTTP (the local runner) are left alone.
pub fn routed_path<B>(mut request: http::Request<B>) -> http::Request<B> {
    let path = match request.extensions().get::<RequestContext>() {
        Some(RequestContext::ApiGatewayV1(_)) => {
            use lambda_http::RequestExt;
            let raw = request.raw_http_path();
            (!raw.is_empty()).then(|| raw.to_string())
        }
        Some(RequestContext::ApiGatewayV2(context)) => context
            .stage
            .as_deref()
            .filter(|stage| *stage != "$default")
            .and_then(|stage| {
                let path = request.uri().path();
                path.strip_prefix('/')
                    .and_then(|rest| rest.strip_prefix(stage))
                    .filter(|rest| rest.starts_with('/'))
                    .map(str::to_string)
            }),
        _ => None,
    };
    if let Some(path) = path
        && path != request.uri().path()
    {
        let path_and_query = match request.uri().query() {
            Some(query) => format!("{path}?{query}"),
            None => path,
        };
        let mut parts = request.uri().clone().into_parts();
        if let Ok(value) = path_and_query.parse() {
            parts.path_and_query = Some(value);
            if let Ok(uri) = Uri::from_parts(parts) {
                *request.uri_mut() = uri;
            }
        }
    }
    request
}

/// The route's own 503 when its head is not ready within [`ROUTE_BUDGET`].
async fn within_route_budget(request: Request, next: Next) -> Response {
    // Kept for the log line of a late answer: the matched path is shared, not copied.
    let route = request.extensions().get::<MatchedPath>().cloned();
    let method = request.method().clone();
    match tokio::time::timeout(ROUTE_BUDGET, next.run(request)).await {
        Ok(response) => response,
        Err(_) => {
            tracing::error!(
                method = %method,
                route = route.as_ref().map_or("", MatchedPath::as_str),
                budget_ms = ROUTE_BUDGET.as_millis() as u64,
                "route did not answer within its budget"
            );
            let mut response = ApiError::unavailable(format!(
                "The request did not finish within {} s. Try again shortly.",
                ROUTE_BUDGET.as_secs()
            ))
            .into_response();
            let headers = response.headers_mut();
            headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            response
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lambda_http::request::LambdaRequest;

    fn path_of(event: serde_json::Value) -> String {
        let event: LambdaRequest = serde_json::from_value(event).expect("event");
        let request: lambda_http::Request = event.into();
        routed_path(request).uri().path().to_string()
    }

    fn rest_event(stage: &str, path: &str) -> serde_json::Value {
        serde_json::json!({
            "resource": "/branding/{file}",
            "path": path,
            "httpMethod": "GET",
            "headers": {"Host": "abc123.execute-api.eu-central-1.amazonaws.com"},
            "multiValueHeaders": {"Host": ["abc123.execute-api.eu-central-1.amazonaws.com"]},
            "queryStringParameters": null,
            "multiValueQueryStringParameters": null,
            "pathParameters": {"file": "pwa-icon-192.png"},
            "stageVariables": null,
            "requestContext": {
                "accountId": "123456789012",
                "apiId": "abc123",
                "httpMethod": "GET",
                "path": format!("/{stage}{path}"),
                "resourcePath": "/branding/{file}",
                "stage": stage,
                "requestId": "r-1",
                "identity": {"sourceIp": "198.51.100.7"}
            },
            "body": null,
            "isBase64Encoded": false
        })
    }

    #[test]
    fn rest_events_route_by_their_path_without_the_stage() {
        assert_eq!(
            path_of(rest_event("live", "/branding/pwa-icon-192.png")),
            "/branding/pwa-icon-192.png"
        );
        // A path that happens to start like the stage keeps it: it is the API's own path.
        assert_eq!(
            path_of(rest_event("live", "/live/branding/x.png")),
            "/live/branding/x.png"
        );
    }

    fn http_api_event(stage: &str, raw_path: &str) -> serde_json::Value {
        serde_json::json!({
            "version": "2.0",
            "routeKey": "$default",
            "rawPath": raw_path,
            "rawQueryString": "v=1",
            "headers": {"host": "abc123.execute-api.eu-central-1.amazonaws.com"},
            "requestContext": {
                "accountId": "123456789012",
                "apiId": "abc123",
                "domainName": "abc123.execute-api.eu-central-1.amazonaws.com",
                "http": {"method": "GET", "path": raw_path, "protocol": "HTTP/1.1",
                         "sourceIp": "198.51.100.7", "userAgent": "test"},
                "requestId": "r-2",
                "routeKey": "$default",
                "stage": stage,
                "time": "01/Dec/2026:00:00:00 +0000",
                "timeEpoch": 1_795_000_000_000u64
            },
            "isBase64Encoded": false
        })
    }

    #[test]
    fn http_api_events_lose_a_named_stage_and_keep_their_query() {
        assert_eq!(
            path_of(http_api_event("live", "/live/pwa/sw.js")),
            "/pwa/sw.js"
        );
        assert_eq!(
            path_of(http_api_event("$default", "/pwa/sw.js")),
            "/pwa/sw.js"
        );
        let event: LambdaRequest =
            serde_json::from_value(http_api_event("live", "/live/pwa/sw.js")).expect("event");
        let request = routed_path(lambda_http::Request::from(event));
        assert_eq!(request.uri().query(), Some("v=1"));
    }

    #[test]
    fn plain_requests_are_left_alone() {
        let request = http::Request::builder()
            .uri("/live/x")
            .body(())
            .expect("request");
        assert_eq!(routed_path(request).uri().path(), "/live/x");
    }

    #[tokio::test(start_paused = true)]
    async fn a_route_past_its_budget_answers_its_own_503() {
        use tower::ServiceExt;
        async fn stalls() -> &'static str {
            tokio::time::sleep(ROUTE_BUDGET * 3).await;
            "too late"
        }
        async fn quick() -> &'static str {
            "ok"
        }
        let router = front_door(Routes::new().get("/stalls", stalls).get("/quick", quick));
        let request = |path: &str| {
            http::Request::builder()
                .uri(path)
                .body(axum::body::Body::empty())
                .expect("request")
        };
        let started = tokio::time::Instant::now();
        let response = router
            .clone()
            .oneshot(request("/stalls"))
            .await
            .expect("infallible");
        assert_eq!(response.status(), http::StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(started.elapsed(), ROUTE_BUDGET);
        assert_eq!(response.headers()[header::CACHE_CONTROL], "no-store");
        let quick = router.oneshot(request("/quick")).await.expect("infallible");
        assert_eq!(quick.status(), http::StatusCode::OK);
    }
}
