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
use k2b_core::telemetry::metrics;
use k2b_core::widgets::{
    DashboardWidget, MAX_STREAM_WIDGETS, WidgetResponse, WidgetSize, fit_size, list_widgets,
};
use serde::Serialize;
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep_until, timeout};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::WidgetsState;
use crate::call::{
    CallContext, Outcome, Phase, Reason, Rejection, call_widget, log_rejection, record_outcome,
};
use crate::signing::{needed_lifetime, sign_all};

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

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum Line<'a> {
    Start {
        widgets: &'a [String],
    },
    Widget {
        key: &'a str,
        status: &'static str,
        #[serde(skip_serializing_if = "Option::is_none")]
        widget: Option<&'a WidgetResponse>,
        ms: u64,
    },
    Done {
        status: &'static str,
    },
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

pub(crate) async fn widgets(
    State(state): State<WidgetsState>,
    Extension(actor): Extension<Actor>,
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
    let declared = match timeout(options.timeout, list_widgets(&state.core.pool, None)).await {
        Ok(Ok(declared)) => declared,
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
        let stream_left = stream_deadline.saturating_duration_since(Instant::now());
        let budget = options.timeout.min(stream_left);
        let needed = (0..widgets.len())
            .map(|index| needed_lifetime(index, options.concurrency, options.timeout, stream_left))
            .collect();
        let issuing = Instant::now();
        match sign_all(
            &state.core,
            &state.tokens,
            &actor,
            widgets,
            needed,
            context.request_id.clone(),
            budget,
            options.concurrency,
        )
        .await
        {
            Ok(issued) => {
                let issuance = issuing.elapsed();
                tracing::debug!(
                    source = "widgets",
                    widgets = issued.tokens.len(),
                    registry_ms = registry_read.as_secs_f64() * 1000.0,
                    guard_ms = issuance.saturating_sub(issued.signing).as_secs_f64() * 1000.0,
                    signing_ms = issued.signing.as_secs_f64() * 1000.0,
                    signed = issued.signed,
                    reused = issued.reused,
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
    if sender
        .try_send(encode(&Line::Start { widgets: &keys }))
        .is_err()
    {
        return ApiError::internal().into_response();
    }
    let cancel = CancellationToken::new();
    // Dropping the body (the client went away) cancels the fan-out.
    let guard = cancel.clone().drop_guard();
    // The fan-out logs under this invocation.
    tokio::spawn(fan_out(state, jobs, context, stream_deadline, sender, cancel).in_current_span());
    let lines = futures::stream::unfold((receiver, guard), |(mut receiver, guard)| async move {
        let line = receiver.recv().await?;
        Some((Ok::<_, Infallible>(line), (receiver, guard)))
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
    let line = encode(&Line::Widget {
        key: &job.key,
        status: outcome.status(),
        widget,
        ms,
    });
    let partial = matches!(outcome, Outcome::Timeout(_) | Outcome::Error(_));
    (job.index, line, partial)
}

/// Starts widgets in registry order with at most `concurrency` in flight and writes each line
/// as it settles; then the `done` line. Stops silently when the client goes away.
async fn fan_out(
    state: WidgetsState,
    jobs: Vec<Job>,
    context: CallContext,
    stream_deadline: Instant,
    sender: mpsc::Sender<Bytes>,
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
    let deadline = sleep_until(stream_deadline);
    tokio::pin!(deadline);
    loop {
        while running.len() < options.concurrency.max(1) {
            let Some(job) = queue.next() else { break };
            running.push(run_one(
                state.apps.clone(),
                job,
                context.clone(),
                options.timeout,
            ));
        }
        if running.is_empty() {
            break;
        }
        tokio::select! {
            biased;
            () = cancel.cancelled() => return,
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
                    let line = encode(&Line::Widget { key: &key, status: "timeout", widget: None, ms });
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
            }
        }
    }
    if cancel.is_cancelled() {
        return;
    }
    let status = if partial { "partial" } else { "complete" };
    sender.send(encode(&Line::Done { status })).await.ok();
}
