//! The `icons` function: `GET /branding/{variant}.png` (and `HEAD`) for the four icons of the
//! installable app, drawn from the installation logo.
//!
//! The ETag is the icon version (12 hex characters), so a matching `If-None-Match` is answered
//! with 304 without rendering anything — even while rendering fails. A failed render answers 503
//! with `Retry-After: 60` and `no-store`. Any other name under `/branding/` is 404.

pub mod cache;
pub mod render;
pub mod scale;
pub mod svg;
pub mod vector;
pub mod worker;

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::{Router, middleware};
use k2b_core::Core;
use k2b_core::config::Needs;
use k2b_core::http::ApiError;
use k2b_core::http::etag::if_none_match;
use k2b_core::http::headers::request_id;
use k2b_core::http::openapi::ErrorBody;
use k2b_core::http::routes::Routes;
use utoipa::OpenApi;

pub use cache::{APP_ICON_RETRY_SECONDS, AppIcons};
pub use worker::{IconRenderer, WorkerRenderer, run_if_worker};

#[derive(Clone)]
struct IconsState {
    core: Core,
    icons: Arc<AppIcons>,
}

/// The function: the database and `APP_SECRET` (it reads the logo setting).
pub const FUNCTION: k2b_core::lambda::Function = k2b_core::lambda::Function {
    name: "icons",
    needs: Needs::DATABASE.with_settings(),
};

/// The routes as the front door serves them.
pub fn router(core: Core) -> Router {
    k2b_core::lambda::front_door(routes(core))
}

/// The routes, rendering with a worker started from this very binary.
pub fn routes(core: Core) -> Routes {
    let renderer: Arc<dyn IconRenderer> = match WorkerRenderer::current_exe() {
        Ok(renderer) => Arc::new(renderer),
        Err(error) => {
            tracing::error!(error = %error, "icon renderer unavailable");
            Arc::new(Unavailable)
        }
    };
    routes_with(core, Arc::new(AppIcons::new(renderer)))
}

/// The function's part of the API's OpenAPI document.
#[derive(OpenApi)]
#[openapi(paths(icon))]
struct Api;

/// The `HEAD` operation's id (the `GET` one's is `brandingGetIcon`).
pub const HEAD_OPERATION_ID: &str = "brandingHeadIcon";

/// The function's part of the API's OpenAPI document: every route of [`routes`]. `HEAD
/// /branding/{file}` is the `GET` operation without the bodies of its successful answers.
pub fn openapi() -> utoipa::openapi::OpenApi {
    let mut document = Api::openapi();
    for item in document.paths.paths.values_mut() {
        if let Some(get) = &item.get {
            let mut head = get.clone();
            head.operation_id = Some(HEAD_OPERATION_ID.to_string());
            head.summary = Some("The headers of one of the installable app's icons".to_string());
            for (status, response) in head.responses.responses.iter_mut() {
                if let utoipa::openapi::RefOr::T(response) = response
                    && (status.starts_with('2') || status.starts_with('3'))
                {
                    response.content.clear();
                }
            }
            item.head = Some(head);
        }
    }
    document
}

/// The file names `GET /branding/{file}` serves: `<variant>.png` for each icon variant.
pub fn icon_files() -> Vec<String> {
    render::VARIANTS
        .iter()
        .map(|(variant, ..)| format!("{variant}.png"))
        .collect()
}

/// The schema of the `file` parameter: one of [`icon_files`].
struct IconFile;

impl utoipa::PartialSchema for IconFile {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::Type::String)
            .enum_values(Some(icon_files()))
            .into()
    }
}

impl utoipa::ToSchema for IconFile {
    fn name() -> std::borrow::Cow<'static, str> {
        "BrandingIconFile".into()
    }
}

/// The routes over a given icon cache (tests choose the renderer).
pub fn routes_with(core: Core, icons: Arc<AppIcons>) -> Routes {
    Routes::new()
        .get_and_head("/branding/{file}", icon)
        .layer(middleware::from_fn(request_id))
        .with_state(IconsState { core, icons })
}

/// [`routes_with`] as the front door serves them.
pub fn router_with(core: Core, icons: Arc<AppIcons>) -> Router {
    k2b_core::lambda::front_door(routes_with(core, icons))
}

struct Unavailable;

impl IconRenderer for Unavailable {
    fn render(
        &self,
        _: &k2b_core::branding::AppIconSource,
    ) -> futures::future::BoxFuture<'static, Result<worker::RenderedIcons, worker::RenderFailure>>
    {
        Box::pin(async { Err(worker::RenderFailure("no icon renderer".into())) })
    }
}

const PUBLIC_NO_CACHE: HeaderValue = HeaderValue::from_static("public, no-cache");

/// One of the installable app's icons
///
/// Drawn from the installation logo. The ETag is the icon version (12 hex characters, the same
/// for every icon of one logo), so a matching `If-None-Match` is answered with 304 without
/// rendering — even while rendering fails. Any other name under `/branding/` is 404.
#[utoipa::path(
    get,
    path = "/branding/{file}",
    tag = "branding",
    operation_id = "brandingGetIcon",
    params(
        ("file" = inline(IconFile), Path, description = "The icon: `<variant>.png`."),
        ("If-None-Match" = Option<String>, Header, description = "ETags of earlier answers: 304 when one matches."),
    ),
    security(()),
    responses(
        (status = 200, description = "The icon (PNG).", body = [u8], content_type = "image/png",
            headers(
                ("ETag" = String, description = "`\"` + the icon version (12 hex characters) + `\"`."),
                ("Cache-Control" = String, description = "`public, no-cache`."),
            )),
        (status = 304, description = "The icon did not change since the ETag sent.",
            headers(
                ("ETag" = String, description = "The icon's ETag."),
                ("Cache-Control" = String, description = "`public, no-cache`."),
            )),
        (status = 400, description = "The path is not valid UTF-8.", content(
            (ErrorBody = "application/json"), (String = "text/plain"))),
        (status = 404, description = "No icon of this name.", body = ErrorBody),
        (status = 503, description = "The icons cannot be rendered right now (this answer of the renderer has no body), or the request ran past its time budget.", body = ErrorBody,
            headers(
                ("Retry-After" = u64, description = "`60`: seconds until rendering is tried again."),
                ("Cache-Control" = String, description = "`no-store`."),
            )),
    )
)]
async fn icon(
    State(state): State<IconsState>,
    Path(file): Path<String>,
    headers: HeaderMap,
) -> Response {
    let Some(variant) = file
        .strip_suffix(".png")
        .filter(|id| render::VARIANTS.iter().any(|(v, ..)| v == id))
    else {
        return ApiError::not_found("Not found.").into_response();
    };
    let source = match state.core.app_icon_source().await {
        Ok(source) => source,
        Err(error) => {
            tracing::error!(variant, error = %error, "App icon rendering failed");
            return unavailable();
        }
    };
    let etag = format!("\"{}\"", source.version);
    let Ok(etag_value) = HeaderValue::from_str(&etag) else {
        return unavailable();
    };
    if if_none_match(&headers, &etag) {
        return (
            StatusCode::NOT_MODIFIED,
            [
                (header::CACHE_CONTROL, PUBLIC_NO_CACHE),
                (header::ETAG, etag_value),
            ],
            Body::empty(),
        )
            .into_response();
    }
    match state.icons.icons(&source).await {
        Ok(icons) => match icons.icons.get(variant) {
            Some(png) => (
                StatusCode::OK,
                [
                    (header::CONTENT_TYPE, HeaderValue::from_static("image/png")),
                    (header::CACHE_CONTROL, PUBLIC_NO_CACHE),
                    (header::ETAG, etag_value),
                ],
                png.clone(),
            )
                .into_response(),
            None => unavailable(),
        },
        Err(error) => {
            tracing::error!(variant, error = %error, "App icon rendering failed");
            unavailable()
        }
    }
}

fn unavailable() -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [
            (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
            (
                header::RETRY_AFTER,
                HeaderValue::from(APP_ICON_RETRY_SECONDS),
            ),
        ],
        Body::empty(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The document names exactly the routes of [`routes_with`] (building them needs a
    /// `Core`; the shared drift test compares the table itself): `GET` and `HEAD`, each with
    /// its id, no security and the `Error` body on every failure; `file` is one of the icons.
    #[test]
    fn the_document_lists_get_and_head_with_the_icon_names() {
        let document = serde_json::to_value(openapi()).expect("json");
        let item = &document["paths"]["/branding/{file}"];
        let methods: Vec<&String> = item.as_object().expect("item").keys().collect();
        assert_eq!(methods, ["get", "head"]);
        assert_eq!(document["paths"].as_object().map(|p| p.len()), Some(1));
        assert_eq!(item["get"]["operationId"], "brandingGetIcon");
        assert_eq!(item["head"]["operationId"], HEAD_OPERATION_ID);
        assert_eq!(
            k2b_core::http::openapi::contract_problems(&document, &[]),
            Vec::<String>::new()
        );
        for method in ["get", "head"] {
            let operation = &item[method];
            assert_eq!(operation["security"], serde_json::json!([{}]));
            assert_eq!(operation["tags"], serde_json::json!(["branding"]));
            let file = &operation["parameters"][0];
            assert_eq!(file["name"], "file");
            assert_eq!(file["schema"]["enum"], serde_json::json!(icon_files()));
        }
        assert!(item["get"]["responses"]["200"]["content"]["image/png"].is_object());
        assert!(item["head"]["responses"]["200"].get("content").is_none());
        assert!(item["head"]["responses"]["200"]["headers"]["ETag"].is_object());
        assert_eq!(
            icon_files(),
            [
                "pwa-icon-192.png",
                "pwa-icon-512.png",
                "pwa-icon-maskable-512.png",
                "apple-touch-icon.png"
            ]
        );
    }
}
