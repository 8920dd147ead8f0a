//! Scenarios 25 and 29 (enrollment): possession of the key, the code both screens show, the
//! starting session's authority, assisted enrollment by administrators, and the limits.

use k2b_tests::authenticator::TestAuthenticator;
use serde_json::json;

use super::{APP_ORIGIN, CloudLogin};
use crate::pwa::{Jar, ORIGIN};

#[tokio::test]
async fn enrollment_needs_the_key_and_the_starting_sessions_confirmation() {
    let cloud = CloudLogin::new().await;
    let (_, mut browser) = cloud.person("ada", false).await;
    let mut device = TestAuthenticator::new();
    let started = cloud.start_pairing(&mut browser, None).await;
    assert_eq!(started["protocol"], "cloud-app-approval-v1");
    assert_eq!(started["issuer"], ORIGIN);
    let pairing = started["pairingId"].as_str().expect("id").to_string();
    let secret = started["secret"].as_str().expect("secret").to_string();

    // A name other than the one signed.
    let mut tampered = device.claim_body(ORIGIN, &pairing, &secret, "Phone");
    tampered["name"] = json!("Tampered");
    cloud
        .app_post("/pairings/claim", tampered)
        .await
        .expect(403, Some("FORBIDDEN"));

    let claimed = cloud.claim(&device, &started, "Phone").await;
    claimed.expect(200, None);
    let comparison = claimed.body["comparison"]
        .as_str()
        .expect("code")
        .to_string();
    let device_id = claimed.body["deviceId"].as_str().expect("id").to_string();
    assert_eq!(comparison.len(), 6);

    // Not enrolled until confirmed: its commands are refused.
    device.device_id = Some(device_id.clone());
    cloud
        .command(&device, json!({"operation": "pending"}))
        .await
        .expect(403, Some("FORBIDDEN"));
    let other = TestAuthenticator::new();

    // The device polls its result with its own key; another key learns nothing.
    let polled = cloud
        .app_post(
            "/pairings/result",
            json!({"pairingId": pairing, "secret": secret, "publicKey": device.jwk}),
        )
        .await;
    polled.expect(200, None);
    assert_eq!(polled.body["state"], "claimed");
    assert_eq!(polled.body["comparison"], comparison.as_str());
    cloud
        .app_post(
            "/pairings/result",
            json!({"pairingId": pairing, "secret": secret, "publicKey": other.jwk}),
        )
        .await
        .expect(403, Some("FORBIDDEN"));

    // A second claim, a wrong code, a second confirmation.
    cloud
        .claim(&device, &started, "Phone")
        .await
        .expect(409, Some("CONFLICT"));
    let wrong = if comparison == "000000" {
        "111111"
    } else {
        "000000"
    };
    cloud
        .confirm(&mut browser, &started, wrong)
        .await
        .expect(409, Some("CONFLICT"));
    let confirmed = cloud.confirm(&mut browser, &started, &comparison).await;
    confirmed.expect(200, None);
    assert_eq!(confirmed.body["deviceId"], device_id.as_str());
    cloud
        .confirm(&mut browser, &started, &comparison)
        .await
        .expect(409, Some("CONFLICT"));

    let page = cloud.get("/manage/devices", &mut browser).await;
    assert_eq!(page.body["items"].as_array().map(Vec::len), Some(1));
    assert_eq!(page.body["items"][0]["name"], "Phone");
    assert_eq!(page.body["items"][0]["assisted"], false);
    let polled = cloud
        .app_post(
            "/pairings/result",
            json!({"pairingId": pairing, "secret": secret, "publicKey": device.jwk}),
        )
        .await;
    assert_eq!(
        polled.body,
        json!({"state": "confirmed", "deviceId": device_id, "comparison": null})
    );

    // Only the hash of the secret is stored; the key is stored as a JSON object.
    let stored: String = cloud
        .scalar(
            "SELECT secret_hash FROM auth.app_pairings WHERE id = $1",
            &pairing,
        )
        .await;
    assert_ne!(stored, secret);
    assert_eq!(stored, k2b_core::approvals::hash_secret(&secret));
    let kind: String = cloud
        .scalar(
            "SELECT jsonb_typeof(public_key) FROM auth.app_devices WHERE id = $1",
            &device_id,
        )
        .await;
    assert_eq!(kind, "object");
    let actions: Vec<String> = cloud.pwa.audit_actions().await;
    assert_eq!(
        actions,
        ["auth.app.pairing.start", "auth.app.device.enroll"]
    );
    for row in cloud.pwa.audit_rows().await {
        let text = row.to_string();
        assert!(
            !text.contains(&secret) && !text.contains(&comparison),
            "{text}"
        );
        assert_eq!(row["target_type"], "app_device");
    }
}

#[tokio::test]
async fn the_management_api_refuses_anonymous_cross_origin_and_old_sessions() {
    let cloud = CloudLogin::new().await;
    let (_, mut browser) = cloud.person("ada", false).await;
    cloud
        .post("/manage/pairings/start", &mut Jar::default(), json!({}))
        .await
        .expect(401, Some("UNAUTHORIZED"));
    cloud
        .post_from(
            "/manage/pairings/start",
            &mut browser,
            Some(APP_ORIGIN),
            json!({}),
        )
        .await
        .expect(403, Some("FORBIDDEN"));
    cloud
        .post_from("/manage/pairings/start", &mut browser, None, json!({}))
        .await
        .expect(403, Some("FORBIDDEN"));
    cloud
        .post("/manage/pairings/start", &mut browser, json!({}))
        .await
        .expect(201, None);
    let token = browser.get("session_token").expect("token");
    let sid = crate::pwa::token_sid(&token);
    cloud
        .pwa
        .exec(
            "UPDATE auth.session_families SET issued_at = now() - interval '11 minutes' WHERE sid = $1",
            sid,
        )
        .await;
    cloud
        .post("/manage/pairings/start", &mut browser, json!({}))
        .await
        .expect(403, Some("REAUTHENTICATE"));
}

#[tokio::test]
async fn assisted_enrollment_needs_the_opt_in_the_current_role_and_the_starting_session() {
    let cloud = CloudLogin::new().await;
    let (admin, mut admin_browser) = cloud.person("root", true).await;
    let (owner, mut owner_browser) = cloud.person("ada", false).await;
    cloud
        .post(
            "/manage/pairings/start",
            &mut admin_browser,
            json!({"userId": owner.id}),
        )
        .await
        .expect(403, Some("FORBIDDEN"));
    cloud
        .set("user.app_approval.admin_pairing", json!(true))
        .await;
    // A person who is not an administrator cannot start one for someone else.
    cloud
        .post(
            "/manage/pairings/start",
            &mut owner_browser,
            json!({"userId": admin.id}),
        )
        .await
        .expect(403, Some("FORBIDDEN"));
    let started = cloud
        .start_pairing(&mut admin_browser, Some(owner.id))
        .await;
    let reference = json!({"pairingId": started["pairingId"]});
    // The owner did not start it.
    cloud
        .post(
            "/manage/pairings/status",
            &mut owner_browser,
            reference.clone(),
        )
        .await
        .expect(403, Some("FORBIDDEN"));
    let status = cloud
        .post(
            "/manage/pairings/status",
            &mut admin_browser,
            reference.clone(),
        )
        .await;
    status.expect(200, None);
    assert_eq!(status.body["state"], "pending");
    assert_eq!(status.body["userId"], owner.id.to_string());
    // The role is read now: without it, the starter cannot see the pairing either.
    cloud
        .exec(
            "UPDATE auth.users SET admin = false WHERE id = $1",
            &admin.id.to_string(),
        )
        .await;
    cloud
        .post(
            "/manage/pairings/status",
            &mut admin_browser,
            reference.clone(),
        )
        .await
        .expect(403, Some("FORBIDDEN"));
    cloud
        .exec(
            "UPDATE auth.users SET admin = true WHERE id = $1",
            &admin.id.to_string(),
        )
        .await;
    cloud
        .post("/manage/pairings/cancel", &mut admin_browser, reference)
        .await
        .expect(204, None);
    let result = cloud
        .app_post(
            "/pairings/result",
            json!({
                "pairingId": started["pairingId"], "secret": started["secret"],
                "publicKey": TestAuthenticator::new().jwk,
            }),
        )
        .await;
    result.expect(200, None);
    assert_eq!(result.body["state"], "cancelled");
    let audited: Vec<String> = cloud.pwa.audit_actions().await;
    assert_eq!(
        audited,
        ["auth.app.pairing.start", "auth.app.pairing.cancel"]
    );
}

#[tokio::test]
async fn an_assisted_enrollment_is_marked_and_enrolled_by_the_administrator() {
    let cloud = CloudLogin::new().await;
    cloud
        .set("user.app_approval.admin_pairing", json!(true))
        .await;
    let (admin, mut admin_browser) = cloud.person("root", true).await;
    let (owner, mut owner_browser) = cloud.person("ada", false).await;
    let device = TestAuthenticator::new();
    let started = cloud
        .start_pairing(&mut admin_browser, Some(owner.id))
        .await;
    let claimed = cloud.claim(&device, &started, "Ada's phone").await;
    claimed.expect(200, None);
    let code = claimed.body["comparison"].as_str().expect("code");
    cloud
        .confirm(&mut admin_browser, &started, code)
        .await
        .expect(200, None);
    let page = cloud.get("/manage/devices", &mut owner_browser).await;
    assert_eq!(page.body["items"][0]["assisted"], true);
    let enrolled_by: uuid::Uuid = cloud
        .scalar(
            "SELECT enrolled_by FROM auth.app_devices WHERE id = $1",
            claimed.body["deviceId"].as_str().expect("id"),
        )
        .await;
    assert_eq!(enrolled_by, admin.id);
}

#[tokio::test]
async fn expired_and_cancelled_pairings_cannot_be_claimed_and_open_ones_are_capped() {
    let cloud = CloudLogin::new().await;
    let (_, mut browser) = cloud.person("ada", false).await;
    let device = TestAuthenticator::new();
    let expired = cloud.start_pairing(&mut browser, None).await;
    cloud
        .exec(
            "UPDATE auth.app_pairings SET expires_at = created_at + interval '1 millisecond' WHERE id = $1",
            expired["pairingId"].as_str().expect("id"),
        )
        .await;
    cloud
        .claim(&device, &expired, "Expired")
        .await
        .expect(403, Some("FORBIDDEN"));
    let cancelled = cloud.start_pairing(&mut browser, None).await;
    cloud
        .post(
            "/manage/pairings/cancel",
            &mut browser,
            json!({"pairingId": cancelled["pairingId"]}),
        )
        .await
        .expect(204, None);
    cloud
        .claim(&device, &cancelled, "Cancelled")
        .await
        .expect(409, Some("CONFLICT"));
    // A wrong secret for a live pairing says no more than a missing one.
    let mut wrong = cloud.start_pairing(&mut browser, None).await;
    wrong["secret"] = json!(k2b_core::approvals::create_secret());
    cloud
        .claim(&device, &wrong, "Wrong")
        .await
        .expect(403, Some("FORBIDDEN"));
    // Open pairings: the cancelled and expired ones do not count; five are the limit.
    for _ in 0..4 {
        cloud.start_pairing(&mut browser, None).await;
    }
    cloud
        .post("/manage/pairings/start", &mut browser, json!({}))
        .await
        .expect(429, Some("LIMIT_REACHED"));
}

#[tokio::test]
async fn the_same_key_is_never_enrolled_twice_and_twenty_devices_are_the_limit() {
    let cloud = CloudLogin::new().await;
    let (user, mut browser) = cloud.person("ada", false).await;
    let device = cloud.enroll(&mut browser).await;
    let again = cloud.start_pairing(&mut browser, None).await;
    let claimed = cloud.claim(&device, &again, "Duplicate").await;
    claimed.expect(200, None);
    let code = claimed.body["comparison"].as_str().expect("code");
    cloud
        .confirm(&mut browser, &again, code)
        .await
        .expect(409, Some("CONFLICT"));

    sqlx::query(
        "INSERT INTO auth.app_devices (id, issuer, user_id, name, public_key, assisted)
         SELECT gen_random_uuid(), $1, $2, 'Filler',
                jsonb_build_object('kty', 'EC', 'crv', 'P-256',
                  'x', rpad(i::text, 42, 'A') || 'A', 'y', rpad(i::text, 42, 'B') || 'A'),
                false
           FROM generate_series(1, 19) AS i",
    )
    .bind(ORIGIN)
    .bind(user.id)
    .execute(&cloud.core().pool)
    .await
    .expect("fillers");
    let one_more = TestAuthenticator::new();
    let started = cloud.start_pairing(&mut browser, None).await;
    let claimed = cloud.claim(&one_more, &started, "Twenty-first").await;
    claimed.expect(200, None);
    let code = claimed.body["comparison"].as_str().expect("code");
    cloud
        .confirm(&mut browser, &started, code)
        .await
        .expect(429, Some("LIMIT_REACHED"));
}

#[tokio::test]
async fn the_database_refuses_rows_the_protocol_never_writes() {
    let cloud = CloudLogin::new().await;
    let (user, _) = cloud.person("ada", false).await;
    let pool = &cloud.core().pool;
    let device = TestAuthenticator::new();
    let mut with_private = device.jwk.clone();
    with_private["d"] = json!(device.jwk["x"]);
    let key_row = |key: serde_json::Value| {
        sqlx::query(
            "INSERT INTO auth.app_devices (id, issuer, user_id, name, public_key, assisted)
             VALUES (gen_random_uuid(), $1, $2, 'x', $3, false)",
        )
        .bind(ORIGIN)
        .bind(user.id)
        .bind(key)
        .execute(pool)
    };
    let bad_key = key_row(with_private).await;
    assert!(bad_key.is_err(), "a private member");
    let mut short = device.jwk.clone();
    short["y"] = json!("AAAA");
    assert!(key_row(short).await.is_err(), "a short coordinate");
    assert!(
        key_row(device.jwk.clone()).await.is_ok(),
        "the public key itself"
    );
    let decided_decoy = sqlx::query(
        "INSERT INTO auth.app_logins (id, issuer, category, browser_hash, challenge, comparison, state, expires_at)
         VALUES (gen_random_uuid(), $1, 'login', repeat('a', 64), repeat('A', 43), '123456', 'approved',
                 now() + interval '1 minute')",
    )
    .bind(ORIGIN)
    .execute(pool)
    .await;
    assert!(decided_decoy.is_err(), "a decoy is never decided");
    let bad_state = sqlx::query(
        "INSERT INTO auth.app_pairings (id, issuer, user_id, initiated_by, initiator_sid, assisted, secret_hash, expires_at, state)
         VALUES (gen_random_uuid(), $1, $2, $2, gen_random_uuid(), false, repeat('a', 64), now() + interval '1 minute', 'claimed')",
    )
    .bind(ORIGIN)
    .bind(user.id)
    .execute(pool)
    .await;
    assert!(bad_state.is_err(), "claimed without a key, name and code");
}
