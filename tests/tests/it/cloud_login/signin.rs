//! Scenarios 26 and 28: browser sign-in for every account category, one consume of two, the
//! held status, decoys of the same shape, and the HTTP rules of completion.

use std::time::{Duration, Instant};

use k2b_core::auth::{Profile, Provider};
use k2b_core::cloud_login::login::{self, LoginState};
use serde_json::{Value, json};
use uuid::Uuid;

use super::{APP_ORIGIN, CloudLogin, hold, reference};
use crate::pwa::{Jar, ORIGIN};

fn ids(started: &Value) -> (Uuid, String) {
    (
        Uuid::parse_str(started["requestId"].as_str().expect("id")).expect("uuid"),
        started["browserSecret"]
            .as_str()
            .expect("secret")
            .to_string(),
    )
}

#[tokio::test]
async fn every_category_signs_in_once_with_an_approval() {
    let cloud = CloudLogin::new().await;
    let cases = [
        ("local-user", Provider::Local, Profile::User, "login"),
        ("local-guest", Provider::Local, Profile::Guest, "guest"),
        ("ipa-user", Provider::Ipa, Profile::User, "freeipa"),
        ("ipa-guest", Provider::Ipa, Profile::Guest, "freeipa"),
    ];
    for (uid, provider, profile, category) in cases {
        let user = k2b_tests::create_account(cloud.core(), uid, provider, profile, false).await;
        let mut conn = cloud.core().pool.acquire().await.expect("connection");
        k2b_core::approvals::accept_legal_terms(&mut conn, user.id)
            .await
            .expect("terms");
        drop(conn);
        let mut browser = cloud.pwa.browser(&user).await;
        let device = cloud.enroll(&mut browser).await;
        let started = cloud.start_login(uid, category).await;
        cloud.approve(&device, &started).await;
        let status = cloud.status(&started).await;
        assert_eq!(
            status.body,
            json!({"state": "approved", "pollAfterSeconds": 5})
        );
        let mut wrong = reference(&started);
        wrong["browserSecret"] = json!(k2b_core::approvals::create_secret());
        cloud
            .post("/login/complete", &mut Jar::default(), wrong)
            .await
            .expect(409, Some("CONFLICT"));
        let (mut a, mut b) = (Jar::default(), Jar::default());
        let (first, second) = tokio::join!(
            cloud.complete(&started, &mut a),
            cloud.complete(&started, &mut b)
        );
        let mut statuses = [first.status.as_u16(), second.status.as_u16()];
        statuses.sort_unstable();
        assert_eq!(statuses, [204, 409], "{uid}: exactly one consume wins");
        let winner = if first.status == 204 { &a } else { &b };
        let token = winner.get("session_token").expect("web session cookie");
        let claims = cloud
            .core()
            .identity
            .verify_session_token(&token)
            .await
            .expect("a valid session token");
        assert_eq!(claims.sub, user.id, "{uid}");
        assert_eq!(cloud.status(&started).await.body["state"], "consumed");
    }
    let consumes = cloud
        .pwa
        .audit_actions()
        .await
        .into_iter()
        .filter(|a| a == "auth.app.login.consume")
        .count();
    assert_eq!(consumes, 4);
}

#[tokio::test]
async fn a_held_status_answers_at_the_decision_the_expiry_the_bound_or_the_abort() {
    let cloud = CloudLogin::new().await;
    let (_, mut browser) = cloud.person("ada", false).await;
    let device = cloud.enroll(&mut browser).await;
    let core = cloud.core().clone();
    let started = cloud.start_login("ada", "login").await;
    let (id, secret) = ids(&started);

    let since = Instant::now();
    let (state, _) = hold(&core, &started, Duration::from_millis(200)).await;
    assert_eq!(state, Ok(LoginState::Pending));
    assert!(
        since.elapsed() >= Duration::from_millis(190),
        "{:?}",
        since.elapsed()
    );

    let wrong = k2b_core::approvals::create_secret();
    let refused = login::status(
        &core,
        id,
        &wrong,
        Some(Duration::from_secs(10)),
        std::future::pending(),
    )
    .await;
    assert_eq!(
        refused,
        Err(k2b_core::cloud_login::CloudLoginError::Missing)
    );

    // The client goes away: the answer is the state then.
    let since = Instant::now();
    let aborted = login::status(
        &core,
        id,
        &secret,
        Some(Duration::from_secs(10)),
        tokio::time::sleep(Duration::from_millis(100)),
    )
    .await
    .expect("status");
    assert_eq!(aborted, LoginState::Pending);
    assert!(since.elapsed() < Duration::from_secs(5));

    let held = {
        let (core, started) = (core.clone(), started.clone());
        tokio::spawn(async move { hold(&core, &started, Duration::from_secs(15)).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let decided_at = Instant::now();
    cloud
        .decide(&device, &id.to_string(), "approve")
        .await
        .expect(200, None);
    let (state, answered_at) = held.await.expect("join");
    assert_eq!(state, Ok(LoginState::Approved));
    assert!(
        answered_at - decided_at < Duration::from_secs(1),
        "{:?}",
        answered_at - decided_at
    );

    let expiring = cloud.start_login("ada", "login").await;
    cloud
        .exec(
            "UPDATE auth.app_logins SET expires_at = now() + interval '300 milliseconds' WHERE id = $1",
            expiring["requestId"].as_str().expect("id"),
        )
        .await;
    let since = Instant::now();
    let (state, _) = hold(&core, &expiring, Duration::from_secs(15)).await;
    assert_eq!(state, Ok(LoginState::Expired));
    assert!(
        since.elapsed() < Duration::from_secs(5),
        "{:?}",
        since.elapsed()
    );
}

#[tokio::test]
async fn over_http_a_status_is_held_with_prefer_wait_and_woken_by_the_decision() {
    let cloud = CloudLogin::new().await;
    let (_, mut browser) = cloud.person("ada", false).await;
    let device = cloud.enroll(&mut browser).await;
    let started = cloud.start_login("ada", "login").await;
    let request = cloud
        .pwa
        .client
        .post(format!(
            "{}/api/auth/app-approval/v1/login/status",
            cloud.pwa.base
        ))
        .header("origin", ORIGIN)
        .header("prefer", "wait=10")
        .json(&reference(&started))
        .send();
    let held = tokio::spawn(async move {
        let response = request.await.expect("status");
        let applied = response.headers().get("preference-applied").cloned();
        let body: Value = response.json().await.expect("json");
        (body, applied, Instant::now())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let decided_at = Instant::now();
    cloud
        .decide(&device, started["requestId"].as_str().expect("id"), "deny")
        .await
        .expect(200, None);
    let (body, applied, at) = held.await.expect("join");
    assert_eq!(body["state"], "denied");
    assert_eq!(
        applied
            .and_then(|v| v.to_str().ok().map(str::to_string))
            .as_deref(),
        Some("wait=10")
    );
    assert!(
        at - decided_at < Duration::from_secs(1),
        "{:?}",
        at - decided_at
    );
    // A denied sign-in is never completed.
    cloud
        .complete(&started, &mut Jar::default())
        .await
        .expect(409, Some("CONFLICT"));
    // A wrong secret is the same 404 as no request at all.
    let mut wrong = reference(&started);
    wrong["browserSecret"] = json!(k2b_core::approvals::create_secret());
    cloud
        .post("/login/status", &mut Jar::default(), wrong)
        .await
        .expect(404, Some("UNAVAILABLE"));
}

#[tokio::test]
async fn unknown_known_and_switched_off_accounts_get_the_same_answer() {
    let cloud = CloudLogin::new().await;
    let (_, mut browser) = cloud.person("ada", false).await;
    cloud.enroll(&mut browser).await;
    let known = cloud.start_login("ada", "login").await;
    let by_mail = cloud.start_login("  ADA@example.test ", "login").await;
    let unknown = cloud.start_login("nobody@example.test", "login").await;
    let wrong_category = cloud.start_login("ada", "guest").await;
    cloud.set("user.category.login.enabled", json!(false)).await;
    let disabled = cloud.start_login("ada", "login").await;
    cloud.unset("user.category.login.enabled").await;
    let keys = |v: &Value| {
        let mut keys: Vec<String> = v.as_object().expect("object").keys().cloned().collect();
        keys.sort();
        keys
    };
    for other in [&by_mail, &unknown, &wrong_category, &disabled] {
        assert_eq!(keys(&known), keys(other));
        assert_eq!(other["pollAfterSeconds"], 5);
        assert_eq!(other["comparison"].as_str().map(str::len), Some(6));
        assert_eq!(other["browserSecret"].as_str().map(str::len), Some(43));
    }
    for started in [&known, &by_mail, &unknown, &wrong_category, &disabled] {
        let status = cloud.status(started).await;
        status.expect(200, None);
        assert_eq!(status.body["state"], "pending");
    }
    // Only the known account's (by uid and by mail) are requests of a person.
    let owned: i64 =
        sqlx::query_scalar("SELECT count(*) FROM auth.app_logins WHERE user_id IS NOT NULL")
            .fetch_one(&cloud.core().pool)
            .await
            .expect("count");
    assert_eq!(owned, 2);
}

#[tokio::test]
async fn completion_sets_only_the_installations_cookie_and_cors_covers_only_device_paths() {
    let cloud = CloudLogin::new().await;
    let (_, mut browser) = cloud.person("ada", false).await;
    let device = cloud.enroll(&mut browser).await;
    let started = cloud.start_login("ada", "login").await;
    cloud.approve(&device, &started).await;
    cloud
        .post_from(
            "/login/complete",
            &mut Jar::default(),
            Some(APP_ORIGIN),
            reference(&started),
        )
        .await
        .expect(403, Some("FORBIDDEN"));
    let mut jar = Jar::default();
    let complete = cloud.complete(&started, &mut jar).await;
    complete.expect(204, None);
    assert_eq!(complete.body, Value::Null, "empty body");
    let cookie = complete.cookie("session_token").expect("session cookie");
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("Path=/"),
        "{cookie}"
    );
    assert!(cookie.contains("SameSite=Lax"), "{cookie}");
    assert_eq!(
        complete
            .headers
            .get("cache-control")
            .and_then(|v| v.to_str().ok()),
        Some("no-store")
    );
    assert!(
        complete
            .headers
            .get("access-control-allow-origin")
            .is_none()
    );
    cloud
        .complete(&started, &mut Jar::default())
        .await
        .expect(409, Some("CONFLICT"));

    let preflight = cloud
        .pwa
        .client
        .request(
            reqwest::Method::OPTIONS,
            format!("{}/api/auth/app-approval/v1/device", cloud.pwa.base),
        )
        .header("origin", APP_ORIGIN)
        .header("access-control-request-method", "POST")
        .send()
        .await
        .expect("preflight");
    assert_eq!(preflight.status(), 204);
    let header = |name: &str| {
        preflight
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    assert_eq!(
        header("access-control-allow-origin").as_deref(),
        Some(APP_ORIGIN)
    );
    assert_eq!(
        header("access-control-allow-methods").as_deref(),
        Some("GET, POST, OPTIONS")
    );
    assert_eq!(
        header("access-control-allow-headers").as_deref(),
        Some("Content-Type")
    );
    assert_eq!(header("access-control-max-age").as_deref(), Some("300"));
    assert!(header("access-control-allow-credentials").is_none());

    let command = device.command(ORIGIN, json!({"operation": "pending"}));
    cloud
        .post_from(
            "/device",
            &mut Jar::default(),
            Some("https://evil.example.test"),
            command.clone(),
        )
        .await
        .expect(403, Some("FORBIDDEN"));
    // No Origin at all is a native app: accepted on the device paths.
    cloud
        .post_from("/device", &mut Jar::default(), None, command)
        .await
        .expect(200, None);
    cloud
        .app_post("/device", json!({"oversized": "a".repeat(9000)}))
        .await
        .expect(413, Some("PAYLOAD_TOO_LARGE"));
    cloud
        .app_post("/device", json!({"proof": {}, "signature": "bad"}))
        .await
        .expect(400, Some("INVALID_REQUEST"));
    cloud
        .app_post("/device", json!([1, 2]))
        .await
        .expect(400, Some("INVALID_REQUEST"));
    // The sign-in start is the installation's page, not the app's.
    cloud
        .post_from(
            "/login/start",
            &mut Jar::default(),
            Some(APP_ORIGIN),
            json!({"identifier": "ada", "category": "login"}),
        )
        .await
        .expect(403, Some("FORBIDDEN"));
    cloud
        .post(
            "/login/start",
            &mut Jar::default(),
            json!({"identifier": "ada", "category": "admin"}),
        )
        .await
        .expect(400, Some("INVALID_REQUEST"));
    cloud
        .post(
            "/login/start",
            &mut Jar::default(),
            json!({"identifier": "x".repeat(255), "category": "login"}),
        )
        .await
        .expect(400, Some("INVALID_REQUEST"));
}

#[tokio::test]
async fn the_sixth_open_sign_in_of_a_person_is_a_decoy_and_the_device_sees_five() {
    let cloud = CloudLogin::new().await;
    let (_, mut browser) = cloud.person("ada", false).await;
    let device = cloud.enroll(&mut browser).await;
    for _ in 0..7 {
        cloud.start_login("ada", "login").await;
    }
    let pending = cloud
        .command(&device, json!({"operation": "pending"}))
        .await;
    pending.expect(200, None);
    assert_eq!(pending.body["requests"].as_array().map(Vec::len), Some(5));
    assert_eq!(pending.body["pollAfterSeconds"], 5);
    let owned: i64 =
        sqlx::query_scalar("SELECT count(*) FROM auth.app_logins WHERE user_id IS NOT NULL")
            .fetch_one(&cloud.core().pool)
            .await
            .expect("count");
    assert_eq!(owned, 5, "the sixth and seventh are decoys");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_starts_never_open_more_than_five_requests_of_a_person() {
    let cloud = CloudLogin::new().await;
    cloud.person("ada", false).await;
    let starts = (0..12).map(|_| cloud.start_login("ada", "login"));
    let started = futures::future::join_all(starts).await;
    assert_eq!(started.len(), 12, "every start is answered alike");
    let owned: i64 =
        sqlx::query_scalar("SELECT count(*) FROM auth.app_logins WHERE user_id IS NOT NULL")
            .fetch_one(&cloud.core().pool)
            .await
            .expect("count");
    assert_eq!(owned, 5, "the rest are decoys");
}
