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
use k2b_core::help::reader::HelpReader;
use k2b_core::help::store::{self, Published};
use k2b_core::help::{
    HelpError, LIST_PAGE, MAX_SEARCH_LIMIT, parse_corpus, render_help_markdown, validate_corpus,
};
use k2b_core::http::ApiError;
use k2b_core::http::body::{BodyError, read_limited};
use k2b_core::http::etag::{if_none_match, sha256_etag};
use k2b_core::http::headers::{no_store, request_id, set_no_store};
use k2b_core::http::locale::request_locale;
use k2b_core::http::routes::Routes;
use k2b_core::lambda::Function;
use serde::Serialize;
use serde_json::{Value, json};

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
        Ok::<_, HelpError>(json!({"locale": reader.locale(), "ids": ids}))
    };
    match result.await {
        Ok(body) => personal(Json(body).into_response()),
        Err(error) => store_failed(error),
    }
}

/// Search across the Help of every app the viewer may see: `{locale, documents}`, each hit
/// `{kind, appId, appName, locale, documentId, title, description?}`; `limit` 1–25 (default 10).
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
        Ok::<_, HelpError>(json!({"locale": reader.locale(), "documents": documents}))
    };
    match result.await {
        Ok(body) => personal(Json(body).into_response()),
        Err(error) => store_failed(error),
    }
}

#[derive(Serialize)]
struct DocumentBody<'a> {
    locale: &'a str,
    id: &'a str,
    title: &'a str,
    markdown: &'a str,
    html: String,
}

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
        Ok::<_, HelpError>(json!({
            "locale": reader.locale(),
            "items": items,
            "nextCursor": next_cursor,
        }))
    };
    match result.await {
        Ok(body) => personal(Json(body).into_response()),
        Err(error) => store_failed(error),
    }
}

fn invalid_corpus(message: String) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "INVALID_CORPUS", message)
}

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
        let mut body = json!({
            "appId": app_id,
            "manifestHash": manifest_hash,
            "published": published,
        });
        if let Some(documents) = documents {
            body["documents"] = json!(documents);
        }
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
