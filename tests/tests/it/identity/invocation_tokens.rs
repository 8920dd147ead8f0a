//! Invocation tokens: scenarios 19–33 of spec/identity.md §15.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::FutureExt;
use futures::future::BoxFuture;
use jsonwebtoken::DecodingKey;
use k2b_core::auth::SessionKind;
use k2b_core::identity::invocation::{
    InvocationAuthority, InvocationClaims, InvocationExpectation, InvocationRequest, build_claims,
    sign_invocation, verify_invocation,
};
use k2b_core::identity::keys::{self, GeneratedKey};
use k2b_core::identity::{
    Identity, IdentityError, IdentitySettings, IdentitySettingsSource, IssueOptions, Metrics,
    Purpose, RuntimeConfigCache, jwt,
};
use k2b_tests::{TestDb, core_for};
use serde_json::{Value, json};
use uuid::Uuid;

const ISSUER: &str = "https://cloud.example.test";
const HASH: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

struct Keys {
    key: GeneratedKey,
}

impl Keys {
    fn new() -> Keys {
        Keys {
            key: keys::generate().expect("key"),
        }
    }
    fn sign(&self, claims: &Value) -> String {
        self.sign_typ("cloud-invocation+jwt", claims)
    }
    fn sign_typ(&self, typ: &str, claims: &Value) -> String {
        let signing =
            keys::import(&self.key.kid, &self.key.public, &self.key.private).expect("import");
        jwt::encode(&self.key.kid, typ, claims, &signing).expect("encode")
    }
    /// Tokens of `claims` exactly at the size limit and one byte over it, otherwise the same.
    fn size_twins(&self, claims: &Value) -> (String, String) {
        let signing =
            keys::import(&self.key.kid, &self.key.public, &self.key.private).expect("import");
        jwt::testing::encode_size_twins(&self.key.kid, "cloud-invocation+jwt", claims, &signing)
            .expect("twins")
    }
    fn decoding(&self) -> Arc<DecodingKey> {
        Arc::new(keys::decoding_key(&self.key.public).expect("decoding"))
    }
}

fn now() -> u64 {
    chrono::Utc::now().timestamp() as u64
}

fn base_claims() -> Value {
    let authority = InvocationAuthority::for_session(Uuid::new_v4(), SessionKind::Web);
    let claims = build_claims(
        ISSUER,
        &InvocationRequest {
            target_app: "weather",
            caller_app: "core",
            operation: "widget.read:current",
            schema_hash: None,
            authority: &authority,
            request_id: None,
            issued_at: None,
            jti: None,
        },
    )
    .expect("claims");
    serde_json::to_value(claims).expect("json")
}

fn expect<'a>(
    target: &'a str,
    op: &'a str,
    hash: Option<&'a str>,
    defer: bool,
) -> InvocationExpectation<'a> {
    InvocationExpectation {
        issuer: ISSUER,
        target_app: target,
        operation: op,
        schema_hash: hash,
        defer_schema_binding: defer,
    }
}

async fn check(
    keys: &Keys,
    token: &str,
    expected: &InvocationExpectation<'_>,
) -> Option<InvocationClaims> {
    let key = keys.decoding();
    verify_invocation(token, expected, now() as i64, |_| async move { Some(key) }).await
}

async fn accepts(keys: &Keys, claims: &Value) -> bool {
    check(
        keys,
        &keys.sign(claims),
        &expect(
            "weather",
            "widget.read:current",
            claims["schema_hash"].as_str(),
            false,
        ),
    )
    .await
    .is_some()
}

/// Counts runtime-configuration loads.
struct Counting(Arc<AtomicUsize>);

impl IdentitySettingsSource for Counting {
    fn load(&self) -> BoxFuture<'static, Result<IdentitySettings, IdentityError>> {
        self.0.fetch_add(1, Ordering::SeqCst);
        async {
            Ok(IdentitySettings {
                app_url: ISSUER.into(),
                admin_groups: json!(["admins"]),
            })
        }
        .boxed()
    }
}

/// Scenario 19: an explicit issuer: the runtime configuration is never read; the token verifies.
#[tokio::test]
async fn scenario_19_explicit_issuer_reads_no_settings() {
    let db = TestDb::new().await;
    let core = core_for(&db);
    let loads = Arc::new(AtomicUsize::new(0));
    let metrics = Arc::new(Metrics::default());
    let identity = Identity::from_parts(
        db.pool.clone(),
        core.config.identity.keks.clone(),
        Arc::new(k2b_core::identity::DbSignerSource::new(
            db.pool.clone(),
            core.config.identity.keks.clone(),
            metrics.clone(),
        )),
        RuntimeConfigCache::new(Arc::new(Counting(loads.clone())), false, None, None),
        metrics,
    );
    let authority = InvocationAuthority::for_session(Uuid::new_v4(), SessionKind::Web);
    let token = identity
        .with_active_signer(
            Purpose::Invocation,
            IssueOptions {
                issuer: Some("https://explicit.example".into()),
                ..IssueOptions::default()
            },
            |scope| {
                let authority = authority.clone();
                async move {
                    let request = InvocationRequest {
                        target_app: "weather",
                        caller_app: "core",
                        operation: "widget.read:current",
                        schema_hash: None,
                        authority: &authority,
                        request_id: None,
                        issued_at: None,
                        jti: None,
                    };
                    let token = sign_invocation(&scope, None, &request);
                    (scope, token)
                }
            },
        )
        .await
        .expect("signed");
    assert_eq!(loads.load(Ordering::SeqCst), 0);
    let kid = jwt::parse(&token).expect("parse").kid;
    let key = identity
        .verification_key(Purpose::Invocation, &kid)
        .await
        .expect("published");
    let expected = InvocationExpectation {
        issuer: "https://explicit.example",
        ..expect("weather", "widget.read:current", None, false)
    };
    let verified = verify_invocation(
        &token,
        &expected,
        now() as i64,
        |_| async move { Some(key) },
    )
    .await;
    assert!(verified.is_some());
}

/// Scenario 20: a token carrying a raw invalid request id is refused; 200 characters are kept.
#[tokio::test]
async fn scenario_20_raw_invalid_request_ids_are_refused() {
    let keys = Keys::new();
    for bad in ["", "two words", "ümlaut", &"x".repeat(201), "line\nbreak"] {
        let mut claims = base_claims();
        claims["request_id"] = json!(bad);
        assert!(!accepts(&keys, &claims).await, "{bad:?}");
    }
    let mut claims = base_claims();
    claims["request_id"] = json!("x".repeat(200));
    assert!(accepts(&keys, &claims).await);
    let mut claims = base_claims();
    claims["request_id"] = json!(123);
    assert!(!accepts(&keys, &claims).await);
}

/// Scenario 21: the minimal token verifies to exactly its claims.
#[tokio::test]
async fn scenario_21_minimal_token_verifies_to_its_claims() {
    let keys = Keys::new();
    let claims = base_claims();
    let verified = check(
        &keys,
        &keys.sign(&claims),
        &expect("weather", "widget.read:current", None, false),
    )
    .await
    .expect("valid");
    assert_eq!(serde_json::to_value(verified).expect("json"), claims);
}

/// Scenarios 22 and 23: delegated, resource-bound and mandate authorities.
#[tokio::test]
async fn scenarios_22_23_service_accounts_and_mandates() {
    let keys = Keys::new();
    let user = Uuid::new_v4().to_string();
    let account = Uuid::new_v4().to_string();
    let mut delegated = base_claims();
    delegated["principal_type"] = json!("service_account");
    delegated["sub"] = json!(account);
    delegated["access_subject_id"] = json!(user);
    delegated["delegated_user_id"] = json!(user);
    delegated["credential_kind"] = json!("api_key");
    delegated["credential_id"] = json!("cred-1");
    delegated["scopes"] = json!(["read"]);
    assert!(accepts(&keys, &delegated).await);
    let mut bound = base_claims();
    bound["principal_type"] = json!("service_account");
    bound["access_subject_type"] = json!("service_account");
    bound["sub"] = json!(account);
    bound["access_subject_id"] = json!(account);
    bound["credential_kind"] = json!("oauth");
    bound["scopes"] = json!(["read", "write"]);
    assert!(accepts(&keys, &bound).await);
    let mut mandate = base_claims();
    mandate["credential_kind"] = json!("mandate");
    mandate["mandate_id"] = json!(Uuid::new_v4());
    mandate["mandate_revision"] = json!(3);
    mandate["workload_type"] = json!("ai.task");
    mandate["workload_id"] = json!("task-1");
    assert!(accepts(&keys, &mandate).await);
    let mut lone = base_claims();
    lone["mandate_id"] = json!(Uuid::new_v4());
    assert!(!accepts(&keys, &lone).await);
}

/// Scenario 24: wrong app, operation, hash, or an expected null hash.
#[tokio::test]
async fn scenario_24_binding_mismatches() {
    let keys = Keys::new();
    let mut claims = base_claims();
    claims["schema_hash"] = json!(HASH);
    let token = keys.sign(&claims);
    let other_hash = "f".repeat(64);
    assert!(
        check(
            &keys,
            &token,
            &expect("weather", "widget.read:current", Some(HASH), false)
        )
        .await
        .is_some()
    );
    assert!(
        check(
            &keys,
            &token,
            &expect("mail", "widget.read:current", Some(HASH), false)
        )
        .await
        .is_none()
    );
    assert!(
        check(
            &keys,
            &token,
            &expect("weather", "widget.read:other", Some(HASH), false)
        )
        .await
        .is_none()
    );
    assert!(
        check(
            &keys,
            &token,
            &expect("weather", "widget.read:current", Some(&other_hash), false)
        )
        .await
        .is_none()
    );
    assert!(
        check(
            &keys,
            &token,
            &expect("weather", "widget.read:current", None, false)
        )
        .await
        .is_none()
    );
}

/// Scenario 25: deferred schema binding accepts any hash, but still binds app, operation and
/// a valid request id.
#[tokio::test]
async fn scenario_25_deferred_schema_binding() {
    let keys = Keys::new();
    let mut claims = base_claims();
    claims["schema_hash"] = json!(HASH);
    let token = keys.sign(&claims);
    let other = "e".repeat(64);
    assert!(
        check(
            &keys,
            &token,
            &expect("weather", "widget.read:current", Some(&other), true)
        )
        .await
        .is_some()
    );
    assert!(
        check(
            &keys,
            &token,
            &expect("mail", "widget.read:current", Some(&other), true)
        )
        .await
        .is_none()
    );
    assert!(
        check(
            &keys,
            &token,
            &expect("weather", "widget.read:x", Some(&other), true)
        )
        .await
        .is_none()
    );
    claims["request_id"] = json!("two words");
    let token = keys.sign(&claims);
    assert!(
        check(
            &keys,
            &token,
            &expect("weather", "widget.read:current", Some(&other), true)
        )
        .await
        .is_none()
    );
}

/// Scenario 26: null hashes match only null; malformed hashes fail on either side.
#[tokio::test]
async fn scenario_26_null_and_malformed_hashes() {
    let keys = Keys::new();
    let null_token = keys.sign(&base_claims());
    assert!(
        check(
            &keys,
            &null_token,
            &expect("weather", "widget.read:current", None, false)
        )
        .await
        .is_some()
    );
    assert!(
        check(
            &keys,
            &null_token,
            &expect("weather", "widget.read:current", Some(HASH), false)
        )
        .await
        .is_none()
    );
    let malformed = [
        "".to_string(),
        "a".repeat(63),
        "a".repeat(65),
        "A".repeat(64),
        "g".repeat(64),
    ];
    for bad in &malformed {
        for defer in [false, true] {
            assert!(
                check(
                    &keys,
                    &null_token,
                    &expect("weather", "widget.read:current", Some(bad), defer)
                )
                .await
                .is_none()
            );
            let mut claims = base_claims();
            claims["schema_hash"] = json!(bad);
            let token = keys.sign(&claims);
            assert!(
                check(
                    &keys,
                    &token,
                    &expect("weather", "widget.read:current", Some(HASH), defer)
                )
                .await
                .is_none()
            );
        }
    }
}

/// Scenario 27: inconsistent subjects.
#[tokio::test]
async fn scenario_27_inconsistent_subjects() {
    let keys = Keys::new();
    let account = Uuid::new_v4().to_string();
    let mut a = base_claims();
    a["access_subject_id"] = json!(account);
    let mut b = base_claims();
    let user = b["sub"].clone();
    b["principal_type"] = json!("service_account");
    b["sub"] = json!(account);
    b["delegated_user_id"] = user.clone();
    b["access_subject_id"] = user.clone();
    let mut c = base_claims();
    c["principal_type"] = json!("service_account");
    c["access_subject_type"] = json!("service_account");
    c["sub"] = json!(account);
    c["access_subject_id"] = user;
    c["credential_kind"] = json!("oauth");
    let mut d = base_claims();
    d["credential_kind"] = json!("api_key");
    d["credential_id"] = json!("k");
    for claims in [a, b, c, d] {
        assert!(!accepts(&keys, &claims).await);
    }
}

/// Scenario 28: duplicate scopes, an extra claim, an extra header member.
#[tokio::test]
async fn scenario_28_duplicates_extras_and_header_members() {
    let keys = Keys::new();
    let mut dup = base_claims();
    dup["principal_type"] = json!("service_account");
    dup["access_subject_type"] = json!("service_account");
    let sub = dup["sub"].clone();
    dup["access_subject_id"] = sub;
    dup["credential_kind"] = json!("oauth");
    dup["scopes"] = json!(["read", "read"]);
    assert!(!accepts(&keys, &dup).await);
    let mut extra = base_claims();
    extra["roles"] = json!(["admin"]);
    assert!(!accepts(&keys, &extra).await);
    use base64::Engine;
    let b64 = |v: &Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
    let header =
        json!({"alg": "RS256", "kid": keys.key.kid, "typ": "cloud-invocation+jwt", "cty": "JWT"});
    let input = format!("{}.{}", b64(&header), b64(&base_claims()));
    let signing = keys::import(&keys.key.kid, &keys.key.public, &keys.key.private).expect("import");
    let signature = signing
        .sign(input.as_bytes())
        .map(|s| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s))
        .expect("sign");
    let token = format!("{input}.{signature}");
    assert!(
        check(
            &keys,
            &token,
            &expect("weather", "widget.read:current", None, false)
        )
        .await
        .is_none()
    );
}

/// Scenario 29: wrong use, issuer, version, scopes on a session, typ, kid, algorithm.
#[tokio::test]
async fn scenario_29_each_wrong_field_is_refused() {
    let keys = Keys::new();
    for (field, value) in [
        ("token_use", json!("session")),
        ("iss", json!("https://evil.example")),
        ("ver", json!(2)),
        ("scopes", json!(["read"])),
    ] {
        let mut claims = base_claims();
        claims[field] = value;
        assert!(!accepts(&keys, &claims).await, "{field}");
    }
    let token = keys.sign_typ("cloud-session+jwt", &base_claims());
    assert!(
        check(
            &keys,
            &token,
            &expect("weather", "widget.read:current", None, false)
        )
        .await
        .is_none()
    );
    let signing = keys::import(&keys.key.kid, &keys.key.public, &keys.key.private).expect("import");
    let bad_kid = jwt::encode(
        "not-a-uuid",
        "cloud-invocation+jwt",
        &base_claims(),
        &signing,
    )
    .expect("encode");
    assert!(
        check(
            &keys,
            &bad_kid,
            &expect("weather", "widget.read:current", None, false)
        )
        .await
        .is_none()
    );
    use base64::Engine;
    let b64 = |v: &Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
    let header = json!({"alg": "PS256", "kid": keys.key.kid, "typ": "cloud-invocation+jwt"});
    let input = format!("{}.{}", b64(&header), b64(&base_claims()));
    let signature = signing
        .sign(input.as_bytes())
        .map(|s| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s))
        .expect("sign");
    assert!(
        check(
            &keys,
            &format!("{input}.{signature}"),
            &expect("weather", "widget.read:current", None, false)
        )
        .await
        .is_none()
    );
}

/// Scenario 30: a token signed with a session key is not an invocation.
#[tokio::test]
async fn scenario_30_session_keys_do_not_sign_invocations() {
    let db = TestDb::new().await;
    let core = core_for(&db);
    let session = core
        .identity
        .prepare_signer(Purpose::Session)
        .await
        .expect("session signer");
    let token = jwt::encode(
        &session.kid,
        "cloud-invocation+jwt",
        &base_claims(),
        &session.key,
    )
    .expect("encode");
    let identity = core.identity.clone();
    let verified = verify_invocation(
        &token,
        &expect("weather", "widget.read:current", None, false),
        now() as i64,
        |kid| async move { identity.verification_key(Purpose::Invocation, &kid).await },
    )
    .await;
    assert!(verified.is_none());
}

/// Scenario 31: lifetimes and sizes.
#[tokio::test]
async fn scenario_31_lifetime_and_size() {
    let keys = Keys::new();
    let n = now();
    let mut long = base_claims();
    long["exp"] = json!(long["iat"].as_u64().expect("iat") + 31);
    let mut future = base_claims();
    future["iat"] = json!(n + 31);
    future["nbf"] = json!(n + 31);
    future["exp"] = json!(n + 61);
    let mut past = base_claims();
    past["iat"] = json!(n - 61);
    past["nbf"] = json!(n - 61);
    past["exp"] = json!(n - 31);
    for claims in [long, future, past] {
        assert!(!accepts(&keys, &claims).await);
    }
    // Signed by the trusted key with valid claims, refused for its size alone: its twin at
    // the limit is accepted.
    let (at_limit, over) = keys.size_twins(&base_claims());
    assert_eq!((at_limit.len(), over.len()), (4096, 4097));
    let expected = expect("weather", "widget.read:current", None, false);
    assert!(
        check(&keys, &at_limit, &expected).await.is_some(),
        "the twin at the limit"
    );
    assert!(check(&keys, &over, &expected).await.is_none());
}

/// Scenario 32: two seconds of skew, no more (checked at one fixed instant).
#[tokio::test]
async fn scenario_32_skew() {
    let keys = Keys::new();
    let n = now();
    let accepts = |keys: &Keys, claims: &Value| {
        let token = keys.sign(claims);
        let key = keys.decoding();
        async move {
            verify_invocation(
                &token,
                &expect("weather", "widget.read:current", None, false),
                n as i64,
                |_| async move { Some(key) },
            )
            .await
            .is_some()
        }
    };
    let at = |iat: u64| {
        let mut claims = base_claims();
        claims["iat"] = json!(iat);
        claims["nbf"] = json!(iat);
        claims["exp"] = json!(iat + 30);
        claims
    };
    assert!(accepts(&keys, &at(n - 31)).await, "exp = now - 1");
    assert!(!accepts(&keys, &at(n - 33)).await, "exp = now - 3");
    assert!(accepts(&keys, &at(n + 1)).await, "iat = now + 1");
    assert!(!accepts(&keys, &at(n + 3)).await, "iat = now + 3");
}

/// Scenario 33: `session_kind: "app"` only with a session credential, and only "app".
#[tokio::test]
async fn scenario_33_session_kind_app() {
    let keys = Keys::new();
    let mut app = base_claims();
    app["session_kind"] = json!("app");
    assert!(accepts(&keys, &app).await);
    let account = Uuid::new_v4().to_string();
    for kind in ["oauth", "api_key", "mandate"] {
        let mut claims = base_claims();
        claims["session_kind"] = json!("app");
        claims["principal_type"] = json!("service_account");
        claims["access_subject_type"] = json!("service_account");
        claims["sub"] = json!(account);
        claims["access_subject_id"] = json!(account);
        claims["credential_kind"] = json!(kind);
        if kind == "api_key" {
            claims["credential_id"] = json!("k");
        }
        if kind == "mandate" {
            claims["mandate_id"] = json!(Uuid::new_v4());
            claims["mandate_revision"] = json!(1);
            claims["workload_type"] = json!("ai.task");
            claims["workload_id"] = json!("t");
        }
        assert!(!accepts(&keys, &claims).await, "{kind}");
    }
    let mut web = base_claims();
    web["session_kind"] = json!("web");
    assert!(!accepts(&keys, &web).await);
}
