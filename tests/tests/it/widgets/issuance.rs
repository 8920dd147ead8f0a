//! A stream's tokens are signed while the registry is read, for the widgets the previous read
//! declared, and released only when the fresh read selects exactly those widgets.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};
use widgets::WidgetsOptions;

use super::{Provider, Setup, answers, lines, register, summary_widget, widget_lines};

fn body(i: usize) -> Value {
    json!({"title": format!("app-{i:02}"), "blocks": []})
}

/// One stream with `cookie`: the keys of its start line, after checking every widget answered.
async fn stream(setup: &Setup, cookie: String) -> Vec<Value> {
    let response = setup
        .client
        .get(format!("{}/api/widgets/v1", setup.base))
        .header("cookie", cookie)
        .send()
        .await
        .expect("get");
    assert_eq!(response.status(), 200);
    let all = lines(response).await;
    assert!(
        widget_lines(&all).iter().all(|l| l["status"] == "ok"),
        "{all:?}"
    );
    all[0]["widgets"].as_array().expect("start line").clone()
}

/// The audience of each token a provider received, in order.
fn audiences(provider: &Provider) -> Vec<Value> {
    provider
        .requests()
        .iter()
        .map(|seen| {
            let bearer = seen.header("authorization").expect("bearer");
            let token = bearer.strip_prefix("Bearer ").expect("bearer");
            let payload = token.split('.').nth(1).expect("a JWT");
            let claims: Value =
                serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).expect("base64"))
                    .expect("json");
            claims["aud"].clone()
        })
        .collect()
}

#[tokio::test]
async fn tokens_signed_during_the_registry_read_are_used_only_for_what_it_still_declares() {
    let setup = Setup::new(WidgetsOptions::default()).await;
    let providers = setup.apps((0..2).map(|i| answers(body(i))).collect()).await;

    // The first stream of this process knows no earlier read: registry, then one issuance.
    // A session of its own for every stream: no token of another stream can be reused.
    let cookie = k2b_tests::session_cookie(&setup.core, &setup.user).await;
    let before = setup.metrics();
    assert_eq!(
        stream(&setup, cookie).await,
        vec!["app-00/summary", "app-01/summary"]
    );
    let after = setup.metrics();
    assert_eq!(after.signer_guards - before.signer_guards, 1);
    assert_eq!(after.sign_success - before.sign_success, 2);

    // Unchanged registry: the tokens signed beside the read are the ones released.
    // A session of its own for every stream: no token of another stream can be reused.
    let cookie = k2b_tests::session_cookie(&setup.core, &setup.user).await;
    let before = setup.metrics();
    assert_eq!(
        stream(&setup, cookie).await,
        vec!["app-00/summary", "app-01/summary"]
    );
    let after = setup.metrics();
    assert_eq!(after.signer_guards - before.signer_guards, 1, "one guard");
    assert_eq!(
        after.sign_success - before.sign_success,
        2,
        "two signatures"
    );

    // app-01 gone, app-02 new: what was signed for app-01 is never released, app-02 gets a
    // token of its own, and app-00's signed beside the read is released again.
    sqlx::query("DELETE FROM registry.apps WHERE app_id = 'app-01'")
        .execute(&setup.core.pool)
        .await
        .expect("remove app-01");
    let newcomer = setup.provider(answers(body(2))).await;
    register(&setup.core, "app-02", &newcomer.origin, summary_widget()).await;
    // A session of its own for every stream: no token of another stream can be reused.
    let cookie = k2b_tests::session_cookie(&setup.core, &setup.user).await;
    let before = setup.metrics();
    assert_eq!(
        stream(&setup, cookie).await,
        vec!["app-00/summary", "app-02/summary"]
    );
    let after = setup.metrics();
    assert_eq!(
        after.signer_guards - before.signer_guards,
        2,
        "the guess's guard and the fresh selection's"
    );
    assert_eq!(
        after.sign_success - before.sign_success,
        3,
        "app-00 and app-01 beside the read, then app-02 alone"
    );
    assert_eq!(providers[0].requests().len(), 3);
    assert_eq!(
        providers[1].requests().len(),
        2,
        "the removed app is not called"
    );
    assert_eq!(audiences(&newcomer), vec![json!("app:app-02")]);
    assert_eq!(audiences(&providers[0]), vec![json!("app:app-00"); 3]);
}
