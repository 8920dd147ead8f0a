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
use k2b_core::http::openapi::ErrorBody;
use k2b_core::http::routes::Routes;
use k2b_core::mail::accept::{self, Enqueued, MailContext, Refused};
use k2b_core::mail::attachments::{self, Upload, pending_upload};
use k2b_core::mail::log::AppRecordPage;
use k2b_core::mail::objects::ObjectStore;
use k2b_core::mail::policy::{self, Caller, UsableProfile};
use k2b_core::mail::record::{AppRecord, MessageRow};
use k2b_core::mail::validate::{self, INVALID_FILTER, MailBatch, MailStatus, RawMessage};
use k2b_core::mail::{MailCode, MailError, MailFault, log, settle};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use utoipa::ToSchema;
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

/// The app API's part of the document.
#[derive(utoipa::OpenApi)]
#[openapi(paths(send, enqueue, list, readable_apps, profiles, create_upload, upload))]
pub(crate) struct Api;

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

/// Send one message now
///
/// Accepts one message on the immediate lane and waits for its delivery (at most 15 s, or
/// what `Prefer: wait=N` asks), then answers its record: `sent`, `failed`, or still `queued`
/// or `sending` when delivery takes longer (it goes on). A known `key` answers its message as
/// it is. Needs `mail:send` in the app's `platformPermissions`.
#[utoipa::path(
    post,
    path = "/api/mail/v1/send",
    tag = "mail",
    operation_id = "mailSend",
    params(
        ("Prefer" = Option<String>, Header, description = "RFC 7240 `wait=N`: wait at most N \
            seconds for delivery (at most 15; `wait=0` answers the queued record at once).",
            example = "wait=5"),
    ),
    request_body(
        content = RawMessage,
        content_type = "application/json",
        description = "The message: a JSON body of at most 4 MiB (larger attachments go \
            through an upload)."
    ),
    security(("appCredential" = [])),
    responses(
        (status = 200, description = "The message's record, as delivery left it.", body = AppRecord),
        (status = 400, description = "`bad_input` (not JSON, over 4 MiB, an invalid message, an \
            unknown or used upload), `profile_unknown`, `profile_required`, \
            `profile_not_allowed`, `quota_exceeded` (with `limit`, `used`, `requested`), \
            `attachments_too_large` or `attachment_storage_full`.", body = ErrorBody),
        (status = 401, description = "No valid app credential.", body = ErrorBody),
        (status = 403, description = "The credential may not act for the app or lacks the \
            `mail` scope, or the app does not declare `mail:send` (`mail_not_declared`).",
            body = ErrorBody),
        (status = 500, description = "`mail_unavailable`: no profile is configured, storage \
            failed, or the outcome of the acceptance could not be determined (retry with the \
            same key).", body = ErrorBody),
        (status = 503, description = "Credentials cannot be checked right now, or the request \
            ran past its time budget.", body = ErrorBody),
    )
)]
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

/// Enqueue a batch
///
/// Accepts 1–1000 messages on the bulk lane, all or none, and answers at once; the profile's
/// pace sends them. Items whose `key` is known keep their messages. Needs `mail:send`.
#[utoipa::path(
    post,
    path = "/api/mail/v1/enqueue",
    tag = "mail",
    operation_id = "mailEnqueue",
    request_body(
        content = MailBatch,
        content_type = "application/json",
        description = "The messages: a JSON array of at most 4 MiB."
    ),
    security(("appCredential" = [])),
    responses(
        (status = 202, description = "Accepted: the batch and each message's id, in input \
            order.", body = Enqueued),
        (status = 400, description = "`bad_input` (not JSON, over 4 MiB, an invalid batch), \
            `profile_unknown`, `profile_required`, `profile_not_allowed`, `quota_exceeded` \
            (with `limit`, `used`, `requested`), `attachments_too_large` or \
            `attachment_storage_full`.", body = ErrorBody),
        (status = 401, description = "No valid app credential.", body = ErrorBody),
        (status = 403, description = "The credential may not act for the app or lacks the \
            `mail` scope, or the app does not declare `mail:send` (`mail_not_declared`).",
            body = ErrorBody),
        (status = 409, description = "`backlog_full`: a profile's bulk backlog would pass a \
            day of its pace.", body = ErrorBody),
        (status = 500, description = "`mail_unavailable`: no profile is configured, storage \
            failed, or the outcome could not be determined (retry with the same keys).",
            body = ErrorBody),
        (status = 503, description = "Credentials cannot be checked right now, or the request \
            ran past its time budget.", body = ErrorBody),
    )
)]
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

/// List mail log records
///
/// The app's own records, newest first, and with `apps` those of apps that granted it their
/// log (needs `mail:read`). Every given filter narrows the result. Parameters other than these
/// are refused, and each of `batchId`, `since`, `until`, `q`, `recipient`, `page`, `perPage`
/// and `cursor` may be given once. Needs `mail:send` or `mail:read`.
#[utoipa::path(
    get,
    path = "/api/mail/v1/messages",
    tag = "mail",
    operation_id = "mailListMessages",
    params(
        ("apps" = Option<BTreeSet<String>>, Query, style = Form, explode,
            description = "The apps whose records to list (default: the caller's own): 1–101 \
                distinct app ids, repeated or comma-separated. Another app than the caller \
                needs `mail:read` and its grant.",
            max_items = 101, min_length = 1, pattern = "^[^,]*$"),
        ("ids" = Option<Vec<Uuid>>, Query, style = Form, explode,
            description = "Only these messages: 1–100 ids, repeated or comma-separated.",
            max_items = 100),
        ("batchId" = Option<Uuid>, Query, description = "Only the messages of this batch."),
        ("status" = inline(Option<Vec<MailStatus>>), Query, style = Form, explode,
            description = "Only messages in these states: 1–6 states, repeated or \
                comma-separated.",
            max_items = 6),
        ("since" = Option<chrono::DateTime<chrono::Utc>>, Query,
            description = "Only messages created at or after this time (RFC 3339 with an \
                offset)."),
        ("until" = Option<chrono::DateTime<chrono::Utc>>, Query,
            description = "Only messages created before this time (RFC 3339 with an offset)."),
        ("q" = Option<String>, Query,
            description = "A search term found in the subject or an address (case-insensitive, \
                wildcards literal): no control characters, at most 200 characters once trimmed, \
                with three letters or digits in a row.",
            min_length = 3, pattern = r"^[^\u0000-\u001F\u007F-\u009F]*$"),
        ("recipient" = Option<String>, Query,
            description = "Only messages to this address (whole address, ignoring case; \
                surrounding whitespace trimmed).",
            pattern = r"^\s*[a-zA-Z0-9.!#$%&'*+/=?^_`{|}~-]+@[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)*\s*$"),
        ("ref" = Option<String>, Query,
            description = "The app's reference: `scope` or `scope:id`, each part 1–200 \
                characters without NUL (the scope without `:`).",
            pattern = r"^[^:\u0000]{1,200}(?::[^\u0000]{1,200})?$"),
        ("page" = Option<i64>, Query,
            description = "The page (1-based; default 1), when no cursor is given.",
            minimum = 1, maximum = 9007199254740991.0),
        ("perPage" = Option<i64>, Query, description = "Records per page (default 50).",
            minimum = 1, maximum = 100),
        ("cursor" = Option<String>, Query,
            description = "The `nextCursor` of the previous page.", max_length = 1024),
    ),
    security(("appCredential" = [])),
    responses(
        (status = 200, description = "One page of records.", body = AppRecordPage),
        (status = 400, description = "`bad_input`: an unknown, repeated or invalid parameter, \
            an invalid cursor, or a search that took too long.", body = ErrorBody),
        (status = 401, description = "No valid app credential.", body = ErrorBody),
        (status = 403, description = "The credential may not act for the app or lacks the \
            `mail` scope; the app declares neither `mail:send` nor `mail:read`, or names other \
            apps without `mail:read` (`mail_not_declared`); or it names an app whose log it \
            was not granted (`app_not_allowed`).", body = ErrorBody),
        (status = 500, description = "`mail_unavailable`: storage failed.", body = ErrorBody),
        (status = 503, description = "Credentials cannot be checked right now, or the request \
            ran past its time budget.", body = ErrorBody),
    )
)]
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
    Ok(Json(page.for_app(&caller.app_id)).into_response())
}

/// The apps whose mail logs the app may read: itself first, then (only with `mail:read`) the
/// apps that granted it their log, sorted.
#[derive(Serialize, ToSchema)]
#[schema(as = MailReadableApps)]
struct ReadableApps {
    apps: Vec<String>,
}

/// List readable apps
///
/// The app itself, then the apps whose logs it may read (only with `mail:read`). Needs
/// `mail:send` or `mail:read`.
#[utoipa::path(
    get,
    path = "/api/mail/v1/readable-apps",
    tag = "mail",
    operation_id = "mailReadableApps",
    security(("appCredential" = [])),
    responses(
        (status = 200, description = "The readable apps.", body = ReadableApps),
        (status = 401, description = "No valid app credential.", body = ErrorBody),
        (status = 403, description = "The credential may not act for the app or lacks the \
            `mail` scope, or the app declares neither `mail:send` nor `mail:read` \
            (`mail_not_declared`).", body = ErrorBody),
        (status = 500, description = "`mail_unavailable`: storage failed.", body = ErrorBody),
        (status = 503, description = "Credentials cannot be checked right now, or the request \
            ran past its time budget.", body = ErrorBody),
    )
)]
async fn readable_apps(
    State(core): State<Core>,
    CallingApp(caller): CallingApp,
) -> Result<Response, AppError> {
    let apps = log::readable_apps(&core.pool, &caller).await?;
    Ok(Json(ReadableApps { apps }).into_response())
}

/// The profiles an app may send with: the default first, then by name and key.
#[derive(Serialize, ToSchema)]
#[schema(as = MailUsableProfiles)]
struct UsableProfiles {
    items: Vec<UsableProfile>,
}

/// List usable profiles
///
/// The profiles the app may send with, with its quota on each. Needs `mail:send`.
#[utoipa::path(
    get,
    path = "/api/mail/v1/profiles",
    tag = "mail",
    operation_id = "mailUsableProfiles",
    security(("appCredential" = [])),
    responses(
        (status = 200, description = "The usable profiles.", body = UsableProfiles),
        (status = 401, description = "No valid app credential.", body = ErrorBody),
        (status = 403, description = "The credential may not act for the app or lacks the \
            `mail` scope, or the app does not declare `mail:send` (`mail_not_declared`).",
            body = ErrorBody),
        (status = 500, description = "`mail_unavailable`: storage failed.", body = ErrorBody),
        (status = 503, description = "Credentials cannot be checked right now, or the request \
            ran past its time budget.", body = ErrorBody),
    )
)]
async fn profiles(
    State(core): State<Core>,
    CallingApp(caller): CallingApp,
) -> Result<Response, AppError> {
    caller.require_send()?;
    let items = policy::usable_profiles(&core.pool, &caller.app_id).await?;
    Ok(Json(UsableProfiles { items }).into_response())
}

/// The body of `POST /uploads`: the attachment's size and content type.
#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schema(as = MailUploadRequest)]
struct UploadRequest {
    /// The attachment's exact size in bytes: at most 25 MiB (`attachments_too_large`).
    #[schema(maximum = 26214400)]
    size: u64,
    /// 1–998 bytes on one line (no CR, LF or NUL).
    #[schema(min_length = 1, max_length = 998, pattern = r"^[^\r\n\u0000]*$")]
    content_type: String,
}

/// Create an upload
///
/// `{size, contentType}`: room for one attachment the app uploads itself, then names in a
/// message's `attachments[].upload` within an hour. The answer says where to `PUT` the bytes:
/// a presigned object store URL, or locally `PUT /api/mail/v1/uploads/{id}`. Needs
/// `mail:send`.
#[utoipa::path(
    post,
    path = "/api/mail/v1/uploads",
    tag = "mail",
    operation_id = "mailCreateUpload",
    request_body(content = UploadRequest, content_type = "application/json"),
    security(("appCredential" = [])),
    responses(
        (status = 201, description = "The upload and where to send its bytes.", body = Upload),
        (status = 400, description = "`bad_input` (not JSON, not `{size, contentType}`), \
            `attachments_too_large` (over 25 MiB) or `attachment_storage_full`.",
            body = ErrorBody),
        (status = 401, description = "No valid app credential.", body = ErrorBody),
        (status = 403, description = "The credential may not act for the app or lacks the \
            `mail` scope, or the app does not declare `mail:send` (`mail_not_declared`).",
            body = ErrorBody),
        (status = 500, description = "`mail_unavailable`: storage failed.", body = ErrorBody),
        (status = 503, description = "Credentials cannot be checked right now, or the request \
            ran past its time budget.", body = ErrorBody),
    )
)]
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
    let UploadRequest { size, content_type } =
        serde_json::from_value(value).map_err(|_| invalid())?;
    if content_type.is_empty()
        || content_type.len() > 998
        || content_type.contains(['\r', '\n', '\0'])
    {
        return Err(invalid().into());
    }
    let objects = core.mail_objects.store().await;
    let upload = attachments::create_upload(
        &core.pool,
        objects,
        &caller.app_id,
        size,
        &content_type,
        |id| format!("/api/mail/v1/uploads/{id}"),
    )
    .await?;
    Ok((StatusCode::CREATED, Json(upload)).into_response())
}

/// What an upload stored.
#[derive(Serialize, ToSchema)]
#[schema(as = MailUploadStored)]
struct UploadStored {
    /// Bytes.
    size: u64,
    /// The SHA-256 of the bytes, lowercase hex.
    #[schema(pattern = "^[0-9a-f]{64}$")]
    sha256: String,
}

/// Upload an attachment's bytes
///
/// The bytes of an upload, for stores that take no presigned upload (the local folder): at
/// most the reserved size. Needs `mail:send`.
#[utoipa::path(
    put,
    path = "/api/mail/v1/uploads/{id}",
    tag = "mail",
    operation_id = "mailUpload",
    params(("id" = String, Path, description = "The upload's id (a UUID).")),
    request_body(
        content(("application/octet-stream")),
        description = "The attachment's bytes, at most the upload's `maxBytes` (the content \
            type is not checked)."
    ),
    security(("appCredential" = [])),
    responses(
        (status = 200, description = "Stored.", body = UploadStored),
        (status = 400, description = "`bad_input`: no pending upload of the app has this id \
            (not a UUID, unknown, older than an hour, or used); `attachments_too_large`: more \
            bytes than reserved.", body = ErrorBody),
        (status = 401, description = "No valid app credential.", body = ErrorBody),
        (status = 403, description = "The credential may not act for the app or lacks the \
            `mail` scope, or the app does not declare `mail:send` (`mail_not_declared`).",
            body = ErrorBody),
        (status = 500, description = "`mail_unavailable`: storage failed.", body = ErrorBody),
        (status = 503, description = "Credentials cannot be checked right now, or the request \
            ran past its time budget.", body = ErrorBody),
    )
)]
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
    Ok(Json(UploadStored {
        size: stored.size,
        sha256: stored.sha256,
    })
    .into_response())
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
