//! The pairing handshake: scenarios 1, 4–7, 9 and 10 of spec/approvals.md §6.

use k2b_core::auth::{Actor, SessionKind};
use serde_json::json;

use super::{IPHONE_UA, Jar, Pwa, device_id, token_sid};

fn has(cookie: &str, attribute: &str) -> bool {
    cookie.split(';').any(|a| a.trim() == attribute)
}

fn max_age(cookie: &str) -> i64 {
    cookie
        .split(';')
        .find_map(|a| a.trim().strip_prefix("Max-Age="))
        .and_then(|v| v.parse().ok())
        .unwrap_or(-1)
}

/// Scenario 1: the iOS happy path, every cookie's attributes, what another app sees, the list,
/// and exactly three audit rows without any secret.
#[tokio::test]
async fn scenario_1_ios_happy_path() {
    let pwa = Pwa::new().await;
    let ada = pwa.user("Ada", false).await;
    let mut browser = pwa.browser(&ada).await;
    // On iOS the installed app starts with a copy of the browser's cookies.
    let mut phone = browser.clone();
    let started = pwa
        .post("/api/auth/pwa/v1/pairings", &mut browser, None)
        .await;
    started.expect(201, None);
    let id = started.body["id"].as_str().expect("id").to_string();
    let secret = started.body["secret"].as_str().expect("secret").to_string();
    assert_eq!(secret.len(), 43);
    assert!(started.body["claimUntil"].is_string() && started.body["expiresAt"].is_string());

    let claimed = pwa.claim(&mut phone, &secret, "ios").await;
    claimed.expect(200, None);
    let completion = phone.get("pwa_pairing").expect("completion secret");
    let code = claimed.body["code"].as_str().expect("code").to_string();
    assert!(code.len() == 6 && code.bytes().all(|b| b.is_ascii_digit()));
    assert_eq!(claimed.body["account"], json!({"name": "Ada Example"}));
    let pairing_cookie = claimed.cookie("pwa_pairing").expect("pairing cookie");
    assert!(has(pairing_cookie, "HttpOnly"));
    assert!(has(pairing_cookie, "SameSite=Strict"));
    assert!(has(pairing_cookie, "Path=/pwa/_auth/pairings"));
    assert!(
        !has(pairing_cookie, "Secure"),
        "local mode speaks plain HTTP"
    );
    assert!(
        (590..=600).contains(&max_age(pairing_cookie)),
        "{pairing_cookie}"
    );

    let status = pwa
        .get(&format!("/api/auth/pwa/v1/pairings/{id}"), &mut browser)
        .await;
    status.expect(200, None);
    assert_eq!(status.body["state"], "claimed");
    assert_eq!(
        status.body["device"],
        json!({"name": "iPhone", "platform": "ios"})
    );
    assert_eq!(status.body["attemptsLeft"], 3);
    assert!(status.body.get("code").is_none());
    assert!(!status.body.to_string().contains(&code), "never the code");

    let waiting = pwa.complete(&mut phone).await;
    waiting.expect(202, None);
    assert_eq!(waiting.body["state"], "waiting");
    assert_eq!(waiting.body["code"], code.as_str());
    assert_eq!(waiting.body["account"]["name"], "Ada Example");

    pwa.confirm(&mut browser, &id, &code)
        .await
        .expect(204, None);
    let done = pwa.complete(&mut phone).await;
    done.expect(200, None);
    assert_eq!(done.body, json!({"state": "paired"}));
    assert_eq!(done.headers["cache-control"], "no-store");
    assert_eq!(done.headers["referrer-policy"], "no-referrer");
    let session = done.cookie("pwa_session").expect("app session cookie");
    assert!(has(session, "HttpOnly") && has(session, "SameSite=Lax") && has(session, "Path=/"));
    assert_eq!(max_age(session), 86_400);
    let device = done.cookie("pwa_device").expect("device cookie");
    assert!(
        has(device, "HttpOnly") && has(device, "SameSite=Lax") && has(device, "Path=/pwa/_auth")
    );
    assert_eq!(max_age(device), 12_960_000);
    assert!(phone.get("pwa_pairing").is_none(), "pairing cookie deleted");
    assert!(
        phone.get("session_token").is_none(),
        "the web session copy is deleted on iOS"
    );
    let device_id = device_id(&phone).expect("device key");

    // Another app sees an app session of Ada's.
    let Some(Actor::User(user)) = pwa.probe(&phone).await else {
        panic!("a valid app session")
    };
    assert_eq!(user.user.id, ada.id);
    assert_eq!(user.session, SessionKind::App { device_id });

    let list = pwa.get("/api/auth/pwa/v1/devices", &mut browser).await;
    list.expect(200, None);
    let items = list.body["items"].as_array().expect("items");
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["name"], "iPhone");
    assert_eq!(items[0]["platform"], "ios");
    assert_eq!(items[0]["current"], false);
    assert_eq!(items[0]["id"], device_id.to_string());

    assert_eq!(
        pwa.audit_actions().await,
        [
            "auth.pwa.pairing.start",
            "auth.pwa.pairing.confirm",
            "auth.pwa.device.enroll"
        ]
    );
    let rows = serde_json::to_string(&pwa.audit_rows().await).expect("json");
    let key = phone.get("pwa_device").expect("key");
    let key_secret = key.split('.').nth(1).expect("secret");
    let app_token = phone.get("pwa_session").expect("token");
    let web_token = browser.get("session_token").expect("web token");
    for secret_value in [
        secret.as_str(),
        completion.as_str(),
        key_secret,
        app_token.as_str(),
        web_token.as_str(),
    ] {
        assert!(!rows.contains(secret_value), "audit rows hold a secret");
    }
    assert!(
        !super::contains_code(&rows, &code),
        "audit rows hold the code"
    );
    let enroll = &pwa.audit_rows().await[2];
    assert_eq!(enroll["metadata"]["platform"], "ios");
    assert_eq!(enroll["metadata"]["pairingId"], id.as_str());
    assert_eq!(enroll["target_type"], "pwa_device");
}

/// Scenario 4: a sign-in older than ten minutes cannot start a pairing; a sixth open pairing is
/// refused.
#[tokio::test]
async fn scenario_4_recent_sign_in_and_open_pairing_limit() {
    let pwa = Pwa::new().await;
    let ada = pwa.user("Ada", false).await;
    let mut old = pwa.browser(&ada).await;
    let sid = token_sid(&old.get("session_token").expect("token"));
    pwa.exec(
        "UPDATE auth.session_families SET issued_at = now() - interval '11 minutes' WHERE sid = $1",
        sid,
    )
    .await;
    pwa.post("/api/auth/pwa/v1/pairings", &mut old, None)
        .await
        .expect(403, Some("REAUTHENTICATE"));

    let mut browser = pwa.browser(&ada).await;
    for _ in 0..5 {
        pwa.start(&mut browser).await;
    }
    let sixth = pwa
        .post("/api/auth/pwa/v1/pairings", &mut browser, None)
        .await;
    sixth.expect(429, Some("LIMIT_REACHED"));
    assert_eq!(
        sixth.body["message"],
        "The limit for this account was reached."
    );
}

/// Scenario 5: a link is claimed once, only before `claim_until`, and only if it exists.
#[tokio::test]
async fn scenario_5_claims() {
    let pwa = Pwa::new().await;
    let ada = pwa.user("Ada", false).await;
    let mut browser = pwa.browser(&ada).await;
    let (_, secret) = pwa.start(&mut browser).await;
    pwa.claim(&mut Jar::default(), &secret, "android")
        .await
        .expect(200, None);
    pwa.claim(&mut Jar::default(), &secret, "android")
        .await
        .expect(409, Some("ALREADY_USED"));

    let (id, secret) = pwa.start(&mut browser).await;
    pwa.exec(
        "UPDATE auth.pwa_pairings SET claim_until = now() - interval '1 second' WHERE id = $1",
        id.parse().expect("uuid"),
    )
    .await;
    pwa.claim(&mut Jar::default(), &secret, "ios")
        .await
        .expect(410, Some("EXPIRED"));
    pwa.get(&format!("/api/auth/pwa/v1/pairings/{id}"), &mut browser)
        .await
        .expect(410, Some("EXPIRED"));

    let unknown = k2b_core::approvals::create_secret();
    let reply = pwa.claim(&mut Jar::default(), &unknown, "ios").await;
    reply.expect(410, Some("EXPIRED"));
    assert_eq!(reply.body["message"], "This pairing has expired.");
}

/// Scenario 6: only the starting session confirms; three wrong codes cancel the pairing (the
/// counts commit although the requests fail); nothing completes afterwards.
#[tokio::test]
async fn scenario_6_wrong_codes() {
    let pwa = Pwa::new().await;
    let ada = pwa.user("Ada", false).await;
    let mut browser = pwa.browser(&ada).await;
    let mut other_tab = pwa.browser(&ada).await;
    let mut phone = Jar::default();
    let (id, secret) = pwa.start(&mut browser).await;
    let claimed = pwa.claim(&mut phone, &secret, "android").await;
    let code = claimed.body["code"].as_str().expect("code").to_string();
    let wrong = if code == "000000" { "000001" } else { "000000" };

    pwa.confirm(&mut other_tab, &id, &code)
        .await
        .expect(404, Some("NOT_FOUND"));
    let first = pwa.confirm(&mut browser, &id, wrong).await;
    first.expect(409, Some("WRONG_CODE"));
    assert_eq!(first.body["attemptsLeft"], 2);
    let second = pwa.confirm(&mut browser, &id, wrong).await;
    second.expect(409, Some("WRONG_CODE"));
    assert_eq!(second.body["attemptsLeft"], 1);
    let third = pwa.confirm(&mut browser, &id, wrong).await;
    third.expect(410, Some("EXPIRED"));
    assert_eq!(third.body["attemptsLeft"], 0);
    pwa.confirm(&mut browser, &id, &code)
        .await
        .expect(410, Some("EXPIRED"));

    assert!(phone.get("pwa_pairing").is_some());
    let done = pwa.complete(&mut phone).await;
    done.expect(410, Some("EXPIRED"));
    assert!(phone.get("pwa_pairing").is_none(), "pairing cookie cleared");
    let rows = pwa.audit_rows().await;
    let cancel = rows
        .iter()
        .find(|r| r["action"] == "auth.pwa.pairing.cancel")
        .expect("cancel audit");
    assert_eq!(cancel["metadata"]["reason"], "wrong_code");
}

/// Scenario 7: the initiating web session must stay valid, and sign out everywhere voids the
/// pairing.
#[tokio::test]
async fn scenario_7_web_sign_out_voids_the_pairing() {
    let pwa = Pwa::new().await;
    let ada = pwa.user("Ada", false).await;
    let mut browser = pwa.browser(&ada).await;
    let mut phone = Jar::default();
    let (id, code) = pwa.claimed(&mut browser, &mut phone, "android").await;
    pwa.confirm(&mut browser, &id, &code)
        .await
        .expect(204, None);
    let sid = token_sid(&browser.get("session_token").expect("token"));
    {
        let mut conn = pwa.core.pool.acquire().await.expect("connection");
        assert!(
            k2b_core::identity::session::revoke_family(&mut conn, sid, "logout", None)
                .await
                .expect("logout")
        );
    }
    pwa.complete(&mut phone).await.expect(410, Some("EXPIRED"));
    assert!(phone.get("pwa_pairing").is_none());

    let mut browser = pwa.browser(&ada).await;
    let mut phone = Jar::default();
    let (_, secret) = pwa.start(&mut browser).await;
    pwa.claim(&mut phone, &secret, "ios")
        .await
        .expect(200, None);
    pwa.complete(&mut phone).await.expect(202, None);
    pwa.sign_out_everywhere(ada.id).await;
    pwa.complete(&mut phone).await.expect(410, Some("EXPIRED"));
}

/// Scenario 9: a phone paired with another account is refused; an Android jar signed in to
/// another account on the web is refused until that session is gone.
#[tokio::test]
async fn scenario_9_already_paired_and_account_mismatch() {
    let pwa = Pwa::new().await;
    let ada = pwa.user("Ada", false).await;
    let grace = pwa.user("Grace", false).await;
    let mut ada_browser = pwa.browser(&ada).await;
    let mut grace_browser = pwa.browser(&grace).await;
    let (grace_phone, _) = pwa.pair(&mut grace_browser, "android").await;

    // The phone still holds Grace's device key; Ada tries to pair it.
    let mut phone = Jar::default();
    phone.set(
        "pwa_device",
        &grace_phone.get("pwa_device").expect("key"),
        "/pwa/_auth",
    );
    let (id, code) = pwa.claimed(&mut ada_browser, &mut phone, "android").await;
    pwa.confirm(&mut ada_browser, &id, &code)
        .await
        .expect(204, None);
    pwa.complete(&mut phone)
        .await
        .expect(409, Some("ALREADY_PAIRED"));

    // Android shares Chrome's cookies: Grace's web session in the same jar.
    let mut phone = Jar::default();
    phone.set(
        "session_token",
        &grace_browser.get("session_token").expect("token"),
        "/",
    );
    let (id, code) = pwa.claimed(&mut ada_browser, &mut phone, "android").await;
    pwa.confirm(&mut ada_browser, &id, &code)
        .await
        .expect(204, None);
    let mismatch = pwa.complete(&mut phone).await;
    mismatch.expect(409, Some("ACCOUNT_MISMATCH"));
    assert!(
        mismatch.cookie("session_token").is_none(),
        "cookie untouched"
    );
    assert!(phone.get("session_token").is_some());
    phone.remove("session_token");
    pwa.complete(&mut phone).await.expect(200, None);
    assert!(device_id(&phone).is_some());
}

/// Scenario 10: a category switched off at completion blocks; the 21st device is refused.
#[tokio::test]
async fn scenario_10_blocked_account_and_device_limit() {
    let pwa = Pwa::new().await;
    let ada = pwa.user("Ada", false).await;
    let mut browser = pwa.browser(&ada).await;
    let mut phone = Jar::default();
    let (id, code) = pwa.claimed(&mut browser, &mut phone, "ios").await;
    pwa.confirm(&mut browser, &id, &code)
        .await
        .expect(204, None);
    pwa.core
        .settings
        .set("user.category.login.enabled", json!(false))
        .await
        .expect("setting");
    pwa.complete(&mut phone)
        .await
        .expect(403, Some("ACCOUNT_BLOCKED"));
    pwa.core
        .settings
        .set("user.category.login.enabled", json!(true))
        .await
        .expect("setting");

    for i in 0..20 {
        sqlx::query(
            "INSERT INTO auth.pwa_devices (id, user_id, name, platform, auth_epoch, secret_hash, rotated_at)
             VALUES ($1, $2, $3, 'android', 0, $4, now())",
        )
        .bind(uuid::Uuid::new_v4())
        .bind(ada.id)
        .bind(format!("Phone {i}"))
        .bind(k2b_core::approvals::hash_secret(&format!("s{i}")))
        .execute(&pwa.core.pool)
        .await
        .expect("device");
    }
    let mut phone = Jar::default();
    let (id, secret) = pwa.start(&mut browser).await;
    let claimed = pwa
        .send(
            http::Method::POST,
            "/pwa/_auth/pairings/claim",
            &mut phone,
            super::Options {
                body: Some(json!({"secret": secret, "platform": "ios"})),
                headers: vec![("user-agent".into(), IPHONE_UA.into())],
                ..super::Options::default()
            },
        )
        .await;
    let code = claimed.body["code"].as_str().expect("code").to_string();
    pwa.confirm(&mut browser, &id, &code)
        .await
        .expect(204, None);
    pwa.complete(&mut phone)
        .await
        .expect(429, Some("LIMIT_REACHED"));
}

/// Cancel: only the starting session, a no-op when already cancelled, never after completion;
/// confirming out of step is a conflict; codes must be six digits; another person's pairing is
/// not found.
#[tokio::test]
async fn cancel_confirm_steps_and_isolation() {
    let pwa = Pwa::new().await;
    let ada = pwa.user("Ada", false).await;
    let grace = pwa.user("Grace", false).await;
    let mut browser = pwa.browser(&ada).await;
    let mut grace_browser = pwa.browser(&grace).await;

    let (id, secret) = pwa.start(&mut browser).await;
    pwa.get(
        &format!("/api/auth/pwa/v1/pairings/{id}"),
        &mut grace_browser,
    )
    .await
    .expect(404, Some("NOT_FOUND"));
    pwa.confirm(&mut browser, &id, "123456")
        .await
        .expect(409, Some("CONFLICT"));
    for bad in ["12345", "1234567", "12345a"] {
        pwa.confirm(&mut browser, &id, bad)
            .await
            .expect(400, Some("INVALID_REQUEST"));
    }
    pwa.post(
        &format!("/api/auth/pwa/v1/pairings/{id}/cancel"),
        &mut grace_browser,
        None,
    )
    .await
    .expect(404, Some("NOT_FOUND"));
    let cancel = format!("/api/auth/pwa/v1/pairings/{id}/cancel");
    pwa.post(&cancel, &mut browser, None)
        .await
        .expect(204, None);
    pwa.post(&cancel, &mut browser, None)
        .await
        .expect(204, None);
    pwa.claim(&mut Jar::default(), &secret, "ios")
        .await
        .expect(410, Some("EXPIRED"));
    let cancels: Vec<_> = pwa
        .audit_rows()
        .await
        .into_iter()
        .filter(|r| r["action"] == "auth.pwa.pairing.cancel")
        .collect();
    assert_eq!(cancels.len(), 1, "the second cancel is a no-op");
    assert_eq!(cancels[0]["metadata"]["reason"], "user");

    let mut phone = Jar::default();
    let (id, code) = pwa.claimed(&mut browser, &mut phone, "android").await;
    pwa.confirm(&mut browser, &id, &code)
        .await
        .expect(204, None);
    pwa.confirm(&mut browser, &id, &code)
        .await
        .expect(409, Some("CONFLICT"));
    pwa.complete(&mut phone).await.expect(200, None);
    pwa.post(
        &format!("/api/auth/pwa/v1/pairings/{id}/cancel"),
        &mut browser,
        None,
    )
    .await
    .expect(409, Some("CONFLICT"));
    let status = pwa
        .get(&format!("/api/auth/pwa/v1/pairings/{id}"), &mut browser)
        .await;
    status.expect(200, None);
    assert_eq!(status.body["state"], "completed");
}

/// Self-service activity shows "App paired" and "App removed" for the owner.
#[tokio::test]
async fn self_service_labels() {
    let pwa = Pwa::new().await;
    let ada = pwa.user("Ada", false).await;
    let mut browser = pwa.browser(&ada).await;
    let (_, device) = pwa.pair(&mut browser, "android").await;
    pwa.send(
        http::Method::DELETE,
        &format!("/api/auth/pwa/v1/devices/{device}"),
        &mut browser,
        super::Options::default(),
    )
    .await
    .expect(204, None);
    let mut conn = pwa.core.pool.acquire().await.expect("connection");
    let activity = k2b_core::audit::list_self_service(&mut conn, ada.id, None, 50)
        .await
        .expect("activity");
    let labels: Vec<&str> = activity.iter().map(|a| a.label.as_str()).collect();
    assert!(labels.contains(&"App paired"), "{labels:?}");
    assert!(labels.contains(&"App removed"), "{labels:?}");
}
