//! Cloud Login's HTTP API (`/api/auth/app-approval/v1`): discovery, enrollment, signed device
//! commands, browser sign-in and the person's own device management.
//!
//! Transport rules: every answer is `no-store`, `no-referrer` and varies by `Origin`. The device
//! paths (`/info`, `/pairings/claim`, `/pairings/result`, `/device`) accept the installation's
//! origin, the authenticator app's origin (with CORS for it, never with credentials) or none;
//! every other path accepts only the installation's origin, and needs it on every method but
//! GET. Bodies are at most 8 KiB; the management paths need a signed-in browser.

use axum::Json;
use axum::body::Body;
use axum::extract::{Query, Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use k2b_core::Core;
use k2b_core::auth::{self, Role};
use k2b_core::cloud_login::device::CommandAnswer;
use k2b_core::cloud_login::enroll::{ClaimedPairing, PairingResult, PairingStatus, StartedPairing};
use k2b_core::cloud_login::login::{LoginState, StartedLogin};
use k2b_core::cloud_login::manage::{self, DevicePage as Page, Mutation};
use k2b_core::cloud_login::proof::{self, DeviceRequestBody, PairingClaim, PublicKeyJwk};
use k2b_core::cloud_login::{
    self, API_PATH, BODY_BYTES, CloudLoginError, Limits, ManageActor, NAME_MAX_CHARS, PROTOCOL,
    config, device, enroll, login,
};
use k2b_core::http::body::{BodyError, read_limited};
use k2b_core::http::cookies::SetCookie;
use k2b_core::http::openapi::ErrorBody;
use k2b_core::http::routes::Routes;
use k2b_core::identity::IssueOptions;
use k2b_core::identity::session::{SESSION_COOKIE, SessionRequest};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, OpenApi, ToSchema};
use uuid::Uuid;

use crate::{
    ApprovalsState, RateLimitedAnswer, RequestFacts, rate_limited, secure_cookies, with_cookies,
    with_privacy_headers, within_rate_limit,
};

/// The paths an authenticator app calls from its own origin.
const DEVICE_PATHS: [&str; 4] = ["/info", "/pairings/claim", "/pairings/result", "/device"];

/// Cloud Login's part of the API document.
#[derive(OpenApi)]
#[openapi(paths(
    info,
    info_preflight,
    claim,
    claim_preflight,
    result,
    result_preflight,
    command,
    command_preflight,
    login_start,
    login_status,
    login_complete,
    pairing_start,
    pairing_status,
    pairing_confirm,
    pairing_cancel,
    devices,
    device_update
))]
struct Api;

pub(crate) fn openapi() -> utoipa::openapi::OpenApi {
    Api::openapi()
}

pub(crate) fn routes(state: ApprovalsState) -> Routes<ApprovalsState> {
    Routes::new()
        .get("/api/auth/app-approval/v1/info", info)
        .options("/api/auth/app-approval/v1/info", info_preflight)
        .post("/api/auth/app-approval/v1/pairings/claim", claim)
        .options("/api/auth/app-approval/v1/pairings/claim", claim_preflight)
        .post("/api/auth/app-approval/v1/pairings/result", result)
        .options(
            "/api/auth/app-approval/v1/pairings/result",
            result_preflight,
        )
        .post("/api/auth/app-approval/v1/device", command)
        .options("/api/auth/app-approval/v1/device", command_preflight)
        .post("/api/auth/app-approval/v1/login/start", login_start)
        .post("/api/auth/app-approval/v1/login/status", login_status)
        .post("/api/auth/app-approval/v1/login/complete", login_complete)
        .post(
            "/api/auth/app-approval/v1/manage/pairings/start",
            pairing_start,
        )
        .post(
            "/api/auth/app-approval/v1/manage/pairings/status",
            pairing_status,
        )
        .post(
            "/api/auth/app-approval/v1/manage/pairings/confirm",
            pairing_confirm,
        )
        .post(
            "/api/auth/app-approval/v1/manage/pairings/cancel",
            pairing_cancel,
        )
        .get("/api/auth/app-approval/v1/manage/devices", devices)
        .post(
            "/api/auth/app-approval/v1/manage/devices/update",
            device_update,
        )
        .map_router(|router| {
            router.method_not_allowed_fallback(|| async { CloudLoginError::InvalidRequest })
        })
        .layer(middleware::from_fn_with_state(state, transport))
}

/// The privacy headers, the Origin and CORS rules, the per-client rate limit.
async fn transport(State(state): State<ApprovalsState>, request: Request, next: Next) -> Response {
    with_privacy_headers(match guarded(&state, request, next).await {
        Ok(response) => response,
        Err(error) => error.into_response(),
    })
}

async fn guarded(
    state: &ApprovalsState,
    request: Request,
    next: Next,
) -> Result<Response, CloudLoginError> {
    let path = request
        .uri()
        .path()
        .strip_prefix(API_PATH)
        .unwrap_or_default()
        .to_string();
    let cfg = config::read(&state.core).await?;
    let device_surface = DEVICE_PATHS.contains(&path.as_str());
    let mut origins = request.headers().get_all(header::ORIGIN).iter();
    let origin = match (origins.next(), origins.next()) {
        (None, _) => None,
        (Some(value), None) => Some(value.to_str().map_err(|_| CloudLoginError::Forbidden)?),
        (Some(_), Some(_)) => return Err(CloudLoginError::Forbidden),
    };
    let from_app = device_surface && origin.is_some() && origin == cfg.app_origin.as_deref();
    if let Some(origin) = origin
        && origin != cfg.issuer
        && !from_app
    {
        return Err(CloudLoginError::Forbidden);
    }
    if !device_surface && request.method() != Method::GET && origin != Some(cfg.issuer.as_str()) {
        return Err(CloudLoginError::Forbidden);
    }
    let cors = from_app.then(|| cfg.app_origin.clone()).flatten();
    let allowed = within_rate_limit(state, "cloud-login", &request)
        .await
        .map_err(|error| {
            tracing::warn!(error = %error, router = "cloud-login", "rate limit unreadable");
            CloudLoginError::Unavailable("RateLimitError")
        })?;
    let mut response = if !allowed {
        rate_limited()
    } else if request.method() == Method::OPTIONS {
        StatusCode::NO_CONTENT.into_response()
    } else {
        next.run(request).await
    };
    if let Some(app_origin) = cors
        && let Ok(value) = HeaderValue::from_str(&app_origin)
    {
        let headers = response.headers_mut();
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, value);
        headers.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static("GET, POST, OPTIONS"),
        );
        headers.insert(
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            HeaderValue::from_static("Content-Type"),
        );
        headers.insert(
            header::ACCESS_CONTROL_MAX_AGE,
            HeaderValue::from_static("300"),
        );
    }
    Ok(response)
}

/// A preflight is answered by the transport rules; this only gives the route its place.
async fn preflight() -> StatusCode {
    StatusCode::NO_CONTENT
}

/// CORS preflight of `/info`
///
/// Answered by the transport rules: 204, with the CORS headers when `Origin` is the
/// authenticator app's (never with credentials). The installation's origin or none is also
/// accepted; any other is 403.
#[utoipa::path(
    options,
    path = "/api/auth/app-approval/v1/info",
    tag = "app-approval",
    operation_id = "appApprovalInfoPreflight",
    security(()),
    responses(
        (status = 204, description = "Allowed; CORS headers for the authenticator app's origin.",
            headers(
                ("Access-Control-Allow-Origin" = String, description = "The authenticator app's origin (only for it)."),
                ("Access-Control-Allow-Methods" = String, description = "`GET, POST, OPTIONS`."),
                ("Access-Control-Allow-Headers" = String, description = "`Content-Type`."),
                ("Access-Control-Max-Age" = String, description = "`300`."),
            )),
        (status = 403, description = "`FORBIDDEN`: an `Origin` that is neither the installation's nor the authenticator app's, or more than one.", body = ErrorBody),
        RateLimitedAnswer,
        (status = 503, description = "`UNAVAILABLE`: the settings cannot be read or are not valid.", body = ErrorBody),
    )
)]
async fn info_preflight() -> StatusCode {
    preflight().await
}

/// CORS preflight of `/pairings/claim`
///
/// As the preflight of `/info`.
#[utoipa::path(
    options,
    path = "/api/auth/app-approval/v1/pairings/claim",
    tag = "app-approval",
    operation_id = "appApprovalClaimPreflight",
    security(()),
    responses(
        (status = 204, description = "Allowed; CORS headers for the authenticator app's origin.",
            headers(
                ("Access-Control-Allow-Origin" = String, description = "The authenticator app's origin (only for it)."),
                ("Access-Control-Allow-Methods" = String, description = "`GET, POST, OPTIONS`."),
                ("Access-Control-Allow-Headers" = String, description = "`Content-Type`."),
                ("Access-Control-Max-Age" = String, description = "`300`."),
            )),
        (status = 403, description = "`FORBIDDEN`: an `Origin` that is neither the installation's nor the authenticator app's, or more than one.", body = ErrorBody),
        RateLimitedAnswer,
        (status = 503, description = "`UNAVAILABLE`: the settings cannot be read or are not valid.", body = ErrorBody),
    )
)]
async fn claim_preflight() -> StatusCode {
    preflight().await
}

/// CORS preflight of `/pairings/result`
///
/// As the preflight of `/info`.
#[utoipa::path(
    options,
    path = "/api/auth/app-approval/v1/pairings/result",
    tag = "app-approval",
    operation_id = "appApprovalResultPreflight",
    security(()),
    responses(
        (status = 204, description = "Allowed; CORS headers for the authenticator app's origin.",
            headers(
                ("Access-Control-Allow-Origin" = String, description = "The authenticator app's origin (only for it)."),
                ("Access-Control-Allow-Methods" = String, description = "`GET, POST, OPTIONS`."),
                ("Access-Control-Allow-Headers" = String, description = "`Content-Type`."),
                ("Access-Control-Max-Age" = String, description = "`300`."),
            )),
        (status = 403, description = "`FORBIDDEN`: an `Origin` that is neither the installation's nor the authenticator app's, or more than one.", body = ErrorBody),
        RateLimitedAnswer,
        (status = 503, description = "`UNAVAILABLE`: the settings cannot be read or are not valid.", body = ErrorBody),
    )
)]
async fn result_preflight() -> StatusCode {
    preflight().await
}

/// CORS preflight of `/device`
///
/// As the preflight of `/info`.
#[utoipa::path(
    options,
    path = "/api/auth/app-approval/v1/device",
    tag = "app-approval",
    operation_id = "appApprovalDevicePreflight",
    security(()),
    responses(
        (status = 204, description = "Allowed; CORS headers for the authenticator app's origin.",
            headers(
                ("Access-Control-Allow-Origin" = String, description = "The authenticator app's origin (only for it)."),
                ("Access-Control-Allow-Methods" = String, description = "`GET, POST, OPTIONS`."),
                ("Access-Control-Allow-Headers" = String, description = "`Content-Type`."),
                ("Access-Control-Max-Age" = String, description = "`300`."),
            )),
        (status = 403, description = "`FORBIDDEN`: an `Origin` that is neither the installation's nor the authenticator app's, or more than one.", body = ErrorBody),
        RateLimitedAnswer,
        (status = 503, description = "`UNAVAILABLE`: the settings cannot be read or are not valid.", body = ErrorBody),
    )
)]
async fn command_preflight() -> StatusCode {
    preflight().await
}

/// The body as JSON: over 8 KiB 413, not JSON 400.
async fn body_json(headers: &HeaderMap, body: Body) -> Result<Value, CloudLoginError> {
    let bytes = read_limited(headers, body, BODY_BYTES)
        .await
        .map_err(|error| match error {
            BodyError::TooLarge { .. } => CloudLoginError::TooLarge,
            _ => CloudLoginError::InvalidRequest,
        })?;
    serde_json::from_slice(&bytes).map_err(|_| CloudLoginError::InvalidRequest)
}

/// The body as a strict `T` (unknown fields are 400).
async fn body_as<T: serde::de::DeserializeOwned>(
    headers: &HeaderMap,
    body: Body,
) -> Result<T, CloudLoginError> {
    serde_json::from_value(body_json(headers, body).await?)
        .map_err(|_| CloudLoginError::InvalidRequest)
}

fn uuid(raw: &str) -> Result<Uuid, CloudLoginError> {
    Uuid::parse_str(raw)
        .ok()
        .filter(|_| raw.len() == 36)
        .ok_or(CloudLoginError::InvalidRequest)
}

fn secret(raw: &str) -> Result<&str, CloudLoginError> {
    proof::is_secret(raw)
        .then_some(raw)
        .ok_or(CloudLoginError::InvalidRequest)
}

/// What an authenticator learns of the installation.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = CloudLoginInfo)]
struct Info {
    /// `cloud-app-approval-v1`.
    #[schema(value_type = String, example = "cloud-app-approval-v1")]
    protocol: &'static str,
    /// The installation's origin.
    issuer: String,
    /// The API's base URL: the issuer and `/api/auth/app-approval/v1`.
    api: String,
    /// The authenticator app's origin.
    app_origin: String,
    /// `ES256`.
    #[schema(value_type = String, example = "ES256")]
    algorithm: &'static str,
    limits: Limits,
}

/// Cloud Login discovery
///
/// The protocol, issuer, API base, the authenticator app's origin and the limits. 503 while
/// Cloud Login is off or its app origin is not valid. Accepts the installation's origin, the
/// authenticator app's (with CORS) or none.
#[utoipa::path(
    get,
    path = "/api/auth/app-approval/v1/info",
    tag = "app-approval",
    operation_id = "appApprovalInfo",
    security(()),
    responses(
        (status = 200, description = "Cloud Login is on.", body = Info),
        (status = 403, description = "`FORBIDDEN`: an `Origin` that is neither the installation's nor the authenticator app's, or more than one.", body = ErrorBody),
        RateLimitedAnswer,
        (status = 503, description = "`UNAVAILABLE`: Cloud Login is off, its settings are not valid, or a dependency failed.", body = ErrorBody),
    )
)]
async fn info(State(state): State<ApprovalsState>) -> Result<Response, CloudLoginError> {
    let cfg = config::read(&state.core).await?;
    let app_origin = cfg.require_feature()?;
    Ok(Json(Info {
        protocol: PROTOCOL,
        api: format!("{}{API_PATH}", cfg.issuer),
        issuer: cfg.issuer.clone(),
        app_origin: app_origin.to_string(),
        algorithm: "ES256",
        limits: cloud_login::limits(),
    })
    .into_response())
}

/// Claim an enrollment (authenticator)
///
/// The authenticator claims a started pairing with its P-256 public key, its name and an ES256
/// signature over the claim; both screens then show the same six-digit code. Accepts the
/// installation's origin, the authenticator app's (with CORS) or none.
#[utoipa::path(
    post,
    path = "/api/auth/app-approval/v1/pairings/claim",
    tag = "app-approval",
    operation_id = "appApprovalClaimPairing",
    request_body(content = PairingClaim, content_type = "application/json",
        description = "Exactly these members; at most 8192 bytes."),
    security(()),
    responses(
        (status = 200, description = "Claimed.", body = ClaimedPairing),
        (status = 400, description = "`INVALID_REQUEST`: not JSON, or not a claim of the right shape.", body = ErrorBody),
        (status = 403, description = "`FORBIDDEN`: a wrong signature or secret, an expired or unknown pairing, an account that cannot be used, or a foreign `Origin`.", body = ErrorBody),
        (status = 409, description = "`CONFLICT`: the pairing is not pending.", body = ErrorBody),
        (status = 413, description = "`PAYLOAD_TOO_LARGE`: the body is over 8192 bytes.", body = ErrorBody),
        RateLimitedAnswer,
        (status = 503, description = "`UNAVAILABLE`: Cloud Login is off, its settings are not valid, or a dependency failed.", body = ErrorBody),
    )
)]
async fn claim(
    State(state): State<ApprovalsState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, CloudLoginError> {
    let claim = proof::parse_claim(&body_json(&headers, body).await?)?;
    let claimed = enroll::claim(&state.core, &claim).await?;
    Ok(Json(claimed).into_response())
}

/// A pairing the authenticator polls.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[schema(as = CloudLoginPairingReference)]
struct PairingReference {
    #[schema(format = Uuid)]
    pairing_id: String,
    /// The link's secret.
    #[schema(pattern = "^[A-Za-z0-9_-]{42}[AEIMQUYcgkosw048]$")]
    secret: String,
    /// The key the authenticator claimed with.
    #[schema(value_type = PublicKeyJwk)]
    public_key: Value,
}

/// Poll an enrollment (authenticator)
///
/// The pairing's state for the authenticator that claimed it (the code only while claimed).
/// Accepts the installation's origin, the authenticator app's (with CORS) or none.
#[utoipa::path(
    post,
    path = "/api/auth/app-approval/v1/pairings/result",
    tag = "app-approval",
    operation_id = "appApprovalPairingResult",
    request_body(content = PairingReference, content_type = "application/json",
        description = "No other member; at most 8192 bytes."),
    security(()),
    responses(
        (status = 200, description = "The pairing's state.", body = PairingResult),
        (status = 400, description = "`INVALID_REQUEST`: not JSON, or not a reference of the right shape.", body = ErrorBody),
        (status = 403, description = "`FORBIDDEN`: a wrong secret, another key, an expired or unknown pairing, or a foreign `Origin`.", body = ErrorBody),
        (status = 413, description = "`PAYLOAD_TOO_LARGE`: the body is over 8192 bytes.", body = ErrorBody),
        RateLimitedAnswer,
        (status = 503, description = "`UNAVAILABLE`: Cloud Login is off, its settings are not valid, or a dependency failed.", body = ErrorBody),
    )
)]
async fn result(
    State(state): State<ApprovalsState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, CloudLoginError> {
    let input: PairingReference = body_as(&headers, body).await?;
    let key = PublicKeyJwk::parse(&input.public_key)?;
    let result = enroll::result(
        &state.core,
        uuid(&input.pairing_id)?,
        secret(&input.secret)?,
        &key,
    )
    .await?;
    Ok(Json(result).into_response())
}

/// Run a signed device command (authenticator)
///
/// `pending` lists the sign-ins waiting for the person, `decide` approves or denies one (with
/// its challenge and code), `revoke` removes the device. Each command is signed, used once
/// (`jti`) and valid for at most 60 s. Accepts the installation's origin, the authenticator
/// app's (with CORS) or none.
#[utoipa::path(
    post,
    path = "/api/auth/app-approval/v1/device",
    tag = "app-approval",
    operation_id = "appApprovalDeviceCommand",
    request_body(content = DeviceRequestBody, content_type = "application/json",
        description = "Exactly these members; at most 8192 bytes."),
    security(()),
    responses(
        (status = 200, description = "The command's answer.", body = CommandAnswer),
        (status = 400, description = "`INVALID_REQUEST`: not JSON, or not a command of the right shape.", body = ErrorBody),
        (status = 403, description = "`FORBIDDEN`: another issuer, a time outside the window, an unknown or revoked device, a wrong signature, an account that cannot be used, or a foreign `Origin`.", body = ErrorBody),
        (status = 409, description = "`CONFLICT`: the `jti` was used before, or the sign-in is not pending or does not match.", body = ErrorBody),
        (status = 413, description = "`PAYLOAD_TOO_LARGE`: the body is over 8192 bytes.", body = ErrorBody),
        RateLimitedAnswer,
        (status = 503, description = "`UNAVAILABLE`: Cloud Login is off, its settings are not valid, or a dependency failed.", body = ErrorBody),
    )
)]
async fn command(
    State(state): State<ApprovalsState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, CloudLoginError> {
    let request = proof::parse_device_request(&body_json(&headers, body).await?)?;
    let facts = RequestFacts::from_headers(&headers);
    let outcome = device::command(&state.core, &request, facts.request_id).await?;
    Ok(Json(outcome.answer()).into_response())
}

/// Whom a browser sign-in is for.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = CloudLoginLoginStart)]
struct LoginStart {
    /// A uid or a mail address (any case); trimmed, 1 to 254 characters.
    #[schema(min_length = 1, max_length = 254)]
    identifier: String,
    /// The account's category.
    #[schema(pattern = "^(guest|login|freeipa)$", example = "login")]
    category: String,
}

/// Start a browser sign-in
///
/// Anyone can start one: an identifier that matches no usable account gets a decoy of the
/// same shape, so the answer never tells whether the account exists. The browser keeps the
/// request id and secret and shows the code. Needs the installation's own `Origin`.
#[utoipa::path(
    post,
    path = "/api/auth/app-approval/v1/login/start",
    tag = "app-approval",
    operation_id = "appApprovalLoginStart",
    request_body(content = LoginStart, content_type = "application/json",
        description = "No other member; at most 8192 bytes."),
    security(()),
    responses(
        (status = 202, description = "Started; the authenticator decides.", body = StartedLogin,
            links(
                ("status" = (operation_id = "appApprovalLoginStatus",
                    request_body = json!({"requestId": "$response.body#/requestId", "browserSecret": "$response.body#/browserSecret"}))),
                ("complete" = (operation_id = "appApprovalLoginComplete",
                    request_body = json!({"requestId": "$response.body#/requestId", "browserSecret": "$response.body#/browserSecret"})))
            )),
        (status = 400, description = "`INVALID_REQUEST`: not JSON, or not `{identifier, category}` of the right shape.", body = ErrorBody),
        (status = 403, description = "`FORBIDDEN`: an `Origin` other than the installation's.", body = ErrorBody),
        (status = 413, description = "`PAYLOAD_TOO_LARGE`: the body is over 8192 bytes.", body = ErrorBody),
        RateLimitedAnswer,
        (status = 503, description = "`UNAVAILABLE`: Cloud Login is off, its settings are not valid, or a dependency failed.", body = ErrorBody),
    )
)]
async fn login_start(
    State(state): State<ApprovalsState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, CloudLoginError> {
    let input: LoginStart = body_as(&headers, body).await?;
    let identifier = input.identifier.trim();
    if identifier.is_empty() || identifier.chars().count() > 254 {
        return Err(CloudLoginError::InvalidRequest);
    }
    let category = login::parse_category(&input.category).ok_or(CloudLoginError::InvalidRequest)?;
    let started = login::start(&state.core, identifier, category).await?;
    Ok((StatusCode::ACCEPTED, Json(started)).into_response())
}

/// A browser sign-in, as the browser kept it.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[schema(as = CloudLoginLoginReference)]
struct LoginReference {
    #[schema(format = Uuid)]
    request_id: String,
    #[schema(pattern = "^[A-Za-z0-9_-]{42}[AEIMQUYcgkosw048]$")]
    browser_secret: String,
}

/// A sign-in's state.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = CloudLoginLoginStatus)]
struct LoginStatus {
    state: LoginState,
    /// How long to wait before asking again.
    poll_after_seconds: i64,
}

/// `Prefer: wait=<seconds>` (RFC 7240), the longest the browser wants its status held.
fn preferred_wait(headers: &HeaderMap) -> Option<std::time::Duration> {
    headers
        .get_all("prefer")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|p| p.trim().strip_prefix("wait="))
        .filter_map(|s| s.trim().parse::<u64>().ok())
        .map(std::time::Duration::from_secs)
        .next()
}

/// A browser sign-in's state
///
/// With `Prefer: wait=<seconds>` a pending sign-in is held until it is decided, expires, or
/// the wait (at most 15 s) passes; `Preference-Applied` then names the wait. A wrong secret is
/// the same 404 as an unknown request. Needs the installation's own `Origin`.
#[utoipa::path(
    post,
    path = "/api/auth/app-approval/v1/login/status",
    tag = "app-approval",
    operation_id = "appApprovalLoginStatus",
    params(("Prefer" = Option<String>, Header, description = "`wait=<seconds>` (RFC 7240): hold a pending answer up to that long (at most 15 s).")),
    request_body(content = LoginReference, content_type = "application/json",
        description = "No other member; at most 8192 bytes."),
    security(()),
    responses(
        (status = 200, description = "The state.", body = LoginStatus,
            headers(("Preference-Applied" = String, description = "`wait=<seconds>`, the wait applied, when `Prefer` asked for one."))),
        (status = 400, description = "`INVALID_REQUEST`: not JSON, or not `{requestId, browserSecret}` of the right shape.", body = ErrorBody),
        (status = 403, description = "`FORBIDDEN`: an `Origin` other than the installation's.", body = ErrorBody),
        (status = 404, description = "`UNAVAILABLE`: no such sign-in, or a wrong secret.", body = ErrorBody),
        (status = 413, description = "`PAYLOAD_TOO_LARGE`: the body is over 8192 bytes.", body = ErrorBody),
        RateLimitedAnswer,
        (status = 503, description = "`UNAVAILABLE`: Cloud Login is off, its settings are not valid, or a dependency failed.", body = ErrorBody),
    )
)]
async fn login_status(
    State(state): State<ApprovalsState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, CloudLoginError> {
    let input: LoginReference = body_as(&headers, body).await?;
    let hold = preferred_wait(&headers).map(|wait| wait.min(login::HOLD_MAX));
    let state_now = login::status(
        &state.core,
        uuid(&input.request_id)?,
        secret(&input.browser_secret)?,
        hold,
        std::future::pending(),
    )
    .await?;
    let mut response = Json(LoginStatus {
        state: state_now,
        poll_after_seconds: cloud_login::POLL_SECONDS,
    })
    .into_response();
    if let Some(hold) = hold
        && let Ok(value) = HeaderValue::from_str(&format!("wait={}", hold.as_secs()))
    {
        response.headers_mut().insert("preference-applied", value);
    }
    Ok(response)
}

/// Complete a browser sign-in
///
/// Consumes an approved sign-in once and sets the browser's web session (`session_token`).
/// Needs the installation's own `Origin`.
#[utoipa::path(
    post,
    path = "/api/auth/app-approval/v1/login/complete",
    tag = "app-approval",
    operation_id = "appApprovalLoginComplete",
    request_body(content = LoginReference, content_type = "application/json",
        description = "No other member; at most 8192 bytes."),
    security(()),
    responses(
        (status = 204, description = "Signed in: the web session is in the cookie.",
            headers(("Set-Cookie" = String, description = "`session_token=<web session>; Path=/; HttpOnly; SameSite=Lax`."))),
        (status = 400, description = "`INVALID_REQUEST`: not JSON, or not `{requestId, browserSecret}` of the right shape.", body = ErrorBody),
        (status = 403, description = "`FORBIDDEN`: the approving device is revoked, the account cannot be used, or an `Origin` other than the installation's.", body = ErrorBody),
        (status = 409, description = "`CONFLICT`: unknown, not approved, expired, already consumed, or a wrong secret.", body = ErrorBody),
        (status = 413, description = "`PAYLOAD_TOO_LARGE`: the body is over 8192 bytes.", body = ErrorBody),
        RateLimitedAnswer,
        (status = 503, description = "`UNAVAILABLE`: Cloud Login is off, its settings are not valid, or a dependency failed.", body = ErrorBody),
    )
)]
async fn login_complete(
    State(state): State<ApprovalsState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, CloudLoginError> {
    let input: LoginReference = body_as(&headers, body).await?;
    let facts = RequestFacts::from_headers(&headers);
    let user_id = login::complete(
        &state.core,
        uuid(&input.request_id)?,
        secret(&input.browser_secret)?,
        facts.request_id.clone(),
    )
    .await?;
    let session = state
        .core
        .identity
        .issue_session(
            &state.core.settings,
            SessionRequest {
                request_id: facts.request_id,
                user_agent: facts.user_agent,
                ..SessionRequest::web(user_id)
            },
            IssueOptions::default(),
        )
        .await
        .map_err(|error| {
            tracing::warn!(error = %error, "web session after cloud login not issued");
            CloudLoginError::Unavailable("IdentityError")
        })?;
    let cookie = SetCookie::new(SESSION_COOKIE, &session.token, session.max_age_seconds())
        .secure(secure_cookies(&state.core));
    Ok(with_cookies(
        StatusCode::NO_CONTENT.into_response(),
        &[cookie],
    ))
}

/// The signed-in browser behind a management request (401 without one), with its current
/// administrator role.
async fn manage_actor(core: &Core, headers: &HeaderMap) -> Result<ManageActor, CloudLoginError> {
    let presented = crate::sessions::presented(core, headers)
        .await
        .map_err(|_| CloudLoginError::Unavailable("SessionError"))?;
    let web = presented.web.ok_or(CloudLoginError::Unauthenticated)?;
    let mut conn = core.pool.acquire().await?;
    let roles = auth::roles_of(&mut conn, &core.settings, &web.user).await?;
    Ok(ManageActor {
        user_id: web.actor.user_id,
        sid: web.actor.sid,
        admin: roles.contains(&Role::Admin),
    })
}

/// Whom to enroll an authenticator for.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[schema(as = CloudLoginPairingStart)]
struct PairingStart {
    /// Another person (an administrator, with `user.app_approval.admin_pairing` on); oneself
    /// when absent or `null`.
    #[schema(format = Uuid)]
    user_id: Option<String>,
}

/// Start enrolling an authenticator
///
/// From a browser signed in within the last 10 minutes: the answer is what the link (or QR
/// code) carries to the authenticator. At most five open pairings per account. Needs the
/// installation's own `Origin`.
#[utoipa::path(
    post,
    path = "/api/auth/app-approval/v1/manage/pairings/start",
    tag = "app-approval",
    operation_id = "appApprovalStartPairing",
    request_body(content = PairingStart, content_type = "application/json",
        description = "No other member; at most 8192 bytes."),
    security(("session" = [])),
    responses(
        (status = 201, description = "Started.", body = StartedPairing,
            links(
                ("status" = (operation_id = "appApprovalPairingStatus",
                    request_body = json!({"pairingId": "$response.body#/pairingId"}))),
                ("confirm" = (operation_id = "appApprovalConfirmPairing",
                    request_body = json!({"pairingId": "$response.body#/pairingId"}))),
                ("cancel" = (operation_id = "appApprovalCancelPairing",
                    request_body = json!({"pairingId": "$response.body#/pairingId"})))
            )),
        (status = 400, description = "`INVALID_REQUEST`: not JSON, or not `{userId?}` of the right shape.", body = ErrorBody),
        (status = 401, description = "`UNAUTHORIZED`: no signed-in browser.", body = ErrorBody),
        (status = 403, description = "`REAUTHENTICATE` (signed in more than 10 minutes ago) or `FORBIDDEN` (another person without the administrator role or the opt-in, an account that cannot be used, or an `Origin` other than the installation's).", body = ErrorBody),
        (status = 413, description = "`PAYLOAD_TOO_LARGE`: the body is over 8192 bytes.", body = ErrorBody),
        (status = 429, description = "`LIMIT_REACHED` (five open pairings), or `RATE_LIMITED` (too many requests from this client; `Retry-After: 1`).", body = ErrorBody,
            headers(("Retry-After" = String, description = "`1`, on `RATE_LIMITED`."))),
        (status = 503, description = "`UNAVAILABLE`: Cloud Login is off, its settings are not valid, or a dependency failed.", body = ErrorBody),
    )
)]
async fn pairing_start(
    State(state): State<ApprovalsState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, CloudLoginError> {
    let actor = manage_actor(&state.core, &headers).await?;
    let input: PairingStart = body_as(&headers, body).await?;
    let target = input.user_id.as_deref().map(uuid).transpose()?;
    let facts = RequestFacts::from_headers(&headers);
    let started = enroll::start(&state.core, actor, target, facts.request_id).await?;
    Ok((StatusCode::CREATED, Json(started)).into_response())
}

/// A pairing this browser session started.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[schema(as = CloudLoginPairingId)]
struct PairingId {
    #[schema(format = Uuid)]
    pairing_id: String,
}

/// Inspect an enrollment
///
/// The state of a pairing this browser session started, signed in within the last 10
/// minutes. Needs the installation's own `Origin`.
#[utoipa::path(
    post,
    path = "/api/auth/app-approval/v1/manage/pairings/status",
    tag = "app-approval",
    operation_id = "appApprovalPairingStatus",
    request_body(content = PairingId, content_type = "application/json",
        description = "No other member; at most 8192 bytes."),
    security(("session" = [])),
    responses(
        (status = 200, description = "The pairing's state.", body = PairingStatus),
        (status = 400, description = "`INVALID_REQUEST`: not JSON, or not `{pairingId}` with a UUID.", body = ErrorBody),
        (status = 401, description = "`UNAUTHORIZED`: no signed-in browser.", body = ErrorBody),
        (status = 403, description = "`REAUTHENTICATE` (signed in more than 10 minutes ago) or `FORBIDDEN` (another session's pairing, an account that cannot be used, or an `Origin` other than the installation's).", body = ErrorBody),
        (status = 404, description = "`UNAVAILABLE`: no such pairing, or it expired.", body = ErrorBody),
        (status = 413, description = "`PAYLOAD_TOO_LARGE`: the body is over 8192 bytes.", body = ErrorBody),
        RateLimitedAnswer,
        (status = 503, description = "`UNAVAILABLE`: Cloud Login is off, its settings are not valid, or a dependency failed.", body = ErrorBody),
    )
)]
async fn pairing_status(
    State(state): State<ApprovalsState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, CloudLoginError> {
    let actor = manage_actor(&state.core, &headers).await?;
    let input: PairingId = body_as(&headers, body).await?;
    let status = enroll::inspect(&state.core, actor, uuid(&input.pairing_id)?).await?;
    Ok(Json(status).into_response())
}

/// The code the authenticator shows.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[schema(as = CloudLoginConfirmPairing)]
struct PairingConfirm {
    #[schema(format = Uuid)]
    pairing_id: String,
    /// Six digits.
    #[schema(pattern = "^[0-9]{6}$", example = "042137")]
    comparison: String,
}

/// The enrolled authenticator.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = CloudLoginConfirmedPairing)]
struct Confirmed {
    device_id: Uuid,
}

/// Confirm an enrollment
///
/// The browser types the code the authenticator shows; the authenticator is then enrolled.
/// Needs the installation's own `Origin`.
#[utoipa::path(
    post,
    path = "/api/auth/app-approval/v1/manage/pairings/confirm",
    tag = "app-approval",
    operation_id = "appApprovalConfirmPairing",
    request_body(content = PairingConfirm, content_type = "application/json",
        description = "No other member; at most 8192 bytes."),
    security(("session" = [])),
    responses(
        (status = 200, description = "Enrolled.", body = Confirmed),
        (status = 400, description = "`INVALID_REQUEST`: not JSON, or not `{pairingId, comparison}` of the right shape.", body = ErrorBody),
        (status = 401, description = "`UNAUTHORIZED`: no signed-in browser.", body = ErrorBody),
        (status = 403, description = "`REAUTHENTICATE` (signed in more than 10 minutes ago) or `FORBIDDEN` (another session's pairing, an account that cannot be used, or an `Origin` other than the installation's).", body = ErrorBody),
        (status = 409, description = "`CONFLICT`: unknown, not claimed, expired, a wrong code, or the key is already enrolled.", body = ErrorBody),
        (status = 413, description = "`PAYLOAD_TOO_LARGE`: the body is over 8192 bytes.", body = ErrorBody),
        (status = 429, description = "`LIMIT_REACHED` (20 active devices), or `RATE_LIMITED` (too many requests from this client; `Retry-After: 1`).", body = ErrorBody,
            headers(("Retry-After" = String, description = "`1`, on `RATE_LIMITED`."))),
        (status = 503, description = "`UNAVAILABLE`: Cloud Login is off, its settings are not valid, or a dependency failed.", body = ErrorBody),
    )
)]
async fn pairing_confirm(
    State(state): State<ApprovalsState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, CloudLoginError> {
    let actor = manage_actor(&state.core, &headers).await?;
    let input: PairingConfirm = body_as(&headers, body).await?;
    if !proof::is_comparison(&input.comparison) {
        return Err(CloudLoginError::InvalidRequest);
    }
    let facts = RequestFacts::from_headers(&headers);
    let device_id = enroll::confirm(
        &state.core,
        actor,
        uuid(&input.pairing_id)?,
        &input.comparison,
        facts.request_id,
    )
    .await?;
    Ok(Json(Confirmed { device_id }).into_response())
}

/// Cancel an enrollment
///
/// Cancels a pairing this browser session started (a confirmed one cannot be). Needs the
/// installation's own `Origin`.
#[utoipa::path(
    post,
    path = "/api/auth/app-approval/v1/manage/pairings/cancel",
    tag = "app-approval",
    operation_id = "appApprovalCancelPairing",
    request_body(content = PairingId, content_type = "application/json",
        description = "No other member; at most 8192 bytes."),
    security(("session" = [])),
    responses(
        (status = 204, description = "Cancelled."),
        (status = 400, description = "`INVALID_REQUEST`: not JSON, or not `{pairingId}` with a UUID.", body = ErrorBody),
        (status = 401, description = "`UNAUTHORIZED`: no signed-in browser.", body = ErrorBody),
        (status = 403, description = "`REAUTHENTICATE` (signed in more than 10 minutes ago) or `FORBIDDEN` (another session's pairing, an account that cannot be used, or an `Origin` other than the installation's).", body = ErrorBody),
        (status = 404, description = "`UNAVAILABLE`: no such pairing.", body = ErrorBody),
        (status = 409, description = "`CONFLICT`: the pairing is confirmed.", body = ErrorBody),
        (status = 413, description = "`PAYLOAD_TOO_LARGE`: the body is over 8192 bytes.", body = ErrorBody),
        RateLimitedAnswer,
        (status = 503, description = "`UNAVAILABLE`: Cloud Login is off, its settings are not valid, or a dependency failed.", body = ErrorBody),
    )
)]
async fn pairing_cancel(
    State(state): State<ApprovalsState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, CloudLoginError> {
    let actor = manage_actor(&state.core, &headers).await?;
    let input: PairingId = body_as(&headers, body).await?;
    let facts = RequestFacts::from_headers(&headers);
    enroll::cancel(
        &state.core,
        actor,
        uuid(&input.pairing_id)?,
        facts.request_id,
    )
    .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// A page of one's devices.
#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct DevicePage {
    /// The `nextCursor` of the page before; the first page without it. No other parameter.
    #[param(format = Uuid)]
    after: Option<String>,
}

/// List one's authenticators
///
/// The signed-in person's authenticators at this installation (revoked ones too), 20 a page
/// by id. Works while Cloud Login is off.
#[utoipa::path(
    get,
    path = "/api/auth/app-approval/v1/manage/devices",
    tag = "app-approval",
    operation_id = "appApprovalListDevices",
    params(DevicePage),
    security(("session" = [])),
    responses(
        (status = 200, description = "One page.", body = Page),
        (status = 400, description = "`INVALID_REQUEST`: `after` is not a UUID, or another query parameter.", body = ErrorBody),
        (status = 401, description = "`UNAUTHORIZED`: no signed-in browser.", body = ErrorBody),
        (status = 403, description = "`FORBIDDEN`: an `Origin` other than the installation's.", body = ErrorBody),
        RateLimitedAnswer,
        (status = 503, description = "`UNAVAILABLE`: the settings are not valid, or a dependency failed.", body = ErrorBody),
    )
)]
async fn devices(
    State(state): State<ApprovalsState>,
    headers: HeaderMap,
    query: Result<Query<DevicePage>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, CloudLoginError> {
    let actor = manage_actor(&state.core, &headers).await?;
    let Query(page) = query.map_err(|_| CloudLoginError::InvalidRequest)?;
    let after = page.after.as_deref().map(uuid).transpose()?;
    let page = manage::list(&state.core, actor, after).await?;
    Ok(Json(page).into_response())
}

/// A change of one's own authenticator, as [`parse_mutation`] reads it (the API's document).
#[derive(ToSchema)]
#[serde(tag = "operation", rename_all = "lowercase", deny_unknown_fields)]
#[schema(as = CloudLoginDeviceUpdate)]
#[allow(dead_code)]
enum DeviceUpdate {
    /// A new name.
    Rename {
        #[serde(rename = "deviceId")]
        #[schema(format = Uuid)]
        device_id: String,
        /// Trimmed, 1 to 80 characters.
        #[schema(min_length = 1, max_length = 80)]
        name: String,
    },
    /// Revoke the device (idempotent).
    Revoke {
        #[serde(rename = "deviceId")]
        #[schema(format = Uuid)]
        device_id: String,
    },
}

/// Rename or revoke one's authenticator
///
/// From a browser signed in within the last 10 minutes; another person's device is 404.
/// Works while Cloud Login is off. Needs the installation's own `Origin`.
#[utoipa::path(
    post,
    path = "/api/auth/app-approval/v1/manage/devices/update",
    tag = "app-approval",
    operation_id = "appApprovalUpdateDevice",
    request_body(content = DeviceUpdate, content_type = "application/json",
        description = "Exactly these members; at most 8192 bytes."),
    security(("session" = [])),
    responses(
        (status = 204, description = "Done."),
        (status = 400, description = "`INVALID_REQUEST`: not JSON, or not a change of the right shape.", body = ErrorBody),
        (status = 401, description = "`UNAUTHORIZED`: no signed-in browser.", body = ErrorBody),
        (status = 403, description = "`REAUTHENTICATE` (signed in more than 10 minutes ago), or `FORBIDDEN` (an account that cannot be used, or an `Origin` other than the installation's).", body = ErrorBody),
        (status = 404, description = "`UNAVAILABLE`: no such device of this person.", body = ErrorBody),
        (status = 413, description = "`PAYLOAD_TOO_LARGE`: the body is over 8192 bytes.", body = ErrorBody),
        RateLimitedAnswer,
        (status = 503, description = "`UNAVAILABLE`: the settings are not valid, or a dependency failed.", body = ErrorBody),
    )
)]
async fn device_update(
    State(state): State<ApprovalsState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, CloudLoginError> {
    let actor = manage_actor(&state.core, &headers).await?;
    let input = body_json(&headers, body).await?;
    let (device_id, mutation) = parse_mutation(&input)?;
    let facts = RequestFacts::from_headers(&headers);
    manage::update(&state.core, actor, device_id, &mutation, facts.request_id).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `{operation: "rename", deviceId, name}` or `{operation: "revoke", deviceId}`, nothing else.
fn parse_mutation(input: &Value) -> Result<(Uuid, Mutation), CloudLoginError> {
    let bad = CloudLoginError::InvalidRequest;
    let object = input.as_object().ok_or(bad.clone())?;
    let device_id = uuid(
        object
            .get("deviceId")
            .and_then(Value::as_str)
            .ok_or(bad.clone())?,
    )?;
    match (
        object.get("operation").and_then(Value::as_str),
        object.len(),
    ) {
        (Some("revoke"), 2) => Ok((device_id, Mutation::Revoke)),
        (Some("rename"), 3) => {
            let name = object
                .get("name")
                .and_then(Value::as_str)
                .map(str::trim)
                .filter(|n| !n.is_empty() && n.chars().count() <= NAME_MAX_CHARS)
                .ok_or(bad)?;
            Ok((device_id, Mutation::Rename(name.to_string())))
        }
        _ => Err(bad),
    }
}
