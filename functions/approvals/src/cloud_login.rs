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
use k2b_core::cloud_login::manage::{self, Mutation};
use k2b_core::cloud_login::proof::{self, PublicKeyJwk};
use k2b_core::cloud_login::{
    self, API_PATH, BODY_BYTES, CloudLoginError, ManageActor, NAME_MAX_CHARS, PROTOCOL, config,
    device, enroll, login,
};
use k2b_core::http::body::{BodyError, read_limited};
use k2b_core::http::cookies::SetCookie;
use k2b_core::http::routes::Routes;
use k2b_core::identity::IssueOptions;
use k2b_core::identity::session::{SESSION_COOKIE, SessionRequest};
use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::{
    ApprovalsState, RequestFacts, rate_limited, secure_cookies, with_cookies, with_privacy_headers,
    within_rate_limit,
};

/// The paths an authenticator app calls from its own origin.
const DEVICE_PATHS: [&str; 4] = ["/info", "/pairings/claim", "/pairings/result", "/device"];

pub(crate) fn routes(state: ApprovalsState) -> Routes<ApprovalsState> {
    Routes::new()
        .get("/api/auth/app-approval/v1/info", info)
        .options("/api/auth/app-approval/v1/info", preflight)
        .post("/api/auth/app-approval/v1/pairings/claim", claim)
        .options("/api/auth/app-approval/v1/pairings/claim", preflight)
        .post("/api/auth/app-approval/v1/pairings/result", result)
        .options("/api/auth/app-approval/v1/pairings/result", preflight)
        .post("/api/auth/app-approval/v1/device", command)
        .options("/api/auth/app-approval/v1/device", preflight)
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
    let mut response = if !within_rate_limit(state, "cloud-login", &request).await {
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

async fn info(State(state): State<ApprovalsState>) -> Result<Response, CloudLoginError> {
    let cfg = config::read(&state.core).await?;
    let app_origin = cfg.require_feature()?;
    Ok(Json(json!({
        "protocol": PROTOCOL,
        "issuer": cfg.issuer,
        "api": format!("{}{API_PATH}", cfg.issuer),
        "appOrigin": app_origin,
        "algorithm": "ES256",
        "limits": cloud_login::limits(),
    }))
    .into_response())
}

async fn claim(
    State(state): State<ApprovalsState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, CloudLoginError> {
    let claim = proof::parse_claim(&body_json(&headers, body).await?)?;
    let claimed = enroll::claim(&state.core, &claim).await?;
    Ok(Json(claimed).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PairingReference {
    pairing_id: String,
    secret: String,
    public_key: Value,
}

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

async fn command(
    State(state): State<ApprovalsState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, CloudLoginError> {
    let request = proof::parse_device_request(&body_json(&headers, body).await?)?;
    let facts = RequestFacts::from_headers(&headers);
    let outcome = device::command(&state.core, &request, facts.request_id).await?;
    Ok(Json(outcome.to_json()).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LoginStart {
    identifier: String,
    category: String,
}

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

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct LoginReference {
    request_id: String,
    browser_secret: String,
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
    let mut response = Json(json!({
        "state": state_now,
        "pollAfterSeconds": cloud_login::POLL_SECONDS,
    }))
    .into_response();
    if let Some(hold) = hold
        && let Ok(value) = HeaderValue::from_str(&format!("wait={}", hold.as_secs()))
    {
        response.headers_mut().insert("preference-applied", value);
    }
    Ok(response)
}

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

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PairingStart {
    user_id: Option<String>,
}

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

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PairingId {
    pairing_id: String,
}

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

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PairingConfirm {
    pairing_id: String,
    comparison: String,
}

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
    Ok(Json(json!({"deviceId": device_id})).into_response())
}

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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DevicePage {
    after: Option<String>,
}

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
