//! Expired accounts end: web and app sessions and delegated API keys stop working the moment
//! `account_expires` passes, and maintenance ends the sessions for good.

use http::{HeaderMap, HeaderValue, header};
use k2b_core::Core;
use k2b_core::access::authenticate;
use k2b_core::auth::{Actor, UserRecord};
use k2b_core::identity::IssueOptions;
use k2b_core::identity::session::SessionRequest;

use super::Widgets;

async fn expire(core: &Core, user: &UserRecord) {
    sqlx::query(
        "UPDATE auth.users SET account_expires = now() - interval '1 second' WHERE id = $1",
    )
    .bind(user.id)
    .execute(&core.pool)
    .await
    .expect("expire");
}

fn cookie(name: &str, token: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::COOKIE,
        HeaderValue::from_str(&format!("{name}={token}")).expect("cookie"),
    );
    headers
}

async fn app_session(core: &Core, user: &UserRecord) -> String {
    let device = k2b_tests::pwa_device(&core.pool, user.id).await;
    core.identity
        .issue_session(
            &core.settings,
            SessionRequest {
                device_id: Some(device),
                ..SessionRequest::web(user.id)
            },
            IssueOptions::default(),
        )
        .await
        .expect("app session")
        .token
}

/// A delegated API key of `user` (a `cld_` token of a user-delegated service account).
async fn delegated_key(core: &Core, user: &UserRecord) -> String {
    let account = k2b_tests::service_account(&core.pool, Some(user.id)).await;
    k2b_tests::api_key(&core.pool, account, &["read"]).await
}

#[tokio::test]
async fn a_web_session_ends_when_the_account_expires() {
    let w = Widgets::start(|_| {}).await;
    assert_eq!(w.signed_in.get("/api/widgets/v1").await.status, 200);
    expire(&w.core, &w.user).await;
    let reply = w.signed_in.get("/api/widgets/v1").await;
    assert_eq!(reply.status, 401, "{}", reply.text);
}

#[tokio::test]
async fn an_app_session_ends_when_the_account_expires() {
    let w = Widgets::start(|_| {}).await;
    let token = app_session(&w.core, &w.user).await;
    let phone = w.client.with_cookie(format!("pwa_session={token}"));
    assert_eq!(phone.get("/api/widgets/v1").await.status, 200);
    expire(&w.core, &w.user).await;
    assert_eq!(phone.get("/api/widgets/v1").await.status, 401);
    assert_eq!(
        authenticate(&w.core, &cookie("pwa_session", &token))
            .await
            .expect("auth"),
        Actor::Anonymous
    );
}

#[tokio::test]
async fn a_delegated_api_key_stops_acting_for_an_expired_person() {
    let w = Widgets::start(|_| {}).await;
    let key = delegated_key(&w.core, &w.user).await;
    let cli = w.client.with_bearer(&key);
    assert_eq!(cli.get("/api/widgets/v1").await.status, 200);
    expire(&w.core, &w.user).await;
    let reply = cli.get("/api/widgets/v1").await;
    assert_eq!(reply.status, 401, "{}", reply.text);
}

#[tokio::test]
async fn maintenance_ends_the_sessions_so_renewing_the_account_does_not_revive_them() {
    let w = Widgets::start(|_| {}).await;
    let other = k2b_tests::create_user(&w.core, "grace", false).await;
    let grace = w
        .client
        .with_cookie(k2b_tests::session_cookie(&w.core, &other).await);
    let app = app_session(&w.core, &w.user).await;
    expire(&w.core, &w.user).await;

    let report = maintenance::run(&w.core).await.expect("maintenance");
    assert_eq!(
        report.expired_account_sessions, 2,
        "the web and the app session"
    );
    let reasons: Vec<String> = sqlx::query_scalar(
        "SELECT revocation_reason FROM auth.session_families WHERE user_id = $1",
    )
    .bind(w.user.id)
    .fetch_all(&w.core.pool)
    .await
    .expect("families");
    assert_eq!(reasons, vec!["account_expired", "account_expired"]);
    assert_eq!(
        maintenance::run(&w.core)
            .await
            .expect("again")
            .expired_account_sessions,
        0
    );

    sqlx::query("UPDATE auth.users SET account_expires = NULL WHERE id = $1")
        .bind(w.user.id)
        .execute(&w.core.pool)
        .await
        .expect("renew");
    assert_eq!(w.signed_in.get("/api/widgets/v1").await.status, 401);
    let phone = w.client.with_cookie(format!("pwa_session={app}"));
    assert_eq!(phone.get("/api/widgets/v1").await.status, 401);
    // Someone else's session was never touched.
    assert_eq!(grace.get("/api/widgets/v1").await.status, 200);
}
