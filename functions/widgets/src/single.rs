//! `GET /api/widgets/v1/{appId}/{widgetId}?size=`: one widget as JSON under one budget
//! (registry, signing and the call). Answers: 200 with the checked JSON, 204 / 403 empty, 404
//! for an unknown widget, 504 when the budget ran out, 502 for anything else. The app's headers
//! are never passed on.

use std::collections::HashMap;

use axum::Extension;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderValue, StatusCode, header};
use k2b_core::auth::Actor;
use k2b_core::http::ApiError;
use k2b_core::http::openapi::ErrorBody;
use k2b_core::widgets::{SIZE_PARAM, WidgetResponse, fit_size, list_widgets};
use tokio::time::{Instant, timeout_at};
use utoipa::OpenApi;

use crate::WidgetsState;
use crate::call::{
    CallContext, Outcome, Phase, Reason, Rejection, call_widget, log_rejection, record_outcome,
};
use crate::signing::{REUSE_MARGIN, sign_all};

fn deadline_exceeded() -> Response {
    ApiError::new(
        StatusCode::GATEWAY_TIMEOUT,
        "WIDGET_TIMEOUT",
        "Widget deadline exceeded",
    )
    .into_response()
}

fn bad_gateway(reason: Reason) -> Response {
    let (code, message) = match reason {
        Reason::InvalidSchema => ("WIDGET_INVALID", "Widget returned an invalid response"),
        Reason::TooLarge | Reason::InvalidJson => (
            "WIDGET_INVALID",
            "Widget returned invalid or oversized JSON",
        ),
        _ => ("WIDGET_UNAVAILABLE", "Widget is unavailable"),
    };
    ApiError::new(StatusCode::BAD_GATEWAY, code, message).into_response()
}

/// Milliseconds since `since`, as the widget's latency.
fn millis(since: Instant) -> u64 {
    (since.elapsed().as_secs_f64() * 1000.0).round() as u64
}

fn empty(status: StatusCode) -> Response {
    (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        Body::empty(),
    )
        .into_response()
}

/// One widget as JSON
///
/// Under one 8 s budget for the registry, signing and the app's answer. The app's answer is
/// checked against the widget contract and re-serialized; its headers are never passed on.
#[utoipa::path(
    get,
    path = "/api/widgets/v1/{app_id}/{widget_id}",
    tag = "widgets",
    operation_id = "widgetsGetWidget",
    params(
        ("app_id" = String, Path, description = "The app that declares the widget."),
        ("widget_id" = String, Path, description = "The widget's id."),
        ("size" = Option<String>, Query, description = "`small`, `medium` or `large`: used when the widget offers it, else (and for any other value) the widget's default size."),
        ("x-cloud-locale" = Option<String>, Header, description = "The viewer's locale (a BCP 47 tag), passed on to the apps; else the `cloud.locale` cookie, else `Accept-Language`. Invalid tags are skipped."),
    ),
    security(("session" = []), ("appSession" = []), ("oauth" = [])),
    responses(
        (status = 200, description = "The widget's answer.", body = WidgetResponse),
        (status = 204, description = "The widget has nothing to show (empty body)."),
        (status = 400, description = "A path parameter is not valid UTF-8.", content(
            (ErrorBody = "application/json"), (String = "text/plain"))),
        (status = 401, description = "No valid credential.", body = ErrorBody),
        (status = 403, description = "An app's workload credential, or an OAuth token without the `read` or `admin` scope; or the app refuses the viewer (then the body is empty).", body = ErrorBody),
        (status = 404, description = "No such widget.", body = ErrorBody),
        (status = 502, description = "`WIDGET_INVALID`: the app's answer broke the contract or was not JSON; `WIDGET_UNAVAILABLE`: anything else failed.", body = ErrorBody),
        (status = 503, description = "Credentials cannot be checked right now.", body = ErrorBody),
        (status = 504, description = "`WIDGET_TIMEOUT`: the budget ran out.", body = ErrorBody),
    )
)]
pub(crate) async fn widget(
    State(state): State<WidgetsState>,
    Extension(actor): Extension<Actor>,
    Path((app_id, widget_id)): Path<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let options = state.options.clone();
    let started = Instant::now();
    let deadline = started + options.timeout;
    let context = CallContext::from_headers(&headers);
    let fail = |phase: Phase, reason: Reason| {
        let rejection = Rejection {
            phase,
            reason,
            upstream_status: None,
        };
        log_rejection(&app_id, &widget_id, rejection);
        let outcome = if reason == Reason::DeadlineExceeded {
            Outcome::Timeout(rejection)
        } else {
            Outcome::Error(rejection)
        };
        record_outcome(&outcome, millis(started));
        if reason == Reason::DeadlineExceeded {
            deadline_exceeded()
        } else {
            bad_gateway(reason)
        }
    };

    let declared = match timeout_at(deadline, list_widgets(&state.core.pool, None)).await {
        Ok(Ok(declared)) => declared,
        Ok(Err(_)) => return fail(Phase::Registry, Reason::OperationFailed),
        Err(_) => return fail(Phase::Registry, Reason::DeadlineExceeded),
    };
    let Some(widget) = declared
        .iter()
        .find(|w| w.app_id == app_id && w.widget_id == widget_id)
    else {
        return ApiError::not_found("Widget not found").into_response();
    };

    let budget = deadline.saturating_duration_since(Instant::now());
    if budget.is_zero() {
        return fail(Phase::Signing, Reason::DeadlineExceeded);
    }
    // The issuance keeps its own deadline (it waits for Postgres to end a statement at it).
    let signed = sign_all(
        &state.core,
        &state.tokens,
        &actor,
        vec![widget.clone()],
        vec![budget + REUSE_MARGIN],
        context.request_id.clone(),
        budget,
        1,
    )
    .await;
    let token = match signed {
        Err(error) if error.is_timeout() => return fail(Phase::Signing, Reason::DeadlineExceeded),
        Err(_) => return fail(Phase::Signing, Reason::OperationFailed),
        Ok(mut issued) => match issued.tokens.pop() {
            Some(Ok(token)) => token,
            _ => return fail(Phase::Signing, Reason::OperationFailed),
        },
    };
    if Instant::now() >= deadline {
        return fail(Phase::Signing, Reason::DeadlineExceeded);
    }

    let size = fit_size(
        query.get(SIZE_PARAM).map(String::as_str),
        &widget.sizes,
        widget.default_size,
    );
    let outcome = call_widget(&state.apps, widget, size, &token, &context, deadline).await;
    record_outcome(&outcome, millis(started));
    match outcome {
        Outcome::Ok(body) => axum::Json(body).into_response(),
        Outcome::Empty => empty(StatusCode::NO_CONTENT),
        Outcome::Forbidden => empty(StatusCode::FORBIDDEN),
        Outcome::Timeout(rejection) => {
            log_rejection(&app_id, &widget_id, rejection);
            deadline_exceeded()
        }
        Outcome::Error(rejection) => {
            log_rejection(&app_id, &widget_id, rejection);
            bad_gateway(rejection.reason)
        }
    }
}

/// The single widget route's part of the API's OpenAPI document.
#[derive(OpenApi)]
#[openapi(paths(widget))]
struct Api;

pub(crate) fn openapi() -> utoipa::openapi::OpenApi {
    Api::openapi()
}
