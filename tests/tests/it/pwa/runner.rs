//! The pairing walk through `k2b-local`, which registers the PWA shell: a browser signed in as
//! the seeded administrator pairs a phone, and the phone renews and launches; none of the
//! walk's secrets reaches the runner's output.

use k2b_tests::{LocalRunner, LogCapture, TEST_APP_SECRET, TestDb};
use serde_json::{Value, json};

fn cookie_value(response: &reqwest::Response, name: &str) -> Option<String> {
    response
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|c| c.strip_prefix(&format!("{name}=")))
        .and_then(|rest| rest.split(';').next())
        .map(str::to_string)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_phone_pairs_through_the_runner() {
    let db = TestDb::new().await;
    let url = db.url();
    let env = [
        ("DATABASE_URL", url.as_str()),
        ("APP_SECRET", TEST_APP_SECRET),
    ];
    let logs = LogCapture::start();
    let runner = LocalRunner::start(&env);
    let base = runner.base_url.clone();
    let web_cookie = k2b_tests::admin_cookie(&env);
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");

    // The shell registers with the runner's first heartbeat.
    let mut started = None;
    for _ in 0..50 {
        let response = client
            .post(format!("{base}/api/auth/pwa/v1/pairings"))
            .header("cookie", &web_cookie)
            .header("origin", &base)
            .send()
            .await
            .expect("start");
        if response.status() == 201 {
            started = Some(response.json::<Value>().await.expect("json"));
            break;
        }
        assert_eq!(response.status(), 503, "only the shell may be missing");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let started = started.expect("the shell registered");
    let id = started["id"].as_str().expect("id");
    let claim = client
        .post(format!("{base}/pwa/_auth/pairings/claim"))
        .header("origin", &base)
        .json(&json!({"secret": started["secret"], "platform": "android"}))
        .send()
        .await
        .expect("claim");
    assert_eq!(claim.status(), 200);
    let pairing = cookie_value(&claim, "pwa_pairing").expect("pairing cookie");
    let claimed: Value = claim.json().await.expect("json");
    assert_eq!(claimed["account"]["name"], "Local Admin");
    let confirm = client
        .post(format!("{base}/api/auth/pwa/v1/pairings/{id}/confirm"))
        .header("cookie", &web_cookie)
        .header("origin", &base)
        .json(&json!({"code": claimed["code"]}))
        .send()
        .await
        .expect("confirm");
    assert_eq!(confirm.status(), 204);
    let complete = client
        .post(format!("{base}/pwa/_auth/pairings/complete"))
        .header("cookie", format!("pwa_pairing={pairing}"))
        .header("origin", &base)
        .send()
        .await
        .expect("complete");
    assert_eq!(complete.status(), 200);
    let session = cookie_value(&complete, "pwa_session").expect("app session");
    let device = cookie_value(&complete, "pwa_device").expect("device key");
    let phone = format!("pwa_session={session}; pwa_device={device}");
    let renew = client
        .post(format!("{base}/pwa/_auth/session/renew"))
        .header("cookie", &phone)
        .header("origin", &base)
        .send()
        .await
        .expect("renew");
    assert_eq!(renew.status(), 200);
    assert_eq!(
        renew.json::<Value>().await.expect("json"),
        json!({"renewed": false})
    );
    let launch = client
        .get(format!("{base}/pwa/_auth/session/launch?to=/pwa/today"))
        .header("cookie", &phone)
        .send()
        .await
        .expect("launch");
    assert_eq!(launch.status(), 302);
    assert_eq!(launch.headers()["location"], "/pwa/today?pwa_launch=1");
    let devices = client
        .get(format!("{base}/api/auth/pwa/v1/devices"))
        .header("cookie", &web_cookie)
        .send()
        .await
        .expect("devices");
    let listed: Value = devices.json().await.expect("json");
    assert_eq!(listed["items"][0]["name"], "Android");

    let served = runner.stop();
    assert!(
        logs.own_text().contains("k2b-local listening on"),
        "the capture holds the runner's output"
    );
    // `admin_cookie` prints the web session on purpose: only the server must never show it.
    let web_token = web_cookie.split_once('=').map_or("", |(_, token)| token);
    assert!(
        !web_token.is_empty() && !served.contains(web_token),
        "{served}"
    );
    let log = logs.text();
    let code = claimed["code"].as_str().expect("code");
    assert!(
        !super::contains_code(&log, code),
        "a log line holds the code"
    );
    let device_secret = device.split('.').nth(1).expect("device secret");
    for secret in [
        started["secret"].as_str().expect("link secret"),
        pairing.as_str(),
        session.as_str(),
        device_secret,
    ] {
        assert!(!log.contains(secret), "a log line holds a secret");
    }
}
