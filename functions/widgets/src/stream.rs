//! `GET /api/widgets/v1`: the dashboard's NDJSON stream.
//!
//! Setup (registry read, then every invocation token signed under one signer guard) answers 503
//! when it fails; after that the response is 200 and streams: a `start` line with the keys in
//! registry order, one `widget` line per key in completion order (at most `concurrency` widgets
//! in flight, each with its own budget from its start), and a `done` line. The whole stream ends
//! at the stream deadline: what has not settled by then is a `timeout`. A client that goes away
//! stops everything at once and nothing more is written or logged.

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::sync::Arc;

use axum::Extension;
use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use http::{HeaderMap, HeaderValue, StatusCode, header};
use k2b_core::auth::Actor;
use k2b_core::http::ApiError;
use k2b_core::http::openapi::ErrorBody;
use k2b_core::identity::IdentityError;
use k2b_core::telemetry::metrics;
use k2b_core::widgets::{
    DashboardWidget, MAX_STREAM_WIDGETS, WidgetResponse, WidgetSize, fit_size, list_widgets,
};
use serde::Serialize;
use tokio::sync::{mpsc, watch};
use tokio::time::{Instant, sleep_until, timeout};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use utoipa::OpenApi;

use crate::WidgetsState;
use crate::call::{
    CallContext, Outcome, Phase, Reason, Rejection, call_widget, log_rejection, record_outcome,
};
use crate::signing::{Issued, needed_lifetime, start_signing};

/// `<appId>/<widgetId>` with an optional `@small|@medium|@large`. A value that is itself a
/// declared key is that key (so ids that end in such a suffix keep working); otherwise the size
/// is split off at the last `@` when it names a size; else the whole value is the key.
pub fn parse_requested(value: &str, declared: &HashSet<String>) -> (String, Option<WidgetSize>) {
    if declared.contains(value) {
        return (value.to_string(), None);
    }
    if let Some((key, suffix)) = value.rsplit_once('@')
        && let Some(size) = WidgetSize::parse(suffix)
    {
        return (key.to_string(), Some(size));
    }
    (value.to_string(), None)
}

/// The widgets to ask, in registry order (first of a key wins), and the size asked for each.
pub fn select<'a>(
    declared: &'a [DashboardWidget],
    query: Option<&str>,
) -> Vec<(&'a DashboardWidget, Option<WidgetSize>)> {
    let keys: HashSet<String> = declared.iter().map(DashboardWidget::key).collect();
    let requested: HashMap<String, Option<WidgetSize>> = query
        .map(|q| {
            url::form_urlencoded::parse(q.as_bytes())
                .filter(|(name, _)| name == "widget")
                .map(|(_, value)| parse_requested(&value, &keys))
                .collect()
        })
        .unwrap_or_default();
    let mut seen = HashSet::new();
    declared
        .iter()
        .filter_map(|widget| {
            let key = widget.key();
            if (!requested.is_empty() && !requested.contains_key(&key)) || !seen.insert(key.clone())
            {
                return None;
            }
            Some((widget, requested.get(&key).copied().flatten()))
        })
        .collect()
}

/// One line of the stream, told apart by its `type`.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(untagged)]
#[schema(
    as = WidgetStreamLine,
    discriminator(property_name = "type", mapping(
        ("start" = "#/components/schemas/WidgetStreamStart"),
        ("widget" = "#/components/schemas/WidgetStreamWidget"),
        ("done" = "#/components/schemas/WidgetStreamDone"),
    ))
)]
pub(crate) enum Line<'a> {
    Start(StartLine<'a>),
    Widget(WidgetLine<'a>),
    Done(DoneLine),
}

/// The `type` of a [`StartLine`].
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
#[schema(as = WidgetStreamStartType)]
pub(crate) enum StartType {
    Start,
}

/// The first line: the keys of the widgets that follow, in registry order.
#[derive(Serialize, utoipa::ToSchema)]
#[schema(as = WidgetStreamStart)]
pub(crate) struct StartLine<'a> {
    #[serde(rename = "type")]
    kind: StartType,
    /// `<appId>/<widgetId>` of every widget asked, in registry order (at most 100).
    #[schema(max_items = 100)]
    widgets: &'a [String],
}

/// The `type` of a [`WidgetLine`].
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
#[schema(as = WidgetStreamWidgetType)]
pub(crate) enum WidgetType {
    Widget,
}

/// How a widget settled: `ok` (with its answer), `empty` (nothing to show), `forbidden` (not
/// for this viewer), `timeout` or `error`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
#[schema(as = WidgetStreamStatus)]
pub(crate) enum WidgetStatus {
    Ok,
    Empty,
    Forbidden,
    Timeout,
    Error,
}

impl WidgetStatus {
    fn of(outcome: &Outcome) -> WidgetStatus {
        match outcome {
            Outcome::Ok(_) => WidgetStatus::Ok,
            Outcome::Empty => WidgetStatus::Empty,
            Outcome::Forbidden => WidgetStatus::Forbidden,
            Outcome::Timeout(_) => WidgetStatus::Timeout,
            Outcome::Error(_) => WidgetStatus::Error,
        }
    }
}

/// One line per widget of the start line, in the order they settle.
#[derive(Serialize, utoipa::ToSchema)]
#[schema(as = WidgetStreamWidget)]
pub(crate) struct WidgetLine<'a> {
    #[serde(rename = "type")]
    kind: WidgetType,
    /// The widget's key, as in the start line.
    key: &'a str,
    status: WidgetStatus,
    /// The widget's answer, when the status is `ok`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    widget: Option<&'a WidgetResponse>,
    /// Milliseconds from the widget's start to its settling (from the fan-out's start for a
    /// widget the stream deadline settled).
    ms: u64,
}

/// The `type` of a [`DoneLine`].
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
#[schema(as = WidgetStreamDoneType)]
pub(crate) enum DoneType {
    Done,
}

/// How the stream ended: `complete` when every widget was `ok`, `empty` or `forbidden`,
/// `partial` when one timed out or failed.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
#[schema(as = WidgetStreamDoneStatus)]
pub(crate) enum DoneStatus {
    Complete,
    Partial,
}

/// The last line, after every widget line (missing when the stream was cut off).
#[derive(Serialize, utoipa::ToSchema)]
#[schema(as = WidgetStreamDone)]
pub(crate) struct DoneLine {
    #[serde(rename = "type")]
    kind: DoneType,
    status: DoneStatus,
}

impl<'a> Line<'a> {
    fn start(widgets: &'a [String]) -> Line<'a> {
        Line::Start(StartLine {
            kind: StartType::Start,
            widgets,
        })
    }

    fn widget(
        key: &'a str,
        status: WidgetStatus,
        widget: Option<&'a WidgetResponse>,
        ms: u64,
    ) -> Line<'a> {
        Line::Widget(WidgetLine {
            kind: WidgetType::Widget,
            key,
            status,
            widget,
            ms,
        })
    }

    fn done(status: DoneStatus) -> Line<'a> {
        Line::Done(DoneLine {
            kind: DoneType::Done,
            status,
        })
    }
}

/// When the request reached the function's routes (before its credentials were checked).
#[derive(Clone, Copy)]
pub(crate) struct Arrival(Instant);

/// Marks a request's [`Arrival`].
pub(crate) async fn mark_arrival(
    mut request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    request.extensions_mut().insert(Arrival(Instant::now()));
    next.run(request).await
}

/// The widgets a stream runs for `query`, in registry order, at most [`MAX_STREAM_WIDGETS`].
fn chosen(declared: &[DashboardWidget], query: Option<&str>) -> Vec<DashboardWidget> {
    select(declared, query)
        .into_iter()
        .take(MAX_STREAM_WIDGETS)
        .map(|(widget, _)| widget.clone())
        .collect()
}

/// What the tokens of `widgets` name, in order: the app and the widget of each.
fn identities(widgets: &[DashboardWidget]) -> Vec<(String, String)> {
    widgets
        .iter()
        .map(|widget| (widget.app_id.clone(), widget.widget_id.clone()))
        .collect()
}

/// Starts the issuance of one token per widget for a stream with `stream_left` to run.
fn issue(
    state: &WidgetsState,
    actor: &Actor,
    widgets: Vec<DashboardWidget>,
    context: &CallContext,
    stream_left: std::time::Duration,
) -> tokio::task::JoinHandle<Result<Issued, IdentityError>> {
    let options = &state.options;
    let needed = (0..widgets.len())
        .map(|index| needed_lifetime(index, options.concurrency, options.timeout, stream_left))
        .collect();
    start_signing(
        &state.core,
        &state.tokens,
        actor,
        widgets,
        needed,
        context.request_id.clone(),
        options.timeout.min(stream_left),
        options.concurrency,
    )
}

fn encode(line: &Line<'_>) -> Bytes {
    let mut bytes = serde_json::to_vec(line).unwrap_or_default();
    bytes.push(b'\n');
    Bytes::from(bytes)
}

fn millis(since: Instant) -> u64 {
    (since.elapsed().as_secs_f64() * 1000.0).round() as u64
}

fn unavailable(message: &'static str) -> Response {
    ApiError::unavailable(message).into_response()
}

/// One widget to run: its place, the widget, the size to ask, its token.
struct Job {
    index: usize,
    key: String,
    widget: DashboardWidget,
    size: WidgetSize,
    token: Option<String>,
}

/// Every requested widget of every app, as an NDJSON stream
///
/// The body is `application/x-ndjson`: each line is one JSON value (a `start`, `widget` or `done` line) followed by `\n`.
/// First a `start` line with the keys of the widgets asked, in registry order; then one
/// `widget` line per key as soon as that widget settles (at most 8 in flight, each within 8 s
/// from its start); then a `done` line. The whole stream ends within 30 s (what has not settled
/// by then is a `timeout`). A client that goes away stops everything; no `done` line follows.
///
/// Without `widget` parameters every declared widget is asked (the first 100 in registry
/// order); unknown keys are ignored. Setup failures (the registry, signing) answer 503 before
/// the stream starts.
#[utoipa::path(
    get,
    path = "/api/widgets/v1",
    tag = "widgets",
    operation_id = "widgetsStream",
    params(
        ("widget" = Option<Vec<String>>, Query, explode, style = Form, max_items = 100,
            description = "`<appId>/<widgetId>`, optionally followed by `@small`, `@medium` or `@large`; repeatable, at most 100 distinct values."),
        ("x-cloud-locale" = Option<String>, Header, description = "The viewer's locale (a BCP 47 tag), passed on to the apps; else the `cloud.locale` cookie, else `Accept-Language`. Invalid tags are skipped."),
    ),
    security(("session" = []), ("appSession" = []), ("oauth" = [])),
    responses(
        (status = 200, description = "The stream: each line is one JSON value (`start`, then `widget` lines, then `done`), terminated by a newline.",
            body = Line, content_type = "application/x-ndjson",
            headers(
                ("Cache-Control" = String, description = "`no-store, no-transform`."),
                ("X-Accel-Buffering" = String, description = "`no`: proxies pass each line on at once."),
            )),
        (status = 400, description = "`TOO_MANY_WIDGETS`: more than 100 distinct `widget` values (the body's `limit` says how many).", body = ErrorBody),
        (status = 401, description = "No valid credential.", body = ErrorBody),
        (status = 403, description = "An app's workload credential, or an OAuth token without the `read` or `admin` scope.", body = ErrorBody),
        (status = 500, description = "The stream could not be started.", body = ErrorBody),
        (status = 503, description = "Credentials cannot be checked, or the widget registry or the invocation authority is unavailable right now.", body = ErrorBody),
    )
)]
pub(crate) async fn widgets(
    State(state): State<WidgetsState>,
    Extension(actor): Extension<Actor>,
    Extension(arrival): Extension<Arrival>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    let options = state.options.clone();
    let context = CallContext::from_headers(&headers);
    let asked: HashSet<String> = query
        .as_deref()
        .map(|q| {
            url::form_urlencoded::parse(q.as_bytes())
                .filter(|(name, _)| name == "widget")
                .map(|(_, value)| value.into_owned())
                .collect()
        })
        .unwrap_or_default();
    if asked.len() > MAX_STREAM_WIDGETS {
        return ApiError::new(
            StatusCode::BAD_REQUEST,
            "TOO_MANY_WIDGETS",
            format!("A stream runs at most {MAX_STREAM_WIDGETS} widgets."),
        )
        .with_field("limit", MAX_STREAM_WIDGETS)
        .into_response();
    }

    let setup_started = Instant::now();
    let credentials = setup_started.saturating_duration_since(arrival.0);
    // Tokens for what the last registry read declared, signed while the registry is read again
    // and used only when the fresh read selects exactly the same widgets.
    let guess = state.recent_widgets().and_then(|recent| {
        let guess = chosen(&recent, query.as_deref());
        if guess.is_empty() {
            return None;
        }
        let identities = identities(&guess);
        let handle = issue(&state, &actor, guess, &context, options.stream_deadline);
        Some((identities, handle))
    });
    let declared = match timeout(options.timeout, list_widgets(&state.core.pool, None)).await {
        Ok(Ok(declared)) => Arc::new(declared),
        outcome => {
            let reason = if outcome.is_err() {
                Reason::DeadlineExceeded
            } else {
                Reason::OperationFailed
            };
            tracing::warn!(
                source = "widgets",
                reason = reason.as_str(),
                "Widget registry unavailable"
            );
            metrics::count("WidgetStreamUnavailable", 1);
            return unavailable("Widget registry is currently unavailable");
        }
    };
    state.remember_widgets(declared.clone());
    let mut selected = select(&declared, query.as_deref());
    if selected.len() > MAX_STREAM_WIDGETS {
        tracing::warn!(
            source = "widgets",
            declared = selected.len(),
            limit = MAX_STREAM_WIDGETS,
            "More widgets declared than a stream runs; the first ones in registry order run"
        );
        selected.truncate(MAX_STREAM_WIDGETS);
    }

    let stream_deadline = Instant::now() + options.stream_deadline;
    let registry_read = setup_started.elapsed();
    let tokens: Vec<Option<String>> = if selected.is_empty() {
        Vec::new()
    } else {
        let widgets: Vec<DashboardWidget> = selected.iter().map(|(w, _)| (*w).clone()).collect();
        let (speculated, handle) = match guess {
            Some((guessed, handle)) if guessed == identities(&widgets) => (true, handle),
            other => {
                if let Some((_, handle)) = other {
                    // What it signed is kept for reuse: the issuance below may release it.
                    handle.await.ok();
                }
                let stream_left = stream_deadline.saturating_duration_since(Instant::now());
                (false, issue(&state, &actor, widgets, &context, stream_left))
            }
        };
        let issued = handle
            .await
            .unwrap_or(Err(IdentityError::InvalidInvocation("signing task")));
        match issued {
            Ok(issued) => {
                tracing::debug!(
                    source = "widgets",
                    widgets = issued.tokens.len(),
                    credentials_ms = credentials.as_secs_f64() * 1000.0,
                    registry_ms = registry_read.as_secs_f64() * 1000.0,
                    setup_ms = setup_started.elapsed().as_secs_f64() * 1000.0,
                    guard_ms = issued.total.saturating_sub(issued.signing).as_secs_f64() * 1000.0,
                    signing_ms = issued.signing.as_secs_f64() * 1000.0,
                    signed = issued.signed,
                    reused = issued.reused,
                    speculated,
                    "Widget stream set up"
                );
                issued.tokens.into_iter().map(Result::ok).collect()
            }
            Err(error) => {
                let reason = if error.is_timeout() {
                    Reason::DeadlineExceeded
                } else {
                    Reason::OperationFailed
                };
                tracing::warn!(
                    source = "widgets",
                    reason = reason.as_str(),
                    error = %error,
                    "Widget invocation authority unavailable"
                );
                metrics::count("WidgetStreamUnavailable", 1);
                return unavailable("Widget invocation authority is currently unavailable");
            }
        }
    };

    let keys: Vec<String> = selected.iter().map(|(w, _)| w.key()).collect();
    let jobs: Vec<Job> = selected
        .into_iter()
        .zip(tokens)
        .enumerate()
        .map(|(index, ((widget, requested), token))| Job {
            index,
            key: keys[index].clone(),
            size: fit_size(
                requested.map(WidgetSize::as_str),
                &widget.sizes,
                widget.default_size,
            ),
            widget: widget.clone(),
            token,
        })
        .collect();

    // Every line fits: start, one per widget, done. Writing never waits on the client.
    let (sender, receiver) = mpsc::channel::<Bytes>(jobs.len() + 2);
    if sender.try_send(encode(&Line::start(&keys))).is_err() {
        return ApiError::internal().into_response();
    }
    let cancel = CancellationToken::new();
    // Dropping the body (the client went away, a write to it failed) cancels the fan-out.
    let guard = cancel.clone().drop_guard();
    // How many lines the response has taken: asked for line n, it has written lines 0..n (the
    // server, or Lambda's response stream, asks again only after a write went through).
    let (written_tx, written) = watch::channel(0usize);
    let stream = Written {
        receiver,
        written: written_tx,
        taken: 0,
        _cancel: guard,
    };
    // The fan-out logs under this invocation.
    tokio::spawn(
        fan_out(
            state,
            jobs,
            context,
            stream_deadline,
            sender,
            written,
            cancel,
        )
        .in_current_span(),
    );
    let lines = futures::stream::unfold(stream, |mut stream| async move {
        stream.written.send_replace(stream.taken);
        let line = stream.receiver.recv().await?;
        stream.taken += 1;
        Some((Ok::<_, Infallible>(line), stream))
    });
    (
        StatusCode::OK,
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/x-ndjson; charset=utf-8"),
            ),
            (
                header::CACHE_CONTROL,
                HeaderValue::from_static("no-store, no-transform"),
            ),
            (
                http::HeaderName::from_static("x-accel-buffering"),
                HeaderValue::from_static("no"),
            ),
        ],
        Body::from_stream(lines),
    )
        .into_response()
}

/// The body's side of the stream: the lines, and what it tells the fan-out.
struct Written {
    receiver: mpsc::Receiver<Bytes>,
    written: watch::Sender<usize>,
    taken: usize,
    /// Dropped with the body: cancels the fan-out.
    _cancel: tokio_util::sync::DropGuard,
}

/// Runs one widget from its start to its line (logging its failure, if any).
async fn run_one(
    client: crate::call::AppClient,
    job: Job,
    context: std::sync::Arc<CallContext>,
    budget: std::time::Duration,
) -> (usize, Bytes, bool) {
    let started = Instant::now();
    let outcome = match &job.token {
        None => Outcome::Error(Rejection {
            phase: Phase::Signing,
            reason: Reason::OperationFailed,
            upstream_status: None,
        }),
        Some(token) => {
            call_widget(
                &client,
                &job.widget,
                job.size,
                token,
                &context,
                started + budget,
            )
            .await
        }
    };
    if let Outcome::Timeout(rejection) | Outcome::Error(rejection) = &outcome {
        log_rejection(&job.widget.app_id, &job.widget.widget_id, *rejection);
    }
    let ms = millis(started);
    record_outcome(&outcome, ms);
    let widget = match &outcome {
        Outcome::Ok(widget) => Some(widget.as_ref()),
        _ => None,
    };
    let line = encode(&Line::widget(
        &job.key,
        WidgetStatus::of(&outcome),
        widget,
        ms,
    ));
    let partial = matches!(outcome, Outcome::Timeout(_) | Outcome::Error(_));
    (job.index, line, partial)
}

/// Starts widgets in registry order with at most `concurrency` in flight and writes each line
/// as it settles; then the `done` line. A widget starts only once every line so far was
/// written, so a reader that left (the write failed, the body was dropped, the calls in flight
/// were cancelled) never has another widget started for it. Stops silently then.
async fn fan_out(
    state: WidgetsState,
    jobs: Vec<Job>,
    context: CallContext,
    stream_deadline: Instant,
    sender: mpsc::Sender<Bytes>,
    mut written: watch::Receiver<usize>,
    cancel: CancellationToken,
) {
    let options = state.options.clone();
    let context = std::sync::Arc::new(context);
    let started = Instant::now();
    let mut pending: Vec<Option<(String, String, String)>> = jobs
        .iter()
        .map(|job| {
            Some((
                job.key.clone(),
                job.widget.app_id.clone(),
                job.widget.widget_id.clone(),
            ))
        })
        .collect();
    let mut queue = jobs.into_iter();
    let mut running = FuturesUnordered::new();
    let mut partial = false;
    // Lines handed to the body so far: the start line.
    let mut sent = 1usize;
    let deadline = sleep_until(stream_deadline);
    tokio::pin!(deadline);
    loop {
        let caught_up = *written.borrow() >= sent;
        while caught_up && running.len() < options.concurrency.max(1) {
            let Some(job) = queue.next() else { break };
            running.push(run_one(
                state.apps.clone(),
                job,
                context.clone(),
                options.timeout,
            ));
        }
        if running.is_empty() && queue.len() == 0 {
            break;
        }
        tokio::select! {
            biased;
            () = cancel.cancelled() => return,
            seen = written.changed(), if !caught_up => {
                if seen.is_err() {
                    return;
                }
            }
            () = &mut deadline => {
                // Running calls are dropped (aborted); queued widgets never start.
                running.clear();
                let ms = millis(started);
                for (key, app_id, widget_id) in pending.iter_mut().filter_map(Option::take) {
                    let rejection = Rejection {
                        phase: Phase::Provider,
                        reason: Reason::DeadlineExceeded,
                        upstream_status: None,
                    };
                    log_rejection(&app_id, &widget_id, rejection);
                    record_outcome(&Outcome::Timeout(rejection), ms);
                    let line = encode(&Line::widget(&key, WidgetStatus::Timeout, None, ms));
                    if sender.send(line).await.is_err() {
                        return;
                    }
                }
                partial = true;
                break;
            }
            Some((index, line, failed)) = running.next() => {
                if let Some(slot) = pending.get_mut(index) {
                    *slot = None;
                }
                partial |= failed;
                if sender.send(line).await.is_err() {
                    return;
                }
                sent += 1;
            }
        }
    }
    if cancel.is_cancelled() {
        return;
    }
    let status = if partial {
        DoneStatus::Partial
    } else {
        DoneStatus::Complete
    };
    sender.send(encode(&Line::done(status))).await.ok();
}

/// The stream's part of the API's OpenAPI document.
#[derive(OpenApi)]
#[openapi(paths(widgets))]
struct Api;

pub(crate) fn openapi() -> utoipa::openapi::OpenApi {
    Api::openapi()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::Rejection;

    /// The line's status is the outcome's own name for it.
    #[test]
    fn widget_statuses_are_the_outcomes_names() {
        let rejection = Rejection {
            phase: Phase::Provider,
            reason: Reason::OperationFailed,
            upstream_status: None,
        };
        for outcome in [
            Outcome::Empty,
            Outcome::Forbidden,
            Outcome::Timeout(rejection),
            Outcome::Error(rejection),
        ] {
            assert_eq!(
                serde_json::to_value(WidgetStatus::of(&outcome)).expect("json"),
                outcome.status()
            );
        }
    }

    /// The lines keep their wire shape: `type` first, no `widget` unless there is one.
    #[test]
    fn lines_serialize_as_before() {
        let keys = vec!["a/b".to_string()];
        let line = |line: Line<'_>| String::from_utf8(encode(&line).to_vec()).expect("utf-8");
        assert_eq!(
            line(Line::start(&keys)),
            "{\"type\":\"start\",\"widgets\":[\"a/b\"]}\n"
        );
        assert_eq!(
            line(Line::widget("a/b", WidgetStatus::Timeout, None, 7)),
            "{\"type\":\"widget\",\"key\":\"a/b\",\"status\":\"timeout\",\"ms\":7}\n"
        );
        assert_eq!(
            line(Line::done(DoneStatus::Partial)),
            "{\"type\":\"done\",\"status\":\"partial\"}\n"
        );
    }
}
