//! Scenarios 14, 15 and 18: the manifest and the service worker over HTTP.

use k2b_core::Core;
use reqwest::StatusCode;
use serde_json::{Value, json};

use super::setup;

async fn server(core: &Core) -> String {
    k2b_tests::serve(manifest::router(core.clone())).await
}

async fn name_and_locale(core: &Core, name: &str, locale: &str) {
    core.settings
        .set("app.name", json!(name))
        .await
        .expect("name");
    core.settings
        .set("app.locale", json!(locale))
        .await
        .expect("locale");
}

/// Scenario 14: the manifest, its ETag and a new logo's version.
#[tokio::test]
async fn scenario_14_manifest_and_icon_versions() {
    let (_db, core) = setup().await;
    name_and_locale(&core, "Example Cloud", "de").await;
    let base = server(&core).await;
    let client = reqwest::Client::new();
    let response = client
        .get(format!("{base}/pwa/manifest.webmanifest"))
        .send()
        .await
        .expect("get");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers()["content-type"],
        "application/manifest+json"
    );
    assert_eq!(response.headers()["cache-control"], "no-cache");
    let etag = response.headers()["etag"]
        .to_str()
        .expect("etag")
        .to_string();
    assert_eq!(etag.len(), 34);
    let version = core
        .app_icon_source()
        .await
        .expect("source")
        .version
        .clone();
    let body: Value = response.json().await.expect("json");
    assert_eq!(
        body,
        json!({
            "id": "/pwa/", "name": "Example Cloud", "short_name": "Example Cloud",
            "start_url": "/pwa/", "scope": "/pwa/", "display": "standalone",
            "background_color": "#fafafa", "theme_color": "#fafafa", "lang": "de",
            "icons": [
                {"src": format!("/branding/pwa-icon-192.png?v={version}"), "sizes": "192x192", "type": "image/png", "purpose": "any"},
                {"src": format!("/branding/pwa-icon-512.png?v={version}"), "sizes": "512x512", "type": "image/png", "purpose": "any"},
                {"src": format!("/branding/pwa-icon-maskable-512.png?v={version}"), "sizes": "512x512", "type": "image/png", "purpose": "maskable"}
            ]
        })
    );
    let cached = client
        .get(format!("{base}/pwa/manifest.webmanifest"))
        .header("if-none-match", &etag)
        .send()
        .await
        .expect("get");
    assert_eq!(cached.status(), StatusCode::NOT_MODIFIED);
    assert_eq!(cached.headers()["etag"], etag.as_str());
    assert_eq!(cached.headers()["cache-control"], "no-cache");

    core.settings
        .set("app.logo", json!("data:image/png;base64,AAAA"))
        .await
        .expect("logo");
    let new_version = core
        .app_icon_source()
        .await
        .expect("source")
        .version
        .clone();
    assert_ne!(new_version, version);
    let changed = client
        .get(format!("{base}/pwa/manifest.webmanifest"))
        .header("if-none-match", &etag)
        .send()
        .await
        .expect("get");
    assert_eq!(changed.status(), StatusCode::OK);
    assert!(
        changed
            .text()
            .await
            .expect("body")
            .contains(&format!("?v={new_version}"))
    );
}

/// Scenario 15: the worker script, its ETag, and a new name.
#[tokio::test]
async fn scenario_15_service_worker_script() {
    let (_db, core) = setup().await;
    name_and_locale(&core, "Example Cloud", "de").await;
    let base = server(&core).await;
    let client = reqwest::Client::new();
    let response = client
        .get(format!("{base}/pwa/sw.js"))
        .send()
        .await
        .expect("get");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers()["content-type"],
        "text/javascript; charset=utf-8"
    );
    assert_eq!(response.headers()["cache-control"], "no-cache");
    assert!(response.headers().get("service-worker-allowed").is_none());
    let etag = response.headers()["etag"]
        .to_str()
        .expect("etag")
        .to_string();
    let first = response.text().await.expect("body");
    assert!(first.starts_with("const OFFLINE_HTML = "));
    assert!(first.ends_with(manifest::WORKER_SOURCE));
    let cached = client
        .get(format!("{base}/pwa/sw.js"))
        .header("if-none-match", &etag)
        .send()
        .await
        .expect("get");
    assert_eq!(cached.status(), StatusCode::NOT_MODIFIED);
    core.settings
        .set("app.name", json!("Renamed Cloud"))
        .await
        .expect("name");
    let changed = client
        .get(format!("{base}/pwa/sw.js"))
        .header("if-none-match", &etag)
        .send()
        .await
        .expect("get");
    assert_eq!(changed.status(), StatusCode::OK);
    let second = changed.text().await.expect("body");
    assert_ne!(first, second);
    assert!(second.contains("Renamed Cloud"));
}

/// Scenario 18: the offline page as the worker carries it.
#[tokio::test]
async fn scenario_18_offline_page_in_the_served_worker() {
    let (_db, core) = setup().await;
    name_and_locale(&core, "Example Cloud", "de").await;
    let base = server(&core).await;
    let script = reqwest::get(format!("{base}/pwa/sw.js"))
        .await
        .expect("get")
        .text()
        .await
        .expect("body");
    let literal = script
        .strip_prefix("const OFFLINE_HTML = ")
        .and_then(|rest| rest.split_once(";\n"))
        .map(|(literal, _)| literal)
        .expect("constant");
    let html: String = serde_json::from_str(literal).expect("a JSON string literal");
    for expected in [
        "Can&#39;t reach Example Cloud",
        "Example Cloud nicht erreichbar",
        "data:image/svg+xml;base64,",
        "viewport-fit=cover",
        "env(safe-area-inset-top)",
    ] {
        assert!(html.contains(expected), "{expected}");
    }
    for forbidden in ["<link", "<script src", "http://", "https://"] {
        assert!(!html.contains(forbidden), "{forbidden}");
    }
}
