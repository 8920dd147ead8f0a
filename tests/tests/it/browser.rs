//! The bundle in a real browser (headless Chromium over WebDriver), through the local runner's
//! demo shell: the installable app, its service worker offline, pairing a phone between two
//! browsers, and the dashboard drawing the widget stream as it arrives. Screenshots go to
//! `<target>/test-artifacts/browser/`.

use std::time::Duration;

use k2b_tests::browser::Browser;
use k2b_tests::{LocalRunner, TEST_APP_SECRET, TestDb};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(20);

/// A runner on a fresh database, with the demo apps registered.
async fn runner(db: &TestDb) -> LocalRunner {
    let url = db.url();
    let runner = LocalRunner::start(&[
        ("DATABASE_URL", url.as_str()),
        ("APP_SECRET", TEST_APP_SECRET),
        ("K2B_LOCAL_SMTP_SINK", "off"),
    ]);
    let health = reqwest::get(format!("{}/healthz", runner.base_url))
        .await
        .expect("healthz");
    assert_eq!(health.status(), 200);
    runner
}

/// Signs the browser in as the seeded administrator with the start page's shortcut.
async fn sign_in(browser: &Browser, base: &str) {
    browser.goto(&format!("{base}/")).await;
    browser.click("#sign-in").await;
    browser.wait_visible("#signed-in", WAIT).await;
    assert_eq!(browser.text("#signed-in").await, "Local Admin");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_app_is_installable_and_its_icons_load_at_their_sizes() {
    let db = TestDb::new().await;
    let runner = runner(&db).await;
    let base = runner.base_url.clone();
    let browser = Browser::start().await;

    browser.goto(&format!("{base}/")).await;
    let links = browser
        .execute(
            "return ['#to-dashboard', '#to-pair', '#to-pwa'].map((s) => document.querySelector(s).getAttribute('href'))",
            json!([]),
        )
        .await;
    assert_eq!(links, json!(["/shell/dashboard", "/shell/pair", "/pwa/"]));
    browser.screenshot("start-page").await;

    browser.goto(&format!("{base}/pwa/")).await;
    let manifest = browser.cdp("Page.getAppManifest", json!({})).await;
    assert_eq!(manifest["url"], format!("{base}/pwa/manifest.webmanifest"));
    assert_eq!(manifest["errors"], json!([]), "{manifest}");
    let parsed: Value =
        serde_json::from_str(manifest["data"].as_str().expect("manifest text")).expect("JSON");
    assert_eq!(parsed["start_url"], "/pwa/");
    assert_eq!(parsed["display"], "standalone");

    // The browser's own installability check (it fetches the manifest and its icons).
    let mut errors = Value::Null;
    for _ in 0..100 {
        errors =
            browser.cdp("Page.getInstallabilityErrors", json!({})).await["installabilityErrors"]
                .clone();
        if errors == json!([]) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(errors, json!([]), "installability errors");

    let sizes = browser
        .execute_async(
            "const done = arguments[arguments.length - 1];
             fetch('/pwa/manifest.webmanifest').then((r) => r.json()).then((m) => Promise.all(
               m.icons.map((icon) => new Promise((resolve) => {
                 const image = new Image();
                 image.onload = () => resolve([icon.sizes, icon.purpose, `${image.naturalWidth}x${image.naturalHeight}`]);
                 image.onerror = () => resolve([icon.sizes, icon.purpose, 'failed']);
                 image.src = icon.src;
               })))).then(done, (e) => done(String(e)));",
            json!([]),
        )
        .await;
    assert_eq!(
        sizes,
        json!([
            ["192x192", "any", "192x192"],
            ["512x512", "any", "512x512"],
            ["512x512", "maskable", "512x512"]
        ])
    );
    let apple = browser
        .execute_async(
            "const done = arguments[arguments.length - 1];
             const href = document.querySelector('link[rel=apple-touch-icon]').href;
             const image = new Image();
             image.onload = () => done(`${image.naturalWidth}x${image.naturalHeight}`);
             image.onerror = () => done('failed');
             image.src = href;",
            json!([]),
        )
        .await;
    assert_eq!(apple, "180x180");
    browser.screenshot("pwa-welcome").await;
    browser.quit().await;
    runner.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_worker_controls_the_app_and_shows_the_offline_document() {
    let db = TestDb::new().await;
    let runner = runner(&db).await;
    let base = runner.base_url.clone();
    let browser = Browser::start().await;

    browser.goto(&format!("{base}/pwa/")).await;
    let script = browser
        .wait_for(
            "the service worker controls /pwa/",
            "const c = navigator.serviceWorker.controller; return c && c.state === 'activated' && c.scriptURL",
            WAIT,
        )
        .await;
    assert_eq!(script, format!("{base}/pwa/sw.js"));
    let scope = browser
        .execute_async(
            "const done = arguments[arguments.length - 1];
             navigator.serviceWorker.getRegistration('/pwa/').then((r) => done(r && r.scope));",
            json!([]),
        )
        .await;
    assert_eq!(scope, format!("{base}/pwa/"));

    // A part of the app that is not deployed: the platform's 404 becomes the offline document.
    browser.goto(&format!("{base}/pwa/inventory")).await;
    browser.wait_visible("#offline-en", WAIT).await;
    assert!(
        browser
            .text("#offline-en h1")
            .await
            .starts_with("Can't reach"),
        "the offline document"
    );
    browser.screenshot("pwa-missing-part").await;
    // Under /pwa/_auth the platform's 404 is a real answer and passes through.
    browser.goto(&format!("{base}/pwa/_auth/nowhere")).await;
    let shown = browser
        .execute(
            "return [!!document.getElementById('offline-en'), document.body.innerText]",
            json!([]),
        )
        .await;
    assert_eq!(shown[0], false, "{shown}");
    assert!(
        shown[1].as_str().unwrap_or_default().contains("NOT_FOUND"),
        "{shown}"
    );

    // Network cut: a navigation in the app's scope shows the offline document ...
    browser.goto(&format!("{base}/pwa/")).await;
    browser.wait_visible("#welcome", WAIT).await;
    browser.set_offline(true).await;
    browser.goto(&format!("{base}/pwa/?again=1")).await;
    browser.wait_visible("#offline-en", WAIT).await;
    browser.screenshot("pwa-offline").await;
    // ... while API requests are never answered from a cache, and the worker keeps none.
    let api = browser
        .execute_async(
            "const done = arguments[arguments.length - 1];
             fetch('/api/widgets/v1').then((r) => done('answered ' + r.status), (e) => done('failed: ' + e.name));",
            json!([]),
        )
        .await;
    assert_eq!(api, "failed: TypeError");
    let caches = browser
        .execute_async(
            "const done = arguments[arguments.length - 1]; caches.keys().then(done, (e) => done(String(e)));",
            json!([]),
        )
        .await;
    assert_eq!(caches, json!([]));

    // Back online, the app itself again.
    browser.set_offline(false).await;
    browser.goto(&format!("{base}/pwa/?again=2")).await;
    browser.wait_visible("#welcome", WAIT).await;
    browser.quit().await;
    runner.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_web_browser_and_a_phone_pair_through_the_pages() {
    let db = TestDb::new().await;
    let runner = runner(&db).await;
    let base = runner.base_url.clone();
    let web = Browser::start().await;
    let phone = Browser::start_sized(412, 915).await;

    sign_in(&web, &base).await;
    web.screenshot("start-page-signed-in").await;
    web.goto(&format!("{base}/shell/pair")).await;
    // The shell app registers with the runner's first heartbeat, before it answers.
    web.click("#start").await;
    web.wait_visible("#link-step", WAIT).await;
    let link = web
        .execute("return document.getElementById('link').href", json!([]))
        .await;
    let link = link.as_str().expect("the pairing link").to_string();
    let secret = link
        .strip_prefix(&format!("{base}/pwa/#pair="))
        .unwrap_or_else(|| panic!("a pairing link: {link}"));
    assert_eq!(secret.len(), 43);
    let qr = web
        .execute(
            "const svg = document.querySelector('#qr svg'); return svg && svg.getBoundingClientRect().width",
            json!([]),
        )
        .await;
    assert!(qr.as_f64().is_some_and(|w| w >= 200.0), "a QR code: {qr}");
    web.screenshot("pairing-web-link").await;

    phone.goto(&link).await;
    phone.wait_visible("#code-step", WAIT).await;
    let code = phone.text("#code").await;
    assert!(
        code.len() == 6 && code.bytes().all(|b| b.is_ascii_digit()),
        "{code}"
    );
    assert_eq!(phone.text("#account").await, "Local Admin");
    let address = phone.current_url().await;
    assert!(
        !address.contains(secret),
        "the secret left the address bar: {address}"
    );
    phone.screenshot("pairing-phone-code").await;

    web.wait_visible("#code-step", WAIT).await;
    assert_eq!(web.text("#device").await, "Phone");
    web.screenshot("pairing-web-code").await;
    web.type_into("#code", &code).await;
    web.click("#confirm button").await;

    phone.wait_visible("#paired", WAIT).await;
    phone.screenshot("pairing-phone-paired").await;
    web.wait_visible("#paired", WAIT).await;
    web.screenshot("pairing-web-paired").await;

    let cookies = phone.cookie_names().await;
    assert!(cookies.contains(&"pwa_session".to_string()), "{cookies:?}");
    assert!(
        !cookies.contains(&"session_token".to_string()),
        "{cookies:?}"
    );
    let pool = sqlx::PgPool::connect(&db.url()).await.expect("connect");
    let devices: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM auth.pwa_devices d JOIN auth.users u ON u.id = d.user_id
         WHERE u.uid = 'admin' AND d.revoked_at IS NULL",
    )
    .fetch_one(&pool)
    .await
    .expect("count");
    assert_eq!(devices, 1);

    // The phone, opened again, is paired on its own.
    phone.goto(&format!("{base}/pwa/")).await;
    phone.wait_visible("#paired", WAIT).await;
    web.quit().await;
    phone.quit().await;
    runner.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_the_fast_widgets_before_the_slow_one_finishes() {
    let db = TestDb::new().await;
    let runner = runner(&db).await;
    let base = runner.base_url.clone();
    let browser = Browser::start().await;
    sign_in(&browser, &base).await;

    browser.goto(&format!("{base}/shell/dashboard")).await;
    let first = browser
        .wait_for(
            "the stock widget is drawn",
            "const state = (key) => { const e = document.querySelector(`[data-key='${key}']`); return e && e.dataset.state; };
             return state('demo/stock') === 'ok' && {stock: state('demo/stock'), slow: state('demo/slow'), done: document.body.dataset.done || null};",
            WAIT,
        )
        .await;
    assert_eq!(
        first,
        json!({"stock": "ok", "slow": "waiting", "done": null}),
        "the fast widget is drawn while the slow one still runs"
    );
    browser.screenshot("dashboard-filling").await;
    let done = browser
        .wait_for(
            "the stream is done",
            "return document.body.dataset.done || null",
            WAIT,
        )
        .await;
    assert_eq!(
        done, "partial",
        "the failing widget makes the stream partial"
    );
    let drawn = browser
        .execute(
            "const card = (key) => document.querySelector(`[data-key='${key}']`);
             return ['demo/stock', 'demo/empty', 'demo/slow', 'demo/failing'].map((key) => [key, card(key).dataset.state, Number(card(key).dataset.shownAt)]);",
            json!([]),
        )
        .await;
    let states: Vec<(&str, &str)> = drawn
        .as_array()
        .expect("cards")
        .iter()
        .map(|card| {
            (
                card[0].as_str().unwrap_or_default(),
                card[1].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        states,
        vec![
            ("demo/stock", "ok"),
            ("demo/empty", "empty"),
            ("demo/slow", "ok"),
            ("demo/failing", "error")
        ]
    );
    let shown = |index: usize| drawn[index][2].as_f64().expect("a time");
    // The slow widget answers after two seconds; the others were drawn long before.
    for fast in [0, 1, 3] {
        assert!(
            shown(2) - shown(fast) >= 1000.0,
            "{} drawn {} ms before the slow one",
            drawn[fast][0],
            shown(2) - shown(fast)
        );
    }
    assert_eq!(browser.text("[data-key='demo/slow'] h3").await, "Slow");
    browser.screenshot("dashboard").await;
    browser.quit().await;
    runner.stop();
}
