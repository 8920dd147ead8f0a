//! The app API: an app sends, enqueues and reads mail as the app its credential belongs to.

use std::time::Duration;

use axum::body::Body;
use axum::extract::{FromRequestParts, Path, RawQuery, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use futures::TryStreamExt;
use k2b_core::Core;
use k2b_core::access::calling_app;
use k2b_core::http::body::{BodyError, read_json};
use k2b_core::http::headers::RequestId;
use k2b_core::http::routes::Routes;
use k2b_core::mail::accept::{self, MailContext, Refused};
use k2b_core::mail::attachments::{self, pending_upload};
use k2b_core::mail::objects::ObjectStore;
use k2b_core::mail::policy::{self, Caller};
use k2b_core::mail::record::MessageRow;
use k2b_core::mail::validate::{self, INVALID_FILTER};
use k2b_core::mail::{MailCode, MailError, MailFault, log, settle};
use serde_json::{Map, Value, json};
use uuid::Uuid;

use crate::app_error;

/// The credential scope of the mail API.
pub const MAIL_SCOPE: &str = "mail";
/// The largest JSON body: a Lambda request is at most 6 MB, and API Gateway may carry it
/// base64-encoded; larger attachments go through an upload.
pub const MAX_JSON_BYTES: usize = 4 * 1024 * 1024;
/// How long a `send` may take in all, waiting for delivery included, by default and at most:
/// inside the front door's 20 s route budget, so the caller always gets the record (queued if
/// delivery is slower) and never a timeout for a message that was accepted.
pub const SEND_WAIT: Duration = Duration::from_secs(15);
/// How often `send` looks at the message while it waits.
pub const SEND_POLL: Duration = Duration::from_secs(2);

pub(crate) fn routes() -> Routes<Core> {
    Routes::new()
        .post("/api/mail/v1/send", send)
        .post("/api/mail/v1/enqueue", enqueue)
        .get("/api/mail/v1/messages", list)
        .get("/api/mail/v1/readable-apps", readable_apps)
        .get("/api/mail/v1/profiles", profiles)
        .post("/api/mail/v1/uploads", create_upload)
        .put("/api/mail/v1/uploads/{id}", upload)
}

/// The app behind the request and what its registry entry declares: the credential's app,
/// never anything the request says. Handlers take it first.
struct CallingApp(Caller);

impl FromRequestParts<Core> for CallingApp {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, core: &Core) -> Result<Self, Response> {
        let identity = calling_app(&core.pool, &parts.headers, MAIL_SCOPE)
            .await
            .map_err(IntoResponse::into_response)?;
        Caller::of_app(&core.pool, &identity.app_id)
            .await
            .map(CallingApp)
            .map_err(app_error)
    }
}

/// An app API error, answered by [`app_error`].
struct AppError(MailError);

impl From<MailError> for AppError {
    fn from(error: MailError) -> AppError {
        AppError(error)
    }
}

impl From<MailFault> for AppError {
    fn from(fault: MailFault) -> AppError {
        AppError(MailError::Fault(fault))
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        app_error(self.0)
    }
}

async fn json_body(headers: &HeaderMap, body: Body) -> Result<Value, MailError> {
    read_json(headers, body, MAX_JSON_BYTES)
        .await
        .map_err(|error| {
            let message = match error {
                BodyError::TooLarge { .. } => {
                    "The request is too large; upload large attachments first."
                }
                BodyError::InvalidJson => "The request body is not JSON.",
                BodyError::Unreadable => "The request body could not be read.",
            };
            MailError::fault(MailCode::BadInput, message)
        })
}

fn context<'a>(core: &'a Core, objects: &'a ObjectStore, request: &RequestId) -> MailContext<'a> {
    MailContext {
        pool: &core.pool,
        objects,
        wakeups: core.wakeups.as_ref(),
        request_id: Some(request.value.clone()),
    }
}

/// The messages of a `send` or `enqueue`, checked in the contract's order: the permission
/// first, then the body. A refusal is audited with what the body tells of its recipients.
async fn checked<T>(
    ctx: &MailContext<'_>,
    caller: &Caller,
    headers: &HeaderMap,
    body: Body,
    parse: impl FnOnce(&Value) -> Result<T, MailFault>,
) -> Result<T, MailError> {
    let permitted = caller.require_send().map_err(MailError::from);
    let (value, outcome) = match json_body(headers, body).await {
        Err(error) => (None, permitted.and(Err(error))),
        Ok(value) => {
            let outcome = permitted.and_then(|()| parse(&value).map_err(MailError::from));
            (Some(value), outcome)
        }
    };
    if let Err(error) = &outcome {
        accept::audit_denied(ctx, caller, Refused::of_body(value.as_ref()), error).await;
        if let Some(value) = &value {
            let uploads = validate::named_uploads(value);
            attachments::discard_uploads(ctx.pool, ctx.objects, &caller.app_id, &uploads).await;
        }
    }
    outcome
}

/// `Prefer: wait=N` (RFC 7240): how long the caller wants `send` to take at most, waiting for
/// delivery included, never more than [`SEND_WAIT`]; `wait=0` answers at once with the queued
/// record.
fn preferred_wait(headers: &HeaderMap) -> Duration {
    headers
        .get_all("prefer")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split([',', ';']))
        .filter_map(|p| p.trim().strip_prefix("wait="))
        .filter_map(|n| n.trim().parse::<u64>().ok())
        .map(|seconds| Duration::from_secs(seconds).min(SEND_WAIT))
        .next()
        .unwrap_or(SEND_WAIT)
}

async fn send(
    State(core): State<Core>,
    CallingApp(caller): CallingApp,
    Extension(request): Extension<RequestId>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, AppError> {
    // The whole call, waiting included, ends by this time.
    let deadline = tokio::time::Instant::now() + preferred_wait(&headers);
    let objects = core.mail_objects.store().await;
    let ctx = context(&core, objects, &request);
    let message = checked(&ctx, &caller, &headers, body, validate::parse_message).await?;
    let sent = accept::send(&ctx, &caller, message).await?;
    // A known key answers its message as it is; a new one waits for the outcome: delivery
    // settles the message (its settle signal wakes the wait), or it is retried later.
    let mut row = sent.row;
    let waiting = |row: &MessageRow| {
        matches!(row.status.as_str(), "queued" | "sending")
            && !(row.status == "queued" && row.attempt_count > 0)
    };
    if sent.created && waiting(&row) && tokio::time::Instant::now() < deadline {
        let id = row.id;
        let pool = core.pool.clone();
        let settled = settle::wait_for(&core.notifications, id, deadline, SEND_POLL, || {
            let pool = pool.clone();
            async move {
                match accept::find_by_id(&pool, id).await? {
                    Some(fresh) => Ok((!waiting(&fresh), Some(fresh))),
                    None => Ok((true, None)),
                }
            }
        })
        .await;
        if let Some(Some(fresh)) = settled {
            row = fresh;
        }
    }
    Ok(Json(row.for_app(&caller.app_id)).into_response())
}

async fn enqueue(
    State(core): State<Core>,
    CallingApp(caller): CallingApp,
    Extension(request): Extension<RequestId>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, AppError> {
    let objects = core.mail_objects.store().await;
    let ctx = context(&core, objects, &request);
    let messages = checked(&ctx, &caller, &headers, body, validate::parse_batch).await?;
    let enqueued = accept::enqueue(&ctx, &caller, messages).await?;
    Ok((StatusCode::ACCEPTED, Json(enqueued)).into_response())
}

/// The query string as the JSON filter and page of the contract: repeated or comma-separated
/// `apps`, `ids` and `status`; `ref=scope[:id]`; everything else as is.
fn list_params(query: Option<&str>) -> Result<(Value, Value), MailError> {
    let invalid = || MailError::fault(MailCode::BadInput, INVALID_FILTER);
    let mut filter = Map::new();
    let mut page = Map::new();
    let pairs = url_pairs(query.unwrap_or_default());
    for (name, value) in pairs {
        match name.as_str() {
            "apps" | "ids" | "status" => {
                let list = filter
                    .entry(name.clone())
                    .or_insert_with(|| Value::Array(Vec::new()));
                if let Value::Array(items) = list {
                    items.extend(value.split(',').map(|v| json!(v)));
                }
            }
            "ref" => {
                let reference = match value.split_once(':') {
                    Some((scope, id)) => json!({"scope": scope, "id": id}),
                    None => json!({"scope": value}),
                };
                filter.insert(name, reference);
            }
            "batchId" | "since" | "until" | "q" | "recipient" => {
                if filter.insert(name, json!(value)).is_some() {
                    return Err(invalid());
                }
            }
            "page" | "perPage" => {
                let number: i64 = value.parse().map_err(|_| invalid())?;
                if page.insert(name, json!(number)).is_some() {
                    return Err(invalid());
                }
            }
            "cursor" => {
                if page.insert(name, json!(value)).is_some() {
                    return Err(invalid());
                }
            }
            _ => return Err(invalid()),
        }
    }
    Ok((Value::Object(filter), Value::Object(page)))
}

/// Decoded `name=value` pairs of a query string (`+` and percent escapes decoded).
pub(crate) fn url_pairs(query: &str) -> Vec<(String, String)> {
    url::form_urlencoded::parse(query.as_bytes())
        .into_owned()
        .collect()
}

async fn list(
    State(core): State<Core>,
    CallingApp(caller): CallingApp,
    RawQuery(query): RawQuery,
) -> Result<Response, AppError> {
    caller.require_send_or_read()?;
    let (filter, page) = list_params(query.as_deref())?;
    let filter = validate::parse_filter(&filter)?;
    let page = validate::parse_page(&page)?;
    let page = log::list(&core.pool, &caller, filter, page).await?;
    Ok(Json(page.to_json(|row| row.for_app(&caller.app_id))).into_response())
}

async fn readable_apps(
    State(core): State<Core>,
    CallingApp(caller): CallingApp,
) -> Result<Response, AppError> {
    let apps = log::readable_apps(&core.pool, &caller).await?;
    Ok(Json(json!({ "apps": apps })).into_response())
}

async fn profiles(
    State(core): State<Core>,
    CallingApp(caller): CallingApp,
) -> Result<Response, AppError> {
    caller.require_send()?;
    let items = policy::usable_profiles(&core.pool, &caller.app_id).await?;
    Ok(Json(json!({ "items": items })).into_response())
}

/// `POST /uploads {size, contentType}`: room for one attachment the app uploads itself.
async fn create_upload(
    State(core): State<Core>,
    CallingApp(caller): CallingApp,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, AppError> {
    caller.require_send()?;
    let value = json_body(&headers, body).await?;
    let invalid = || {
        MailError::fault(
            MailCode::BadInput,
            "Provide {size, contentType}: a size in bytes and a content type.",
        )
    };
    let object = value.as_object().ok_or_else(invalid)?;
    if object.keys().any(|k| k != "size" && k != "contentType") {
        return Err(invalid().into());
    }
    let size = object
        .get("size")
        .and_then(Value::as_u64)
        .ok_or_else(invalid)?;
    let content_type = object
        .get("contentType")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty() && t.len() <= 998 && !t.contains(['\r', '\n', '\0']))
        .ok_or_else(invalid)?;
    let objects = core.mail_objects.store().await;
    let upload = attachments::create_upload(
        &core.pool,
        objects,
        &caller.app_id,
        size,
        content_type,
        |id| format!("/api/mail/v1/uploads/{id}"),
    )
    .await?;
    Ok((StatusCode::CREATED, Json(upload)).into_response())
}

/// `PUT /uploads/{id}`: the body of an upload, for stores that take no presigned upload (the
/// local folder). At most the reserved size is read.
async fn upload(
    State(core): State<Core>,
    CallingApp(caller): CallingApp,
    Path(id): Path<String>,
    body: Body,
) -> Result<Response, AppError> {
    caller.require_send()?;
    let unknown = || {
        MailError::fault(
            MailCode::BadInput,
            "Unknown upload: create one with POST /api/mail/v1/uploads first.",
        )
    };
    let id: Uuid = id.parse().map_err(|_| unknown())?;
    let size = pending_upload(&core.pool, &caller.app_id, id)
        .await?
        .ok_or_else(unknown)?;
    let objects = core.mail_objects.store().await;
    let key = ObjectStore::key_for(&caller.app_id, id);
    let stream = body.into_data_stream().map_err(|e| e.to_string());
    let stored = objects.put_stream(&key, Box::pin(stream), size).await?;
    Ok(Json(json!({"size": stored.size, "sha256": stored.sha256})).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_string_becomes_the_contract_filter() {
        let (filter, page) = list_params(Some(
            "apps=a,b&apps=c&status=queued&ref=order:42&q=inv%20oice&perPage=4",
        ))
        .expect("valid");
        assert_eq!(filter["apps"], json!(["a", "b", "c"]));
        assert_eq!(filter["ref"], json!({"scope": "order", "id": "42"}));
        assert_eq!(filter["q"], json!("inv oice"));
        assert_eq!(page["perPage"], json!(4));
        assert!(list_params(Some("unknown=1")).is_err());
        assert!(list_params(Some("q=a&q=b")).is_err());
        assert!(list_params(Some("page=x")).is_err());
    }

    #[test]
    fn prefer_wait_is_capped_and_defaults_to_the_full_wait() {
        use axum::http::HeaderValue;
        let mut headers = HeaderMap::new();
        assert_eq!(preferred_wait(&headers), SEND_WAIT);
        headers.insert("prefer", HeaderValue::from_static("respond-async, wait=0"));
        assert_eq!(preferred_wait(&headers), Duration::ZERO);
        headers.insert("prefer", HeaderValue::from_static("wait=600"));
        assert_eq!(preferred_wait(&headers), SEND_WAIT);
    }
}
