//! App icons, the web app manifest and the service worker (spec/branding-pwa.md §11).

mod hostile;
mod icon_routes;
mod manifest;
mod service_worker;

use std::io::Cursor;
use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use image::{ImageFormat, Rgba, RgbaImage};
use k2b_core::Core;
use k2b_tests::TestDb;

/// A renderer running the test crate's worker binary (the functions run their own binary).
pub fn worker_renderer() -> Arc<icons::WorkerRenderer> {
    Arc::new(icons::WorkerRenderer::new(
        env!("CARGO_BIN_EXE_icon_worker").into(),
    ))
}

/// The icons router over a fresh cache with `renderer`.
pub async fn icons_server(core: &Core, renderer: Arc<dyn icons::IconRenderer>) -> String {
    let cache = Arc::new(icons::AppIcons::new(renderer));
    k2b_tests::serve(icons::router_with(core.clone(), cache)).await
}

/// A PNG data URI.
pub fn png_uri(image: &RgbaImage) -> String {
    let mut bytes = Vec::new();
    image
        .write_to(&mut Cursor::new(&mut bytes), ImageFormat::Png)
        .expect("encode png");
    format!("data:image/png;base64,{}", STANDARD.encode(bytes))
}

/// A 64×64 solid `#e11d48` disc on transparency.
pub fn disc_logo() -> RgbaImage {
    RgbaImage::from_fn(64, 64, |x, y| {
        let (dx, dy) = (x as f32 - 31.5, y as f32 - 31.5);
        if dx * dx + dy * dy <= 30.0 * 30.0 {
            Rgba([0xe1, 0x1d, 0x48, 0xff])
        } else {
            Rgba([0, 0, 0, 0])
        }
    })
}

/// An SVG data URI.
pub fn svg_uri(svg: &str) -> String {
    format!("data:image/svg+xml;base64,{}", STANDARD.encode(svg))
}

/// Stores `app.logo`.
pub async fn set_logo(core: &Core, logo: &str) {
    core.settings
        .set("app.logo", serde_json::Value::String(logo.to_string()))
        .await
        .expect("logo");
}

/// Fetches an icon and decodes it.
pub async fn fetch_icon(
    base: &str,
    variant: &str,
) -> (
    reqwest::StatusCode,
    reqwest::header::HeaderMap,
    Option<RgbaImage>,
) {
    let response = reqwest::get(format!("{base}/branding/{variant}.png"))
        .await
        .expect("get");
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = response.bytes().await.expect("body");
    let image = image::load_from_memory_with_format(&bytes, ImageFormat::Png)
        .ok()
        .map(|i| i.to_rgba8());
    (status, headers, image)
}

/// A database and the shared state of the functions.
pub async fn setup() -> (TestDb, Core) {
    let db = TestDb::new().await;
    let core = k2b_tests::core_for(&db);
    (db, core)
}
