//! The `registry` function: apps publish their registry entry with their own workload
//! credential, and anyone reads the identity JWKS documents.
//!
//! - `GET /.well-known/cloud-session-jwks.json`, `GET /.well-known/cloud-invocation-jwks.json`:
//!   the keys that verify session and invocation tokens (ETag, 5-minute public cache, 304).
//!   Concurrent requests share reads of the keys: every answer comes from a read that started
//!   after its request arrived (a revoked key leaves the document at once), and one read serves
//!   every request that arrived while the previous read ran.
//! - `PUT /api/registry/v1/apps/{appId}`: `Authorization: Bearer cld_…` of the app's
//!   resource-bound service account with scope `registry:publish`; the body is the entry, alive
//!   for 180 s unless published again.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router, middleware};
use k2b_core::Core;
use k2b_core::access::app_credential;
use k2b_core::config::Needs;
use k2b_core::db::reads::SharedReads;
use k2b_core::http::ApiError;
use k2b_core::http::body::{BodyError, read_json};
use k2b_core::http::headers::{no_store, request_id};
use k2b_core::http::routes::Routes;
use k2b_core::identity::{
    INVOCATION_JWKS_PATH, JWKS_MAX_AGE_SECONDS, Purpose, SESSION_JWKS_PATH, ring,
};
use k2b_core::registry::store::{self, MAX_ENTRY_BYTES};
use k2b_core::registry::{APP_REGISTRY_TTL, RegistryError};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// The scope an app's credential needs to publish its entry.
pub const PUBLISH_SCOPE: &str = "registry:publish";

/// The function: the database only (JWKS are public keys; credentials are checked by hash).
pub const FUNCTION: k2b_core::lambda::Function = k2b_core::lambda::Function {
    name: "registry",
    needs: Needs::DATABASE,
};

/// The function's routes.
pub fn routes(core: Core) -> Routes {
    let session = Arc::new(JwksReads::new(Purpose::Session));
    let invocation = Arc::new(JwksReads::new(Purpose::Invocation));
    Routes::new()
        .get(
            SESSION_JWKS_PATH,
            move |State(core): State<Core>, headers: HeaderMap| async move {
                session.respond(&core, &headers).await
            },
        )
        .get(
            INVOCATION_JWKS_PATH,
            move |State(core): State<Core>, headers: HeaderMap| async move {
                invocation.respond(&core, &headers).await
            },
        )
        .merge(
            Routes::new()
                .put("/api/registry/v1/apps/{app_id}", publish)
                .layer(middleware::from_fn(no_store)),
        )
        .layer(middleware::from_fn(request_id))
        .with_state(core)
}

/// The routes as the front door serves them.
pub fn router(core: Core) -> Router {
    k2b_core::lambda::front_door(routes(core))
}

/// `"` + the first 32 hex characters of SHA-256 over `{purpose, keys}` + `"`.
pub fn jwks_etag(purpose: Purpose, keys: &[Value]) -> String {
    let document = json!({"purpose": purpose.as_str(), "keys": keys});
    let digest = hex::encode(Sha256::digest(document.to_string().as_bytes()));
    format!("\"{}\"", &digest[..32])
}

/// A purpose's JWKS document as read: its ETag and its serialized body.
struct JwksDocument {
    etag: HeaderValue,
    body: Bytes,
}

/// The reads of one purpose's JWKS document, shared by concurrent requests
/// ([`SharedReads`]: no answer predates its request, so a revoked key leaves at once).
struct JwksReads {
    purpose: Purpose,
    cache_control: HeaderValue,
    reads: SharedReads<JwksDocument>,
}

impl JwksReads {
    fn new(purpose: Purpose) -> JwksReads {
        JwksReads {
            purpose,
            cache_control: HeaderValue::from_str(&format!(
                "public, max-age={JWKS_MAX_AGE_SECONDS}, must-revalidate"
            ))
            .unwrap_or_else(|_| HeaderValue::from_static("no-cache")),
            reads: SharedReads::new(),
        }
    }

    async fn document(
        &self,
        core: &Core,
    ) -> Result<Arc<JwksDocument>, k2b_core::identity::IdentityError> {
        self.reads
            .read(|| async {
                let keys = ring::list_jwks(&core.pool, self.purpose).await?;
                let etag = HeaderValue::from_str(&jwks_etag(self.purpose, &keys))
                    .unwrap_or_else(|_| HeaderValue::from_static("\"\""));
                let body = Bytes::from(json!({ "keys": keys }).to_string());
                Ok(JwksDocument { etag, body })
            })
            .await
    }

    async fn respond(&self, core: &Core, headers: &HeaderMap) -> Response {
        let document = match self.document(core).await {
            Ok(document) => document,
            Err(error) => {
                tracing::warn!(purpose = self.purpose.as_str(), error = %error, "JWKS unavailable");
                return ApiError::unavailable("The key set is unavailable right now.")
                    .into_response();
            }
        };
        let matches = headers
            .get(header::IF_NONE_MATCH)
            .is_some_and(|value| value.as_bytes() == document.etag.as_bytes());
        let mut response = if matches {
            (StatusCode::NOT_MODIFIED, Body::empty()).into_response()
        } else {
            (
                [(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                )],
                document.body.clone(),
            )
                .into_response()
        };
        let headers = response.headers_mut();
        headers.insert(header::ETAG, document.etag.clone());
        headers.insert(header::CACHE_CONTROL, self.cache_control.clone());
        response
    }
}

/// 429 `RATE_LIMITED` with `Retry-After` (seconds to the next minute).
fn too_many_publishes(retry_after: u64) -> Response {
    let mut response = ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        "RATE_LIMITED",
        format!(
            "An app may publish its registry entry at most {} times a minute.",
            store::MAX_PUBLISHES_PER_MINUTE
        ),
    )
    .with_field("limit", store::MAX_PUBLISHES_PER_MINUTE)
    .into_response();
    if let Ok(value) = HeaderValue::from_str(&retry_after.to_string()) {
        response.headers_mut().insert(header::RETRY_AFTER, value);
    }
    response
}

async fn publish(
    State(core): State<Core>,
    Path(app_id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    app_credential(&core.pool, &headers, &app_id, PUBLISH_SCOPE).await?;
    {
        let mut conn = core
            .pool
            .acquire()
            .await
            .map_err(|_| ApiError::unavailable("The registry is unavailable right now."))?;
        match store::count_publish(&mut conn, &app_id).await {
            Ok(None) => {}
            Ok(Some(retry_after)) => {
                tracing::warn!(app_id = %app_id, "registry publishes over the per-minute limit");
                return Ok(too_many_publishes(retry_after));
            }
            Err(error) => {
                tracing::warn!(app_id = %app_id, error = %error, "registry rate count failed");
                return Err(ApiError::unavailable(
                    "The registry is unavailable right now.",
                ));
            }
        }
    }
    let entry: Value =
        read_json(&headers, body, MAX_ENTRY_BYTES)
            .await
            .map_err(|error| match error {
                BodyError::TooLarge { limit } => ApiError::payload_too_large(limit),
                _ => ApiError::bad_request("The registry entry must be a JSON object."),
            })?;
    if entry.get("id").and_then(Value::as_str) != Some(app_id.as_str()) {
        return Err(ApiError::bad_request(
            "The entry's id must equal the app id of the path.",
        ));
    }
    let mut conn = core
        .pool
        .acquire()
        .await
        .map_err(|_| ApiError::unavailable("The registry is unavailable right now."))?;
    match store::upsert(&mut conn, &entry, APP_REGISTRY_TTL).await {
        Ok(_) => {}
        Err(RegistryError::Invalid(reason)) => return Err(ApiError::bad_request(reason)),
        Err(RegistryError::TooLarge { .. }) => {
            return Err(ApiError::payload_too_large(MAX_ENTRY_BYTES));
        }
        Err(error) => {
            tracing::warn!(app_id = %app_id, error = %error, "registry write failed");
            return Err(ApiError::unavailable(
                "The registry is unavailable right now.",
            ));
        }
    }
    let expires_at =
        chrono::Utc::now() + chrono::Duration::seconds(APP_REGISTRY_TTL.as_secs() as i64);
    Ok(Json(json!({
        "id": app_id,
        "expiresAt": expires_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
    }))
    .into_response())
}
