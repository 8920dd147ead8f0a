//! Retries, renewal and launch: scenarios 8, 11–14, 19 and 20 of spec/approvals.md §6.

use serde_json::json;

use super::{Jar, Pwa, device_id, token_sid};

async fn family_count(pwa: &Pwa, device: uuid::Uuid) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM auth.session_families WHERE pwa_device_id = $1")
        .bind(device)
        .fetch_one(&pwa.core.pool)
        .await
        .expect("count")
}

async fn last_login(pwa: &Pwa, user: uuid::Uuid) -> Option<chrono::DateTime<chrono::Utc>> {
    sqlx::query_scalar("SELECT last_login_local FROM auth.users WHERE id = $1")
        .bind(user)
        .fetch_one(&pwa.core.pool)
        .await
        .expect("user")
}

/// Records a sign-in of `user` at `at`.
async fn set_last_login(pwa: &Pwa, user: uuid::Uuid, at: chrono::DateTime<chrono::Utc>) {
    sqlx::query("UPDATE auth.users SET last_login_local = $2 WHERE id = $1")
        .bind(user)
        .bind(at)
        .execute(&pwa.core.pool)
        .await
        .expect("last login");
}

/// A sign-in long ago, to the microsecond: any write of the column (now, NULL, a rounding)
/// changes it.
fn long_ago() -> chrono::DateTime<chrono::Utc> {
    "2021-03-04T05:06:07.123456Z".parse().expect("time")
}

/// Scenario 8: retries of a completed pairing — with the app session (nothing new), after a
/// lost response (key rotated, old session ended, same device), two overlapping retries, a
/// blocked retry, and re-pairing the same app.
#[tokio::test]
async fn scenario_8_retries_and_replacement() {
    let pwa = Pwa::new().await;
    let ada = pwa.user("Ada", false).await;
    let mut browser = pwa.browser(&ada).await;
    let mut phone = Jar::default();
    let (id, code) = pwa.claimed(&mut browser, &mut phone, "android").await;
    pwa.confirm(&mut browser, &id, &code)
        .await
        .expect(204, None);
    let pairing_cookie = phone.get("pwa_pairing").expect("pairing cookie");
    pwa.complete(&mut phone).await.expect(200, None);
    let device = device_id(&phone).expect("device");

    // The app asks again with its session: paired, no new cookies.
    phone.set("pwa_pairing", &pairing_cookie, "/pwa/_auth/pairings");
    let again = pwa.complete(&mut phone).await;
    again.expect(200, None);
    assert!(again.cookie("pwa_device").is_none() && again.cookie("pwa_session").is_none());

    // The first response was lost: the phone only has the pairing cookie.
    let old_session = phone.clone();
    let mut lost = Jar::default();
    lost.set("pwa_pairing", &pairing_cookie, "/pwa/_auth/pairings");
    let recovered = pwa.complete(&mut lost).await;
    recovered.expect(200, None);
    assert_eq!(device_id(&lost), Some(device), "same device");
    assert!(pwa.probe(&old_session).await.is_none(), "old session ended");
    assert!(pwa.probe(&lost).await.is_some(), "new session valid");
    assert!(
        pwa.audit_actions()
            .await
            .contains(&"auth.pwa.device.recover".to_string())
    );
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM auth.pwa_devices WHERE user_id = $1")
        .bind(ada.id)
        .fetch_one(&pwa.core.pool)
        .await
        .expect("count");
    assert_eq!(count, 1, "one device");

    // Two overlapping retries: the first answer's key still renews after the grace.
    let mut first = Jar::default();
    first.set("pwa_pairing", &pairing_cookie, "/pwa/_auth/pairings");
    pwa.complete(&mut first).await.expect(200, None);
    let mut second = Jar::default();
    second.set("pwa_pairing", &pairing_cookie, "/pwa/_auth/pairings");
    pwa.complete(&mut second).await.expect(200, None);
    pwa.exec(
        "UPDATE auth.pwa_devices SET rotated_at = now() - interval '2 minutes' WHERE id = $1",
        device,
    )
    .await;
    first.remove("pwa_session");
    let renewed = pwa.renew(&mut first).await;
    renewed.expect(200, None);
    assert_eq!(renewed.body["renewed"], true);

    // A blocked account cannot recover.
    let mut blocked = Jar::default();
    blocked.set("pwa_pairing", &pairing_cookie, "/pwa/_auth/pairings");
    sqlx::query("DELETE FROM auth.legal_acceptances WHERE user_id = $1")
        .bind(ada.id)
        .execute(&pwa.core.pool)
        .await
        .expect("terms");
    pwa.complete(&mut blocked)
        .await
        .expect(403, Some("ACCOUNT_BLOCKED"));
    let mut conn = pwa.core.pool.acquire().await.expect("connection");
    k2b_core::approvals::accept_legal_terms(&mut conn, ada.id)
        .await
        .expect("terms");

    // Re-pairing the same app replaces its device.
    let (repaired, new_device) = pwa.pair_into(&mut browser, first.clone(), "android").await;
    assert_ne!(new_device, device);
    assert_eq!(device_id(&repaired), Some(new_device));
    let list = pwa.get("/api/auth/pwa/v1/devices", &mut browser).await;
    let items = list.body["items"].as_array().expect("items");
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["id"], new_device.to_string());
    assert_eq!(pwa.device_reason(device).await.as_deref(), Some("replaced"));
}

/// Scenario 11: renewal outcomes and key rotation.
#[tokio::test]
async fn scenario_11_renewal() {
    let pwa = Pwa::new().await;
    let ada = pwa.user("Ada", false).await;
    let mut browser = pwa.browser(&ada).await;
    // App sessions are no sign-in: pairing, renewal, recovery and rotation leave it as it is.
    set_last_login(&pwa, ada.id, long_ago()).await;
    let (mut phone, device) = pwa.pair(&mut browser, "android").await;
    assert_eq!(
        last_login(&pwa, ada.id).await,
        Some(long_ago()),
        "pairing recorded a sign-in"
    );

    let live = pwa.renew(&mut phone).await;
    live.expect(200, None);
    assert_eq!(live.body, json!({"renewed": false}));

    let original_key = phone.get("pwa_device").expect("key");
    phone.remove("pwa_session");
    let renewed = pwa.renew(&mut phone).await;
    renewed.expect(200, None);
    assert_eq!(renewed.body["renewed"], true);
    let rotated_key = phone.get("pwa_device").expect("key");
    assert_ne!(rotated_key, original_key, "a new key");
    assert!(phone.get("pwa_session").is_some(), "a new session");
    assert_eq!(family_count(&pwa, device).await, 2);
    assert_eq!(
        last_login(&pwa, ada.id).await,
        Some(long_ago()),
        "renewal recorded a sign-in"
    );

    // The old key within the grace: nothing to do.
    let mut old = Jar::default();
    old.set("pwa_device", &original_key, "/pwa/_auth");
    let graced = pwa.renew(&mut old).await;
    graced.expect(200, None);
    assert_eq!(graced.body["renewed"], false);
    // After the grace: recovered with a new key, audited.
    pwa.exec(
        "UPDATE auth.pwa_devices SET rotated_at = now() - interval '61 seconds' WHERE id = $1",
        device,
    )
    .await;
    let recovered = pwa.renew(&mut old).await;
    recovered.expect(200, None);
    assert_eq!(recovered.body["renewed"], true);
    assert!(
        pwa.audit_actions()
            .await
            .contains(&"auth.pwa.device.recover".to_string())
    );
    // The newest key rotates (no session), and with its session nothing happens.
    let mut newest = old.clone();
    newest.remove("pwa_session");
    let rotated = pwa.renew(&mut newest).await;
    rotated.expect(200, None);
    assert_eq!(rotated.body["renewed"], true);
    let with_session = pwa.renew(&mut newest).await;
    assert_eq!(with_session.body["renewed"], false);
    assert_eq!(
        last_login(&pwa, ada.id).await,
        Some(long_ago()),
        "recovery or rotation recorded a sign-in"
    );

    // A stale key (two rotations back) and a wrong secret end the pairing on the phone.
    let mut stale = Jar::default();
    stale.set("pwa_device", &original_key, "/pwa/_auth");
    let ended = pwa.renew(&mut stale).await;
    ended.expect(401, Some("UNPAIRED"));
    let mut wrong = Jar::default();
    wrong.set(
        "pwa_device",
        &format!("{device}.{}", k2b_core::approvals::create_secret()),
        "/pwa/_auth",
    );
    wrong.set("pwa_session", "x", "/");
    let cleared = pwa.renew(&mut wrong).await;
    cleared.expect(401, Some("UNPAIRED"));
    assert!(wrong.get("pwa_device").is_none() && wrong.get("pwa_session").is_none());
}

/// An app session with 12 hours or less left is renewed; with more, it is kept and the device's
/// last use is touched once a day.
#[tokio::test]
async fn sessions_renew_in_their_last_twelve_hours() {
    let pwa = Pwa::new().await;
    let ada = pwa.user("Ada", false).await;
    let mut browser = pwa.browser(&ada).await;
    let (mut phone, device) = pwa.pair(&mut browser, "android").await;
    let session_for = |hours: u64| {
        let pwa = &pwa;
        async move {
            pwa.core
                .identity
                .issue_session(
                    &pwa.core.settings,
                    k2b_core::identity::session::SessionRequest {
                        device_id: Some(device),
                        ttl: Some(std::time::Duration::from_secs(hours * 3600)),
                        ..k2b_core::identity::session::SessionRequest::web(ada.id)
                    },
                    k2b_core::identity::IssueOptions::default(),
                )
                .await
                .expect("session")
                .token
        }
    };
    pwa.exec(
        "UPDATE auth.pwa_devices SET last_used_at = now() - interval '2 days' WHERE id = $1",
        device,
    )
    .await;
    phone.set("pwa_session", &session_for(13).await, "/");
    let kept = pwa.renew(&mut phone).await;
    assert_eq!(kept.body["renewed"], false, "{:?}", kept.body);
    let touched: bool = sqlx::query_scalar(
        "SELECT last_used_at >= date_trunc('day', now()) FROM auth.pwa_devices WHERE id = $1",
    )
    .bind(device)
    .fetch_one(&pwa.core.pool)
    .await
    .expect("device");
    assert!(touched, "last use touched");
    phone.set("pwa_session", &session_for(11).await, "/");
    let renewed = pwa.renew(&mut phone).await;
    assert_eq!(renewed.body["renewed"], true, "{:?}", renewed.body);
}

/// Scenario 12: idle devices, blocked accounts, expired accounts and sign out everywhere.
#[tokio::test]
async fn scenario_12_device_lifetime() {
    let pwa = Pwa::new().await;
    let ada = pwa.user("Ada", false).await;
    let mut browser = pwa.browser(&ada).await;

    let (mut idle, device) = pwa.pair(&mut browser, "android").await;
    pwa.exec(
        "UPDATE auth.pwa_devices SET rotated_at = now() - interval '151 days' WHERE id = $1",
        device,
    )
    .await;
    pwa.renew(&mut idle).await.expect(401, Some("UNPAIRED"));

    let (mut phone, device) = pwa.pair(&mut browser, "android").await;
    pwa.core
        .settings
        .set("user.category.login.enabled", json!(false))
        .await
        .expect("setting");
    let blocked = pwa.renew(&mut phone).await;
    blocked.expect(403, Some("ACCOUNT_BLOCKED"));
    assert!(phone.get("pwa_device").is_some(), "cookie kept");
    pwa.core
        .settings
        .set("user.category.login.enabled", json!(true))
        .await
        .expect("setting");
    pwa.renew(&mut phone).await.expect(200, None);

    pwa.exec(
        "UPDATE auth.users SET account_expires = now() - interval '1 minute' WHERE id = $1",
        ada.id,
    )
    .await;
    pwa.renew(&mut phone).await.expect(401, Some("UNPAIRED"));
    assert_eq!(
        pwa.device_reason(device).await.as_deref(),
        Some("account_expired")
    );
    pwa.exec(
        "UPDATE auth.users SET account_expires = NULL WHERE id = $1",
        ada.id,
    )
    .await;

    let mut browser = pwa.browser(&ada).await;
    let (mut phone, device) = pwa.pair(&mut browser, "android").await;
    assert!(pwa.probe(&phone).await.is_some());
    pwa.sign_out_everywhere(ada.id).await;
    assert!(pwa.probe(&phone).await.is_none());
    pwa.renew(&mut phone).await.expect(401, Some("UNPAIRED"));
    assert_eq!(
        pwa.device_reason(device).await.as_deref(),
        Some("sign_out_everywhere")
    );
}

async fn launch(pwa: &Pwa, jar: &mut Jar, to: &str) -> super::Reply {
    let query: String = url_encode(to);
    let reply = pwa
        .get(&format!("/pwa/_auth/session/launch?to={query}"), jar)
        .await;
    assert_eq!(reply.status.as_u16(), 302, "{to}");
    reply
}

fn url_encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// Scenario 13 (HTTP part): launch targets and outcomes.
#[tokio::test]
async fn scenario_13_launch() {
    let pwa = Pwa::new().await;
    let ada = pwa.user("Ada", false).await;
    let mut browser = pwa.browser(&ada).await;
    let (mut phone, _) = pwa.pair(&mut browser, "android").await;
    assert_eq!(
        launch(&pwa, &mut phone, "/pwa/spaces?view=today")
            .await
            .location(),
        "/pwa/spaces?view=today&pwa_launch=1"
    );
    let twice = pwa
        .get("/pwa/_auth/session/launch?to=/pwa/a&to=/pwa/b", &mut phone)
        .await;
    assert_eq!(twice.status.as_u16(), 302);
    assert_eq!(twice.location(), "/pwa/a?pwa_launch=1");
    let bare = pwa.get("/pwa/_auth/session/launch", &mut phone).await;
    assert_eq!(bare.location(), "/pwa/?pwa_launch=1");
    for evil in [
        "https://evil.example/",
        "/pwa/_auth/session/renew",
        "/pwa//x",
        "/pwa/\\x",
        "/pwa/./_auth",
        "/pwa/%2e/_auth",
        "/pwa/spaces/../_auth",
        "/pwa/%5Fauth",
        "/pwa/%2F%2Fx",
        "/pwa/%E0%A4%A",
        "",
        "/me/app",
    ] {
        assert_eq!(
            launch(&pwa, &mut phone, evil).await.location(),
            "/pwa/?pwa_launch=1",
            "{evil}"
        );
    }
    let long = format!("/pwa/{}", "a".repeat(2048));
    assert_eq!(
        launch(&pwa, &mut phone, &long).await.location(),
        "/pwa/?pwa_launch=1"
    );
    // A launch without a session renews and sets the cookies.
    phone.remove("pwa_session");
    let renewed = launch(&pwa, &mut phone, "/pwa/").await;
    assert!(renewed.cookie("pwa_session").is_some());

    assert_eq!(
        launch(&pwa, &mut Jar::default(), "/pwa/").await.location(),
        "/pwa/?pwa=new"
    );
    let mut unknown = Jar::default();
    unknown.set(
        "pwa_device",
        &format!(
            "{}.{}",
            uuid::Uuid::new_v4(),
            k2b_core::approvals::create_secret()
        ),
        "/pwa/_auth",
    );
    let ended = launch(&pwa, &mut unknown, "/pwa/").await;
    assert_eq!(ended.location(), "/pwa/?pwa=ended");
    assert!(unknown.get("pwa_device").is_none(), "cookie cleared");

    pwa.core
        .settings
        .set("user.category.login.enabled", json!(false))
        .await
        .expect("setting");
    assert_eq!(
        launch(&pwa, &mut phone, "/pwa/").await.location(),
        "/pwa/?pwa=blocked"
    );
    pwa.core
        .settings
        .set("user.category.login.enabled", json!(true))
        .await
        .expect("setting");

    // Rate limited to one request per second: five parallel launches all redirect, at least
    // one to the unavailable page.
    pwa.core
        .settings
        .set("security.rate_limit_per_second", json!(1))
        .await
        .expect("setting");
    let replies = futures::future::join_all((0..5).map(|_| {
        let mut jar = phone.clone();
        let pwa = &pwa;
        async move { launch(pwa, &mut jar, "/pwa/").await }
    }))
    .await;
    assert!(
        replies
            .iter()
            .any(|r| r.location() == "/pwa/?pwa=unavailable")
    );
}

/// Scenario 14: an Android app next to another account's web session learns its name.
#[tokio::test]
async fn scenario_14_other_account() {
    let pwa = Pwa::new().await;
    let ada = pwa.user("Ada", false).await;
    let grace = pwa.user("Grace", false).await;
    let mut browser = pwa.browser(&ada).await;
    let (mut phone, _) = pwa.pair(&mut browser, "android").await;
    let grace_browser = pwa.browser(&grace).await;
    phone.set(
        "session_token",
        &grace_browser.get("session_token").expect("token"),
        "/",
    );
    let reply = pwa.renew(&mut phone).await;
    reply.expect(200, None);
    assert_eq!(
        reply.body,
        json!({"renewed": false, "otherAccount": {"name": "Grace Example"}})
    );
}

/// Scenario 19: signing out of the web ends only the web session.
#[tokio::test]
async fn scenario_19_web_logout_keeps_the_app() {
    let pwa = Pwa::new().await;
    let ada = pwa.user("Ada", false).await;
    let mut browser = pwa.browser(&ada).await;
    let (phone, _) = pwa.pair(&mut browser, "android").await;
    let token = browser.get("session_token").expect("token");
    let mut conn = pwa.core.pool.acquire().await.expect("connection");
    k2b_core::identity::session::revoke_family(&mut conn, token_sid(&token), "logout", None)
        .await
        .expect("logout");
    let listed = pwa.get("/api/auth/pwa/v1/devices", &mut browser).await;
    listed.expect(403, Some("REAUTHENTICATE"));
    assert!(
        pwa.probe(&phone).await.is_some(),
        "the app session lives on"
    );
}

/// Scenario 20: revoking the app session's signing key ends it; renewal issues a new one.
#[tokio::test]
async fn scenario_20_signing_key_revocation() {
    let pwa = Pwa::new().await;
    let ada = pwa.user("Ada", false).await;
    let mut browser = pwa.browser(&ada).await;
    let (mut phone, _) = pwa.pair(&mut browser, "android").await;
    let kid: String = sqlx::query_scalar(
        "SELECT signing_kid FROM auth.session_families WHERE pwa_device_id IS NOT NULL",
    )
    .fetch_one(&pwa.core.pool)
    .await
    .expect("kid");
    assert!(
        pwa.core
            .identity
            .revoke_key(&kid, "compromised")
            .await
            .expect("revoke")
    );
    assert!(pwa.probe(&phone).await.is_none());
    let renewed = pwa.renew(&mut phone).await;
    renewed.expect(200, None);
    assert_eq!(renewed.body["renewed"], true);
    assert!(pwa.probe(&phone).await.is_some());
}
