//! OAuth bearer tokens through the production request path: the widget and Help routes verify
//! them against the OAuth issuer's published keys and apply the specs' scope rules; no actor is
//! placed by the test.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::routing::get;
use k2b_core::Core;
use k2b_core::identity::keys;
use k2b_core::identity::{IdentityError, IssueOptions, Purpose, jwt, ring};
use k2b_tests::client::TestClient;
use serde_json::{Value, json};

use super::Widgets;
use crate::widgets::{Counters, answers, provider, register, summary_widget};

type PoolSlot = Arc<std::sync::OnceLock<sqlx::PgPool>>;

/// The OAuth issuer's JWKS (`/.well-known/jwks.json`), read from the key ring like the OAuth
/// app publishes it (from the pool in `slot`, once the test's Core exists).
async fn serve_oauth_jwks(slot: PoolSlot) -> String {
    async fn document(State(slot): State<PoolSlot>) -> Json<Value> {
        let pool = slot.get().expect("the test's pool");
        let keys = ring::list_jwks(pool, Purpose::Oauth)
            .await
            .expect("oauth keys");
        Json(json!({ "keys": keys }))
    }
    let router = axum::Router::new()
        .route("/.well-known/jwks.json", get(document))
        .with_state(slot);
    k2b_tests::serve(router).await
}

/// Widget routes whose Core trusts an OAuth issuer served on loopback.
async fn start() -> Widgets {
    let slot = PoolSlot::default();
    let origin = serve_oauth_jwks(slot.clone()).await;
    let w = Widgets::start(move |config| {
        config.identity.oauth_jwks_origin = Some(origin);
    })
    .await;
    slot.set(w.core.pool.clone()).ok();
    w.core
        .identity
        .prepare_signer(Purpose::Oauth)
        .await
        .expect("oauth signer");
    w
}

async fn issuer(core: &Core) -> String {
    core.identity
        .runtime_config()
        .await
        .expect("runtime")
        .issuer
        .clone()
}

/// An access token signed by the OAuth key ring.
async fn mint(core: &Core, claims: Value) -> String {
    core.identity
        .with_active_signer(
            Purpose::Oauth,
            IssueOptions::default(),
            |scope| async move {
                let token = scope.sign("at+jwt", &claims);
                (scope, token)
            },
        )
        .await
        .map_err(|e: IdentityError| e)
        .expect("access token")
}

async fn claims(core: &Core, scope: &str) -> Value {
    let now = chrono::Utc::now().timestamp();
    json!({"iss": issuer(core).await, "aud": "cloud", "token_use": "access",
           "client_id": "reports-cli", "scope": scope, "sub": "ada",
           "iat": now, "exp": now + 600})
}

#[tokio::test]
async fn widget_scopes_are_checked_on_real_tokens() {
    let w = start().await;
    let counters = Arc::new(Counters::default());
    let app = provider(
        counters.clone(),
        answers(json!({"title": "S", "blocks": []})),
    )
    .await;
    register(&w.core, "weather", &app.origin, summary_widget()).await;
    for (scope, status) in [
        ("", 403),
        ("openid profile", 403),
        ("write", 403),
        ("read", 200),
        ("admin", 200),
        ("openid read", 200),
    ] {
        let token = mint(&w.core, claims(&w.core, scope).await).await;
        let caller = w.client.with_bearer(token);
        let stream = caller.get("/api/widgets/v1").await;
        assert_eq!(
            stream.status, status,
            "stream, scope {scope:?}: {}",
            stream.text
        );
        let single = caller.get("/api/widgets/v1/weather/summary").await;
        assert_eq!(
            single.status, status,
            "single, scope {scope:?}: {}",
            single.text
        );
        if status == 403 {
            assert_eq!(stream.code(), "FORBIDDEN");
            assert_eq!(
                stream.json["message"],
                "OAuth scope read or admin is required"
            );
        }
    }
    // The invocation the app received says who asked and how.
    let seen = app.requests();
    let claims = seen.last().expect("a call").claims();
    assert_eq!(claims["credential_kind"], "oauth");
    assert_eq!(claims["sub"], w.user.id.to_string());
}

#[tokio::test]
async fn help_scopes_are_checked_on_real_tokens() {
    let w = start().await;
    let help = TestClient::serve(help::router(w.core.clone())).await;
    for (scope, status) in [("openid profile", 403), ("read", 200), ("admin", 200)] {
        let token = mint(&w.core, claims(&w.core, scope).await).await;
        let reply = help.with_bearer(token).get("/api/help/v1").await;
        assert_eq!(reply.status, status, "scope {scope:?}: {}", reply.text);
    }
}

#[tokio::test]
async fn invalid_access_tokens_are_anonymous() {
    let w = start().await;
    let good = claims(&w.core, "read").await;
    assert_eq!(
        w.client
            .with_bearer(mint(&w.core, good.clone()).await)
            .get("/api/widgets/v1")
            .await
            .status,
        200
    );
    let now = chrono::Utc::now().timestamp();
    let mut variants = Vec::new();
    for (name, value) in [
        ("iss", json!("https://other.example")),
        ("aud", json!("app:mail")),
        ("token_use", json!("session")),
        ("exp", json!(now - 120)),
        ("nbf", json!(now + 600)),
        ("client_id", json!("")),
        ("sub", json!("nobody")),
    ] {
        let mut changed = good.clone();
        changed[name] = value;
        variants.push((name.to_string(), mint(&w.core, changed).await));
    }
    // A key the issuer never published, and a token whose signature was altered.
    let foreign = keys::generate().expect("key");
    let signing = keys::import(&foreign.kid, &foreign.public, &foreign.private).expect("import");
    variants.push((
        "foreign key".into(),
        jwt::encode(&foreign.kid, "at+jwt", &good, &signing).expect("encode"),
    ));
    let genuine = mint(&w.core, good.clone()).await;
    let (head, signature) = genuine.rsplit_once('.').expect("jws");
    let flipped = if signature.starts_with('A') { "B" } else { "A" };
    variants.push((
        "altered signature".into(),
        format!("{head}.{flipped}{}", &signature[1..]),
    ));
    // A session token is not an access token.
    let session = k2b_tests::session_cookie(&w.core, &w.user).await;
    variants.push((
        "session token".into(),
        session.trim_start_matches("session_token=").to_string(),
    ));
    for (name, token) in variants {
        let reply = w.client.with_bearer(token).get("/api/widgets/v1").await;
        assert_eq!(reply.status, 401, "{name}: {}", reply.text);
    }
}

#[tokio::test]
async fn forged_key_ids_do_not_cost_a_fetch_each() {
    let w = start().await;
    let good = claims(&w.core, "read").await;
    let token = mint(&w.core, good.clone()).await;
    assert_eq!(
        w.client
            .with_bearer(&token)
            .get("/api/widgets/v1")
            .await
            .status,
        200
    );
    let warm = w.core.identity.oauth_jwks_fetches();
    assert_eq!(warm, 1);
    let foreign = keys::generate().expect("key");
    let signing = keys::import(&foreign.kid, &foreign.public, &foreign.private).expect("import");
    for i in 0..20 {
        let forged = jwt::encode(&format!("forged-{i}"), "at+jwt", &good, &signing).expect("jws");
        assert_eq!(
            w.client
                .with_bearer(forged)
                .get("/api/widgets/v1")
                .await
                .status,
            401
        );
    }
    assert!(
        w.core.identity.oauth_jwks_fetches() <= warm + 1,
        "{} fetches",
        w.core.identity.oauth_jwks_fetches()
    );
    // The genuine token still works from the warm keys.
    assert_eq!(
        w.client
            .with_bearer(&token)
            .get("/api/widgets/v1")
            .await
            .status,
        200
    );
}

#[tokio::test]
async fn client_credentials_act_as_the_service_account_while_it_is_active() {
    let w = start().await;
    let counters = Arc::new(Counters::default());
    let app = provider(
        counters.clone(),
        answers(json!({"title": "S", "blocks": []})),
    )
    .await;
    register(&w.core, "weather", &app.origin, summary_widget()).await;
    let account = k2b_tests::service_account(&w.core.pool, None).await;
    let mut token_claims = claims(&w.core, "read").await;
    token_claims["service_account_id"] = json!(account.to_string());
    token_claims["sub"] = json!(account.to_string());
    let token = mint(&w.core, token_claims).await;
    let caller = w.client.with_bearer(&token);
    let reply = caller.get("/api/widgets/v1/weather/summary").await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let claims = app.requests().last().expect("a call").claims();
    assert_eq!(claims["credential_kind"], "oauth");
    assert_eq!(claims["sub"], account.to_string());
    assert_eq!(claims["principal_type"], "service_account");

    sqlx::query("UPDATE auth.service_accounts SET status = 'disabled' WHERE id = $1")
        .bind(account)
        .execute(&w.core.pool)
        .await
        .expect("disable");
    assert_eq!(caller.get("/api/widgets/v1").await.status, 401);

    // A person's token ends with the person's account.
    let person = mint(&w.core, claims_for_user(&w).await).await;
    let caller = w.client.with_bearer(person);
    assert_eq!(caller.get("/api/widgets/v1").await.status, 200);
    sqlx::query("UPDATE auth.users SET account_expires = now() - interval '1 second'")
        .execute(&w.core.pool)
        .await
        .expect("expire");
    assert_eq!(caller.get("/api/widgets/v1").await.status, 401);
}

async fn claims_for_user(w: &Widgets) -> Value {
    let mut c = claims(&w.core, "read").await;
    c["id"] = json!(w.user.id.to_string());
    c["sub"] = json!("someone-else");
    c
}

/// An issuer whose keys cannot be fetched is an outage (503), not an anonymous caller.
#[tokio::test]
async fn an_unreachable_issuer_is_an_outage_not_a_sign_out() {
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("address").port()
    };
    let w = Widgets::start(move |config| {
        config.identity.oauth_jwks_origin = Some(format!("http://127.0.0.1:{closed}"));
    })
    .await;
    w.core
        .identity
        .prepare_signer(Purpose::Oauth)
        .await
        .expect("oauth signer");
    let token = mint(&w.core, claims(&w.core, "read").await).await;
    let reply = w.client.with_bearer(token).get("/api/widgets/v1").await;
    assert_eq!(reply.status, 503, "{}", reply.text);
    assert_eq!(reply.code(), "UNAVAILABLE");
}
