//! The `icons` function: `GET /branding/{variant}.png` (and `HEAD`) for the four icons of the
//! installable app, drawn from the installation logo.
//!
//! The ETag is the icon version (12 hex characters), so a matching `If-None-Match` is answered
//! with 304 without rendering anything — even while rendering fails. A failed render answers 503
//! with `Retry-After: 60` and `no-store`. Any other name under `/branding/` is 404.

pub mod cache;
pub mod render;
pub mod svg;
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
use k2b_core::http::routes::Routes;

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
