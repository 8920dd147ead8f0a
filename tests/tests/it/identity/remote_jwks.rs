//! Verification against a JWKS served over real HTTP: scenarios 11, 16 and 18.

use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use k2b_core::identity::invocation::{InvocationAuthority, InvocationRequest, build_claims};
use k2b_core::identity::keys::{self, GeneratedKey};
use k2b_core::identity::remote::RemoteVerifier;
use k2b_core::identity::{Metrics, jwt};
use serde_json::{Value, json};
use uuid::Uuid;

const ISSUER: &str = "https://cloud.example.test";

#[derive(Default)]
struct Jwks {
    keys: Vec<Value>,
    failing: bool,
}

async fn document(State(state): State<Arc<Mutex<Jwks>>>) -> Response {
    let state = state.lock().expect("lock");
    if state.failing {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    Json(json!({ "keys": state.keys })).into_response()
}

async fn jwks_server(state: Arc<Mutex<Jwks>>) -> String {
    let router = Router::new()
        .route("/jwks.json", get(document))
        .with_state(state);
    format!("{}/jwks.json", k2b_tests::serve(router).await)
}

fn key() -> GeneratedKey {
    keys::generate().expect("key")
}

fn public(key: &GeneratedKey) -> Value {
    serde_json::to_value(&key.public).expect("jwk")
}

fn session_token(key: &GeneratedKey) -> String {
    let now = chrono::Utc::now().timestamp();
    let claims = json!({
        "iss": ISSUER, "aud": "cloud", "token_use": "session", "sub": Uuid::new_v4(),
        "sid": Uuid::new_v4(), "auth_epoch": 0, "iat": now, "exp": now + 600
    });
    let signing = keys::import(&key.kid, &key.public, &key.private).expect("import");
    jwt::encode(&key.kid, "cloud-session+jwt", &claims, &signing).expect("encode")
}

fn invocation_token(key: &GeneratedKey) -> String {
    let authority =
        InvocationAuthority::for_session(Uuid::new_v4(), k2b_core::auth::SessionKind::Web);
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
    let signing = keys::import(&key.kid, &key.public, &key.private).expect("import");
    jwt::encode(&key.kid, "cloud-invocation+jwt", &claims, &signing).expect("encode")
}

/// Scenario 11: warm keys survive an outage; unknown kids force at most one refresh per 30 s.
#[tokio::test]
async fn scenario_11_session_keys_survive_a_jwks_outage() {
    let known = key();
    let state = Arc::new(Mutex::new(Jwks {
        keys: vec![public(&known)],
        failing: false,
    }));
    let verifier = RemoteVerifier::new(
        jwks_server(state.clone()).await,
        ISSUER,
        Arc::new(Metrics::default()),
    );
    assert!(
        verifier
            .verify_session(&session_token(&known))
            .await
            .is_some()
    );
    assert_eq!(verifier.key_set().fetch_count(), 1);
    state.lock().expect("lock").failing = true;
    assert!(
        verifier
            .verify_session(&session_token(&key()))
            .await
            .is_none()
    );
    assert_eq!(verifier.key_set().fetch_count(), 2);
    assert!(
        verifier
            .verify_session(&session_token(&known))
            .await
            .is_some(),
        "warm key survives"
    );
    assert!(
        verifier
            .verify_session(&session_token(&key()))
            .await
            .is_none()
    );
    assert_eq!(
        verifier.key_set().fetch_count(),
        2,
        "cooldown: no new fetch"
    );
}

/// Scenario 16: a rotation is picked up by one forced refresh; a stranger right after is not.
#[tokio::test]
async fn scenario_16_rotation_is_picked_up_once() {
    let first = key();
    let second = key();
    let state = Arc::new(Mutex::new(Jwks {
        keys: vec![public(&first)],
        failing: false,
    }));
    let verifier = RemoteVerifier::new(
        jwks_server(state.clone()).await,
        ISSUER,
        Arc::new(Metrics::default()),
    );
    assert!(
        verifier
            .verify_session(&session_token(&first))
            .await
            .is_some()
    );
    assert_eq!(verifier.key_set().fetch_count(), 1);
    state.lock().expect("lock").keys = vec![public(&second)];
    assert!(
        verifier
            .verify_session(&session_token(&second))
            .await
            .is_some()
    );
    assert_eq!(verifier.key_set().fetch_count(), 2);
    assert!(
        verifier
            .verify_session(&session_token(&key()))
            .await
            .is_none()
    );
    assert_eq!(verifier.key_set().fetch_count(), 2);
}

/// Scenario 18: the outage scenario with invocation tokens.
#[tokio::test]
async fn scenario_18_invocation_keys_survive_a_jwks_outage() {
    let known = key();
    let state = Arc::new(Mutex::new(Jwks {
        keys: vec![public(&known)],
        failing: false,
    }));
    let verifier = RemoteVerifier::new(
        jwks_server(state.clone()).await,
        ISSUER,
        Arc::new(Metrics::default()),
    );
    let verify = |token: String| {
        let verifier = &verifier;
        async move {
            verifier
                .verify_invocation(&token, "weather", "widget.read:current", None, false)
                .await
                .is_some()
        }
    };
    assert!(verify(invocation_token(&known)).await);
    state.lock().expect("lock").failing = true;
    assert!(!verify(invocation_token(&key())).await);
    assert_eq!(verifier.key_set().fetch_count(), 2);
    assert!(verify(invocation_token(&known)).await);
    assert!(!verify(invocation_token(&key())).await);
    assert_eq!(verifier.key_set().fetch_count(), 2);
}
