//! Session tokens against a real key ring: scenarios 12–15 and the forged-token cases, each
//! its own test.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, EncodingKey};
use k2b_core::Core;
use k2b_core::identity::session::SessionRequest;
use k2b_core::identity::{IssueOptions, Purpose, jwt};
use k2b_tests::{TestDb, core_for, create_user};
use serde_json::{Value, json};
use uuid::Uuid;

const ISSUER: &str = "https://cloud.example.test";

struct Fixture {
    _db: TestDb,
    core: Core,
    user: Uuid,
}

async fn fixture() -> Fixture {
    let db = TestDb::new().await;
    let core = core_for(&db);
    let user = create_user(&core, "ada", false).await.id;
    Fixture {
        _db: db,
        core,
        user,
    }
}

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

fn claims(user: Uuid) -> Value {
    json!({
        "iss": ISSUER, "aud": "cloud", "token_use": "session", "sub": user,
        "sid": Uuid::new_v4(), "auth_epoch": 0, "iat": now(), "exp": now() + 3600
    })
}

/// Signs `claims` with the active session key and header `{alg, kid, typ}`.
async fn sign(f: &Fixture, typ: &str, claims: &Value) -> String {
    let signer = f
        .core
        .identity
        .prepare_signer(Purpose::Session)
        .await
        .expect("signer");
    jwt::encode(&signer.kid, typ, claims, &signer.key).expect("encode")
}

/// Re-signs with an arbitrary header (to forge shapes `jwt::encode` never produces).
async fn sign_with_header(f: &Fixture, header: &Value, claims: &Value) -> String {
    let signer = f
        .core
        .identity
        .prepare_signer(Purpose::Session)
        .await
        .expect("signer");
    let input = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(claims.to_string())
    );
    let signature = URL_SAFE_NO_PAD.encode(signer.key.sign(input.as_bytes()).expect("sign"));
    format!("{input}.{signature}")
}

async fn verifies(f: &Fixture, token: &str) -> bool {
    f.core.identity.verify_session_token(token).await.is_some()
}

/// Scenario 12: a minimal token verifies to its claims.
#[tokio::test]
async fn scenario_12_minimal_token_verifies() {
    let f = fixture().await;
    let mut c = claims(f.user);
    c["auth_epoch"] = json!(3);
    let token = sign(&f, "cloud-session+jwt", &c).await;
    let verified = f
        .core
        .identity
        .verify_session_token(&token)
        .await
        .expect("valid");
    assert_eq!(verified.sub, f.user);
    assert_eq!(verified.auth_epoch, 3);
    assert_eq!(verified.aud, "cloud");
    assert_eq!(verified.token_use, "session");
}

/// Scenario 13 and forged tokens: wrong typ.
#[tokio::test]
async fn forged_wrong_typ_is_rejected() {
    let f = fixture().await;
    assert!(!verifies(&f, &sign(&f, "at+jwt", &claims(f.user)).await).await);
    assert!(!verifies(&f, &sign(&f, "cloud-invocation+jwt", &claims(f.user)).await).await);
}

/// Scenario 13: wrong audience.
#[tokio::test]
async fn forged_wrong_audience_is_rejected() {
    let f = fixture().await;
    let mut c = claims(f.user);
    c["aud"] = json!("app:mail");
    assert!(!verifies(&f, &sign(&f, "cloud-session+jwt", &c).await).await);
}

/// Scenario 13: wrong token use.
#[tokio::test]
async fn forged_wrong_token_use_is_rejected() {
    let f = fixture().await;
    let mut c = claims(f.user);
    c["token_use"] = json!("access");
    assert!(!verifies(&f, &sign(&f, "cloud-session+jwt", &c).await).await);
}

/// Forged tokens: another issuer.
#[tokio::test]
async fn forged_wrong_issuer_is_rejected() {
    let f = fixture().await;
    let mut c = claims(f.user);
    c["iss"] = json!("https://evil.example");
    assert!(!verifies(&f, &sign(&f, "cloud-session+jwt", &c).await).await);
}

/// Scenario 13 and forged tokens: an unknown claim (`roles`).
#[tokio::test]
async fn forged_unknown_claim_is_rejected() {
    let f = fixture().await;
    let mut c = claims(f.user);
    c["roles"] = json!(["admin"]);
    assert!(!verifies(&f, &sign(&f, "cloud-session+jwt", &c).await).await);
}

/// Scenario 14: signed by a key nobody published.
#[tokio::test]
async fn scenario_14_unknown_key_is_rejected() {
    let f = fixture().await;
    let stranger = k2b_core::identity::keys::generate().expect("key");
    let key = k2b_core::identity::keys::import(&stranger.kid, &stranger.public, &stranger.private)
        .expect("import");
    let token =
        jwt::encode(&stranger.kid, "cloud-session+jwt", &claims(f.user), &key).expect("encode");
    assert!(!verifies(&f, &token).await);
}

/// Scenario 15 and forged tokens: expiry beyond the 30 s skew.
#[tokio::test]
async fn scenario_15_expiry_beyond_the_skew_is_rejected() {
    let f = fixture().await;
    let mut c = claims(f.user);
    c["iat"] = json!(now() - 3600);
    c["exp"] = json!(now() - 31);
    assert!(!verifies(&f, &sign(&f, "cloud-session+jwt", &c).await).await);
    c["exp"] = json!(now() - 25);
    assert!(
        verifies(&f, &sign(&f, "cloud-session+jwt", &c).await).await,
        "inside the skew"
    );
    let mut c = claims(f.user);
    c["exp"] = json!(c["iat"].as_i64().expect("iat") - 31);
    assert!(!verifies(&f, &sign(&f, "cloud-session+jwt", &c).await).await);
}

/// Scenario 15: `nbf` is not a session claim at all.
#[tokio::test]
async fn scenario_15_nbf_is_rejected() {
    let f = fixture().await;
    let mut c = claims(f.user);
    c["nbf"] = json!(now() + 31);
    assert!(!verifies(&f, &sign(&f, "cloud-session+jwt", &c).await).await);
}

/// Scenario 15 and forged tokens: a 4097-byte token signed by the active session key, with
/// valid claims, is refused for its size alone: its 4096-byte twin verifies.
#[tokio::test]
async fn scenario_15_oversized_token_is_rejected() {
    let f = fixture().await;
    let signer = f
        .core
        .identity
        .prepare_signer(Purpose::Session)
        .await
        .expect("signer");
    let (at_limit, over) = jwt::testing::encode_size_twins(
        &signer.kid,
        "cloud-session+jwt",
        &claims(f.user),
        &signer.key,
    )
    .expect("twins");
    assert_eq!((at_limit.len(), over.len()), (4096, 4097));
    assert!(verifies(&f, &at_limit).await, "the twin at the limit");
    assert!(!verifies(&f, &over).await);
}

/// Forged tokens: `alg: none`.
#[tokio::test]
async fn forged_alg_none_is_rejected() {
    let f = fixture().await;
    let signer = f
        .core
        .identity
        .prepare_signer(Purpose::Session)
        .await
        .expect("signer");
    let header = json!({"alg": "none", "kid": signer.kid, "typ": "cloud-session+jwt"});
    let input = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(claims(f.user).to_string())
    );
    assert!(!verifies(&f, &format!("{input}.")).await);
    let real = sign(&f, "cloud-session+jwt", &claims(f.user)).await;
    let signature = real.rsplit('.').next().expect("signature");
    assert!(!verifies(&f, &format!("{input}.{signature}")).await);
}

/// Forged tokens: HS256 with the RSA public key as the HMAC secret.
#[tokio::test]
async fn forged_hs256_with_the_public_key_is_rejected() {
    let f = fixture().await;
    let signer = f
        .core
        .identity
        .prepare_signer(Purpose::Session)
        .await
        .expect("signer");
    let jwk =
        k2b_core::identity::ring::find_public_jwk(&f.core.pool, Purpose::Session, &signer.kid)
            .await
            .expect("query")
            .expect("published");
    let header = json!({"alg": "HS256", "kid": signer.kid, "typ": "cloud-session+jwt"});
    let input = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(claims(f.user).to_string())
    );
    for secret in [jwk.to_string(), jwk["n"].as_str().expect("n").to_string()] {
        let key = EncodingKey::from_secret(secret.as_bytes()).expect("secret");
        let mac =
            jsonwebtoken::crypto::sign(input.as_bytes(), &key, Algorithm::HS256).expect("mac");
        assert!(!verifies(&f, &format!("{input}.{mac}")).await);
    }
}

/// Forged tokens: an extra header member.
#[tokio::test]
async fn forged_extra_header_member_is_rejected() {
    let f = fixture().await;
    let signer = f
        .core
        .identity
        .prepare_signer(Purpose::Session)
        .await
        .expect("signer");
    let header =
        json!({"alg": "RS256", "kid": signer.kid, "typ": "cloud-session+jwt", "cty": "JWT"});
    assert!(!verifies(&f, &sign_with_header(&f, &header, &claims(f.user)).await).await);
    let exact = json!({"alg": "RS256", "kid": signer.kid, "typ": "cloud-session+jwt"});
    assert!(verifies(&f, &sign_with_header(&f, &exact, &claims(f.user)).await).await);
}

/// Forged tokens: a revoked key's kid, signature and all.
#[tokio::test]
async fn forged_revoked_key_is_rejected() {
    let f = fixture().await;
    let token = sign(&f, "cloud-session+jwt", &claims(f.user)).await;
    assert!(verifies(&f, &token).await);
    let kid = jwt::parse(&token).expect("parse").kid;
    assert!(
        f.core
            .identity
            .revoke_key(&kid, "test")
            .await
            .expect("revoke")
    );
    assert!(!verifies(&f, &token).await);
}

/// An issued session verifies and the family says it is a browser session.
#[tokio::test]
async fn issued_sessions_verify_and_count() {
    let f = fixture().await;
    let issued = f
        .core
        .identity
        .issue_session(
            &f.core.settings,
            SessionRequest::web(f.user),
            IssueOptions::default(),
        )
        .await
        .expect("issue");
    let claims = f
        .core
        .identity
        .verify_session_token(&issued.token)
        .await
        .expect("valid");
    assert_eq!(claims.sid, issued.sid);
    assert_eq!(
        claims.exp - claims.iat,
        8 * 3600,
        "user.session.expiry_hours defaults to 8"
    );
    let snapshot = f.core.identity.metrics().snapshot();
    assert!(snapshot.sign_success >= 1);
    assert!(snapshot.verify_success >= 1);
    assert!(
        f.core
            .identity
            .verify_session_token("garbage")
            .await
            .is_none()
    );
    assert!(f.core.identity.metrics().snapshot().verify_failure >= 1);
}

/// Forged key ids cost one query per interval, not one each: twenty tokens naming kids the ring
/// never had are refused after at most one key-set load; the real kid still verifies.
#[tokio::test]
async fn forged_key_ids_do_not_cost_a_query_each() {
    let f = fixture().await;
    let genuine = sign(&f, "cloud-session+jwt", &claims(f.user)).await;
    assert!(verifies(&f, &genuine).await);
    let before = f.core.identity.metrics().snapshot().unknown_kid_refresh;
    let foreign = k2b_core::identity::keys::generate().expect("key");
    let signing = k2b_core::identity::keys::import(&foreign.kid, &foreign.public, &foreign.private)
        .expect("import");
    for _ in 0..20 {
        let kid = uuid::Uuid::new_v4().to_string();
        let forged =
            k2b_core::identity::jwt::encode(&kid, "cloud-session+jwt", &claims(f.user), &signing)
                .expect("forged");
        assert!(!verifies(&f, &forged).await);
    }
    let loads = f.core.identity.metrics().snapshot().unknown_kid_refresh - before;
    assert!(loads <= 1, "{loads} key-set loads for 20 forged kids");
    assert!(verifies(&f, &genuine).await);
}
