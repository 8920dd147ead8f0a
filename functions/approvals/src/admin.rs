//! Administrators manage another person's paired phones and Cloud Login authenticators (mounted
//! with the Accounts API under `/api/accounts/users`). The admin role is the caller's current
//! one; an app session never has it.

use axum::Json;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderValue, header};
use k2b_core::access::CurrentActor;
use k2b_core::auth::Actor;
use k2b_core::cloud_login::CloudLoginError;
use k2b_core::cloud_login::manage;
use k2b_core::http::ApiError;
use k2b_core::http::routes::Routes;
use k2b_core::pwa::PwaError;
use k2b_core::pwa::devices::{self, DeviceAdministrator};
use serde_json::json;
use uuid::Uuid;

use crate::{ApprovalsState, RequestFacts};

pub(crate) fn routes() -> Routes<ApprovalsState> {
    Routes::new()
        .get("/api/accounts/users/{id}/app-devices", list)
        .delete("/api/accounts/users/{id}/app-devices/{device_id}", revoke)
        .get("/api/accounts/users/{id}/devices", list_authenticators)
        .delete(
            "/api/accounts/users/{id}/devices/{device_id}",
            revoke_authenticator,
        )
}

/// The administrator behind a request: 401 when anonymous, 403 without a person.
fn administrator(actor: &Actor) -> Result<DeviceAdministrator, ApiError> {
    if !actor.is_authenticated() {
        return Err(ApiError::unauthorized());
    }
    let Some(person) = actor.person() else {
        return Err(PwaError::Forbidden.to_api_error());
    };
    Ok(DeviceAdministrator {
        user_id: person.id,
        admin: actor.may_act_as_admin(),
    })
}

fn no_store(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

fn parse(raw: &str) -> Result<Uuid, ApiError> {
    k2b_core::pwa::parse_id(raw).ok_or_else(|| PwaError::NotFound.to_api_error())
}

async fn list(
    State(state): State<ApprovalsState>,
    CurrentActor(actor): CurrentActor,
    Path(id): Path<String>,
) -> Response {
    let result = async {
        let admin = administrator(&actor)?;
        let id = parse(&id)?;
        devices::admin_list(&state.core, admin, id)
            .await
            .map_err(|e| e.to_api_error())
    }
    .await;
    no_store(match result {
        Ok(items) => Json(json!({ "devices": items })).into_response(),
        Err(error) => error.into_response(),
    })
}

async fn revoke(
    State(state): State<ApprovalsState>,
    CurrentActor(actor): CurrentActor,
    Path((id, device_id)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let result = async {
        // A browser's cookie-authenticated change must come from the installation's origin.
        if !headers.contains_key(header::AUTHORIZATION) {
            crate::require_own_origin(&state.core, &headers)
                .await
                .map_err(|e| e.to_api_error())?;
        }
        let admin = administrator(&actor)?;
        let (id, device_id) = (parse(&id)?, parse(&device_id)?);
        let facts = RequestFacts::from_headers(&headers);
        devices::admin_revoke(&state.core, admin, id, device_id, facts.request_id)
            .await
            .map_err(|e| e.to_api_error())
    }
    .await;
    no_store(match result {
        Ok(revoked) => Json(json!({ "revoked": revoked })).into_response(),
        Err(error) => error.into_response(),
    })
}

/// The administrator behind a request for Cloud Login's devices: 401 when anonymous.
fn authenticator_admin(actor: &Actor) -> Result<manage::Administrator, CloudLoginError> {
    if !actor.is_authenticated() {
        return Err(CloudLoginError::Unauthenticated);
    }
    let person = actor.person().ok_or(CloudLoginError::Forbidden)?;
    Ok(manage::Administrator {
        user_id: person.id,
        admin: actor.may_act_as_admin(),
    })
}

fn parse_authenticator(raw: &str) -> Result<Uuid, CloudLoginError> {
    k2b_core::pwa::parse_id(raw).ok_or(CloudLoginError::Missing)
}

/// Cloud Login devices (authenticators) of a person.
async fn list_authenticators(
    State(state): State<ApprovalsState>,
    CurrentActor(actor): CurrentActor,
    Path(id): Path<String>,
) -> Response {
    let result = async {
        let admin = authenticator_admin(&actor)?;
        manage::admin_list(&state.core, admin, parse_authenticator(&id)?).await
    }
    .await;
    no_store(match result {
        Ok(items) => Json(json!({ "devices": items })).into_response(),
        Err(error) => error.into_response(),
    })
}

/// Revokes a person's authenticator (idempotent; the person is notified once).
async fn revoke_authenticator(
    State(state): State<ApprovalsState>,
    CurrentActor(actor): CurrentActor,
    Path((id, device_id)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let result = async {
        if !headers.contains_key(header::AUTHORIZATION) {
            crate::require_own_origin(&state.core, &headers)
                .await
                .map_err(|_| CloudLoginError::Forbidden)?;
        }
        let admin = authenticator_admin(&actor)?;
        let (id, device_id) = (parse_authenticator(&id)?, parse_authenticator(&device_id)?);
        let facts = RequestFacts::from_headers(&headers);
        manage::admin_revoke(&state.core, admin, id, device_id, facts.request_id).await
    }
    .await;
    no_store(match result {
        Ok(revocation) => Json(revocation).into_response(),
        Err(error) => error.into_response(),
    })
}
