//! The API's OpenAPI 3.1 document: every function's operations, generated from the handlers'
//! annotations and the serde types they read and write. Served at [`PATH`] and printed by
//! `k2b-local openapi`.

use std::sync::OnceLock;

use axum::Json;
use axum::response::{IntoResponse, Response};
use http::{HeaderValue, header};
use k2b_core::http::ApiError;
use serde_json::Value;

/// Where the runner serves the document.
pub const PATH: &str = "/api/openapi.json";

/// Each HTTP function's part of the document, named as in `template.yaml`.
pub fn parts() -> Vec<(&'static str, utoipa::openapi::OpenApi)> {
    vec![
        ("registry", registry::openapi()),
        ("icons", icons::openapi()),
        ("manifest", manifest::openapi()),
        ("widgets", widgets::openapi()),
        ("help", help::openapi()),
        ("mail", mail::openapi()),
        ("approvals", approvals::openapi()),
    ]
}

/// The whole document as JSON.
pub fn document() -> anyhow::Result<Value> {
    let document = k2b_core::http::openapi::document(env!("CARGO_PKG_VERSION"), parts())
        .map_err(anyhow::Error::msg)?;
    Ok(serde_json::to_value(document)?)
}

/// `GET /api/openapi.json`: the document, built once.
pub async fn serve() -> Response {
    static DOCUMENT: OnceLock<Result<Value, String>> = OnceLock::new();
    match DOCUMENT.get_or_init(|| document().map_err(|e| format!("{e:#}"))) {
        Ok(document) => {
            let mut response = Json(document).into_response();
            response
                .headers_mut()
                .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
            response
        }
        Err(error) => {
            tracing::error!(error = %error, "the OpenAPI document cannot be built");
            ApiError::internal().into_response()
        }
    }
}

/// `k2b-local openapi`: the document on standard output.
pub fn print() -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(&document()?)?;
    println!("{text}");
    Ok(())
}
