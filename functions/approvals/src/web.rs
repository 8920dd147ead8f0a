//! The browser's side of pairing (`/api/auth/pwa/v1`): a web session only.

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, StatusCode};
use k2b_core::http::body::read_json;
use k2b_core::http::openapi::ErrorBody;
use k2b_core::http::routes::Routes;
use k2b_core::pwa::devices::DeviceItem;
use k2b_core::pwa::pairing::{PairingStatus, StartedPairing};
use k2b_core::pwa::{self, PwaError, devices, pairing};
use serde::{Deserialize, Serialize};
use utoipa::{OpenApi, ToSchema};
use uuid::Uuid;

use crate::sessions::web_actor;
use crate::{ApprovalsState, RateLimitedAnswer, RequestFacts};

pub(crate) fn routes() -> Routes<ApprovalsState> {
    Routes::new()
        .post("/api/auth/pwa/v1/pairings", start)
        .get("/api/auth/pwa/v1/pairings/{id}", inspect)
        .post("/api/auth/pwa/v1/pairings/{id}/confirm", confirm)
        .post("/api/auth/pwa/v1/pairings/{id}/cancel", cancel)
        .get("/api/auth/pwa/v1/devices", list_devices)
        .delete("/api/auth/pwa/v1/devices/{id}", revoke_device)
}

/// The web side's part of the API document.
#[derive(OpenApi)]
#[openapi(paths(start, inspect, confirm, cancel, list_devices, revoke_device))]
struct Api;

pub(crate) fn openapi() -> utoipa::openapi::OpenApi {
    Api::openapi()
}

/// A path id: a UUID, else 400.
fn parse_id(raw: &str) -> Result<Uuid, PwaError> {
    pwa::parse_id(raw).ok_or(PwaError::InvalidRequest)
}

/// Start pairing a phone
///
/// Starts a pairing from a browser signed in within the last 10 minutes: the answer carries the
/// one-time link secret the phone scans (`/pwa/#pair=<secret>`). At most five open pairings per
/// account. A browser session only: an `Authorization` header, an app session or a session of
/// another kind is 403 `FORBIDDEN`; no valid session or an older sign-in is 403
/// `REAUTHENTICATE`. Needs the installation's own `Origin`.
#[utoipa::path(
    post,
    path = "/api/auth/pwa/v1/pairings",
    tag = "pairing",
    operation_id = "pwaStartPairing",
    security(("session" = [])),
    responses(
        (status = 201, description = "The pairing, with its link secret (returned only here).",
            body = StartedPairing,
            links(
                ("inspect" = (operation_id = "pwaInspectPairing",
                    parameters(("id" = "$response.body#/id")))),
                ("confirm" = (operation_id = "pwaConfirmPairing",
                    parameters(("id" = "$response.body#/id")))),
                ("cancel" = (operation_id = "pwaCancelPairing",
                    parameters(("id" = "$response.body#/id"))))
            )),
        (status = 403, description = "`FORBIDDEN` (not a browser session, or an `Origin` other than the installation's) or `REAUTHENTICATE` (no valid browser session, or signed in more than 10 minutes ago).", body = ErrorBody),
        (status = 429, description = "`LIMIT_REACHED` (five open pairings), or `RATE_LIMITED` (too many requests from this client; `Retry-After: 1`).", body = ErrorBody,
            headers(("Retry-After" = String, description = "`1`, on `RATE_LIMITED`."))),
        (status = 503, description = "`UNAVAILABLE`: the mobile app's shell is not installed, or a dependency failed.", body = ErrorBody),
    )
)]
async fn start(
    State(state): State<ApprovalsState>,
    headers: HeaderMap,
) -> Result<Response, PwaError> {
    let (actor, _) = web_actor(&state.core, &headers).await?;
    if !pwa::shell_available(&state.core).await? {
        return Err(PwaError::Unavailable("ShellUnavailable"));
    }
    let facts = RequestFacts::from_headers(&headers);
    let started = pairing::start(&state.core, actor, facts.request_id).await?;
    Ok((StatusCode::CREATED, Json(started)).into_response())
}

/// Inspect a pairing
///
/// The state of a pairing this browser session started (never the code). Another session's
/// pairing, even of the same person, is 404.
#[utoipa::path(
    get,
    path = "/api/auth/pwa/v1/pairings/{id}",
    tag = "pairing",
    operation_id = "pwaInspectPairing",
    params(("id" = String, Path, format = Uuid, description = "The pairing's id (a hyphenated UUID).")),
    security(("session" = [])),
    responses(
        (status = 200, description = "The pairing's state.", body = PairingStatus),
        (status = 400, description = "`INVALID_REQUEST`: the id is not a UUID.", body = ErrorBody),
        (status = 403, description = "`FORBIDDEN` (not a browser session) or `REAUTHENTICATE` (no valid browser session).", body = ErrorBody),
        (status = 404, description = "`NOT_FOUND`: no such pairing of this browser session.", body = ErrorBody),
        (status = 410, description = "`EXPIRED`: the pairing expired, was not claimed in time, or the account signed out everywhere.", body = ErrorBody),
        RateLimitedAnswer,
    )
)]
async fn inspect(
    State(state): State<ApprovalsState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, PwaError> {
    let (actor, _) = web_actor(&state.core, &headers).await?;
    let status = pairing::inspect(&state.core, actor, parse_id(&id)?).await?;
    Ok(Json(status).into_response())
}

/// The code the phone shows.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = PwaConfirmPairing)]
struct ConfirmBody {
    /// Six digits.
    #[schema(pattern = "^[0-9]{6}$", example = "042137")]
    code: String,
}

/// Confirm a pairing
///
/// The browser types the six-digit code the phone shows. A wrong code counts (`attemptsLeft`);
/// the third cancels the pairing (410 with `attemptsLeft: 0`). Needs the installation's own
/// `Origin`.
#[utoipa::path(
    post,
    path = "/api/auth/pwa/v1/pairings/{id}/confirm",
    tag = "pairing",
    operation_id = "pwaConfirmPairing",
    params(("id" = String, Path, format = Uuid, description = "The pairing's id (a hyphenated UUID).")),
    request_body(content = ConfirmBody, content_type = "application/json",
        description = "At most 8192 bytes; no other member."),
    security(("session" = [])),
    responses(
        (status = 204, description = "Confirmed: the phone completes the pairing next."),
        (status = 400, description = "`INVALID_REQUEST`: the id is not a UUID, or the body is not `{code}` with six digits (or is over 8192 bytes).", body = ErrorBody),
        (status = 403, description = "`FORBIDDEN` (not a browser session, an `Origin` other than the installation's, or the account cannot be used now) or `REAUTHENTICATE` (no valid browser session).", body = ErrorBody),
        (status = 404, description = "`NOT_FOUND`: no such pairing of this browser session.", body = ErrorBody),
        (status = 409, description = "`WRONG_CODE` (with `attemptsLeft`), or `CONFLICT` (the pairing is not claimed).", body = ErrorBody),
        (status = 410, description = "`EXPIRED`: the pairing expired, was cancelled (also by the third wrong code: `attemptsLeft: 0`), or its browser session ended.", body = ErrorBody),
        RateLimitedAnswer,
    )
)]
async fn confirm(
    State(state): State<ApprovalsState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, PwaError> {
    let (actor, _) = web_actor(&state.core, &headers).await?;
    let id = parse_id(&id)?;
    let body: ConfirmBody = read_json(&headers, body, pwa::BODY_BYTES)
        .await
        .map_err(|_| PwaError::InvalidRequest)?;
    if body.code.len() != 6 || !body.code.bytes().all(|b| b.is_ascii_digit()) {
        return Err(PwaError::InvalidRequest);
    }
    let facts = RequestFacts::from_headers(&headers);
    pairing::confirm(&state.core, actor, id, &body.code, facts.request_id).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// Cancel a pairing
///
/// Cancels a pairing this browser session started (a cancelled one stays cancelled; a
/// completed one cannot be). Needs the installation's own `Origin`.
#[utoipa::path(
    post,
    path = "/api/auth/pwa/v1/pairings/{id}/cancel",
    tag = "pairing",
    operation_id = "pwaCancelPairing",
    params(("id" = String, Path, format = Uuid, description = "The pairing's id (a hyphenated UUID).")),
    security(("session" = [])),
    responses(
        (status = 204, description = "Cancelled (or already cancelled)."),
        (status = 400, description = "`INVALID_REQUEST`: the id is not a UUID.", body = ErrorBody),
        (status = 403, description = "`FORBIDDEN` (not a browser session, or an `Origin` other than the installation's) or `REAUTHENTICATE` (no valid browser session).", body = ErrorBody),
        (status = 404, description = "`NOT_FOUND`: no such pairing of this browser session.", body = ErrorBody),
        (status = 409, description = "`CONFLICT`: the pairing is completed.", body = ErrorBody),
        RateLimitedAnswer,
    )
)]
async fn cancel(
    State(state): State<ApprovalsState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, PwaError> {
    let (actor, _) = web_actor(&state.core, &headers).await?;
    let facts = RequestFacts::from_headers(&headers);
    pairing::cancel(&state.core, actor, parse_id(&id)?, facts.request_id).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// The person's own paired phones.
#[derive(Serialize, ToSchema)]
#[schema(as = PwaDeviceList)]
struct DeviceList {
    /// The active devices, oldest first (at most 20).
    #[schema(max_items = 20)]
    items: Vec<DeviceItem>,
}

/// List one's paired phones
///
/// The signed-in person's active phones, oldest first; `current` marks the phone whose app
/// session the request also carries. A browser session only (an app session is 403).
#[utoipa::path(
    get,
    path = "/api/auth/pwa/v1/devices",
    tag = "pairing",
    operation_id = "pwaListDevices",
    security(("session" = [])),
    responses(
        (status = 200, description = "The devices.", body = DeviceList),
        (status = 403, description = "`FORBIDDEN` (not a browser session) or `REAUTHENTICATE` (no valid browser session).", body = ErrorBody),
        RateLimitedAnswer,
    )
)]
async fn list_devices(
    State(state): State<ApprovalsState>,
    headers: HeaderMap,
) -> Result<Response, PwaError> {
    let (actor, presented) = web_actor(&state.core, &headers).await?;
    let current = presented
        .app
        .filter(|app| app.user_id == actor.user_id)
        .map(|app| app.device_id);
    let items = devices::list_own(&state.core, actor, current).await?;
    Ok(Json(DeviceList { items }).into_response())
}

/// Remove one's paired phone
///
/// Revokes one of the person's phones (any state; 204 also when it was already revoked) and
/// ends its app sessions. Needs the installation's own `Origin`.
#[utoipa::path(
    delete,
    path = "/api/auth/pwa/v1/devices/{id}",
    tag = "pairing",
    operation_id = "pwaRevokeDevice",
    params(("id" = String, Path, format = Uuid, description = "The device's id (a hyphenated UUID).")),
    security(("session" = [])),
    responses(
        (status = 204, description = "Revoked (or already revoked)."),
        (status = 400, description = "`INVALID_REQUEST`: the id is not a UUID.", body = ErrorBody),
        (status = 403, description = "`FORBIDDEN` (not a browser session, or an `Origin` other than the installation's) or `REAUTHENTICATE` (no valid browser session).", body = ErrorBody),
        (status = 404, description = "`NOT_FOUND`: no such device of this person.", body = ErrorBody),
        RateLimitedAnswer,
    )
)]
async fn revoke_device(
    State(state): State<ApprovalsState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, PwaError> {
    let (actor, _) = web_actor(&state.core, &headers).await?;
    let facts = RequestFacts::from_headers(&headers);
    devices::revoke_own(&state.core, actor, parse_id(&id)?, facts.request_id).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
