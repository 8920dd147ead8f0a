//! The browser's side of pairing (`/api/auth/pwa/v1`): a web session only.

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, StatusCode};
use k2b_core::http::body::read_json;
use k2b_core::http::routes::Routes;
use k2b_core::pwa::{self, PwaError, devices, pairing};
use serde::Deserialize;
use serde_json::json;
use uuid::Uuid;

use crate::sessions::web_actor;
use crate::{ApprovalsState, RequestFacts};

pub(crate) fn routes() -> Routes<ApprovalsState> {
    Routes::new()
        .post("/api/auth/pwa/v1/pairings", start)
        .get("/api/auth/pwa/v1/pairings/{id}", inspect)
        .post("/api/auth/pwa/v1/pairings/{id}/confirm", confirm)
        .post("/api/auth/pwa/v1/pairings/{id}/cancel", cancel)
        .get("/api/auth/pwa/v1/devices", list_devices)
        .delete("/api/auth/pwa/v1/devices/{id}", revoke_device)
}

/// A path id: a UUID, else 400.
fn parse_id(raw: &str) -> Result<Uuid, PwaError> {
    pwa::parse_id(raw).ok_or(PwaError::InvalidRequest)
}

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

async fn inspect(
    State(state): State<ApprovalsState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, PwaError> {
    let (actor, _) = web_actor(&state.core, &headers).await?;
    let status = pairing::inspect(&state.core, actor, parse_id(&id)?).await?;
    Ok(Json(status).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfirmBody {
    code: String,
}

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
    Ok(Json(json!({ "items": items })).into_response())
}

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
