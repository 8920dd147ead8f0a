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
use k2b_core::http::openapi::ErrorBody;
use k2b_core::http::routes::Routes;
use k2b_core::identity::{
    INVOCATION_JWKS_PATH, JWKS_MAX_AGE_SECONDS, Purpose, SESSION_JWKS_PATH, ring,
};
use k2b_core::registry::store::{self, MAX_ENTRY_BYTES};
use k2b_core::registry::{APP_REGISTRY_TTL, AppRegistryEntry, RegistryError};
use serde::Serialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use utoipa::OpenApi;

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
            move |State(core): State<Core>, IfNoneMatch(tag): IfNoneMatch| async move {
                session_jwks(&session, &core, tag.as_ref()).await
            },
        )
        .get(
            INVOCATION_JWKS_PATH,
            move |State(core): State<Core>, IfNoneMatch(tag): IfNoneMatch| async move {
                invocation_jwks(&invocation, &core, tag.as_ref()).await
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

/// The function's part of the API's OpenAPI document.
#[derive(OpenApi)]
#[openapi(paths(session_jwks, invocation_jwks, publish))]
struct Api;

/// The function's part of the API's OpenAPI document: every route of [`routes`].
pub fn openapi() -> utoipa::openapi::OpenApi {
    Api::openapi()
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

/// A JWKS document: `{keys}`.
#[derive(Serialize, utoipa::ToSchema)]
#[schema(as = Jwks)]
struct JwksBody<'a> {
    /// The public keys that verify the purpose's tokens (pending, active and retired keys
    /// inside their verification window), oldest first.
    #[schema(value_type = Vec<Jwk>)]
    keys: &'a [Value],
}

/// A public signing key as published in a JWKS (RFC 7517): RSA, `RS256`, for signatures.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
struct Jwk {
    /// `RSA`.
    kty: String,
    /// The modulus (base64url).
    n: String,
    /// The public exponent (base64url).
    e: String,
    /// `RS256`.
    alg: String,
    /// The key id tokens name in their header.
    kid: String,
    /// `sig`.
    #[schema(rename = "use")]
    key_use: String,
}

/// The keys that verify session tokens
///
/// Public and cacheable for 5 minutes; the ETag covers the purpose and keys, and an
/// `If-None-Match` equal to it is answered with 304. Every answer comes from a read that started
/// after the request arrived, so a revoked key leaves the document at once.
#[utoipa::path(
    get,
    path = SESSION_JWKS_PATH,
    tag = "registry",
    operation_id = "registrySessionJwks",
    params(("If-None-Match" = Option<String>, Header, description = "The ETag of an earlier answer: 304 when it is exactly the current one.")),
    security(()),
    responses(
        (status = 200, description = "The key set.", body = JwksBody,
            headers(
                ("ETag" = String, description = "`\"` + 32 hex characters + `\"`."),
                ("Cache-Control" = String, description = "`public, max-age=300, must-revalidate`."),
            )),
        (status = 304, description = "The key set did not change since the ETag sent.",
            headers(
                ("ETag" = String, description = "The key set's ETag."),
                ("Cache-Control" = String, description = "`public, max-age=300, must-revalidate`."),
            )),
        (status = 503, description = "The key set is unavailable right now.", body = ErrorBody),
    )
)]
async fn session_jwks(reads: &JwksReads, core: &Core, tag: Option<&HeaderValue>) -> Response {
    reads.respond(core, tag).await
}

/// The keys that verify invocation tokens
///
/// Apps verify the tokens Core sends with its calls (widgets, authority routes) against these
/// keys. Public and cacheable for 5 minutes, with the same ETag rules as the session keys.
#[utoipa::path(
    get,
    path = INVOCATION_JWKS_PATH,
    tag = "registry",
    operation_id = "registryInvocationJwks",
    params(("If-None-Match" = Option<String>, Header, description = "The ETag of an earlier answer: 304 when it is exactly the current one.")),
    security(()),
    responses(
        (status = 200, description = "The key set.", body = JwksBody,
            headers(
                ("ETag" = String, description = "`\"` + 32 hex characters + `\"`."),
                ("Cache-Control" = String, description = "`public, max-age=300, must-revalidate`."),
            )),
        (status = 304, description = "The key set did not change since the ETag sent.",
            headers(
                ("ETag" = String, description = "The key set's ETag."),
                ("Cache-Control" = String, description = "`public, max-age=300, must-revalidate`."),
            )),
        (status = 503, description = "The key set is unavailable right now.", body = ErrorBody),
    )
)]
async fn invocation_jwks(reads: &JwksReads, core: &Core, tag: Option<&HeaderValue>) -> Response {
    reads.respond(core, tag).await
}

/// The request's `If-None-Match`: the one header the JWKS routes read (taken alone, without a
/// copy of the others).
struct IfNoneMatch(Option<HeaderValue>);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for IfNoneMatch {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _state: &S,
    ) -> Result<IfNoneMatch, Self::Rejection> {
        Ok(IfNoneMatch(
            parts.headers.get(header::IF_NONE_MATCH).cloned(),
        ))
    }
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
                let body =
                    Bytes::from(serde_json::to_vec(&JwksBody { keys: &keys }).unwrap_or_default());
                Ok(JwksDocument { etag, body })
            })
            .await
    }

    async fn respond(&self, core: &Core, tag: Option<&HeaderValue>) -> Response {
        let document = match self.document(core).await {
            Ok(document) => document,
            Err(error) => {
                tracing::warn!(purpose = self.purpose.as_str(), error = %error, "JWKS unavailable");
                return ApiError::unavailable("The key set is unavailable right now.")
                    .into_response();
            }
        };
        let matches = tag.is_some_and(|value| value.as_bytes() == document.etag.as_bytes());
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

/// The answer of a publish: `{expiresAt, id}`.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
struct RegistryPublished {
    /// When the entry expires unless published again (RFC 3339, milliseconds, UTC).
    #[schema(format = DateTime)]
    expires_at: String,
    /// The app id.
    id: String,
}

/// Publish an app's registry entry
///
/// With the app's own workload credential (scope `registry:publish`). The entry lives 180 s
/// unless published again (the app's heartbeat publishes every 60 s). The body is read as JSON
/// whatever its content type; its `id` must be the app id of the path. An app publishes at most
/// 60 times a minute.
#[utoipa::path(
    put,
    path = "/api/registry/v1/apps/{app_id}",
    tag = "registry",
    operation_id = "registryPublishApp",
    params(("app_id" = String, Path, description = "The publishing app: the app of the credential.")),
    request_body(content = AppRegistryEntry, content_type = "application/json",
        description = "The entry, at most 65 536 bytes."),
    security(("appCredential" = [])),
    responses(
        (status = 200, description = "The entry is published.", body = RegistryPublished,
            headers(("Cache-Control" = String, description = "`no-store`."))),
        (status = 400, description = "The body is not a JSON object, its `id` is not the app of the path, a field breaks a rule (the message names it), or a path parameter is not valid UTF-8.", content(
            (ErrorBody = "application/json"), (String = "text/plain"))),
        (status = 401, description = "No valid app credential (`Authorization: Bearer cld_…` of an app's own account).", body = ErrorBody),
        (status = 403, description = "The credential belongs to another app or lacks the `registry:publish` scope.", body = ErrorBody),
        (status = 413, description = "The entry exceeds 65 536 bytes.", body = ErrorBody),
        (status = 429, description = "`RATE_LIMITED`: more than 60 publishes this minute (the body's `limit` says how many).", body = ErrorBody,
            headers(("Retry-After" = u64, description = "Seconds until the next minute begins."))),
        (status = 503, description = "Credentials cannot be checked, or the registry is unavailable right now.", body = ErrorBody),
    )
)]
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
    Ok(Json(RegistryPublished {
        expires_at: expires_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        id: app_id,
    })
    .into_response())
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
            assert_eq!(operation.operation["tags"], json!(["registry"]));
            operations.push(operation.name());
        }
        operations.sort();
        let mut expected = vec![
            format!("GET {SESSION_JWKS_PATH}"),
            format!("GET {INVOCATION_JWKS_PATH}"),
            "PUT /api/registry/v1/apps/{app_id}".to_string(),
        ];
        expected.sort();
        assert_eq!(operations, expected);
        let paths = &document["paths"];
        assert_eq!(paths[SESSION_JWKS_PATH]["get"]["security"], json!([{}]));
        let publish = &paths["/api/registry/v1/apps/{app_id}"]["put"];
        assert_eq!(publish["security"], json!([{"appCredential": []}]));
        assert!(publish["responses"]["429"]["headers"]["Retry-After"].is_object());
        let entry = &document["components"]["schemas"]["AppRegistryEntry"];
        assert_eq!(
            entry["required"],
            json!(["id", "name", "icon", "description", "baseUrl", "routes"])
        );
    }

    /// The typed bodies keep the bytes of the former `json!` ones.
    #[test]
    fn bodies_keep_their_wire_shape() {
        let keys = vec![json!({"kid": "k", "kty": "RSA"})];
        assert_eq!(
            serde_json::to_string(&JwksBody { keys: &keys }).expect("json"),
            json!({ "keys": keys }).to_string()
        );
        let published = RegistryPublished {
            expires_at: "2026-01-01T00:00:00.000Z".into(),
            id: "demo".into(),
        };
        assert_eq!(
            serde_json::to_string(&published).expect("json"),
            json!({"id": "demo", "expiresAt": "2026-01-01T00:00:00.000Z"}).to_string()
        );
    }
}
