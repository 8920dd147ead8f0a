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
use k2b_core::http::openapi::ErrorBody;
use k2b_core::http::origin::origin_matches;
use k2b_core::http::routes::Routes;
use k2b_core::mail::accept;
use k2b_core::mail::admin::{
    self as store, AccessBody, AccessInput, LogAccessBody, MailApp, MailApps, MessageContent,
    Retention,
};
use k2b_core::mail::log::{self, AdminRecordPage, LogQuery};
use k2b_core::mail::policy::{self, ProfileRow};
use k2b_core::mail::profiles::{self, AdminActor, AdminProfile, ProfileInput, RawProfile};
use k2b_core::mail::record::AdminRecord;
use k2b_core::mail::validate::{self, MailStatus, PageParams};
use k2b_core::mail::{MailCode, MailError, MailFault};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::app::url_pairs;

/// Admin bodies are small JSON documents.
/// Who may call an administration route that changes something, and what any of them answers
/// besides its own: not signed in, not an administrator's own web session or not from the
/// installation's pages, storage failed, authentication or the origin unreadable.
struct ChangeAnswers;

impl utoipa::IntoResponses for ChangeAnswers {
    fn responses() -> std::collections::BTreeMap<
        String,
        utoipa::openapi::RefOr<utoipa::openapi::response::Response>,
    > {
        k2b_core::http::openapi::error_responses(&[
            ("401", NOT_SIGNED_IN),
            (
                "403",
                "Not an administrator's own web session (app sessions, OAuth tokens and app \
                 credentials are refused), or the `Origin` is not the installation's own.",
            ),
            ("500", STORAGE_FAILED),
            (
                "503",
                "Authentication or the installation's origin cannot be read right now, or the \
                 request ran past its time budget.",
            ),
        ])
    }
}

/// [`ChangeAnswers`] of the routes that only read: no `Origin` is needed.
struct ReadAnswers;

impl utoipa::IntoResponses for ReadAnswers {
    fn responses() -> std::collections::BTreeMap<
        String,
        utoipa::openapi::RefOr<utoipa::openapi::response::Response>,
    > {
        k2b_core::http::openapi::error_responses(&[
            ("401", NOT_SIGNED_IN),
            (
                "403",
                "Not an administrator's own web session (app sessions, OAuth tokens and app \
                 credentials are refused).",
            ),
            ("500", STORAGE_FAILED),
            (
                "503",
                "Authentication is unavailable right now, or the request ran past its time \
                 budget.",
            ),
        ])
    }
}

const NOT_SIGNED_IN: &str = "Not signed in.";
const STORAGE_FAILED: &str = "`mail_unavailable`: storage failed.";

const MAX_ADMIN_BODY: usize = 64 * 1024;

/// The administrators' part of the document.
#[derive(utoipa::OpenApi)]
#[openapi(paths(
    get_retention,
    put_retention,
    list_messages,
    get_message,
    get_content,
    cancel_message,
    cancel_batch,
    list_profiles,
    get_profile,
    put_profile,
    delete_profile,
    make_default,
    test_profile,
    list_apps,
    put_access,
    put_log_access,
))]
pub(crate) struct Api;

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

/// The body of a test send: where to send it.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = MailProfileTestInput)]
struct TestInput {
    /// A valid email address (surrounding whitespace trimmed).
    #[schema(
        pattern = r"^\s*[a-zA-Z0-9.!#$%&'*+/=?^_`{|}~-]+@[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)*\s*$"
    )]
    recipient: String,
}

/// A test send went through.
#[derive(Serialize, ToSchema)]
#[schema(as = MailProfileTestSent)]
struct TestSent {
    /// Always `true`.
    #[schema(schema_with = always_true)]
    ok: bool,
}

fn always_true() -> utoipa::openapi::schema::Object {
    utoipa::openapi::schema::ObjectBuilder::new()
        .schema_type(utoipa::openapi::schema::Type::Boolean)
        .enum_values(Some([true]))
        .build()
}

/// Send a test message through a profile
///
/// `{recipient}`: sends a test message through the profile now. The attempt is audited before
/// it is made; a failure answers `smtp_failed` 502 with the server's redacted answer.
#[utoipa::path(
    post,
    path = "/api/admin/core/outgoing-mail/profiles/{key}/test",
    tag = "mail-admin",
    operation_id = "mailAdminTestProfile",
    params(
        ("key" = String, Path, description = "The profile's key.",
            pattern = "^[a-z0-9][a-z0-9-]{0,62}$"),
        ("Origin" = String, Header, description = "The installation's own origin: changes \
            made with the session cookie must come from its pages."),
    ),
    request_body(content = TestInput, content_type = "application/json"),
    security(("session" = [])),
    responses(
        (status = 200, description = "The server accepted the test message.", body = TestSent),
        (status = 400, description = "`invalid_profile`: not a profile key; `bad_input`: not \
            JSON, over 64 KiB, or not `{recipient}` with a valid address.", body = ErrorBody),
        (status = 404, description = "`profile_unknown`: no profile has this key.", body = ErrorBody),
        (status = 502, description = "`smtp_failed`: the server refused or could not be \
            reached (its redacted answer is the message).", body = ErrorBody),
        ChangeAnswers,
    )
)]
async fn test_profile(
    State(core): State<Core>,
    Administrator(admin): Administrator,
    headers: HeaderMap,
    Path(key): Path<String>,
    body: Body,
) -> Result<Response, AdminError> {
    let key = profile_key(&key)?;
    let value = body_json(&headers, body, MailCode::BadInput).await?;
    let input: Option<TestInput> = serde_json::from_value(value).ok();
    let recipient = input
        .as_ref()
        .map(|input| input.recipient.trim())
        .filter(|r| validate::is_valid_address(r))
        .ok_or_else(|| bad("recipient: a valid email address"))?;
    profiles::get(&core.pool, key)
        .await?
        .ok_or_else(unknown_profile)
        .map_err(path_profile)?;
    profiles::audit_test(&core.pool, key, &admin).await?;
    core.mail_delivery.test_send(key, recipient).await?;
    Ok(Json(TestSent { ok: true }).into_response())
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

/// Read the retention
///
/// How long message content and message records are kept.
#[utoipa::path(
    get,
    path = "/api/admin/core/outgoing-mail/retention",
    tag = "mail-admin",
    operation_id = "mailAdminGetRetention",
    security(("session" = [])),
    responses(
        (status = 200, description = "The retention.", body = Retention),
        ReadAnswers,
    )
)]
async fn get_retention(
    State(core): State<Core>,
    _admin: Administrator,
) -> Result<Response, AdminError> {
    Ok(Json(store::retention(&core.settings).await?).into_response())
}

/// Change the retention
///
/// Both values at once; the change is audited with the old and new values.
#[utoipa::path(
    put,
    path = "/api/admin/core/outgoing-mail/retention",
    tag = "mail-admin",
    operation_id = "mailAdminPutRetention",
    params(
        ("Origin" = String, Header, description = "The installation's own origin: changes \
            made with the session cookie must come from its pages."),
    ),
    request_body(content = Retention, content_type = "application/json"),
    security(("session" = [])),
    responses(
        (status = 200, description = "The retention now.", body = Retention),
        (status = 400, description = "`bad_input`: not JSON, over 64 KiB, or not \
            `{contentDays, recordDays}` of 1–36500 days with `recordDays` ≥ `contentDays`.",
            body = ErrorBody),
        ChangeAnswers,
    )
)]
async fn put_retention(
    State(core): State<Core>,
    Administrator(admin): Administrator,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, AdminError> {
    let value = body_json(&headers, body, MailCode::BadInput).await?;
    let retention = Retention::parse(&value)?;
    let stored = store::set_retention(&core.pool, &core.settings, retention, &admin).await?;
    Ok(Json(stored).into_response())
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

/// List messages
///
/// Every app's messages, newest first (never their text). Parameters other than these are
/// refused, and each but `status` may be given once.
#[utoipa::path(
    get,
    path = "/api/admin/core/outgoing-mail/messages",
    tag = "mail-admin",
    operation_id = "mailAdminListMessages",
    params(
        ("app" = Option<String>, Query, description = "Only this app's messages.",
            min_length = 1, max_length = 200),
        ("profile" = Option<String>, Query, description = "Only messages of this profile (a key).",
            pattern = "^[a-z0-9][a-z0-9-]{0,62}$"),
        ("status" = inline(Option<Vec<MailStatus>>), Query, style = Form, explode,
            description = "Only messages in these states, repeated or comma-separated."),
        ("since" = Option<chrono::DateTime<chrono::Utc>>, Query,
            description = "Only messages created at or after this time (RFC 3339 with an \
                offset)."),
        ("ref" = Option<String>, Query,
            description = "The sending app's reference: `scope` or `scope:id`, the scope 1–200 \
                characters without `:`.",
            pattern = r"^[^:]{1,200}(?::[\s\S]*)?$"),
        ("recipient" = Option<String>, Query,
            description = "Only messages to an address containing this text (ignoring case): \
                1–320 characters once trimmed.",
            min_length = 1),
        ("cursor" = Option<String>, Query, description = "The `nextCursor` of the previous page.",
            max_length = 1024),
        ("limit" = Option<i64>, Query, description = "Records per page (default 50).",
            minimum = 1, maximum = 100),
    ),
    security(("session" = [])),
    responses(
        (status = 200, description = "One page of records.", body = AdminRecordPage),
        (status = 400, description = "`bad_input`: an unknown, repeated or invalid parameter, \
            an invalid cursor, or a search that took too long.", body = ErrorBody),
        ReadAnswers,
    )
)]
async fn list_messages(
    State(core): State<Core>,
    _admin: Administrator,
    RawQuery(query): RawQuery,
) -> Result<Response, AdminError> {
    let (query, page) = admin_query(query.as_deref())?;
    let found = log::run(&core.pool, &query, &page).await?;
    Ok(Json(found.for_admin()).into_response())
}

/// Read a message's record
#[utoipa::path(
    get,
    path = "/api/admin/core/outgoing-mail/messages/{id}",
    tag = "mail-admin",
    operation_id = "mailAdminGetMessage",
    params(
        ("id" = Uuid, Path, description = "The message's id."),
    ),
    security(("session" = [])),
    responses(
        (status = 200, description = "The record.", body = AdminRecord),
        (status = 400, description = "`bad_input`: the id is not a UUID.", body = ErrorBody),
        (status = 404, description = "`message_unknown`.", body = ErrorBody),
        ReadAnswers,
    )
)]
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

/// Read a message's content
///
/// Its text, HTML and custom headers, unless retention purged them. The read is audited.
#[utoipa::path(
    get,
    path = "/api/admin/core/outgoing-mail/messages/{id}/content",
    tag = "mail-admin",
    operation_id = "mailAdminGetMessageContent",
    params(
        ("id" = Uuid, Path, description = "The message's id."),
    ),
    security(("session" = [])),
    responses(
        (status = 200, description = "The content, or when it was purged.", body = MessageContent),
        (status = 400, description = "`bad_input`: the id is not a UUID.", body = ErrorBody),
        (status = 404, description = "`message_unknown`.", body = ErrorBody),
        ReadAnswers,
    )
)]
async fn get_content(
    State(core): State<Core>,
    Administrator(admin): Administrator,
    Path(id): Path<String>,
) -> Result<Response, AdminError> {
    let id = message_id(&id)?;
    Ok(Json(store::content(&core.pool, id, &admin).await?).into_response())
}

/// Cancel a queued message
///
/// Only a queued message can be cancelled (`cancelled_by_admin`); its attachments are deleted.
#[utoipa::path(
    post,
    path = "/api/admin/core/outgoing-mail/messages/{id}/cancel",
    tag = "mail-admin",
    operation_id = "mailAdminCancelMessage",
    params(
        ("id" = Uuid, Path, description = "The message's id."),
        ("Origin" = String, Header, description = "The installation's own origin: changes \
            made with the session cookie must come from its pages."),
    ),
    security(("session" = [])),
    responses(
        (status = 200, description = "The cancelled message's record.", body = AdminRecord),
        (status = 400, description = "`bad_input`: the id is not a UUID.", body = ErrorBody),
        (status = 404, description = "`message_unknown`.", body = ErrorBody),
        (status = 409, description = "`message_not_queued`: it is no longer queued.",
            body = ErrorBody),
        ChangeAnswers,
    )
)]
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

/// How many messages of a batch were cancelled.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = MailBatchCancelled)]
struct BatchCancelled {
    batch_id: Uuid,
    /// The batch's messages that were still queued.
    cancelled: u64,
}

/// Cancel a batch's queued messages
///
/// Messages that are no longer queued stay as they are.
#[utoipa::path(
    post,
    path = "/api/admin/core/outgoing-mail/batches/{batch_id}/cancel",
    tag = "mail-admin",
    operation_id = "mailAdminCancelBatch",
    params(
        ("batch_id" = Uuid, Path, description = "The batch's id."),
        ("Origin" = String, Header, description = "The installation's own origin: changes \
            made with the session cookie must come from its pages."),
    ),
    security(("session" = [])),
    responses(
        (status = 200, description = "How many were cancelled.", body = BatchCancelled),
        (status = 400, description = "`bad_input`: the id is not a UUID.", body = ErrorBody),
        (status = 404, description = "`batch_unknown`.", body = ErrorBody),
        ChangeAnswers,
    )
)]
async fn cancel_batch(
    State(core): State<Core>,
    Administrator(admin): Administrator,
    Path(batch_id): Path<String>,
) -> Result<Response, AdminError> {
    let batch_id: Uuid = batch_id.parse().map_err(|_| bad("batchId: a UUID"))?;
    let objects = core.mail_objects.store().await;
    let cancelled = store::cancel_batch(&core.pool, objects, batch_id, &admin).await?;
    Ok(Json(BatchCancelled {
        batch_id,
        cancelled,
    })
    .into_response())
}

/// Every profile: the default first, then by name and key.
#[derive(Serialize, ToSchema)]
#[schema(as = MailAdminProfiles)]
struct AdminProfiles {
    items: Vec<AdminProfile>,
}

/// List profiles
#[utoipa::path(
    get,
    path = "/api/admin/core/outgoing-mail/profiles",
    tag = "mail-admin",
    operation_id = "mailAdminListProfiles",
    security(("session" = [])),
    responses(
        (status = 200, description = "The profiles.", body = AdminProfiles),
        ReadAnswers,
    )
)]
async fn list_profiles(
    State(core): State<Core>,
    _admin: Administrator,
) -> Result<Response, AdminError> {
    let counts = profiles::app_counts(&core.pool).await?;
    let items: Vec<AdminProfile> = policy::all_profiles(&core.pool)
        .await?
        .iter()
        .map(|p| profiles::admin_view(p, counts.get(&p.id).copied().unwrap_or(0)))
        .collect();
    Ok(Json(AdminProfiles { items }).into_response())
}

/// One profile as administrators read it.
async fn profile_view(core: &Core, profile: &ProfileRow) -> Result<AdminProfile, MailError> {
    let counts = profiles::app_counts(&core.pool).await?;
    Ok(profiles::admin_view(
        profile,
        counts.get(&profile.id).copied().unwrap_or(0),
    ))
}

fn unknown_profile() -> MailError {
    MailError::fault(MailCode::ProfileUnknown, "Unknown outgoing mail profile.")
}

/// Read a profile
#[utoipa::path(
    get,
    path = "/api/admin/core/outgoing-mail/profiles/{key}",
    tag = "mail-admin",
    operation_id = "mailAdminGetProfile",
    params(
        ("key" = String, Path, description = "The profile's key.",
            pattern = "^[a-z0-9][a-z0-9-]{0,62}$"),
    ),
    security(("session" = [])),
    responses(
        (status = 200, description = "The profile.", body = AdminProfile),
        (status = 400, description = "`invalid_profile`: not a profile key.", body = ErrorBody),
        (status = 404, description = "`profile_unknown`.", body = ErrorBody),
        ReadAnswers,
    )
)]
async fn get_profile(
    State(core): State<Core>,
    _admin: Administrator,
    Path(key): Path<String>,
) -> Result<Response, AdminError> {
    let profile = profiles::get(&core.pool, profile_key(&key)?)
        .await?
        .ok_or_else(unknown_profile)
        .map_err(path_profile)?;
    Ok(Json(profile_view(&core, &profile).await?).into_response())
}

/// Create or replace a profile
///
/// Creates the profile (the first one becomes the default), or replaces it at its current
/// `revision`. The change is audited.
#[utoipa::path(
    put,
    path = "/api/admin/core/outgoing-mail/profiles/{key}",
    tag = "mail-admin",
    operation_id = "mailAdminPutProfile",
    params(
        ("key" = String, Path, description = "The profile's key.",
            pattern = "^[a-z0-9][a-z0-9-]{0,62}$"),
        ("Origin" = String, Header, description = "The installation's own origin: changes \
            made with the session cookie must come from its pages."),
    ),
    request_body(content = RawProfile, content_type = "application/json"),
    security(("session" = [])),
    responses(
        (status = 200, description = "Replaced.", body = AdminProfile),
        (status = 201, description = "Created.", body = AdminProfile),
        (status = 400, description = "`invalid_profile`: not a profile key, not JSON, over \
            64 KiB, or an invalid field (the message names it), or a new host without the \
            password.", body = ErrorBody),
        (status = 409, description = "`profile_exists` (no `revision` for an existing \
            profile) or `revision_conflict` (stale or deleted meanwhile).", body = ErrorBody),
        ChangeAnswers,
    )
)]
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
    Ok((status, Json(profile_view(&core, &profile).await?)).into_response())
}

/// Delete a profile
///
/// Its queued messages are cancelled by delivery (`profile_removed`).
#[utoipa::path(
    delete,
    path = "/api/admin/core/outgoing-mail/profiles/{key}",
    tag = "mail-admin",
    operation_id = "mailAdminDeleteProfile",
    params(
        ("key" = String, Path, description = "The profile's key.",
            pattern = "^[a-z0-9][a-z0-9-]{0,62}$"),
        ("Origin" = String, Header, description = "The installation's own origin: changes \
            made with the session cookie must come from its pages."),
    ),
    security(("session" = [])),
    responses(
        (status = 204, description = "Deleted."),
        (status = 400, description = "`invalid_profile`: not a profile key.", body = ErrorBody),
        (status = 404, description = "`profile_unknown`.", body = ErrorBody),
        (status = 409, description = "`profile_is_default`: make another profile the default \
            first.", body = ErrorBody),
        ChangeAnswers,
    )
)]
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

/// Make a profile the default
#[utoipa::path(
    post,
    path = "/api/admin/core/outgoing-mail/profiles/{key}/default",
    tag = "mail-admin",
    operation_id = "mailAdminMakeDefaultProfile",
    params(
        ("key" = String, Path, description = "The profile's key.",
            pattern = "^[a-z0-9][a-z0-9-]{0,62}$"),
        ("Origin" = String, Header, description = "The installation's own origin: changes \
            made with the session cookie must come from its pages."),
    ),
    security(("session" = [])),
    responses(
        (status = 200, description = "The profile, now the default.", body = AdminProfile),
        (status = 400, description = "`invalid_profile`: not a profile key.", body = ErrorBody),
        (status = 404, description = "`profile_unknown`.", body = ErrorBody),
        ChangeAnswers,
    )
)]
async fn make_default(
    State(core): State<Core>,
    Administrator(admin): Administrator,
    Path(key): Path<String>,
) -> Result<Response, AdminError> {
    let profile = profiles::make_default(&core.pool, profile_key(&key)?, &admin)
        .await
        .map_err(path_profile)?;
    Ok(Json(profile_view(&core, &profile).await?).into_response())
}

/// List apps
///
/// Registered apps, Core, and every app holding a profile policy or a log grant.
#[utoipa::path(
    get,
    path = "/api/admin/core/outgoing-mail/apps",
    tag = "mail-admin",
    operation_id = "mailAdminListApps",
    security(("session" = [])),
    responses(
        (status = 200, description = "The apps and the default profile.", body = MailApps),
        ReadAnswers,
    )
)]
async fn list_apps(
    State(core): State<Core>,
    _admin: Administrator,
) -> Result<Response, AdminError> {
    Ok(Json(store::admin_apps(&core.pool).await?).into_response())
}

/// Set an app's profile access
///
/// `{mode: "default"}` (only the current default profile) or `{mode: "selected", profiles}`
/// (exactly those). Core's access cannot change. The change is audited.
#[utoipa::path(
    put,
    path = "/api/admin/core/outgoing-mail/apps/{app_id}",
    tag = "mail-admin",
    operation_id = "mailAdminPutAppAccess",
    params(
        ("app_id" = String, Path, description = "The app's id: 1–200 characters, not `core`.",
            max_length = 200, pattern = "^(?!core$)"),
        ("Origin" = String, Header, description = "The installation's own origin: changes \
            made with the session cookie must come from its pages."),
    ),
    request_body(content = AccessBody, content_type = "application/json"),
    security(("session" = [])),
    responses(
        (status = 200, description = "The app now.", body = MailApp),
        (status = 400, description = "`invalid_profile`: not JSON, over 64 KiB, an invalid \
            body, or Core's or an invalid app id; `profile_unknown`: a named profile does not \
            exist.", body = ErrorBody),
        ChangeAnswers,
    )
)]
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

/// Set which logs an app may read
///
/// Replaces the apps whose mail logs the app may read (with `mail:read`). The change is
/// audited.
#[utoipa::path(
    put,
    path = "/api/admin/core/outgoing-mail/apps/{app_id}/log-access",
    tag = "mail-admin",
    operation_id = "mailAdminPutLogAccess",
    params(
        ("app_id" = String, Path, description = "The reading app's id: 1–200 characters, \
            not `core`.", max_length = 200, pattern = "^(?!core$)"),
        ("Origin" = String, Header, description = "The installation's own origin: changes \
            made with the session cookie must come from its pages."),
    ),
    request_body(content = LogAccessBody, content_type = "application/json"),
    security(("session" = [])),
    responses(
        (status = 200, description = "The app now.", body = MailApp),
        (status = 400, description = "`bad_input`: not JSON, over 64 KiB, an invalid body, an \
            app that cannot be granted (empty, `core`, the reader itself), or Core's or an \
            invalid app id.", body = ErrorBody),
        ChangeAnswers,
    )
)]
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
