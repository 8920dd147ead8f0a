//! Hostile logos: each ends in the one outcome spec/branding-pwa.md names for it — a logo that
//! decodes is drawn as it is (§4 step 2), one that cannot be decoded is replaced by the Cloud
//! logo and the fallback is logged (§5), an oversized payload is the Cloud logo from the start
//! (§3) — answered as a 200 icon with its headers (§10) within the worker's deadline, inside its
//! memory cap; the server keeps serving, and no log line carries logo data.

use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use image::Rgba;
use k2b_core::branding::{APP_ICON_SOURCE_MAX_BYTES, parse_icon_source};
use k2b_tests::LogCapture;
use reqwest::StatusCode;
use reqwest::header::HeaderMap;

use super::{fetch_icon, icons_server, set_logo, setup, svg_uri, worker_renderer};

const MARKER: &str = "K2BHOSTILEMARKER";

/// The worker's deadline plus room for a busy machine; anything longer means the kill failed.
const DEADLINE_WITH_SLACK: Duration = Duration::from_secs(20);

/// The warning of a run that drew the Cloud logo because the logo could not be decoded.
const FALLBACK_WARNING: &str =
    "The installation logo could not be decoded; the app icons use the Cloud logo";

/// What the spec has a hostile logo end in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// The logo decodes: the icons are drawn from it, with no fallback.
    Drawn,
    /// The logo cannot be decoded: the worker draws the Cloud logo and the run logs the
    /// fallback warning once.
    Fallback,
    /// The setting is no usable logo (here: over 10 MiB): the icon source is the Cloud logo
    /// itself, so the worker draws it without falling back.
    CloudSource,
}

/// A 200 icon as §10 has it: PNG, `public, no-cache`, and the logo's version as the ETag.
fn assert_icon_headers(headers: &HeaderMap, logo: &str) {
    let etag = format!("\"{}\"", parse_icon_source(logo).version);
    assert_eq!(headers["content-type"], "image/png", "{headers:?}");
    assert_eq!(headers["cache-control"], "public, no-cache", "{headers:?}");
    assert_eq!(headers["etag"], etag.as_str(), "{headers:?}");
    assert!(headers.get("retry-after").is_none(), "{headers:?}");
}

/// Serves `logo`, fetches the Apple icon, and checks the outcome the spec names and the common
/// promises. Returns the Apple icon.
async fn serve_hostile(logo: &str, outcome: Outcome) -> image::RgbaImage {
    let logs = LogCapture::start();
    let (_db, core) = setup().await;
    set_logo(&core, logo).await;
    let renderer = worker_renderer();
    let base = icons_server(&core, renderer.clone()).await;
    let started = Instant::now();
    let (status, headers, image) = fetch_icon(&base, "apple-touch-icon").await;
    let elapsed = started.elapsed();
    assert!(elapsed < DEADLINE_WITH_SLACK, "took {elapsed:?}");
    assert_eq!(status, StatusCode::OK, "{outcome:?}: {headers:?}");
    assert_icon_headers(&headers, logo);
    let image = image.expect("a PNG body");
    assert_eq!(image.dimensions(), (180, 180));
    assert_eq!(
        is_cloud_blue(&image),
        outcome != Outcome::Drawn,
        "{outcome:?}: the Cloud logo is drawn exactly when the logo is not"
    );
    // Still serving: the result is reused without another worker, and other names are 404.
    let (second, headers, other) = fetch_icon(&base, "pwa-icon-192").await;
    assert_eq!(second, StatusCode::OK);
    assert_icon_headers(&headers, logo);
    assert_eq!(other.expect("a PNG body").dimensions(), (192, 192));
    assert_eq!(renderer.spawns(), 1, "one worker for this logo");
    let (missing, _, _) = fetch_icon(&base, "nope").await;
    assert_eq!(missing, StatusCode::NOT_FOUND);
    let own = logs.own_text();
    assert_eq!(
        own.matches(FALLBACK_WARNING).count(),
        usize::from(outcome == Outcome::Fallback),
        "{outcome:?}: {own}"
    );
    assert!(!own.contains("App icon rendering failed"), "{own}");
    // Every thread's lines (and any concurrent test's): a superset, which is what a scan needs.
    let text = logs.text();
    assert!(!text.contains(MARKER), "logo bytes in the logs");
    assert!(
        !text.contains(&STANDARD.encode(MARKER)[..12]),
        "logo base64 in the logs"
    );
    assert!(!text.contains("data:image"), "a data URI in the logs");
    image
}

fn is_cloud_blue(image: &image::RgbaImage) -> bool {
    let [r, g, b, _] = image.get_pixel(90, 100).0;
    u16::from(b) > u16::from(r) + 40 && b > g
}

#[tokio::test]
async fn an_svg_image_pointing_at_local_files_is_drawn_without_reading_them() {
    let path =
        std::env::temp_dir().join(format!("k2b-hostile-{}.png", uuid::Uuid::new_v4().simple()));
    image::RgbaImage::from_pixel(16, 16, Rgba([255, 0, 0, 255]))
        .save(&path)
        .expect("red png");
    let svg = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" viewBox="0 0 10 10"><!-- {MARKER} --><image href="{path}" width="10" height="10"/><image xlink:href="file://{path}" width="10" height="10"/><image href="https://example.test/logo.png" width="10" height="10"/></svg>"#,
        path = path.display()
    );
    let image = serve_hostile(&svg_uri(&svg), Outcome::Drawn).await;
    std::fs::remove_file(&path).ok();
    assert!(
        image
            .pixels()
            .all(|p| !(p.0[0] > 200 && p.0[1] < 80 && p.0[2] < 80)),
        "the referenced file was drawn"
    );
}

/// A PNG that declares 50 000 × 50 000 pixels (and carries almost no data).
fn giant_png() -> Vec<u8> {
    fn crc32(bytes: &[u8]) -> u32 {
        let mut crc = 0xffff_ffffu32;
        for byte in bytes {
            crc ^= u32::from(*byte);
            for _ in 0..8 {
                crc = if crc & 1 == 1 {
                    (crc >> 1) ^ 0xedb8_8320
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }
    fn chunk(kind: &[u8; 4], data: &[u8]) -> Vec<u8> {
        let mut out = (data.len() as u32).to_be_bytes().to_vec();
        let mut body = kind.to_vec();
        body.extend_from_slice(data);
        out.extend_from_slice(&body);
        out.extend_from_slice(&crc32(&body).to_be_bytes());
        out
    }
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut header = 50_000u32.to_be_bytes().to_vec();
    header.extend_from_slice(&50_000u32.to_be_bytes());
    header.extend_from_slice(&[8, 6, 0, 0, 0]);
    png.extend(chunk(b"IHDR", &header));
    png.extend(chunk(b"tEXt", format!("Comment\0{MARKER}").as_bytes()));
    // A zlib stream of a few zero bytes: far too little for the declared size.
    png.extend(chunk(
        b"IDAT",
        &[0x78, 0x9c, 0x63, 0x00, 0x00, 0x00, 0x01, 0x00, 0x01],
    ));
    png.extend(chunk(b"IEND", &[]));
    png
}

/// The decoder's limits refuse the declared size before allocating it (§4 step 2 with the
/// decode limits of the Rust mapping): the Cloud logo is drawn instead.
#[tokio::test]
async fn a_png_declaring_fifty_thousand_pixels_square_falls_back() {
    let logo = format!("data:image/png;base64,{}", STANDARD.encode(giant_png()));
    serve_hostile(&logo, Outcome::Fallback).await;
}

/// usvg refuses a document of more than a million nodes, so the logo does not decode and the
/// Cloud logo is drawn instead (its teal square never is).
#[tokio::test]
async fn an_svg_with_a_million_nodes_falls_back_within_the_deadline() {
    let mut svg =
        format!(r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 10 10"><!-- {MARKER} -->"#);
    svg.push_str(&"<path/>".repeat(1_000_000));
    svg.push_str(r##"<rect width="10" height="10" fill="#0d9488"/></svg>"##);
    assert!(svg.len() < APP_ICON_SOURCE_MAX_BYTES);
    serve_hostile(&svg_uri(&svg), Outcome::Fallback).await;
}

/// The document decodes, so it is drawn as it is, without the fallback; the renderer never
/// allocates the filter's region (it does not fit the canvas's integer coordinates).
#[tokio::test]
async fn an_svg_with_a_huge_filter_region_is_drawn_within_the_deadline() {
    let svg = format!(
        r##"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 10 10"><!-- {MARKER} --><filter id="f" filterUnits="userSpaceOnUse" x="-1000000000" y="-1000000000" width="2000000000" height="2000000000"><feGaussianBlur stdDeviation="1000000"/><feMorphology radius="1000000"/><feTurbulence baseFrequency="0.5" numOctaves="100"/></filter><rect width="10" height="10" fill="#0d9488" filter="url(#f)"/></svg>"##
    );
    serve_hostile(&svg_uri(&svg), Outcome::Drawn).await;
}

/// Over 10 MiB the setting does not count as a logo (§3 step 5): the source is the Cloud logo.
#[tokio::test]
async fn a_payload_one_byte_over_ten_mebibytes_draws_the_cloud_logo() {
    let mut payload = MARKER.as_bytes().to_vec();
    payload.resize(APP_ICON_SOURCE_MAX_BYTES + 1, b'x');
    let logo = format!("data:image/png;base64,{}", STANDARD.encode(&payload));
    assert!(parse_icon_source(&logo).is_cloud_logo());
    serve_hostile(&logo, Outcome::CloudSource).await;
}

/// A valid data URI whose bytes are no image gets its own version, drawn from the fallback
/// (§3, "Consequences").
#[tokio::test]
async fn a_data_uri_that_is_not_an_image_draws_the_cloud_logo() {
    let logo = format!(
        "data:image/png;base64,{}",
        STANDARD.encode(format!("{MARKER} not an image"))
    );
    assert!(!parse_icon_source(&logo).is_cloud_logo());
    serve_hostile(&logo, Outcome::Fallback).await;
}

/// The worker runs under the 512 MiB data limit and reports its peak memory.
#[tokio::test]
async fn the_worker_runs_under_its_memory_cap() {
    let renderer = worker_renderer();
    let rendered = icons::IconRenderer::render(renderer.as_ref(), &parse_icon_source(""))
        .await
        .expect("rendered");
    assert_eq!(rendered.data_limit_bytes, Some(512 * 1024 * 1024));
    assert!(
        rendered
            .peak_rss_kib
            .is_some_and(|kib| kib > 0 && kib < 512 * 1024)
    );
    assert_eq!(rendered.icons.len(), 4);
}
