//! The `manifest` function: the installable app's web app manifest
//! (`GET /pwa/manifest.webmanifest`) and service worker (`GET /pwa/sw.js`).
//!
//! Both are public, the same for everyone, and read `app.name`, `app.locale` and the logo on
//! every request. Their ETag is the first 32 hex characters of SHA-256 over the body, so a new
//! name, locale or logo (whose version the icon URLs carry) reaches installed apps; browsers
//! check on every app navigation and mostly get 304.
//!
//! Every other path under `/pwa/` is a part of the installed app that this deployment does not
//! serve: it answers 404 as the platform (`X-Gateway-App: core`), which the service worker turns
//! into its offline document for a navigation.

pub mod offline;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::{Router, middleware};
use k2b_core::Core;
use k2b_core::branding::AppIconSource;
use k2b_core::config::Needs;
use k2b_core::http::ApiError;
use k2b_core::http::etag::{if_none_match, sha256_etag};
use k2b_core::http::headers::request_id;
use k2b_core::http::openapi::ErrorBody;
use k2b_core::http::routes::{GATEWAY_APP_CORE, GATEWAY_APP_HEADER, Routes};
use serde::Serialize;
use utoipa::OpenApi;

pub const MANIFEST_PATH: &str = "/pwa/manifest.webmanifest";
pub const SERVICE_WORKER_PATH: &str = "/pwa/sw.js";
/// Any other path in the app's scope (`/pwa/{proxy+}` on the REST API).
pub const APP_PARTS_PATH: &str = "/pwa/{*part}";
/// The app's scope, start URL and manifest id.
pub const PWA_SCOPE: &str = "/pwa/";
/// The fixed part of the service worker.
pub const WORKER_SOURCE: &str = include_str!("../assets/service-worker.js");

/// The function: the database and `APP_SECRET` (it reads the name, locale and logo settings).
pub const FUNCTION: k2b_core::lambda::Function = k2b_core::lambda::Function {
    name: "manifest",
    needs: Needs::DATABASE.with_settings(),
};

/// The routes.
pub fn routes(core: Core) -> Routes {
    Routes::new()
        .get(MANIFEST_PATH, manifest)
        .get(SERVICE_WORKER_PATH, service_worker)
        .get(APP_PARTS_PATH, part_not_deployed)
        .layer(middleware::from_fn(request_id))
        .with_state(core)
}

/// The function's part of the API's OpenAPI document.
#[derive(OpenApi)]
#[openapi(paths(manifest, service_worker, part_not_deployed))]
struct Api;

/// The function's part of the API's OpenAPI document: every route of [`routes`] (the wildcard
/// `{*part}` as the parameter `{part}`).
pub fn openapi() -> utoipa::openapi::OpenApi {
    Api::openapi()
}

/// The routes as the front door serves them.
pub fn router(core: Core) -> Router {
    k2b_core::lambda::front_door(routes(core))
}

/// Any other path of the installed app: not deployed here
///
/// Every path under `/pwa/` other than the manifest and the service worker is a part of the
/// installed app this deployment does not serve: 404 as the platform (`X-Gateway-App: core`),
/// never cached, which the service worker turns into its offline document for a navigation.
#[utoipa::path(
    get,
    path = "/pwa/{part}",
    tag = "manifest",
    operation_id = "manifestAppPart",
    params(("part" = String, Path, min_length = 1,
        description = "The rest of the path (may contain `/`); any value other than `manifest.webmanifest` and `sw.js`.")),
    security(()),
    responses(
        (status = 404, description = "No part of the app is deployed at this path.", body = ErrorBody,
            headers(
                ("X-Gateway-App" = String, description = "`core`: the platform answered, not an app."),
                ("Cache-Control" = String, description = "`no-store`."),
            )),
    )
)]
async fn part_not_deployed() -> Response {
    let mut response =
        ApiError::not_found("No part of the app is deployed at this path.").into_response();
    let headers = response.headers_mut();
    headers.insert(
        GATEWAY_APP_HEADER,
        HeaderValue::from_static(GATEWAY_APP_CORE),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// An icon of the manifest.
#[derive(Serialize, utoipa::ToSchema)]
#[schema(as = WebAppManifestIcon)]
struct Icon {
    /// `/branding/<variant>.png?v=<icon version>`.
    src: String,
    /// `192x192` or `512x512`.
    sizes: &'static str,
    /// `image/png`.
    #[serde(rename = "type")]
    kind: &'static str,
    /// `any` or `maskable`.
    purpose: &'static str,
}

/// The installed app's web app manifest. Field order is the manifest's key order.
#[derive(Serialize, utoipa::ToSchema)]
#[schema(as = WebAppManifest)]
struct Manifest<'a> {
    /// `/pwa/`.
    id: &'static str,
    /// The installation's name (`app.name`, `Cloud` when empty).
    name: &'a str,
    short_name: &'a str,
    /// `/pwa/`.
    start_url: &'static str,
    /// `/pwa/`.
    scope: &'static str,
    /// `standalone`.
    display: &'static str,
    background_color: &'static str,
    theme_color: &'static str,
    /// The installation's locale (`app.locale`, `en` when empty).
    lang: &'a str,
    /// The 192 and 512 pixel icons and the maskable 512 pixel icon.
    #[schema(value_type = Vec<Icon>, min_items = 3, max_items = 3)]
    icons: [Icon; 3],
}

/// The installation's name for the app: `app.name`, or `Cloud` when empty.
fn display_name(name: &str) -> &str {
    if name.trim().is_empty() {
        "Cloud"
    } else {
        name
    }
}

/// The manifest body for an installation.
pub fn manifest_body(name: &str, locale: &str, icon_version: &str) -> String {
    let name = display_name(name);
    let icon = |file: &str, sizes: &'static str, purpose: &'static str| Icon {
        src: format!("/branding/{file}.png?v={icon_version}"),
        sizes,
        kind: "image/png",
        purpose,
    };
    let manifest = Manifest {
        id: PWA_SCOPE,
        name,
        short_name: name,
        start_url: PWA_SCOPE,
        scope: PWA_SCOPE,
        display: "standalone",
        background_color: "#fafafa",
        theme_color: "#fafafa",
        lang: if locale.trim().is_empty() {
            "en"
        } else {
            locale
        },
        icons: [
            icon("pwa-icon-192", "192x192", "any"),
            icon("pwa-icon-512", "512x512", "any"),
            icon("pwa-icon-maskable-512", "512x512", "maskable"),
        ],
    };
    serde_json::to_string(&manifest).unwrap_or_default()
}

/// The service worker body: the offline page as a string constant, then the fixed source.
pub fn service_worker_body(name: &str, source: &AppIconSource) -> String {
    let document = offline::offline_document(display_name(name), source);
    let literal = serde_json::to_string(&document).unwrap_or_default();
    format!("const OFFLINE_HTML = {literal};\n{WORKER_SOURCE}")
}

fn cacheable(headers: &HeaderMap, body: String, content_type: &'static str) -> Response {
    let etag = sha256_etag(body.as_bytes(), 32);
    let Ok(etag_value) = HeaderValue::from_str(&etag) else {
        return ApiError::internal().into_response();
    };
    let no_cache = HeaderValue::from_static("no-cache");
    if if_none_match(headers, &etag) {
        return (
            StatusCode::NOT_MODIFIED,
            [
                (header::ETAG, etag_value),
                (header::CACHE_CONTROL, no_cache),
            ],
            Body::empty(),
        )
            .into_response();
    }
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
            (header::ETAG, etag_value),
            (header::CACHE_CONTROL, no_cache),
        ],
        body,
    )
        .into_response()
}

fn settings_unavailable(error: impl std::fmt::Display) -> Response {
    tracing::warn!(error = %error, "installation settings unavailable");
    ApiError::unavailable("The app manifest is unavailable right now.").into_response()
}

/// The installed app's web app manifest
///
/// Public and the same for everyone, built from `app.name`, `app.locale` and the logo on every
/// request. The ETag covers the body; a matching `If-None-Match` is answered with 304.
#[utoipa::path(
    get,
    path = MANIFEST_PATH,
    tag = "manifest",
    operation_id = "manifestWebManifest",
    params(("If-None-Match" = Option<String>, Header, description = "ETags of earlier answers: 304 when one matches.")),
    security(()),
    responses(
        (status = 200, description = "The manifest.", body = Manifest, content_type = "application/manifest+json",
            headers(
                ("ETag" = String, description = "`\"` + the first 32 hex characters of SHA-256 over the body + `\"`."),
                ("Cache-Control" = String, description = "`no-cache`."),
            )),
        (status = 304, description = "The manifest did not change.",
            headers(
                ("ETag" = String, description = "The manifest's ETag."),
                ("Cache-Control" = String, description = "`no-cache`."),
            )),
        (status = 503, description = "The installation's settings cannot be read right now.", body = ErrorBody),
    )
)]
async fn manifest(State(core): State<Core>, headers: HeaderMap) -> Response {
    let read = async {
        let name = core.settings.app_name().await?;
        let locale = core.settings.app_locale().await?;
        let source = core.app_icon_source().await?;
        Ok::<_, k2b_core::settings::SettingsError>(manifest_body(&name, &locale, &source.version))
    };
    match read.await {
        Ok(body) => cacheable(&headers, body, "application/manifest+json"),
        Err(error) => settings_unavailable(error),
    }
}

/// The installed app's service worker
///
/// The offline document (with the installation's name and logo) as a string constant, then the
/// fixed worker source. The ETag covers the body; a matching `If-None-Match` is answered with
/// 304.
#[utoipa::path(
    get,
    path = SERVICE_WORKER_PATH,
    tag = "manifest",
    operation_id = "manifestServiceWorker",
    params(("If-None-Match" = Option<String>, Header, description = "ETags of earlier answers: 304 when one matches.")),
    security(()),
    responses(
        (status = 200, description = "The service worker's script.", body = String, content_type = "text/javascript",
            headers(
                ("ETag" = String, description = "`\"` + the first 32 hex characters of SHA-256 over the body + `\"`."),
                ("Cache-Control" = String, description = "`no-cache`."),
            )),
        (status = 304, description = "The script did not change.",
            headers(
                ("ETag" = String, description = "The script's ETag."),
                ("Cache-Control" = String, description = "`no-cache`."),
            )),
        (status = 503, description = "The installation's settings cannot be read right now.", body = ErrorBody),
    )
)]
async fn service_worker(State(core): State<Core>, headers: HeaderMap) -> Response {
    let read = async {
        let name = core.settings.app_name().await?;
        let source = core.app_icon_source().await?;
        Ok::<_, k2b_core::settings::SettingsError>(service_worker_body(&name, &source))
    };
    match read.await {
        Ok(body) => cacheable(&headers, body, "text/javascript; charset=utf-8"),
        Err(error) => settings_unavailable(error),
    }
}

#[cfg(test)]
mod tests {
    use k2b_core::http::openapi::{contract_problems, documented_operations};

    use super::*;

    /// The document names exactly the routes of [`routes`] (building them needs a `Core`; the
    /// shared drift test compares the table itself), each with an id, its security and the
    /// `Error` body on every failure, and the wildcard's 404 says who answered.
    #[test]
    fn the_document_lists_every_route_with_ids_and_error_bodies() {
        let document = serde_json::to_value(openapi()).expect("json");
        assert_eq!(contract_problems(&document, &[]), Vec::<String>::new());
        let mut operations = Vec::new();
        for operation in documented_operations(&document) {
            let body = operation.operation;
            assert_eq!(body["security"], serde_json::json!([{}]));
            assert_eq!(body["tags"], serde_json::json!(["manifest"]));
            operations.push(operation.name());
        }
        operations.sort();
        let wildcard = APP_PARTS_PATH.replace("{*", "{");
        let mut expected = vec![
            format!("GET {MANIFEST_PATH}"),
            format!("GET {SERVICE_WORKER_PATH}"),
            format!("GET {wildcard}"),
        ];
        expected.sort();
        assert_eq!(operations, expected);
        let paths = &document["paths"];
        assert!(
            paths[MANIFEST_PATH]["get"]["responses"]["200"]["content"]["application/manifest+json"]
                .is_object()
        );
        assert!(
            paths[SERVICE_WORKER_PATH]["get"]["responses"]["200"]["content"]["text/javascript"]
                .is_object()
        );
        assert!(
            paths[wildcard.as_str()]["get"]["responses"]["404"]["headers"]["X-Gateway-App"]
                .is_object()
        );
    }

    /// Scenario 14 (shape): exact keys, key order and icon versions.
    #[test]
    fn scenario_14_manifest_body_is_exact() {
        assert_eq!(
            manifest_body("Example Cloud", "de", "aaaaaaaaaaaa"),
            concat!(
                r#"{"id":"/pwa/","name":"Example Cloud","short_name":"Example Cloud","start_url":"/pwa/","#,
                r##""scope":"/pwa/","display":"standalone","background_color":"#fafafa","theme_color":"#fafafa","##,
                r#""lang":"de","icons":["#,
                r#"{"src":"/branding/pwa-icon-192.png?v=aaaaaaaaaaaa","sizes":"192x192","type":"image/png","purpose":"any"},"#,
                r#"{"src":"/branding/pwa-icon-512.png?v=aaaaaaaaaaaa","sizes":"512x512","type":"image/png","purpose":"any"},"#,
                r#"{"src":"/branding/pwa-icon-maskable-512.png?v=aaaaaaaaaaaa","sizes":"512x512","type":"image/png","purpose":"maskable"}]}"#
            )
        );
        let unnamed: serde_json::Value =
            serde_json::from_str(&manifest_body("  ", "", "v")).expect("json");
        assert_eq!(unnamed["name"], "Cloud");
        assert_eq!(unnamed["lang"], "en");
    }

    #[test]
    fn worker_body_starts_with_the_offline_document_and_ends_with_the_source() {
        let body = service_worker_body("Example Cloud", &k2b_core::branding::parse_icon_source(""));
        assert!(body.starts_with("const OFFLINE_HTML = \"<!doctype html>"));
        assert!(body.ends_with(WORKER_SOURCE));
    }
}
