//! Still-fresh invocation tokens released again: only for the same key, session, app, widget and
//! request id, and only with enough life left for the widget's wave of budgets.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use k2b_core::identity::Purpose;
use serde_json::{Value, json};
use widgets::WidgetsOptions;

use super::{Provider, Setup, answers, lines, widget_lines};

fn body(i: usize) -> Value {
    json!({"title": format!("app-{i:02}"), "blocks": []})
}

/// Runs one stream with `cookie` (and `request_id`) and checks every widget answered.
async fn stream(setup: &Setup, cookie: &str, request_id: Option<&str>) {
    let mut request = setup
        .client
        .get(format!("{}/api/widgets/v1", setup.base))
        .header("cookie", cookie);
    if let Some(id) = request_id {
        request = request.header("x-request-id", id);
    }
    let response = request.send().await.expect("get");
    assert_eq!(response.status(), 200);
    let all = lines(response).await;
    assert!(
        widget_lines(&all).iter().all(|l| l["status"] == "ok"),
        "{all:?}"
    );
}

/// The bearer tokens a provider received, in order.
fn tokens(provider: &Provider) -> Vec<String> {
    provider
        .requests()
        .iter()
        .map(|seen| seen.header("authorization").expect("bearer").to_string())
        .collect()
}

fn kid(bearer: &str) -> Value {
    let token = bearer.strip_prefix("Bearer ").expect("bearer");
    let header = token.split('.').next().expect("a JWT");
    let header: Value =
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(header).expect("base64")).expect("json");
    header["kid"].clone()
}

#[tokio::test]
async fn a_fresh_token_is_released_again_for_the_same_session_app_and_widget() {
    let setup = Setup::new(WidgetsOptions::default()).await;
    let providers = setup.apps((0..3).map(|i| answers(body(i))).collect()).await;
    let before = setup.metrics();
    stream(&setup, &setup.cookie, None).await;
    stream(&setup, &setup.cookie, None).await;
    for provider in &providers {
        let seen = tokens(provider);
        assert_eq!(seen.len(), 2);
        assert_eq!(
            seen[0], seen[1],
            "the second stream reuses the first one's token"
        );
    }
    let after = setup.metrics();
    assert_eq!(
        after.sign_success - before.sign_success,
        3,
        "three signatures for two streams"
    );
    assert_eq!(
        after.signer_guards - before.signer_guards,
        2,
        "every stream has its guard"
    );
}

#[tokio::test]
async fn another_session_or_request_id_gets_tokens_of_its_own() {
    let setup = Setup::new(WidgetsOptions::default()).await;
    let providers = setup.apps(vec![answers(body(0))]).await;
    let other_cookie = k2b_tests::session_cookie(&setup.core, &setup.user).await;
    stream(&setup, &setup.cookie, None).await;
    stream(&setup, &other_cookie, None).await;
    stream(&setup, &setup.cookie, Some("req-1")).await;
    stream(&setup, &setup.cookie, Some("req-2")).await;
    let seen = tokens(&providers[0]);
    assert_eq!(seen.len(), 4);
    for (i, a) in seen.iter().enumerate() {
        for b in &seen[i + 1..] {
            assert_ne!(a, b, "no token is shared across sessions or request ids");
        }
    }
}

#[tokio::test]
async fn a_token_without_life_for_its_wave_of_budgets_is_signed_anew() {
    // One widget at a time, 14 s each: the first widget needs 14 s (+ margin) of the token's
    // 30 s, the second could start 14 s after the first and needs 28 s, more than any token
    // signed for the first stream still has.
    let options = WidgetsOptions {
        timeout: Duration::from_secs(14),
        concurrency: 1,
        ..WidgetsOptions::default()
    };
    let setup = Setup::new(options).await;
    let providers = setup.apps((0..2).map(|i| answers(body(i))).collect()).await;
    stream(&setup, &setup.cookie, None).await;
    stream(&setup, &setup.cookie, None).await;
    let first = tokens(&providers[0]);
    let second = tokens(&providers[1]);
    assert_eq!(first[0], first[1], "the first wave's token is reused");
    assert_ne!(
        second[0], second[1],
        "the second wave's token is signed again"
    );
}

#[tokio::test]
async fn a_revoked_key_ends_reuse() {
    let setup = Setup::new(WidgetsOptions::default()).await;
    let providers = setup.apps(vec![answers(body(0))]).await;
    stream(&setup, &setup.cookie, None).await;
    let first = tokens(&providers[0]).remove(0);
    let revoked = kid(&first);
    setup
        .core
        .identity
        .revoke_key(revoked.as_str().expect("kid"), "test")
        .await
        .expect("revoke");
    setup
        .core
        .identity
        .prepare_signer(Purpose::Invocation)
        .await
        .expect("a new invocation key");
    stream(&setup, &setup.cookie, None).await;
    let second = tokens(&providers[0]).remove(1);
    assert_ne!(first, second);
    assert_ne!(
        kid(&second),
        revoked,
        "nothing signed by the revoked key is released again"
    );
}
