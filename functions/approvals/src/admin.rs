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
use k2b_core::cloud_login::manage::{self, AdminRevocation, DeviceView};
use k2b_core::http::ApiError;
use k2b_core::http::openapi::ErrorBody;
use k2b_core::http::routes::Routes;
use k2b_core::pwa::PwaError;
use k2b_core::pwa::devices::{self, DeviceAdministrator, DeviceItem};
use serde::Serialize;
use utoipa::{OpenApi, ToSchema};
use uuid::Uuid;

use crate::{ApprovalsState, RequestFacts};

/// The administrators' part of the API document.
#[derive(OpenApi)]
#[openapi(paths(list, revoke, list_authenticators, revoke_authenticator))]
struct Api;

pub(crate) fn openapi() -> utoipa::openapi::OpenApi {
    Api::openapi()
}

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

/// A person's paired phones.
#[derive(Serialize, ToSchema)]
#[schema(as = PwaAdminDeviceList)]
struct PhoneList {
    /// The active devices, oldest first (`current` is always false).
    #[schema(max_items = 20)]
    devices: Vec<DeviceItem>,
}

/// A phone revocation's outcome.
#[derive(Serialize, ToSchema)]
#[schema(as = PwaAdminRevocation)]
struct PhoneRevocation {
    /// True only for the call that revoked the device.
    revoked: bool,
}

/// List a person's paired phones
///
/// An administrator (the current role; never through an app session, and with OAuth only with
/// the `admin` scope) lists another person's active phones. An administrator's user-delegated
/// API key (`Authorization: Bearer cld_…`) works too.
#[utoipa::path(
    get,
    path = "/api/accounts/users/{id}/app-devices",
    tag = "accounts",
    operation_id = "accountsListAppDevices",
    params(("id" = String, Path, format = Uuid, description = "The person's id (a hyphenated UUID; anything else is 404).")),
    security(("session" = []), ("oauth" = [])),
    responses(
        (status = 200, description = "The devices.", body = PhoneList,
            headers(("Cache-Control" = String, description = "`no-store`."))),
        (status = 401, description = "`UNAUTHORIZED`: no valid credential.", body = ErrorBody),
        (status = 403, description = "`FORBIDDEN`: not an administrator, an app session, or a credential without a person.", body = ErrorBody),
        (status = 404, description = "`NOT_FOUND`: no such person.", body = ErrorBody),
        (status = 503, description = "Credentials cannot be checked, or a dependency failed.", body = ErrorBody),
    )
)]
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
        Ok(devices) => Json(PhoneList { devices }).into_response(),
        Err(error) => error.into_response(),
    })
}

/// Revoke a person's paired phone
///
/// An administrator revokes another person's phone and ends its app sessions (`revoked` is
/// true only for the call that revoked it). A cookie-authenticated request needs the
/// installation's own `Origin` (checked first); a request with `Authorization` does not.
#[utoipa::path(
    delete,
    path = "/api/accounts/users/{id}/app-devices/{device_id}",
    tag = "accounts",
    operation_id = "accountsRevokeAppDevice",
    params(
        ("id" = String, Path, format = Uuid, description = "The person's id (a hyphenated UUID; anything else is 404)."),
        ("device_id" = String, Path, format = Uuid, description = "The device's id (a hyphenated UUID; anything else is 404)."),
    ),
    security(("session" = []), ("oauth" = [])),
    responses(
        (status = 200, description = "The outcome.", body = PhoneRevocation,
            headers(("Cache-Control" = String, description = "`no-store`."))),
        (status = 401, description = "`UNAUTHORIZED`: no valid credential.", body = ErrorBody),
        (status = 403, description = "`FORBIDDEN`: not an administrator, an app session, a credential without a person, or (without `Authorization`) an `Origin` other than the installation's.", body = ErrorBody),
        (status = 404, description = "`NOT_FOUND`: no such person, or no such device of theirs.", body = ErrorBody),
        (status = 503, description = "Credentials cannot be checked, or a dependency failed.", body = ErrorBody),
    )
)]
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
        Ok(revoked) => Json(PhoneRevocation { revoked }).into_response(),
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

/// A person's Cloud Login authenticators.
#[derive(Serialize, ToSchema)]
#[schema(as = CloudLoginAdminDeviceList)]
struct AuthenticatorList {
    /// Every device at this installation (revoked ones too), oldest first.
    devices: Vec<DeviceView>,
}

/// List a person's authenticators
///
/// An administrator lists another person's Cloud Login devices at this installation (an
/// unknown person has none). Works while Cloud Login is off.
#[utoipa::path(
    get,
    path = "/api/accounts/users/{id}/devices",
    tag = "accounts",
    operation_id = "accountsListAuthenticators",
    params(("id" = String, Path, format = Uuid, description = "The person's id (a hyphenated UUID; anything else is 404).")),
    security(("session" = []), ("oauth" = [])),
    responses(
        (status = 200, description = "The devices.", body = AuthenticatorList,
            headers(("Cache-Control" = String, description = "`no-store`."))),
        (status = 401, description = "`UNAUTHORIZED`: no valid credential.", body = ErrorBody),
        (status = 403, description = "`FORBIDDEN`: not an administrator, an app session, or a credential without a person.", body = ErrorBody),
        (status = 404, description = "`UNAVAILABLE`: the id is not a UUID.", body = ErrorBody),
        (status = 503, description = "Credentials cannot be checked, the settings are not valid, or a dependency failed.", body = ErrorBody),
    )
)]
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
        Ok(devices) => Json(AuthenticatorList { devices }).into_response(),
        Err(error) => error.into_response(),
    })
}

/// Revoke a person's authenticator
///
/// An administrator revokes another person's Cloud Login device (idempotent: `revoked` is
/// false when it already was; the person is notified once; their sessions stay valid). A
/// cookie-authenticated request needs the installation's own `Origin` (checked first); a
/// request with `Authorization` does not.
#[utoipa::path(
    delete,
    path = "/api/accounts/users/{id}/devices/{device_id}",
    tag = "accounts",
    operation_id = "accountsRevokeAuthenticator",
    params(
        ("id" = String, Path, format = Uuid, description = "The person's id (a hyphenated UUID; anything else is 404)."),
        ("device_id" = String, Path, format = Uuid, description = "The device's id (a hyphenated UUID; anything else is 404)."),
    ),
    security(("session" = []), ("oauth" = [])),
    responses(
        (status = 200, description = "The outcome.", body = AdminRevocation,
            headers(("Cache-Control" = String, description = "`no-store`."))),
        (status = 401, description = "`UNAUTHORIZED`: no valid credential.", body = ErrorBody),
        (status = 403, description = "`FORBIDDEN`: not an administrator, an app session, a credential without a person, or (without `Authorization`) an `Origin` other than the installation's.", body = ErrorBody),
        (status = 404, description = "`UNAVAILABLE`: no such device of this person (or an id that is not a UUID).", body = ErrorBody),
        (status = 503, description = "Credentials cannot be checked, the settings are not valid, or a dependency failed.", body = ErrorBody),
    )
)]
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
