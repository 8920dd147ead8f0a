//! Scenario 27 and the forged commands: a device command is accepted once, inside its window,
//! signed by the enrolled P-256 key of an unrevoked device of this issuer whose owner is usable.

use k2b_core::Core;
use k2b_core::cloud_login::{CloudLoginError, ManageActor, device, enroll, login, proof};
use k2b_core::config::{Config, Mode};
use k2b_tests::authenticator::TestAuthenticator;
use serde_json::{Value, json};
use uuid::Uuid;

use super::CloudLogin;
use crate::pwa::{Jar, ORIGIN, token_sid};

/// The order of the P-256 group, big-endian.
const P256_ORDER: [u8; 32] = [
    0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    0xbc, 0xe6, 0xfa, 0xad, 0xa7, 0x17, 0x9e, 0x84, 0xf3, 0xb9, 0xca, 0xc2, 0xfc, 0x63, 0x25, 0x51,
];

/// `a - b` of two 256-bit big-endian numbers (`a ≥ b`).
fn minus(a: &[u8; 32], b: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    let mut borrow = 0i16;
    for i in (0..32).rev() {
        let mut digit = i16::from(a[i]) - i16::from(b[i]) - borrow;
        borrow = i16::from(digit < 0);
        if digit < 0 {
            digit += 256;
        }
        out[i] = digit as u8;
    }
    out
}

fn b64(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn unb64(text: &str) -> Vec<u8> {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(text)
        .expect("base64")
}

/// The same signature with `s` replaced by `n - s` (the other valid signature of the message).
fn malleated(signature: &str) -> String {
    let bytes = unb64(signature);
    let mut out = bytes[..32].to_vec();
    out.extend_from_slice(&minus(&P256_ORDER, &bytes[32..]));
    b64(&out)
}

#[tokio::test]
async fn replays_tampering_the_clock_and_mixups_are_refused() {
    let cloud = CloudLogin::new().await;
    let (_, mut browser) = cloud.person("ada", false).await;
    let device = cloud.enroll(&mut browser).await;

    // A replayed jti.
    let request = device.command(ORIGIN, json!({"operation": "pending"}));
    cloud
        .app_post("/device", request.clone())
        .await
        .expect(200, None);
    cloud
        .app_post("/device", request.clone())
        .await
        .expect(409, Some("CONFLICT"));

    // The other valid signature of the same proof is the same command: still a replay.
    let mut high = request.clone();
    high["signature"] = json!(malleated(request["signature"].as_str().expect("sig")));
    assert_ne!(high["signature"], request["signature"]);
    cloud
        .app_post("/device", high)
        .await
        .expect(409, Some("CONFLICT"));

    // An altered command under the old signature.
    let mut altered = device.command(ORIGIN, json!({"operation": "pending"}));
    altered["proof"]["command"] = json!({"operation": "revoke"});
    cloud
        .app_post("/device", altered)
        .await
        .expect(403, Some("FORBIDDEN"));

    // A signature over the same values in another order.
    let proof = device.proof(ORIGIN, json!({"operation": "pending"}));
    let reordered = json!([
        "cloud-app-approval-v1",
        "device",
        proof["issuer"],
        proof["jti"],
        proof["deviceId"],
        proof["issuedAt"],
        proof["expiresAt"],
        "pending"
    ])
    .to_string();
    cloud
        .app_post(
            "/device",
            json!({"proof": proof, "signature": device.sign(&reordered)}),
        )
        .await
        .expect(403, Some("FORBIDDEN"));

    // Outside the window: issued at 1, issued in the future, living longer than 60 s.
    let now = chrono::Utc::now().timestamp();
    for (issued, expires) in [
        (1, 61),
        (now + 30, now + 60),
        (now - 61, now + 1),
        (now, now + 61),
        (now - 70, now - 10),
    ] {
        let mut proof = device.proof(ORIGIN, json!({"operation": "pending"}));
        proof["issuedAt"] = json!(issued);
        proof["expiresAt"] = json!(expires);
        cloud
            .app_post("/device", device.signed(proof))
            .await
            .expect(403, Some("FORBIDDEN"));
    }

    // Signature values that are no signature: r = 0, s = n, a non-canonical spelling.
    let fresh = device.command(ORIGIN, json!({"operation": "pending"}));
    let bytes = unb64(fresh["signature"].as_str().expect("sig"));
    let mut zero_r = fresh.clone();
    zero_r["signature"] = json!(b64(&[&[0u8; 32][..], &bytes[32..]].concat()));
    cloud
        .app_post("/device", zero_r)
        .await
        .expect(403, Some("FORBIDDEN"));
    let mut s_is_n = fresh.clone();
    s_is_n["signature"] = json!(b64(&[&bytes[..32], &P256_ORDER[..]].concat()));
    cloud
        .app_post("/device", s_is_n)
        .await
        .expect(403, Some("FORBIDDEN"));
    let mut spelled = fresh.clone();
    let text = fresh["signature"].as_str().expect("sig");
    let last = text.chars().last().expect("char");
    let other = match last {
        'A' => 'B',
        'Q' => 'R',
        'g' => 'h',
        _ => 'x',
    };
    spelled["signature"] = json!(format!("{}{other}", &text[..85]));
    cloud
        .app_post("/device", spelled)
        .await
        .expect(400, Some("INVALID_REQUEST"));
    // The untouched command still works: none of the forgeries burnt its jti.
    cloud.app_post("/device", fresh).await.expect(200, None);

    // A decision with a challenge that is not the request's.
    let started = cloud.start_login("ada", "login").await;
    cloud
        .command(
            &device,
            json!({
                "operation": "decide", "requestId": started["requestId"],
                "challenge": "a".repeat(42) + "A", "comparison": started["comparison"],
                "decision": "approve",
            }),
        )
        .await
        .expect(409, Some("CONFLICT"));
    // And a high-S signature of a fresh command is a valid signature: WebCrypto signers produce
    // both forms, so both are accepted (replay protection is the jti, not the signature).
    let fresh = device.command(ORIGIN, json!({"operation": "pending"}));
    let mut high = fresh.clone();
    high["signature"] = json!(malleated(fresh["signature"].as_str().expect("sig")));
    cloud.app_post("/device", high).await.expect(200, None);
}

#[tokio::test]
async fn a_key_of_another_curve_is_refused() {
    use aws_lc_rs::rand::SystemRandom;
    use aws_lc_rs::signature::{
        ECDSA_P256K1_SHA256_FIXED_SIGNING, ECDSA_P384_SHA384_FIXED_SIGNING, EcdsaKeyPair, KeyPair,
    };
    let cloud = CloudLogin::new().await;
    let (_, mut browser) = cloud.person("ada", false).await;
    let started = cloud.start_pairing(&mut browser, None).await;
    let (pairing, secret) = (
        started["pairingId"].as_str().expect("id"),
        started["secret"].as_str().expect("secret"),
    );
    let claim = |pair: &EcdsaKeyPair, crv: &str, size: usize| {
        let point = pair.public_key().as_ref().to_vec();
        let (x, y) = (b64(&point[1..1 + size]), b64(&point[1 + size..]));
        let message = json!([
            "cloud-app-approval-v1",
            "pair",
            ORIGIN,
            pairing,
            secret,
            "EC",
            crv,
            x,
            y,
            "Phone"
        ])
        .to_string();
        let signature = pair
            .sign(&SystemRandom::new(), message.as_bytes())
            .expect("sign");
        json!({
            "pairingId": pairing, "secret": secret,
            "publicKey": {"kty": "EC", "crv": crv, "x": x, "y": y},
            "name": "Phone", "signature": b64(signature.as_ref()),
        })
    };
    // secp256k1 has 32-byte coordinates too: presented as P-256, its point is off the curve.
    let k1 = EcdsaKeyPair::generate(&ECDSA_P256K1_SHA256_FIXED_SIGNING).expect("key");
    cloud
        .app_post("/pairings/claim", claim(&k1, "P-256", 32))
        .await
        .expect(403, Some("FORBIDDEN"));
    let mut named = claim(&k1, "P-256", 32);
    named["publicKey"]["crv"] = json!("secp256k1");
    cloud
        .app_post("/pairings/claim", named)
        .await
        .expect(400, Some("INVALID_REQUEST"));
    // P-384: another curve name, coordinates and signature length; never parsed as a key.
    let p384 = EcdsaKeyPair::generate(&ECDSA_P384_SHA384_FIXED_SIGNING).expect("key");
    cloud
        .app_post("/pairings/claim", claim(&p384, "P-384", 48))
        .await
        .expect(400, Some("INVALID_REQUEST"));
    // None of that touched the pairing: the real key still claims it.
    let device = TestAuthenticator::new();
    cloud
        .claim(&device, &started, "Phone")
        .await
        .expect(200, None);
    assert!(proof::is_secret(secret));
}

/// A second installation on the same database: another issuer.
fn second_cloud(cloud: &CloudLogin) -> Core {
    let url = cloud.pwa.db.url();
    let data = std::env::temp_dir().join(format!("{}-second", cloud.pwa.db.name));
    let config = Config::from_lookup(Mode::Local, |name| match name {
        "DATABASE_URL" => Some(url.clone()),
        "K2B_DATA_DIR" => Some(data.display().to_string()),
        "APP_SECRET" => Some(k2b_tests::TEST_APP_SECRET.to_string()),
        "APP_URL" => Some("https://second-cloud.example.test".to_string()),
        "K2B_SETTINGS_CACHE_MS" => Some("0".to_string()),
        _ => None,
    })
    .expect("config");
    Core::with_pool(config, cloud.pwa.db.pool.clone())
}

/// Enrolls a new authenticator of the browser's person at `core` (service calls).
async fn enroll_at(core: &Core, issuer: &str, browser: &Jar, user: Uuid) -> TestAuthenticator {
    let actor = ManageActor {
        user_id: user,
        sid: token_sid(&browser.get("session_token").expect("token")),
        admin: false,
    };
    let started = enroll::start(core, actor, None, None).await.expect("start");
    let mut device = TestAuthenticator::new();
    let body = device.claim_body(
        issuer,
        &started.pairing_id.to_string(),
        &started.secret,
        "Phone",
    );
    let claim = proof::parse_claim(&body).expect("claim");
    let claimed = enroll::claim(core, &claim).await.expect("claimed");
    enroll::confirm(core, actor, started.pairing_id, &claimed.comparison, None)
        .await
        .expect("confirmed");
    device.device_id = Some(claimed.device_id.to_string());
    device
}

async fn run(core: &Core, body: &Value) -> Result<device::CommandOutcome, CloudLoginError> {
    device::command(core, &proof::parse_device_request(body)?, None).await
}

#[tokio::test]
async fn two_installations_and_two_people_never_share_keys_requests_or_signatures() {
    let cloud = CloudLogin::new().await;
    let second = second_cloud(&cloud);
    const SECOND: &str = "https://second-cloud.example.test";
    let (owner, mut browser) = cloud.person("ada", false).await;
    let (_, mut other_browser) = cloud.person("grace", false).await;
    let a = cloud.enroll(&mut browser).await;
    let b = enroll_at(&second, SECOND, &browser, owner.id).await;
    let stranger = cloud.enroll(&mut other_browser).await;
    let started = cloud.start_login("ada@example.test", "login").await;

    // A's command at the second installation (its issuer, or the second's).
    let command = a.command(ORIGIN, json!({"operation": "pending"}));
    assert_eq!(
        run(&second, &command).await,
        Err(CloudLoginError::Forbidden)
    );
    let command = a.command(SECOND, json!({"operation": "pending"}));
    assert_eq!(
        run(&second, &command).await,
        Err(CloudLoginError::Forbidden)
    );
    // A stranger signing for A's device id.
    let mut proof = stranger.proof(ORIGIN, json!({"operation": "pending"}));
    proof["deviceId"] = json!(a.device_id.clone().expect("id"));
    cloud
        .app_post("/device", stranger.signed(proof))
        .await
        .expect(403, Some("FORBIDDEN"));
    // Each sees only its own installation's and person's requests.
    let at_second = run(&second, &b.command(SECOND, json!({"operation": "pending"}))).await;
    assert_eq!(at_second, Ok(device::CommandOutcome::Pending(Vec::new())));
    let strangers = cloud
        .command(&stranger, json!({"operation": "pending"}))
        .await;
    assert_eq!(strangers.body["requests"], json!([]));

    cloud.approve(&a, &started).await;
    let (id, secret) = (
        Uuid::parse_str(started["requestId"].as_str().expect("id")).expect("uuid"),
        started["browserSecret"].as_str().expect("secret"),
    );
    assert_eq!(
        login::complete(&second, id, secret, None).await,
        Err(CloudLoginError::Conflict)
    );
    assert_eq!(
        login::complete(cloud.core(), id, secret, None).await,
        Ok(owner.id)
    );
}

#[tokio::test]
async fn after_approval_the_account_and_device_are_checked_again() {
    let cloud = CloudLogin::new().await;
    let (owner, mut browser) = cloud.person("ada", false).await;
    let device = cloud.enroll(&mut browser).await;
    let device_id = device.device_id.clone().expect("id");

    // The category switched off after approval.
    let started = cloud.start_login("ada", "login").await;
    cloud.approve(&device, &started).await;
    cloud.set("user.category.login.enabled", json!(false)).await;
    cloud
        .complete(&started, &mut Jar::default())
        .await
        .expect(403, Some("FORBIDDEN"));
    cloud.unset("user.category.login.enabled").await;

    // A sign-out everywhere (epoch bump) after approval.
    let second = cloud.start_login("ada", "login").await;
    cloud.approve(&device, &second).await;
    cloud
        .exec(
            "UPDATE auth.users SET auth_epoch = auth_epoch + 1 WHERE id = $1",
            &owner.id.to_string(),
        )
        .await;
    cloud
        .complete(&second, &mut Jar::default())
        .await
        .expect(409, Some("CONFLICT"));
    // Requests of the old epoch are no longer shown.
    let stale = cloud
        .command(&device, json!({"operation": "pending"}))
        .await;
    assert_eq!(stale.body["requests"], json!([]));

    // The device revoked after approval (the first sign-in is still approved).
    let mut fresh_browser = cloud.pwa.browser(&owner).await;
    cloud
        .post(
            "/manage/devices/update",
            &mut fresh_browser,
            json!({"operation": "revoke", "deviceId": device_id}),
        )
        .await
        .expect(204, None);
    cloud
        .complete(&started, &mut Jar::default())
        .await
        .expect(403, Some("FORBIDDEN"));
    cloud
        .command(&device, json!({"operation": "pending"}))
        .await
        .expect(403, Some("FORBIDDEN"));
}

#[tokio::test]
async fn an_expired_or_deleted_account_cannot_command() {
    let cloud = CloudLogin::new().await;
    let (owner, mut browser) = cloud.person("ada", false).await;
    let device = cloud.enroll(&mut browser).await;
    cloud
        .exec(
            "UPDATE auth.users SET account_expires = now() - interval '1 minute' WHERE id = $1",
            &owner.id.to_string(),
        )
        .await;
    cloud
        .command(&device, json!({"operation": "pending"}))
        .await
        .expect(403, Some("FORBIDDEN"));
    cloud
        .exec(
            "DELETE FROM auth.users WHERE id = $1",
            &owner.id.to_string(),
        )
        .await;
    cloud
        .command(&device, json!({"operation": "pending"}))
        .await
        .expect(403, Some("FORBIDDEN"));
}

#[tokio::test]
async fn a_device_revokes_itself_with_a_signed_command() {
    let cloud = CloudLogin::new().await;
    let (_, mut browser) = cloud.person("ada", false).await;
    let device = cloud.enroll(&mut browser).await;
    let revoked = cloud.command(&device, json!({"operation": "revoke"})).await;
    revoked.expect(200, None);
    assert_eq!(revoked.body, json!({"state": "revoked"}));
    cloud
        .command(&device, json!({"operation": "pending"}))
        .await
        .expect(403, Some("FORBIDDEN"));
    let page = cloud.get("/manage/devices", &mut browser).await;
    assert!(page.body["items"][0]["revokedAt"].is_string());
    assert!(page.body["items"][0]["lastUsedAt"].is_string());
}
