//! One call to an app's widget and what its answer means. Only the origin of the widget's URL is
//! used; the call carries the invocation token, the request id, the trace context (in Lambda the
//! invocation's `X-Amzn-Trace-Id` and a `traceparent`), the locale and the operation, never the
//! browser's cookie or its own authorization. Bodies are read up to
//! 128 KiB, parsed and checked; nothing of a body or an error text is ever logged.

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, HeaderValue};
use k2b_core::http::egress::{self, AppNetworks};
use k2b_core::http::headers::client_request_id;
use k2b_core::http::locale::{LOCALE_HEADER, preferred_locale};
use k2b_core::telemetry::metrics::{self, Unit};
use k2b_core::telemetry::trace::{self, TraceContext};
use k2b_core::widgets::{
    DashboardWidget, INTERNAL_WIDGET_PATH, OPERATION_HEADER, SIZE_PARAM, WIDGET_MAX_RESPONSE_BYTES,
    WidgetResponse, WidgetSize, parse_widget_response, widget_operation,
};
use tokio::time::{Instant, timeout_at};

/// Where a widget failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Registry,
    Signing,
    Provider,
    Response,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Registry => "registry",
            Phase::Signing => "signing",
            Phase::Provider => "provider",
            Phase::Response => "response",
        }
    }
}

/// Why a widget failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    UpstreamTimeout,
    UpstreamStatus,
    TooLarge,
    InvalidJson,
    InvalidSchema,
    DeadlineExceeded,
    RequestCancelled,
    OperationFailed,
    /// The app's address is outside the networks app calls may reach.
    DestinationRefused,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::UpstreamTimeout => "upstream_timeout",
            Reason::UpstreamStatus => "upstream_status",
            Reason::TooLarge => "too_large",
            Reason::InvalidJson => "invalid_json",
            Reason::InvalidSchema => "invalid_schema",
            Reason::DeadlineExceeded => "deadline_exceeded",
            Reason::RequestCancelled => "request_cancelled",
            Reason::OperationFailed => "operation_failed",
            Reason::DestinationRefused => "destination_refused",
        }
    }
}

/// A failure as logged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rejection {
    pub phase: Phase,
    pub reason: Reason,
    pub upstream_status: Option<u16>,
}

/// What a widget call came to.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Ok(Box<WidgetResponse>),
    Empty,
    Forbidden,
    Timeout(Rejection),
    Error(Rejection),
}

impl Outcome {
    /// The stream status of this outcome.
    pub fn status(&self) -> &'static str {
        match self {
            Outcome::Ok(_) => "ok",
            Outcome::Empty => "empty",
            Outcome::Forbidden => "forbidden",
            Outcome::Timeout(_) => "timeout",
            Outcome::Error(_) => "error",
        }
    }

    /// The count this outcome adds to (see [`record_outcome`]).
    pub fn metric(&self) -> &'static str {
        match self {
            Outcome::Ok(_) => "WidgetOk",
            Outcome::Empty => "WidgetEmpty",
            Outcome::Forbidden => "WidgetForbidden",
            Outcome::Timeout(_) => "WidgetTimeout",
            Outcome::Error(_) => "WidgetError",
        }
    }

    fn timeout(phase: Phase, reason: Reason, upstream_status: Option<u16>) -> Outcome {
        Outcome::Timeout(Rejection {
            phase,
            reason,
            upstream_status,
        })
    }

    fn error(phase: Phase, reason: Reason, upstream_status: Option<u16>) -> Outcome {
        Outcome::Error(Rejection {
            phase,
            reason,
            upstream_status,
        })
    }
}

/// The client used for widget calls: no redirects (a redirect is an unusable answer, and the
/// invocation never follows one); keep-alive connections pooled, a bounded number per app so a
/// burst of dashboards does not leave hundreds of idle sockets behind; and only addresses in
/// the allowed networks ([`k2b_core::http::egress`]), judged when they resolve.
#[derive(Clone)]
pub struct AppClient {
    /// `None` when the guarded client could not be built: every call then fails (closed).
    client: Option<reqwest::Client>,
    networks: Arc<AppNetworks>,
}

impl AppClient {
    pub fn new(networks: Arc<AppNetworks>) -> AppClient {
        let client = egress::client_builder(networks.clone())
            .redirect(reqwest::redirect::Policy::none())
            .pool_idle_timeout(Duration::from_secs(30))
            .pool_max_idle_per_host(16)
            .build();
        if let Err(error) = &client {
            tracing::error!(error = %error, "the client for app calls could not be built; widget calls fail");
        }
        AppClient {
            client: client.ok(),
            networks,
        }
    }
}

/// Logs a call the network rules refused (never anything the app sent).
fn log_refusal(widget: &DashboardWidget, refused: &egress::Refused) {
    tracing::warn!(
        source = "widgets",
        app_id = prefix(&widget.app_id, 80),
        widget_id = prefix(&widget.widget_id, 100),
        refusal = %refused,
        "Widget call refused: the app's address is outside the allowed networks"
    );
}

/// Counts a widget's outcome (`WidgetOk`, `WidgetEmpty`, `WidgetForbidden`, `WidgetTimeout`,
/// `WidgetError`, and `WidgetRefused` for an address outside the allowed networks) and keeps
/// its latency as `WidgetLatency`.
pub fn record_outcome(outcome: &Outcome, ms: u64) {
    metrics::count(outcome.metric(), 1);
    if let Outcome::Error(rejection) = outcome
        && rejection.reason == Reason::DestinationRefused
    {
        metrics::count("WidgetRefused", 1);
    }
    metrics::observe("WidgetLatency", Unit::Milliseconds, ms as f64);
}

/// The caller's context forwarded to every app of one request.
#[derive(Debug, Clone, Default)]
pub struct CallContext {
    pub request_id: Option<String>,
    /// The invocation's X-Ray trace header (`X-Amzn-Trace-Id`), in Lambda.
    pub xray: Option<HeaderValue>,
    pub traceparent: Option<HeaderValue>,
    pub tracestate: Option<HeaderValue>,
    pub locale: Option<String>,
}

impl CallContext {
    /// The context of this request: its headers and the invocation's trace context, if any.
    pub fn from_headers(headers: &HeaderMap) -> CallContext {
        CallContext::with_trace(headers, trace::current())
    }

    /// The context from the request's headers and an invocation's trace context. In Lambda the
    /// request id is the invocation's and the X-Ray header goes along; the caller's valid
    /// `traceparent` (with its `tracestate`) is kept, else one derived from the X-Ray header is
    /// used. Without an invocation (the local runner) the client's own valid request id is
    /// forwarded.
    pub fn with_trace(headers: &HeaderMap, invocation: Option<TraceContext>) -> CallContext {
        let invocation = invocation.unwrap_or_default();
        let incoming = headers
            .get(trace::TRACEPARENT_HEADER)
            .filter(|value| value.to_str().is_ok_and(trace::is_valid_traceparent))
            .cloned();
        let tracestate = incoming
            .as_ref()
            .and_then(|_| headers.get("tracestate").cloned());
        let header = |value: &Option<String>| {
            value
                .as_deref()
                .and_then(|value| HeaderValue::from_str(value).ok())
        };
        CallContext {
            request_id: invocation
                .request_id
                .clone()
                .or_else(|| client_request_id(headers)),
            xray: header(&invocation.xray),
            traceparent: incoming.or_else(|| header(&invocation.traceparent)),
            tracestate,
            locale: preferred_locale(headers),
        }
    }
}

/// The app-side URL of a widget: the origin of its URL, the internal path, the fitted size.
pub fn target_url(widget: &DashboardWidget, size: WidgetSize) -> Option<String> {
    target(widget, size).map(String::from)
}

/// [`target_url`] parsed: the widget's URL is parsed once and keeps only its origin.
fn target(widget: &DashboardWidget, size: WidgetSize) -> Option<url::Url> {
    let mut url = url::Url::parse(&widget.url).ok()?;
    if !url.origin().is_tuple() {
        return None;
    }
    url.set_username("").ok()?;
    url.set_password(None).ok()?;
    url.set_fragment(None);
    url.set_path(&format!(
        "{INTERNAL_WIDGET_PATH}{}",
        k2b_core::http::text::encode_uri_component(&widget.widget_id)
    ));
    url.set_query(Some(&format!("{SIZE_PARAM}={size}")));
    Some(url)
}

enum Body {
    Json(serde_json::Value),
    Failed(Reason),
}

/// Reads at most 128 KiB (refusing a larger `Content-Length` unread) and parses UTF-8 JSON.
async fn read_bounded_json(mut response: reqwest::Response, deadline: Instant) -> Option<Body> {
    if response
        .content_length()
        .is_some_and(|length| length > WIDGET_MAX_RESPONSE_BYTES as u64)
    {
        return Some(Body::Failed(Reason::TooLarge));
    }
    let mut bytes = Vec::new();
    loop {
        match timeout_at(deadline, response.chunk()).await {
            Err(_) => return None,
            Ok(Err(_)) => return Some(Body::Failed(Reason::OperationFailed)),
            Ok(Ok(None)) => break,
            Ok(Ok(Some(chunk))) => {
                if bytes.len() + chunk.len() > WIDGET_MAX_RESPONSE_BYTES {
                    return Some(Body::Failed(Reason::TooLarge));
                }
                bytes.extend_from_slice(&chunk);
            }
        }
    }
    let Ok(text) = std::str::from_utf8(&bytes) else {
        return Some(Body::Failed(Reason::InvalidJson));
    };
    match serde_json::from_str(text) {
        Ok(value) => Some(Body::Json(value)),
        Err(_) => Some(Body::Failed(Reason::InvalidJson)),
    }
}

/// Calls one widget until `deadline` (its own budget). The caller drops the future to cancel it.
pub async fn call_widget(
    apps: &AppClient,
    widget: &DashboardWidget,
    size: WidgetSize,
    token: &str,
    context: &CallContext,
    deadline: Instant,
) -> Outcome {
    let Some(url) = target(widget, size) else {
        return Outcome::error(Phase::Provider, Reason::OperationFailed, None);
    };
    if let Err(refused) = apps.networks.check_url(&url) {
        log_refusal(widget, &refused);
        return Outcome::error(Phase::Provider, Reason::DestinationRefused, None);
    }
    let Some(client) = &apps.client else {
        return Outcome::error(Phase::Provider, Reason::OperationFailed, None);
    };
    let mut request = client
        .get(url)
        .bearer_auth(token)
        .header(OPERATION_HEADER, widget_operation(&widget.widget_id));
    if let Some(id) = &context.request_id {
        request = request.header(trace::REQUEST_ID_HEADER, id);
    }
    if let Some(value) = &context.xray {
        request = request.header(trace::XRAY_HEADER, value.clone());
    }
    if let Some(value) = &context.traceparent {
        request = request.header(trace::TRACEPARENT_HEADER, value.clone());
    }
    if let Some(value) = &context.tracestate {
        request = request.header("tracestate", value.clone());
    }
    if let Some(locale) = &context.locale {
        request = request.header(LOCALE_HEADER, locale);
    }
    let response = match timeout_at(deadline, request.send()).await {
        Err(_) => return Outcome::timeout(Phase::Provider, Reason::DeadlineExceeded, None),
        Ok(Err(error)) if error.is_timeout() => {
            return Outcome::timeout(Phase::Provider, Reason::DeadlineExceeded, None);
        }
        Ok(Err(error)) => {
            if let Some(refused) = egress::is_refusal(&error) {
                log_refusal(widget, &refused);
                return Outcome::error(Phase::Provider, Reason::DestinationRefused, None);
            }
            return Outcome::error(Phase::Provider, Reason::OperationFailed, None);
        }
        Ok(Ok(response)) => response,
    };
    let status = response.status().as_u16();
    match status {
        204 => return Outcome::Empty,
        403 => return Outcome::Forbidden,
        504 => {
            return Outcome::timeout(Phase::Provider, Reason::UpstreamTimeout, Some(status));
        }
        200..=299 => {}
        _ => return Outcome::error(Phase::Provider, Reason::UpstreamStatus, Some(status)),
    }
    match read_bounded_json(response, deadline).await {
        None => Outcome::timeout(Phase::Response, Reason::DeadlineExceeded, None),
        Some(Body::Failed(reason)) => Outcome::error(Phase::Response, reason, None),
        Some(Body::Json(value)) => match parse_widget_response(&value) {
            Ok(parsed) => Outcome::Ok(Box::new(parsed)),
            Err(_) => Outcome::error(Phase::Response, Reason::InvalidSchema, None),
        },
    }
}

fn prefix(value: &str, chars: usize) -> &str {
    match value.char_indices().nth(chars) {
        Some((cut, _)) => &value[..cut],
        None => value,
    }
}

/// The one log line of a widget failure: ids (bounded), phase, reason, upstream status.
pub fn log_rejection(app_id: &str, widget_id: &str, rejection: Rejection) {
    let app_id = prefix(app_id, 80);
    let widget_id = prefix(widget_id, 100);
    let phase = rejection.phase.as_str();
    let reason = rejection.reason.as_str();
    match rejection.upstream_status {
        Some(upstream_status) => tracing::warn!(
            source = "widgets",
            app_id,
            widget_id,
            phase,
            reason,
            upstream_status,
            "Widget proxy rejected response"
        ),
        None => tracing::warn!(
            source = "widgets",
            app_id,
            widget_id,
            phase,
            reason,
            "Widget proxy rejected response"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn widget(url: &str, id: &str) -> DashboardWidget {
        DashboardWidget {
            app_id: "weather".into(),
            app_name: "Weather".into(),
            app_icon: "i".into(),
            widget_id: id.into(),
            url: url.into(),
            title: "t".into(),
            description: "d".into(),
            sizes: vec![WidgetSize::Small],
            default_size: WidgetSize::Small,
            suggest: false,
            requires_roles: Vec::new(),
        }
    }

    #[test]
    fn only_the_origin_of_the_widget_url_is_used() {
        assert_eq!(
            target_url(
                &widget(
                    "http://app-weather:3000/api/weather/widget/current",
                    "current"
                ),
                WidgetSize::Small
            )
            .as_deref(),
            Some("http://app-weather:3000/api/_internal/widgets/v1/current?size=small")
        );
        assert_eq!(
            target_url(
                &widget("https://demo.example/custom/path/x", "a b/ü~*"),
                WidgetSize::Large
            )
            .as_deref(),
            Some("https://demo.example/api/_internal/widgets/v1/a%20b%2F%C3%BC~*?size=large")
        );
        assert_eq!(
            target_url(
                &widget("https://user:secret@demo.example:8443/p?q=1#frag", "w"),
                WidgetSize::Medium
            )
            .as_deref(),
            Some("https://demo.example:8443/api/_internal/widgets/v1/w?size=medium")
        );
        assert_eq!(
            target_url(&widget("not a url", "x"), WidgetSize::Large),
            None
        );
        assert_eq!(
            target_url(&widget("data:text/plain,x", "x"), WidgetSize::Large),
            None
        );
    }

    #[test]
    fn in_lambda_calls_carry_the_invocations_request_id_and_trace() {
        let xray = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1";
        let invocation = TraceContext::new(Some("lambda-request".into()), Some(xray.into()), None);
        let mut headers = HeaderMap::new();
        headers.insert("x-request-id", HeaderValue::from_static("client-id"));
        headers.insert("tracestate", HeaderValue::from_static("vendor=value"));
        let context = CallContext::with_trace(&headers, Some(invocation.clone()));
        assert_eq!(context.request_id.as_deref(), Some("lambda-request"));
        assert_eq!(
            context.xray.as_ref().map(|v| v.as_bytes()),
            Some(xray.as_bytes())
        );
        assert_eq!(
            context.traceparent.as_ref().and_then(|v| v.to_str().ok()),
            Some("00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01")
        );
        // A tracestate belongs to the caller's own traceparent only.
        assert_eq!(context.tracestate, None);

        let incoming = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        headers.insert("traceparent", HeaderValue::from_static(incoming));
        let context = CallContext::with_trace(&headers, Some(invocation));
        assert_eq!(
            context.traceparent.as_ref().and_then(|v| v.to_str().ok()),
            Some(incoming)
        );
        assert_eq!(
            context.tracestate.as_ref().and_then(|v| v.to_str().ok()),
            Some("vendor=value")
        );

        // Outside Lambda: the client's own id, no X-Ray header.
        let local = CallContext::with_trace(&headers, None);
        assert_eq!(local.request_id.as_deref(), Some("client-id"));
        assert_eq!(local.xray, None);
        headers.insert("traceparent", HeaderValue::from_static("not-a-traceparent"));
        let local = CallContext::with_trace(&headers, None);
        assert_eq!(local.traceparent, None);
        assert_eq!(local.tracestate, None);
    }

    #[test]
    fn logged_ids_are_bounded() {
        assert_eq!(prefix(&"ä".repeat(90), 80).chars().count(), 80);
        assert_eq!(prefix("short", 80), "short");
    }
}
