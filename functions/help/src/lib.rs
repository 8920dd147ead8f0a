//! The `help` function: the Help of every app, for the people who may see the app.
//!
//! - Readers (any signed-in credential; OAuth needs `read` or `admin`):
//!   `GET /api/help/v1/search?q=&limit=` → `{locale, documents}` across every app the viewer
//!   may see; `GET /api/help/v1/{appId}/search?q=` → `{locale, ids}`;
//!   `GET /api/help/v1/{appId}/documents/{documentId}` → `{locale, id, title, markdown, html}`
//!   (ETag, 304); `GET /api/help/v1/{appId}/manifest` → the app's documents without bodies;
//!   `GET /api/help/v1?cursor=` → every visible document's metadata, 100 per page.
//!   An app the viewer may not see looks exactly like one without Help: empty, or 404.
//! - Apps: `PUT /api/help/v1/{appId}/corpus` with their own workload credential
//!   (`registry:publish`), before they advertise the corpus's hash in their registry entry.

use std::collections::HashMap;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json, Router, middleware};
use k2b_core::Core;
use k2b_core::access::{app_credential, require_reader};
use k2b_core::auth::Actor;
use k2b_core::config::Needs;
use k2b_core::help::compile::Corpus;
use k2b_core::help::reader::HelpReader;
use k2b_core::help::reader::{ListItem, Manifest, SearchItem};
use k2b_core::help::store::{self, Published};
use k2b_core::help::{
    HelpError, LIST_PAGE, MAX_SEARCH_LIMIT, parse_corpus, render_help_markdown, validate_corpus,
};
use k2b_core::http::ApiError;
use k2b_core::http::body::{BodyError, read_limited};
use k2b_core::http::etag::{if_none_match, sha256_etag};
use k2b_core::http::headers::{no_store, request_id, set_no_store};
use k2b_core::http::locale::request_locale;
use k2b_core::http::openapi::ErrorBody;
use k2b_core::http::routes::Routes;
use k2b_core::lambda::Function;
use serde::Serialize;
use serde_json::Value;
use utoipa::OpenApi;

/// The function: the database and `APP_SECRET` (sessions and the installation's locale).
pub const FUNCTION: Function = Function {
    name: "help",
    needs: Needs::DATABASE.with_settings(),
};

/// The scope an app's credential needs to publish its corpus: the one that advertises it.
pub const PUBLISH_SCOPE: &str = "registry:publish";
/// The largest corpus accepted, in bytes of JSON: API Gateway base64-encodes the body (4/3), and
/// a Lambda request is at most 6 MB.
pub const MAX_CORPUS_BYTES: usize = 4 * 1024 * 1024;

/// The function's part of the API's OpenAPI document.
#[derive(OpenApi)]
#[openapi(paths(list, search_all, search, document, manifest, publish))]
struct Api;

/// The function's part of the API's OpenAPI document: every route of [`routes`].
pub fn openapi() -> utoipa::openapi::OpenApi {
    Api::openapi()
}

/// The function's routes.
pub fn routes(core: Core) -> Routes {
    let reading = Routes::new()
        .get("/api/help/v1", list)
        .get("/api/help/v1/search", search_all)
        .get("/api/help/v1/{app_id}/search", search)
        .get("/api/help/v1/{app_id}/documents/{document_id}", document)
        .get("/api/help/v1/{app_id}/manifest", manifest)
        .layer(middleware::from_fn_with_state(core.clone(), require_reader));
    reading
        .merge(
            Routes::new()
                .put("/api/help/v1/{app_id}/corpus", publish)
                .layer(middleware::from_fn(no_store)),
        )
        .layer(middleware::from_fn(request_id))
        .with_state(core)
}

/// The routes as the front door serves them.
pub fn router(core: Core) -> Router {
    k2b_core::lambda::front_door(routes(core))
}

/// 500 for a store that failed (logged without the request).
fn store_failed(error: HelpError) -> Response {
    tracing::error!(error = %error, "help store unavailable");
    ApiError::internal().into_response()
}

/// The request locale: the client's choice, else the installation's `app.locale`, else `en`.
async fn locale_of(core: &Core, headers: &HeaderMap) -> String {
    let installation = core.settings.app_locale().await.ok();
    request_locale(headers, installation.as_deref())
}

/// The reader of this request's viewer and locale (the viewer is the person behind the actor:
/// a user, or the person a service account acts for).
async fn reader_for(
    core: &Core,
    actor: &Actor,
    headers: &HeaderMap,
    app_id: Option<&str>,
) -> Result<HelpReader, HelpError> {
    let locale = locale_of(core, headers).await;
    HelpReader::new(&core.pool, &locale, actor.person(), app_id).await
}

/// A personal answer: it depends on who asks.
fn personal(mut response: Response) -> Response {
    set_no_store(response.headers_mut());
    response.headers_mut().append(
        header::VARY,
        HeaderValue::from_static("Cookie, Authorization"),
    );
    response
}

fn not_found(locale: &str) -> Response {
    let german = locale
        .split('-')
        .next()
        .is_some_and(|p| p.eq_ignore_ascii_case("de"));
    let message = if german {
        "Hilfedokument nicht gefunden"
    } else {
        "Help document not found"
    };
    personal(ApiError::new(StatusCode::NOT_FOUND, "HELP_NOT_FOUND", message).into_response())
}

/// The ids of an app's Help documents that match `q`
///
/// At most 25, best first: an exact id or title, then by full-text rank in each document's own
/// language. An unknown app, one the viewer may not see, or an empty `q` gives no ids.
#[utoipa::path(
    get,
    path = "/api/help/v1/{app_id}/search",
    tag = "help",
    operation_id = "helpSearchApp",
    params(
        ("app_id" = String, Path, description = "The app whose Help is searched."),
        ("q" = Option<String>, Query, description = "The search text (trimmed, cut to 200 characters)."),
        ("x-cloud-locale" = Option<String>, Header, description = "The request locale (a BCP 47 tag); else the `cloud.locale` cookie, else `Accept-Language`, else the installation's `app.locale`, else `en`. Invalid tags are skipped."),
    ),
    security(("session" = []), ("appSession" = []), ("oauth" = [])),
    responses(
        (status = 200, description = "The matching document ids.", body = HelpSearchIds,
            headers(("Cache-Control" = String, description = "`no-store`: the answer depends on the viewer."))),
        (status = 400, description = "A path parameter is not valid UTF-8.", content(
            (ErrorBody = "application/json"), (String = "text/plain"))),
        (status = 401, description = "No valid credential.", body = ErrorBody),
        (status = 403, description = "An app's workload credential, or an OAuth token without the `read` or `admin` scope.", body = ErrorBody),
        (status = 500, description = "The Help store failed.", body = ErrorBody),
        (status = 503, description = "Credentials cannot be checked right now.", body = ErrorBody),
    )
)]
async fn search(
    State(core): State<Core>,
    Extension(actor): Extension<Actor>,
    Path(app_id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let result = async {
        let reader = reader_for(&core, &actor, &headers, Some(&app_id)).await?;
        let q = query.get("q").map(String::as_str).unwrap_or_default();
        let hits = reader
            .search(q, Some(&app_id), Some(MAX_SEARCH_LIMIT))
            .await?;
        let ids: Vec<String> = hits.into_iter().map(|hit| hit.document_id).collect();
        Ok::<_, HelpError>(HelpSearchIds {
            ids,
            locale: reader.locale().to_string(),
        })
    };
    match result.await {
        Ok(body) => personal(Json(body).into_response()),
        Err(error) => store_failed(error),
    }
}

/// `{ids, locale}`: the answer of an app's search.
#[derive(Serialize, utoipa::ToSchema)]
struct HelpSearchIds {
    /// Document ids, best first (at most 25).
    #[schema(max_items = 25)]
    ids: Vec<String>,
    /// The request locale.
    locale: String,
}

/// `{documents, locale}`: the answer of a search across apps.
#[derive(Serialize, utoipa::ToSchema)]
struct HelpSearchResults {
    /// The hits, best first (at most 25).
    #[schema(max_items = 25)]
    documents: Vec<SearchItem>,
    /// The request locale.
    locale: String,
}

/// Search the Help of every app the viewer may see
///
/// Each hit is `{kind, appId, appName, locale, documentId, title, description?}`, best first:
/// an exact id or title, then by full-text rank in each document's own language. `limit` is
/// clamped to 1–25 (default 10); an empty `q` finds nothing.
#[utoipa::path(
    get,
    path = "/api/help/v1/search",
    tag = "help",
    operation_id = "helpSearch",
    params(
        ("q" = Option<String>, Query, description = "The search text (trimmed, cut to 200 characters)."),
        ("limit" = Option<i64>, Query, description = "How many hits at most: a whole number, clamped to 1–25 (default 10)."),
        ("x-cloud-locale" = Option<String>, Header, description = "The request locale (a BCP 47 tag); else the `cloud.locale` cookie, else `Accept-Language`, else the installation's `app.locale`, else `en`. Invalid tags are skipped."),
    ),
    security(("session" = []), ("appSession" = []), ("oauth" = [])),
    responses(
        (status = 200, description = "The hits.", body = HelpSearchResults,
            headers(("Cache-Control" = String, description = "`no-store`: the answer depends on the viewer."))),
        (status = 400, description = "`limit` is not a whole number.", body = ErrorBody),
        (status = 401, description = "No valid credential.", body = ErrorBody),
        (status = 403, description = "An app's workload credential, or an OAuth token without the `read` or `admin` scope.", body = ErrorBody),
        (status = 500, description = "The Help store failed.", body = ErrorBody),
        (status = 503, description = "Credentials cannot be checked right now.", body = ErrorBody),
    )
)]
async fn search_all(
    State(core): State<Core>,
    Extension(actor): Extension<Actor>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let limit = match query.get("limit").map(|l| l.parse::<i64>()) {
        None => None,
        Some(Ok(limit)) => Some(limit),
        Some(Err(_)) => {
            return ApiError::bad_request("limit must be a whole number from 1 to 25.")
                .into_response();
        }
    };
    let result = async {
        let reader = reader_for(&core, &actor, &headers, None).await?;
        let q = query.get("q").map(String::as_str).unwrap_or_default();
        let documents = reader.search(q, None, limit).await?;
        Ok::<_, HelpError>(HelpSearchResults {
            documents,
            locale: reader.locale().to_string(),
        })
    };
    match result.await {
        Ok(body) => personal(Json(body).into_response()),
        Err(error) => store_failed(error),
    }
}

/// One Help document with its body, as Markdown and as sanitised HTML.
#[derive(Serialize, utoipa::ToSchema)]
#[schema(as = HelpDocument)]
struct DocumentBody<'a> {
    /// The locale of the version read (the first of the request's chain the app translates).
    locale: &'a str,
    id: &'a str,
    title: &'a str,
    markdown: &'a str,
    /// The Markdown rendered for the document's locale and sanitised.
    html: String,
}

/// One Help document
///
/// The ETag covers the body, so `If-None-Match` revalidates it (304); the answer is private and
/// revalidated on every use. A document the viewer may not see is not found.
#[utoipa::path(
    get,
    path = "/api/help/v1/{app_id}/documents/{document_id}",
    tag = "help",
    operation_id = "helpGetDocument",
    params(
        ("app_id" = String, Path, description = "The app the document belongs to."),
        ("document_id" = String, Path, description = "The document's id."),
        ("If-None-Match" = Option<String>, Header, description = "An ETag of an earlier answer: 304 when it still matches."),
        ("x-cloud-locale" = Option<String>, Header, description = "The request locale (a BCP 47 tag); else the `cloud.locale` cookie, else `Accept-Language`, else the installation's `app.locale`, else `en`. Invalid tags are skipped."),
    ),
    security(("session" = []), ("appSession" = []), ("oauth" = [])),
    responses(
        (status = 200, description = "The document.", body = DocumentBody,
            headers(
                ("ETag" = String, description = "`\"` + the first 32 hex characters of SHA-256 over the body + `\"`."),
                ("Cache-Control" = String, description = "`private, no-cache`."),
            )),
        (status = 304, description = "The document did not change since the ETag sent.",
            headers(
                ("ETag" = String, description = "The document's ETag."),
                ("Cache-Control" = String, description = "`private, no-cache`."),
            )),
        (status = 400, description = "A path parameter is not valid UTF-8.", content(
            (ErrorBody = "application/json"), (String = "text/plain"))),
        (status = 401, description = "No valid credential.", body = ErrorBody),
        (status = 403, description = "An app's workload credential, or an OAuth token without the `read` or `admin` scope.", body = ErrorBody),
        (status = 404, description = "`HELP_NOT_FOUND`: no such document, or the viewer may not see the app (message in the request locale).", body = ErrorBody),
        (status = 500, description = "The Help store failed.", body = ErrorBody),
        (status = 503, description = "Credentials cannot be checked right now.", body = ErrorBody),
    )
)]
async fn document(
    State(core): State<Core>,
    Extension(actor): Extension<Actor>,
    Path((app_id, document_id)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let result = async {
        let reader = reader_for(&core, &actor, &headers, Some(&app_id)).await?;
        let read = reader.read(&app_id, &document_id).await?;
        Ok::<_, HelpError>((reader.locale().to_string(), read))
    };
    let (locale, read) = match result.await {
        Ok(found) => found,
        Err(error) => return store_failed(error),
    };
    let Some(read) = read else {
        return not_found(&locale);
    };
    let body = DocumentBody {
        locale: &read.item.locale,
        id: &read.item.document_id,
        title: &read.item.title,
        markdown: &read.markdown,
        html: render_help_markdown(&read.markdown, Some(&read.item.locale)),
    };
    let Ok(bytes) = serde_json::to_vec(&body) else {
        return ApiError::internal().into_response();
    };
    let etag = sha256_etag(&bytes, 32);
    let Ok(etag_value) = HeaderValue::from_str(&etag) else {
        return ApiError::internal().into_response();
    };
    let mut response = if if_none_match(&headers, &etag) {
        (StatusCode::NOT_MODIFIED, Body::empty()).into_response()
    } else {
        (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            bytes,
        )
            .into_response()
    };
    let headers = response.headers_mut();
    headers.insert(header::ETAG, etag_value);
    // Revalidated on every use: what a viewer may read can change at any time.
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("private, no-cache"),
    );
    headers.append(
        header::VARY,
        HeaderValue::from_static("Cookie, Authorization"),
    );
    response
}

/// An app's Help documents without their bodies
///
/// With the advertised corpus hash, its page base and base locale, and each document's
/// search and read URLs; documents by order, then title.
#[utoipa::path(
    get,
    path = "/api/help/v1/{app_id}/manifest",
    tag = "help",
    operation_id = "helpGetManifest",
    params(
        ("app_id" = String, Path, description = "The app whose Help is listed."),
        ("x-cloud-locale" = Option<String>, Header, description = "The request locale (a BCP 47 tag); else the `cloud.locale` cookie, else `Accept-Language`, else the installation's `app.locale`, else `en`. Invalid tags are skipped."),
    ),
    security(("session" = []), ("appSession" = []), ("oauth" = [])),
    responses(
        (status = 200, description = "The app's Help.", body = Manifest,
            headers(("Cache-Control" = String, description = "`no-store`: the answer depends on the viewer."))),
        (status = 400, description = "A path parameter is not valid UTF-8.", content(
            (ErrorBody = "application/json"), (String = "text/plain"))),
        (status = 401, description = "No valid credential.", body = ErrorBody),
        (status = 403, description = "An app's workload credential, or an OAuth token without the `read` or `admin` scope.", body = ErrorBody),
        (status = 404, description = "`HELP_NOT_FOUND`: the app has no published Help, or the viewer may not see it.", body = ErrorBody),
        (status = 500, description = "The Help store failed.", body = ErrorBody),
        (status = 503, description = "Credentials cannot be checked right now.", body = ErrorBody),
    )
)]
async fn manifest(
    State(core): State<Core>,
    Extension(actor): Extension<Actor>,
    Path(app_id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let result = async {
        let reader = reader_for(&core, &actor, &headers, Some(&app_id)).await?;
        let manifest = reader.manifest(&app_id).await?;
        Ok::<_, HelpError>((reader.locale().to_string(), manifest))
    };
    match result.await {
        Ok((_, Some(manifest))) => personal(Json(manifest).into_response()),
        Ok((locale, None)) => not_found(&locale),
        Err(error) => store_failed(error),
    }
}

/// A page of every visible Help document's metadata: `{items, locale, nextCursor}`.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
struct HelpListPage {
    /// At most 100 documents, in resource-URI order.
    #[schema(max_items = 100)]
    items: Vec<ListItem>,
    /// The request locale.
    locale: String,
    /// The `cursor` of the next page (`cloud://help/<appId>/<documentId>`), or `null` on the
    /// last page.
    #[schema(required = true)]
    next_cursor: Option<String>,
}

/// Every Help document the viewer may see, without bodies, 100 per page
#[utoipa::path(
    get,
    path = "/api/help/v1",
    tag = "help",
    operation_id = "helpList",
    params(
        ("cursor" = Option<String>, Query, description = "The `nextCursor` of the previous page; absent or empty for the first."),
        ("x-cloud-locale" = Option<String>, Header, description = "The request locale (a BCP 47 tag); else the `cloud.locale` cookie, else `Accept-Language`, else the installation's `app.locale`, else `en`. Invalid tags are skipped."),
    ),
    security(("session" = []), ("appSession" = []), ("oauth" = [])),
    responses(
        (status = 200, description = "A page of documents.", body = HelpListPage,
            headers(("Cache-Control" = String, description = "`no-store`: the answer depends on the viewer."))),
        (status = 401, description = "No valid credential.", body = ErrorBody),
        (status = 403, description = "An app's workload credential, or an OAuth token without the `read` or `admin` scope.", body = ErrorBody),
        (status = 500, description = "The Help store failed.", body = ErrorBody),
        (status = 503, description = "Credentials cannot be checked right now.", body = ErrorBody),
    )
)]
async fn list(
    State(core): State<Core>,
    Extension(actor): Extension<Actor>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let cursor = query.get("cursor").map(String::as_str).unwrap_or_default();
    let result = async {
        let reader = reader_for(&core, &actor, &headers, None).await?;
        let mut items = reader.list(cursor).await?;
        let next_cursor = (items.len() > LIST_PAGE).then(|| items[LIST_PAGE - 1].uri());
        items.truncate(LIST_PAGE);
        Ok::<_, HelpError>(HelpListPage {
            items,
            locale: reader.locale().to_string(),
            next_cursor,
        })
    };
    match result.await {
        Ok(body) => personal(Json(body).into_response()),
        Err(error) => store_failed(error),
    }
}

fn invalid_corpus(message: String) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "INVALID_CORPUS", message)
}

/// The answer of a publish: `{appId, documents?, manifestHash, published}`.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
struct HelpPublished<'a> {
    app_id: &'a str,
    /// The document rows stored (every locale), when the corpus was new.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    documents: Option<usize>,
    manifest_hash: &'a str,
    /// Whether this publish stored the corpus (`false`: it was stored already and only renewed).
    published: bool,
}

/// Publish an app's Help corpus
///
/// With the app's own workload credential (scope `registry:publish`), before the app advertises
/// the corpus's hash in its registry entry. A corpus stored already (same app and hash) is only
/// renewed (200, `published: false`); a new one is checked and stored (201). The body is read
/// as JSON whatever its content type, at most 4 MiB.
#[utoipa::path(
    put,
    path = "/api/help/v1/{app_id}/corpus",
    tag = "help",
    operation_id = "helpPublishCorpus",
    params(("app_id" = String, Path, description = "The publishing app: the app of the credential.")),
    request_body(content = Corpus, content_type = "application/json",
        description = "The compiled corpus, at most 4 194 304 bytes."),
    security(("appCredential" = [])),
    responses(
        (status = 200, description = "The corpus was stored already: its lease is renewed.", body = HelpPublished,
            headers(("Cache-Control" = String, description = "`no-store`."))),
        (status = 201, description = "The corpus is stored.", body = HelpPublished,
            headers(("Cache-Control" = String, description = "`no-store`."))),
        (status = 400, description = "`INVALID_CORPUS`: not JSON, or a rule broken (the message names the document and field); `INVALID_REQUEST`: the body could not be read; or a path parameter is not valid UTF-8.", content(
            (ErrorBody = "application/json"), (String = "text/plain"))),
        (status = 401, description = "No valid app credential (`Authorization: Bearer cld_…` of an app's own account).", body = ErrorBody),
        (status = 403, description = "The credential belongs to another app or lacks the `registry:publish` scope.", body = ErrorBody),
        (status = 413, description = "The body exceeds 4 194 304 bytes.", body = ErrorBody),
        (status = 503, description = "Credentials cannot be checked, or Help cannot be published right now.", body = ErrorBody),
    )
)]
async fn publish(
    State(core): State<Core>,
    Path(app_id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let app_id = app_id.as_str();
    app_credential(&core.pool, &headers, app_id, PUBLISH_SCOPE).await?;
    let bytes = read_limited(&headers, body, MAX_CORPUS_BYTES)
        .await
        .map_err(|error| match error {
            BodyError::TooLarge { limit } => ApiError::payload_too_large(limit),
            _ => ApiError::bad_request("The request body could not be read."),
        })?;
    let value: Value = serde_json::from_slice(&bytes)
        .map_err(|error| invalid_corpus(format!("The corpus is not valid JSON: {error}")))?;
    let mut corpus = parse_corpus(value).map_err(|error| invalid_corpus(error.to_string()))?;
    let manifest_hash = corpus.manifest_hash.clone();
    let answer = |status: StatusCode, published: bool, documents: Option<usize>| {
        let body = HelpPublished {
            app_id,
            documents,
            manifest_hash: &manifest_hash,
            published,
        };
        (status, Json(body)).into_response()
    };
    // An unchanged corpus only renews its lease: no checks, no document writes.
    if corpus.app_id == app_id {
        let renewed = store::renew(&core.pool, app_id, &manifest_hash)
            .await
            .map_err(|error| {
                tracing::error!(app_id, error = %error, "help corpus not renewed");
                ApiError::unavailable("Help cannot be published right now.")
            })?;
        if renewed {
            return Ok(answer(StatusCode::OK, false, None));
        }
    }
    validate_corpus(app_id, &mut corpus).map_err(|error| invalid_corpus(error.to_string()))?;
    match store::register(&core.pool, &corpus).await {
        Ok(Published::Inserted { documents }) => {
            tracing::info!(app_id, documents, "help corpus published");
            Ok(answer(StatusCode::CREATED, true, Some(documents)))
        }
        Ok(Published::Renewed) => Ok(answer(StatusCode::OK, false, None)),
        Err(error) => {
            tracing::error!(app_id, error = %error, "help corpus not published");
            Err(ApiError::unavailable("Help cannot be published right now."))
        }
    }
}

#[cfg(test)]
mod tests {
    use k2b_core::http::openapi::{contract_problems, documented_operations};

    use super::*;

    /// The document names exactly the routes of [`routes`] (building them needs a `Core`; the
    /// shared drift test compares the table itself), each with an id, its security and the
    /// `Error` body on every failure.
    #[test]
    fn the_document_lists_every_route_with_ids_and_error_bodies() {
        let document = serde_json::to_value(openapi()).expect("json");
        assert_eq!(contract_problems(&document, &[]), Vec::<String>::new());
        let mut operations = Vec::new();
        for operation in documented_operations(&document) {
            assert_eq!(operation.operation["tags"], serde_json::json!(["help"]));
            operations.push(operation.name());
        }
        operations.sort();
        assert_eq!(
            operations,
            [
                "GET /api/help/v1",
                "GET /api/help/v1/search",
                "GET /api/help/v1/{app_id}/documents/{document_id}",
                "GET /api/help/v1/{app_id}/manifest",
                "GET /api/help/v1/{app_id}/search",
                "PUT /api/help/v1/{app_id}/corpus",
            ]
        );
    }
}
