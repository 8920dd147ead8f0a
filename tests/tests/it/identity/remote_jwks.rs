//! Verification against a JWKS served over real HTTP: scenarios 11, 16 and 18.

use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use k2b_core::identity::invocation::{InvocationAuthority, InvocationRequest, build_claims};
use k2b_core::identity::keys::{self, GeneratedKey};
use k2b_core::identity::remote::{RemoteKeySet, RemoteVerifier};
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

/// A JWKS server whose answers the test releases one at a time.
struct Gated {
    keys: Mutex<Vec<Value>>,
    gate: tokio::sync::Semaphore,
}

async fn gated_server(keys: Vec<Value>) -> (String, Arc<Gated>) {
    let state = Arc::new(Gated {
        keys: Mutex::new(keys),
        gate: tokio::sync::Semaphore::new(0),
    });
    async fn handler(State(state): State<Arc<Gated>>) -> Response {
        if let Ok(permit) = state.gate.acquire().await {
            permit.forget();
        }
        let keys = state.keys.lock().expect("keys").clone();
        Json(json!({ "keys": keys })).into_response()
    }
    let router = Router::new()
        .route("/jwks.json", get(handler))
        .with_state(state.clone());
    (
        format!("{}/jwks.json", k2b_tests::serve(router).await),
        state,
    )
}

/// A failed routine refresh is not retried on every call: warm keys answer, and the next fetch
/// waits for the cooldown.
#[tokio::test]
async fn a_failed_refresh_waits_for_the_cooldown() {
    let known = key();
    let state = Arc::new(Mutex::new(Jwks {
        keys: vec![public(&known)],
        failing: false,
    }));
    let keys = RemoteKeySet::with_max_age(
        jwks_server(state.clone()).await,
        Arc::new(Metrics::default()),
        std::time::Duration::from_millis(200),
    );
    let verifier = RemoteVerifier::with_key_set(keys, ISSUER);
    assert!(
        verifier
            .verify_session(&session_token(&known))
            .await
            .is_some()
    );
    state.lock().expect("lock").failing = true;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    for _ in 0..20 {
        assert!(
            verifier
                .verify_session(&session_token(&known))
                .await
                .is_some(),
            "warm keys answer during the outage"
        );
    }
    assert_eq!(
        verifier.key_set().fetch_count(),
        2,
        "one failed refresh, then the cooldown"
    );
}

/// A document larger than the cap is not read: its keys do not count.
#[tokio::test]
async fn an_oversized_document_is_refused() {
    let known = key();
    let mut keys = vec![public(&known)];
    let filler = json!({"kty": "oct", "k": "x".repeat(4096)});
    keys.extend(std::iter::repeat_n(filler, 80));
    let state = Arc::new(Mutex::new(Jwks {
        keys,
        failing: false,
    }));
    let verifier = RemoteVerifier::new(
        jwks_server(state).await,
        ISSUER,
        Arc::new(Metrics::default()),
    );
    assert!(
        verifier
            .verify_session(&session_token(&known))
            .await
            .is_none()
    );
}

/// One fetch at a time, outside any lock: while a refresh for a newly published key hangs,
/// every caller asking for that key shares it (one fetch) and gets the key once it arrives, and
/// a caller asking for a key already held is answered at once.
#[tokio::test]
async fn one_fetch_at_a_time_and_no_caller_waits_behind_a_lock() {
    let known = key();
    let rotated = key();
    let (url, server) = gated_server(vec![public(&known)]).await;
    let keys = Arc::new(RemoteKeySet::new(url, Arc::new(Metrics::default())));
    server.gate.add_permits(1);
    assert!(keys.candidate(&known.kid).await.is_some());
    assert_eq!(keys.fetch_count(), 1);

    // The issuer publishes a new key; the refresh it forces hangs at the server.
    server.keys.lock().expect("keys").push(public(&rotated));
    let waiters: Vec<_> = (0..16)
        .map(|_| {
            let keys = keys.clone();
            let kid = rotated.kid.clone();
            tokio::spawn(async move { keys.candidate(&kid).await.is_some() })
        })
        .collect();
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let warm = tokio::time::timeout(
        std::time::Duration::from_secs(2),
        keys.candidate(&known.kid),
    )
    .await
    .expect("not blocked by the fetch in flight");
    assert!(warm.is_some());
    assert_eq!(
        keys.fetch_count(),
        2,
        "one fetch in flight for every waiter"
    );
    server.gate.add_permits(1);
    for waiter in waiters {
        assert!(waiter.await.expect("task"), "each waiter gets the new key");
    }
    assert_eq!(keys.fetch_count(), 2);
}

/// A caller that stops waiting (its request went away) does not hold a place among the waiters.
#[tokio::test]
async fn abandoned_waits_free_their_place() {
    let known = key();
    let (url, server) = gated_server(vec![public(&known)]).await;
    let keys = Arc::new(RemoteKeySet::new(url, Arc::new(Metrics::default())));
    // Cold: every caller joins the first fetch; more than the bound give up waiting.
    for _ in 0..2 * k2b_core::identity::constants::REMOTE_JWKS_MAX_WAITERS {
        let abandoned = tokio::time::timeout(
            std::time::Duration::from_millis(5),
            keys.candidate(&known.kid),
        )
        .await;
        assert!(abandoned.is_err() || matches!(abandoned, Ok(None)));
    }
    let waiter = {
        let keys = keys.clone();
        let kid = known.kid.clone();
        tokio::spawn(async move { keys.candidate(&kid).await.is_some() })
    };
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    server.gate.add_permits(1);
    assert!(
        waiter.await.expect("task"),
        "a later caller still waits and gets the key"
    );
    assert_eq!(keys.fetch_count(), 1);
}
