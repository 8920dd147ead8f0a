//! The administrators' API under `/api/admin/core/outgoing-mail`: web sessions of
//! administrators only (never app sessions or credentials); changes made with the session
//! cookie must come from the installation's own origin.

use axum::Json;
use axum::body::Body;
use axum::extract::{FromRequestParts, Path, RawQuery, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use k2b_core::Core;
use k2b_core::access::CurrentActor;
use k2b_core::auth::{Actor, Role};
use k2b_core::http::ApiError;
use k2b_core::http::body::{BodyError, read_json};
use k2b_core::http::headers::RequestId;
use k2b_core::http::origin::origin_matches;
use k2b_core::http::routes::Routes;
use k2b_core::mail::accept;
use k2b_core::mail::admin::{self as store, AccessInput, Retention};
use k2b_core::mail::log::{self, LogQuery};
use k2b_core::mail::policy::{self, ProfileRow};
use k2b_core::mail::profiles::{self, AdminActor, ProfileInput};
use k2b_core::mail::validate::{self, MailStatus, PageParams};
use k2b_core::mail::{MailCode, MailError, MailFault};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::app::url_pairs;

/// Admin bodies are small JSON documents.
const MAX_ADMIN_BODY: usize = 64 * 1024;

pub(crate) fn routes() -> Routes<Core> {
    Routes::new()
        .get("/api/admin/core/outgoing-mail/retention", get_retention)
        .put("/api/admin/core/outgoing-mail/retention", put_retention)
        .get("/api/admin/core/outgoing-mail/messages", list_messages)
        .get("/api/admin/core/outgoing-mail/messages/{id}", get_message)
        .get(
            "/api/admin/core/outgoing-mail/messages/{id}/content",
            get_content,
        )
        .post(
            "/api/admin/core/outgoing-mail/messages/{id}/cancel",
            cancel_message,
        )
        .post(
            "/api/admin/core/outgoing-mail/batches/{batch_id}/cancel",
            cancel_batch,
        )
        .get("/api/admin/core/outgoing-mail/profiles", list_profiles)
        .get("/api/admin/core/outgoing-mail/profiles/{key}", get_profile)
        .put("/api/admin/core/outgoing-mail/profiles/{key}", put_profile)
        .delete(
            "/api/admin/core/outgoing-mail/profiles/{key}",
            delete_profile,
        )
        .post(
            "/api/admin/core/outgoing-mail/profiles/{key}/default",
            make_default,
        )
        .post(
            "/api/admin/core/outgoing-mail/profiles/{key}/test",
            test_profile,
        )
        .get("/api/admin/core/outgoing-mail/apps", list_apps)
        .put("/api/admin/core/outgoing-mail/apps/{app_id}", put_access)
        .put(
            "/api/admin/core/outgoing-mail/apps/{app_id}/log-access",
            put_log_access,
        )
}

/// A domain error as the admin API answers it: `{error, code, message}` with its status, or
/// `status` where the route knows better.
fn admin_error(error: MailError, status: Option<StatusCode>) -> Response {
    if !matches!(error, MailError::Fault(_)) {
        tracing::error!(error = %error, "outgoing mail administration unavailable");
    }
    let fault = error.to_fault();
    let status = status.unwrap_or_else(|| fault.code.status());
    let code = fault.code.as_str();
    (
        status,
        Json(json!({"error": code, "code": code, "message": fault.message})),
    )
        .into_response()
}

/// `{recipient}`: sends a test message through the profile now. The attempt is audited before
/// it is made; a failure answers `smtp_failed` 502 with the server's redacted answer.
async fn test_profile(
    State(core): State<Core>,
    Administrator(admin): Administrator,
    headers: HeaderMap,
    Path(key): Path<String>,
    body: Body,
) -> Result<Response, AdminError> {
    let key = profile_key(&key)?;
    let value = body_json(&headers, body, MailCode::BadInput).await?;
    let recipient = match value.as_object() {
        Some(object) if object.len() == 1 => object.get("recipient").and_then(Value::as_str),
        _ => None,
    }
    .map(str::trim)
    .filter(|r| validate::is_valid_address(r))
    .ok_or_else(|| bad("recipient: a valid email address"))?;
    profiles::get(&core.pool, key)
        .await?
        .ok_or_else(unknown_profile)
        .map_err(path_profile)?;
    profiles::audit_test(&core.pool, key, &admin).await?;
    core.mail_delivery.test_send(key, recipient).await?;
    Ok(Json(json!({"ok": true})).into_response())
}

/// The administrator behind the request: 401 anonymous, 403 anyone but an administrator's own
/// web session; a cookie-authenticated change must carry the installation's `Origin`. Handlers
/// take it first, so nothing else of a request is read before it passes.
struct Administrator(AdminActor);

impl FromRequestParts<Core> for Administrator {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, core: &Core) -> Result<Self, Response> {
        let CurrentActor(actor) = CurrentActor::from_request_parts(parts, core)
            .await
            .map_err(IntoResponse::into_response)?;
        if !actor.is_authenticated() {
            return Err(ApiError::unauthorized().into_response());
        }
        let admin = match &actor {
            Actor::User(user) if !actor.is_app_session() && user.user.has_role(Role::Admin) => {
                &user.user
            }
            _ => {
                return Err(
                    ApiError::forbidden("Only administrators may manage outgoing mail.")
                        .into_response(),
                );
            }
        };
        if !matches!(parts.method, Method::GET | Method::HEAD) {
            let expected = core.settings.public_origin().await.map_err(|error| {
                tracing::warn!(error = %error, "installation origin unavailable");
                ApiError::unavailable("The installation's origin cannot be read.").into_response()
            })?;
            if !origin_matches(&parts.headers, &expected) {
                return Err(ApiError::forbidden(
                    "Changes must come from the installation's own pages.",
                )
                .into_response());
            }
        }
        Ok(Administrator(AdminActor {
            user_id: admin.id,
            uid: admin.uid.clone(),
            request_id: parts.extensions.get::<RequestId>().map(|r| r.value.clone()),
        }))
    }
}

/// An admin operation's error, answered by [`admin_error`].
struct AdminError(MailError, Option<StatusCode>);

impl From<MailError> for AdminError {
    fn from(error: MailError) -> AdminError {
        AdminError(error, None)
    }
}

impl From<MailFault> for AdminError {
    fn from(fault: MailFault) -> AdminError {
        AdminError(MailError::Fault(fault), None)
    }
}

impl IntoResponse for AdminError {
    fn into_response(self) -> Response {
        admin_error(self.0, self.1)
    }
}

/// An unknown profile the path names is not found (one a body names is a bad request).
fn path_profile(error: MailError) -> AdminError {
    let not_found = error.code() == Some(MailCode::ProfileUnknown);
    AdminError(error, not_found.then_some(StatusCode::NOT_FOUND))
}

fn bad(message: impl Into<String>) -> MailError {
    MailError::fault(MailCode::BadInput, message.into())
}

async fn body_json(headers: &HeaderMap, body: Body, code: MailCode) -> Result<Value, MailError> {
    read_json(headers, body, MAX_ADMIN_BODY)
        .await
        .map_err(|error| match error {
            BodyError::InvalidJson => MailError::fault(code, "body: not JSON"),
            _ => MailError::fault(code, "body: at most 64 KiB of JSON"),
        })
}

/// A message id of the path: a malformed one is a bad request, not an unknown message.
fn message_id(raw: &str) -> Result<Uuid, MailError> {
    raw.parse().map_err(|_| bad("id: a UUID"))
}

/// A profile key of the path, checked like the key of a new profile.
fn profile_key(raw: &str) -> Result<&str, MailError> {
    if validate::is_valid_profile_key(raw) {
        Ok(raw)
    } else {
        Err(MailError::fault(
            MailCode::InvalidProfile,
            "key: lowercase letters, digits and hyphens (1–63)",
        ))
    }
}

fn unknown_message() -> MailError {
    MailError::fault(MailCode::MessageUnknown, "Unknown outgoing mail message.")
}

async fn get_retention(
    State(core): State<Core>,
    _admin: Administrator,
) -> Result<Response, AdminError> {
    Ok(Json(store::retention(&core.settings).await?.to_json()).into_response())
}

async fn put_retention(
    State(core): State<Core>,
    Administrator(admin): Administrator,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, AdminError> {
    let value = body_json(&headers, body, MailCode::BadInput).await?;
    let retention = Retention::parse(&value)?;
    let stored = store::set_retention(&core.pool, &core.settings, retention, &admin).await?;
    Ok(Json(stored.to_json()).into_response())
}

/// `app, profile, status` (comma or repeated), `since, ref=scope[:id], recipient, cursor,
/// limit 1–100`.
fn admin_query(query: Option<&str>) -> Result<(LogQuery, PageParams), MailError> {
    let pairs = url_pairs(query.unwrap_or_default());
    let mut log = LogQuery::default();
    let mut page = PageParams {
        page: 1,
        per_page: validate::DEFAULT_PER_PAGE,
        cursor: None,
    };
    let mut seen = std::collections::BTreeSet::new();
    for (name, value) in pairs {
        if name != "status" && !seen.insert(name.clone()) {
            return Err(bad(format!("{name}: given twice")));
        }
        match name.as_str() {
            "app" => {
                if value.is_empty() || value.chars().count() > 200 {
                    return Err(bad("app: an app id of 1–200 characters"));
                }
                log.app = Some(value);
            }
            "profile" => {
                if !validate::is_valid_profile_key(&value) {
                    return Err(bad("profile: a profile key"));
                }
                log.profile = Some(value);
            }
            "status" => {
                for part in value.split(',') {
                    let status = MailStatus::parse(part)
                        .ok_or_else(|| bad(format!("status: unknown status \"{part}\"")))?;
                    if !log.filter.status.contains(&status) {
                        log.filter.status.push(status);
                    }
                }
            }
            "since" => {
                let since = chrono::DateTime::parse_from_rfc3339(&value)
                    .map_err(|_| bad("since: an ISO date-time with offset"))?;
                log.filter.since = Some(since.with_timezone(&chrono::Utc));
            }
            "ref" => {
                let (scope, id) = match value.split_once(':') {
                    Some((scope, id)) => (scope.to_string(), Some(id.to_string())),
                    None => (value.clone(), None),
                };
                if scope.is_empty() || scope.chars().count() > 200 {
                    return Err(bad("ref: scope[:id], each 1–200 characters"));
                }
                log.filter.ref_scope = Some(scope);
                log.filter.ref_id = id;
            }
            "recipient" => {
                let part = value.trim().to_string();
                if part.is_empty() || part.chars().count() > 320 {
                    return Err(bad("recipient: 1–320 characters"));
                }
                log.recipient_substring = Some(part);
            }
            "cursor" => page.cursor = Some(value),
            "limit" => {
                page.per_page = value
                    .parse::<i64>()
                    .ok()
                    .filter(|l| (1..=validate::MAX_PER_PAGE).contains(l))
                    .ok_or_else(|| bad("limit: a whole number from 1 to 100"))?;
            }
            other => return Err(bad(format!("{other}: unknown parameter"))),
        }
    }
    Ok((log, page))
}

async fn list_messages(
    State(core): State<Core>,
    _admin: Administrator,
    RawQuery(query): RawQuery,
) -> Result<Response, AdminError> {
    let (query, page) = admin_query(query.as_deref())?;
    let found = log::run(&core.pool, &query, &page).await?;
    Ok(Json(found.to_json(|row| row.for_admin())).into_response())
}

async fn get_message(
    State(core): State<Core>,
    _admin: Administrator,
    Path(id): Path<String>,
) -> Result<Response, AdminError> {
    let id = message_id(&id)?;
    let row = accept::find_by_id(&core.pool, id)
        .await?
        .ok_or_else(unknown_message)?;
    Ok(Json(row.for_admin()).into_response())
}

async fn get_content(
    State(core): State<Core>,
    Administrator(admin): Administrator,
    Path(id): Path<String>,
) -> Result<Response, AdminError> {
    let id = message_id(&id)?;
    Ok(Json(store::content(&core.pool, id, &admin).await?).into_response())
}

async fn cancel_message(
    State(core): State<Core>,
    Administrator(admin): Administrator,
    Path(id): Path<String>,
) -> Result<Response, AdminError> {
    let id = message_id(&id)?;
    let objects = core.mail_objects.store().await;
    store::cancel_message(&core.pool, objects, id, &admin).await?;
    let row = accept::find_by_id(&core.pool, id)
        .await?
        .ok_or_else(unknown_message)?;
    Ok(Json(row.for_admin()).into_response())
}

async fn cancel_batch(
    State(core): State<Core>,
    Administrator(admin): Administrator,
    Path(batch_id): Path<String>,
) -> Result<Response, AdminError> {
    let batch_id: Uuid = batch_id.parse().map_err(|_| bad("batchId: a UUID"))?;
    let objects = core.mail_objects.store().await;
    let cancelled = store::cancel_batch(&core.pool, objects, batch_id, &admin).await?;
    Ok(Json(json!({"batchId": batch_id, "cancelled": cancelled})).into_response())
}

async fn list_profiles(
    State(core): State<Core>,
    _admin: Administrator,
) -> Result<Response, AdminError> {
    let counts = profiles::app_counts(&core.pool).await?;
    let items: Vec<Value> = policy::all_profiles(&core.pool)
        .await?
        .iter()
        .map(|p| profiles::admin_json(p, counts.get(&p.id).copied().unwrap_or(0)))
        .collect();
    Ok(Json(json!({ "items": items })).into_response())
}

/// One profile as administrators read it.
async fn profile_json(core: &Core, profile: &ProfileRow) -> Result<Value, MailError> {
    let counts = profiles::app_counts(&core.pool).await?;
    Ok(profiles::admin_json(
        profile,
        counts.get(&profile.id).copied().unwrap_or(0),
    ))
}

fn unknown_profile() -> MailError {
    MailError::fault(MailCode::ProfileUnknown, "Unknown outgoing mail profile.")
}

async fn get_profile(
    State(core): State<Core>,
    _admin: Administrator,
    Path(key): Path<String>,
) -> Result<Response, AdminError> {
    let profile = profiles::get(&core.pool, profile_key(&key)?)
        .await?
        .ok_or_else(unknown_profile)
        .map_err(path_profile)?;
    Ok(Json(profile_json(&core, &profile).await?).into_response())
}

async fn put_profile(
    State(core): State<Core>,
    Administrator(admin): Administrator,
    headers: HeaderMap,
    Path(key): Path<String>,
    body: Body,
) -> Result<Response, AdminError> {
    let value = body_json(&headers, body, MailCode::InvalidProfile).await?;
    let input = ProfileInput::parse(&value)?;
    let (profile, created) = profiles::put(&core.pool, &core.settings, &key, input, &admin).await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(profile_json(&core, &profile).await?)).into_response())
}

async fn delete_profile(
    State(core): State<Core>,
    Administrator(admin): Administrator,
    Path(key): Path<String>,
) -> Result<Response, AdminError> {
    profiles::delete(&core.pool, profile_key(&key)?, &admin)
        .await
        .map_err(path_profile)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn make_default(
    State(core): State<Core>,
    Administrator(admin): Administrator,
    Path(key): Path<String>,
) -> Result<Response, AdminError> {
    let profile = profiles::make_default(&core.pool, profile_key(&key)?, &admin)
        .await
        .map_err(path_profile)?;
    Ok(Json(profile_json(&core, &profile).await?).into_response())
}

async fn list_apps(
    State(core): State<Core>,
    _admin: Administrator,
) -> Result<Response, AdminError> {
    Ok(Json(store::admin_apps(&core.pool).await?).into_response())
}

async fn put_access(
    State(core): State<Core>,
    Administrator(admin): Administrator,
    headers: HeaderMap,
    Path(app_id): Path<String>,
    body: Body,
) -> Result<Response, AdminError> {
    let value = body_json(&headers, body, MailCode::InvalidProfile).await?;
    let input = AccessInput::parse(&value)?;
    let app = store::set_access(&core.pool, &app_id, input, &admin).await?;
    Ok(Json(app).into_response())
}

async fn put_log_access(
    State(core): State<Core>,
    Administrator(admin): Administrator,
    headers: HeaderMap,
    Path(app_id): Path<String>,
    body: Body,
) -> Result<Response, AdminError> {
    let value = body_json(&headers, body, MailCode::BadInput).await?;
    let apps = store::parse_log_access(&app_id, &value)?;
    let app = store::set_log_access(&core.pool, &app_id, apps, &admin).await?;
    Ok(Json(app).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admin_queries_are_strict() {
        let (query, page) = admin_query(Some(
            "app=inventory&status=queued,sent&limit=10&ref=order:7",
        ))
        .expect("valid");
        assert_eq!(query.app.as_deref(), Some("inventory"));
        assert_eq!(query.filter.status.len(), 2);
        assert_eq!(query.filter.ref_id.as_deref(), Some("7"));
        assert_eq!(page.per_page, 10);
        for wrong in [
            "limit=0",
            "limit=101",
            "status=lost",
            "since=yesterday",
            "x=1",
            "app=a&app=b",
        ] {
            assert!(admin_query(Some(wrong)).is_err(), "{wrong}");
        }
    }
}
