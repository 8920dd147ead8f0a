//! Scenarios 2–6 and 10–13: the icons, drawn by the real worker process or a stub renderer.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use icons::worker::{RenderFailure, RenderedIcons};
use icons::{AppIcons, IconRenderer};
use image::Rgba;
use k2b_core::branding::{AppIconSource, parse_icon_source};
use reqwest::StatusCode;

use super::{
    disc_logo, fetch_icon, icons_server, png_uri, set_logo, setup, svg_uri, worker_renderer,
};

const TRANSPARENT: Rgba<u8> = Rgba([0, 0, 0, 0]);
const CANVAS: Rgba<u8> = Rgba([0xfa, 0xfa, 0xfa, 0xff]);

/// Scenario 2: four icons from one worker run; exact corners and centres.
#[tokio::test]
async fn scenario_2_variants_have_exact_corners_and_centres() {
    let (_db, core) = setup().await;
    set_logo(&core, &png_uri(&disc_logo())).await;
    let renderer = worker_renderer();
    let base = icons_server(&core, renderer.clone()).await;
    for (variant, size, opaque) in [
        ("pwa-icon-192", 192, false),
        ("pwa-icon-512", 512, false),
        ("pwa-icon-maskable-512", 512, true),
        ("apple-touch-icon", 180, true),
    ] {
        let (status, headers, image) = fetch_icon(&base, variant).await;
        assert_eq!(status, StatusCode::OK, "{variant}");
        assert_eq!(headers["content-type"], "image/png");
        let image = image.expect("png");
        assert_eq!(image.dimensions(), (size, size), "{variant}");
        let corner = *image.get_pixel(0, 0);
        assert_eq!(
            corner,
            if opaque { CANVAS } else { TRANSPARENT },
            "{variant} corner"
        );
        assert_eq!(
            *image.get_pixel(size / 2, size / 2),
            Rgba([0xe1, 0x1d, 0x48, 0xff]),
            "{variant} centre"
        );
    }
    assert_eq!(renderer.spawns(), 1, "one worker for all four");
}

/// Scenario 3: a wide SVG in the maskable icon stays inside the 40 % safe circle.
#[tokio::test]
async fn scenario_3_maskable_logo_stays_in_the_safe_circle() {
    let (_db, core) = setup().await;
    set_logo(
        &core,
        &svg_uri(r##"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 40 20"><rect width="40" height="20" fill="#0d9488"/></svg>"##),
    )
    .await;
    let base = icons_server(&core, worker_renderer()).await;
    let (_, _, image) = fetch_icon(&base, "pwa-icon-maskable-512").await;
    let image = image.expect("png");
    let mut logo_pixels = 0;
    for y in (0..512).step_by(2) {
        for x in (0..512).step_by(2) {
            if *image.get_pixel(x, y) != CANVAS {
                logo_pixels += 1;
                let (dx, dy) = (x as f64 - 256.0, y as f64 - 256.0);
                assert!(
                    (dx * dx + dy * dy).sqrt() <= 0.4 * 512.0,
                    "({x},{y}) outside the safe circle"
                );
            }
        }
    }
    assert!(logo_pixels > 1000, "{logo_pixels}");
    assert_eq!(*image.get_pixel(116, 256), Rgba([0x0d, 0x94, 0x88, 0xff]));
    assert_eq!(*image.get_pixel(256, 156), CANVAS);
}

/// Scenario 4: concurrent requests share one run; a new logo starts a new one at once.
#[tokio::test]
async fn scenario_4_one_run_per_version() {
    let (_db, core) = setup().await;
    set_logo(&core, &png_uri(&disc_logo())).await;
    let renderer = worker_renderer();
    let base = icons_server(&core, renderer.clone()).await;
    let version = core
        .app_icon_source()
        .await
        .expect("source")
        .version
        .clone();
    assert_eq!(version.len(), 12);
    assert!(
        version
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    );
    let (a, b) = tokio::join!(
        fetch_icon(&base, "pwa-icon-192"),
        fetch_icon(&base, "apple-touch-icon")
    );
    assert_eq!(renderer.spawns(), 1);
    for (status, headers, _) in [a, b] {
        assert_eq!(status, StatusCode::OK);
        assert_eq!(headers["etag"], format!("\"{version}\"").as_str());
    }
    let mut other = disc_logo();
    other.put_pixel(0, 0, Rgba([1, 2, 3, 255]));
    set_logo(&core, &png_uri(&other)).await;
    let (status, headers, _) = fetch_icon(&base, "pwa-icon-192").await;
    assert_eq!(status, StatusCode::OK);
    let new_version = core
        .app_icon_source()
        .await
        .expect("source")
        .version
        .clone();
    assert_ne!(new_version, version);
    assert_eq!(headers["etag"], format!("\"{new_version}\"").as_str());
    assert_eq!(renderer.spawns(), 2);
}

/// A renderer that fails as long as told to, counting its runs.
struct Flaky {
    runs: AtomicUsize,
    fail_first: usize,
}

impl IconRenderer for Flaky {
    fn render(
        &self,
        _: &AppIconSource,
    ) -> BoxFuture<'static, Result<RenderedIcons, RenderFailure>> {
        let run = self.runs.fetch_add(1, Ordering::SeqCst);
        let fail = run < self.fail_first;
        async move {
            tokio::time::sleep(Duration::from_millis(10)).await;
            if fail {
                return Err(RenderFailure("spawn failed".into()));
            }
            let icons: BTreeMap<String, Vec<u8>> = icons::render::VARIANTS
                .iter()
                .map(|(id, ..)| ((*id).to_string(), vec![0x89, 0x50, 0x4e, 0x47]))
                .collect();
            Ok(RenderedIcons {
                icons,
                fallback: false,
                peak_rss_kib: None,
                data_limit_bytes: None,
            })
        }
        .boxed()
    }
}

/// Scenario 5: a failed run is kept for exactly 60 s; requests inside the window fail at once.
#[tokio::test(start_paused = true)]
async fn scenario_5_failures_are_kept_for_sixty_seconds() {
    let renderer = Arc::new(Flaky {
        runs: AtomicUsize::new(0),
        fail_first: 1,
    });
    let cache = AppIcons::new(renderer.clone());
    let source = parse_icon_source(&png_uri(&disc_logo()));
    let (a, b) = tokio::join!(cache.icons(&source), cache.icons(&source));
    assert!(a.is_err() && b.is_err());
    assert_eq!(renderer.runs.load(Ordering::SeqCst), 1);
    tokio::time::sleep(Duration::from_secs(59)).await;
    assert!(
        cache.icons(&source).await.is_err(),
        "still inside the window"
    );
    assert_eq!(
        renderer.runs.load(Ordering::SeqCst),
        1,
        "no worker per failing request"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        cache.icons(&source).await.is_ok(),
        "at failure + 60 s exactly"
    );
    assert_eq!(renderer.runs.load(Ordering::SeqCst), 2);
    // A new logo renders at once, even inside a failure window.
    let failing_again = Arc::new(Flaky {
        runs: AtomicUsize::new(0),
        fail_first: 1,
    });
    let cache = AppIcons::new(failing_again.clone());
    assert!(cache.icons(&source).await.is_err());
    let other = parse_icon_source(&svg_uri("<svg xmlns='http://www.w3.org/2000/svg'/>"));
    assert!(cache.icons(&other).await.is_ok());
    assert_eq!(failing_again.runs.load(Ordering::SeqCst), 2);
}

/// Scenario 6: undecodable and linked logos draw the Cloud logo (blue in the middle).
#[tokio::test]
async fn scenario_6_fallback_to_the_cloud_logo() {
    let (_db, core) = setup().await;
    for logo in [
        "data:image/png;base64,bm90IGFuIGltYWdl",
        "https://logo.example.test/logo.png",
    ] {
        set_logo(&core, logo).await;
        let base = icons_server(&core, worker_renderer()).await;
        let (status, _, image) = fetch_icon(&base, "apple-touch-icon").await;
        assert_eq!(status, StatusCode::OK, "{logo}");
        let pixel = *image.expect("png").get_pixel(90, 100);
        let [r, g, b, _] = pixel.0;
        assert!(
            u16::from(b) > u16::from(r) + 40 && b > g,
            "{logo}: {pixel:?} is not blue"
        );
    }
    // Two fresh instances agree on the linked logo's version.
    let linked = "https://logo.example.test/logo.png";
    assert_eq!(
        parse_icon_source(linked).version,
        parse_icon_source(linked).version
    );
    assert_eq!(
        parse_icon_source(linked).version,
        parse_icon_source("").version
    );
}

/// Scenarios 10–12: paths, ETags and 304s (a stub renderer: four bytes of PNG signature).
#[tokio::test]
async fn scenarios_10_to_12_routes_etags_and_not_modified() {
    let (_db, core) = setup().await;
    let renderer = Arc::new(Flaky {
        runs: AtomicUsize::new(0),
        fail_first: 0,
    });
    let base = icons_server(&core, renderer.clone()).await;
    let version = core
        .app_icon_source()
        .await
        .expect("source")
        .version
        .clone();
    let etag = format!("\"{version}\"");
    let client = reqwest::Client::new();
    for variant in [
        "pwa-icon-192",
        "pwa-icon-512",
        "pwa-icon-maskable-512",
        "apple-touch-icon",
    ] {
        let response = client
            .get(format!("{base}/branding/{variant}.png"))
            .send()
            .await
            .expect("get");
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()["content-type"], "image/png");
        assert_eq!(response.headers()["etag"], etag.as_str());
        assert_eq!(response.headers()["cache-control"], "public, no-cache");
        assert_eq!(
            response.bytes().await.expect("body").as_ref(),
            &[0x89, 0x50, 0x4e, 0x47]
        );
    }
    assert_eq!(renderer.runs.load(Ordering::SeqCst), 1);
    let missing = client
        .get(format!("{base}/branding/pwa-icon-1024.png"))
        .send()
        .await
        .expect("get");
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);

    // A fresh cache: a matching If-None-Match is answered without rendering.
    let renderer = Arc::new(Flaky {
        runs: AtomicUsize::new(0),
        fail_first: 0,
    });
    let base = icons_server(&core, renderer.clone()).await;
    for tag in [
        etag.clone(),
        format!("W/{etag}"),
        format!("\"other\", {etag}"),
        "*".to_string(),
    ] {
        let response = client
            .get(format!("{base}/branding/pwa-icon-192.png"))
            .header("if-none-match", &tag)
            .send()
            .await
            .expect("get");
        assert_eq!(response.status(), StatusCode::NOT_MODIFIED, "{tag}");
        assert_eq!(response.headers()["etag"], etag.as_str());
        assert_eq!(response.headers()["cache-control"], "public, no-cache");
    }
    assert_eq!(
        renderer.runs.load(Ordering::SeqCst),
        0,
        "nothing rendered for a 304"
    );
    let stale = client
        .get(format!("{base}/branding/pwa-icon-192.png"))
        .header("if-none-match", "\"0123456789ab\"")
        .send()
        .await
        .expect("get");
    assert_eq!(stale.status(), StatusCode::OK);
    assert_eq!(stale.headers()["etag"], etag.as_str());
    let head = client
        .head(format!("{base}/branding/apple-touch-icon.png"))
        .send()
        .await
        .expect("head");
    assert_eq!(head.status(), StatusCode::OK);
    assert_eq!(head.headers()["etag"], etag.as_str());
}

/// Scenario 13: a failed render is 503, `no-store`, `Retry-After: 60`; a 304 still works.
#[tokio::test]
async fn scenario_13_render_failure_is_503_with_retry_after() {
    let (_db, core) = setup().await;
    let renderer = Arc::new(Flaky {
        runs: AtomicUsize::new(0),
        fail_first: usize::MAX,
    });
    let base = icons_server(&core, renderer).await;
    let client = reqwest::Client::new();
    let response = client
        .get(format!("{base}/branding/apple-touch-icon.png"))
        .send()
        .await
        .expect("get");
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(response.headers()["cache-control"], "no-store");
    assert_eq!(response.headers()["retry-after"], "60");
    assert!(response.headers().get("etag").is_none());
    assert!(response.bytes().await.expect("body").is_empty());
    let version = core
        .app_icon_source()
        .await
        .expect("source")
        .version
        .clone();
    let cached = client
        .get(format!("{base}/branding/apple-touch-icon.png"))
        .header("if-none-match", format!("\"{version}\""))
        .send()
        .await
        .expect("get");
    assert_eq!(cached.status(), StatusCode::NOT_MODIFIED);
}
