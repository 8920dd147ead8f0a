//! Who a request acts as: sessions (browser and mobile app), API keys, and the actor an app
//! resolves from an invocation (scenario 40).

use axum::http::{HeaderMap, HeaderValue, header};
use k2b_core::Core;
use k2b_core::access::authenticate;
use k2b_core::auth::{Actor, Role, SessionKind};
use k2b_core::identity::IssueOptions;
use k2b_core::identity::invocation::{
    InvocationAuthority, InvocationRequest, build_claims, resolve_invocation_actor,
};
use k2b_core::identity::session::SessionRequest;
use k2b_core::identity::workload;
use k2b_tests::{TestDb, core_for, create_user};
use uuid::Uuid;

fn cookie(name: &str, value: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::COOKIE,
        HeaderValue::from_str(&format!("{name}={value}")).expect("cookie"),
    );
    headers
}

async fn session(core: &Core, request: SessionRequest) -> String {
    core.identity
        .issue_session(&core.settings, request, IssueOptions::default())
        .await
        .expect("session")
        .token
}

#[tokio::test]
async fn a_web_session_acts_as_its_user_with_current_roles() {
    let db = TestDb::new().await;
    let core = core_for(&db);
    let admin = create_user(&core, "ada", true).await;
    let token = session(&core, SessionRequest::web(admin.id)).await;
    let actor = authenticate(&core, &cookie("session_token", &token))
        .await
        .expect("auth");
    let Actor::User(user) = actor else {
        panic!("a user: {actor:?}")
    };
    assert_eq!(user.user.id, admin.id);
    assert_eq!(user.session, SessionKind::Web);
    assert!(user.user.has_role(Role::Admin));
    assert!(!user.user.has_role(Role::GroupManager));
    assert!(!Actor::User(user).is_app_session());
    assert_eq!(
        authenticate(&core, &HeaderMap::new()).await.expect("auth"),
        Actor::Anonymous
    );

    // Made a group manager: the same session carries the role at its next request.
    sqlx::query("INSERT INTO auth.group_managers VALUES ($1, 'staff')")
        .bind(admin.id)
        .execute(&db.pool)
        .await
        .expect("manager");
    let actor = authenticate(&core, &cookie("session_token", &token))
        .await
        .expect("auth");
    let Actor::User(user) = actor else {
        panic!("a user: {actor:?}")
    };
    assert!(user.user.has_role(Role::GroupManager));
    assert!(user.user.has_role(Role::Admin));
}

#[tokio::test]
async fn an_app_session_is_an_app_session_and_never_admin() {
    let db = TestDb::new().await;
    let core = core_for(&db);
    let admin = create_user(&core, "ada", true).await;
    let device = k2b_tests::pwa_device(&core.pool, admin.id).await;
    let token = session(
        &core,
        SessionRequest {
            device_id: Some(device),
            ..SessionRequest::web(admin.id)
        },
    )
    .await;
    let claims = core
        .identity
        .verify_session_token(&token)
        .await
        .expect("valid");
    assert_eq!(claims.exp - claims.iat, 86_400, "app sessions last a day");
    let actor = authenticate(&core, &cookie("pwa_session", &token))
        .await
        .expect("auth");
    assert!(actor.is_app_session());
    let Actor::User(user) = &actor else {
        panic!("a user")
    };
    assert_eq!(user.session, SessionKind::App { device_id: device });
    assert!(!user.user.has_role(Role::Admin));
    // An invocation made from it says so.
    let authority = InvocationAuthority::from_actor(&actor).expect("authority");
    assert_eq!(
        authority.session_kind,
        Some(k2b_core::identity::invocation::InvocationSessionKind::App)
    );
}

#[tokio::test]
async fn sessions_end_with_revocation_epoch_key_category_and_pending_terms() {
    let db = TestDb::new().await;
    let core = core_for(&db);
    let ada = create_user(&core, "ada", false).await;
    let valid = |token: String| {
        let core = core.clone();
        async move {
            authenticate(&core, &cookie("session_token", &token))
                .await
                .expect("auth")
                != Actor::Anonymous
        }
    };
    // Revoked family.
    let token = session(&core, SessionRequest::web(ada.id)).await;
    assert!(valid(token.clone()).await);
    sqlx::query(
        "UPDATE auth.session_families SET revoked_at = now(), revocation_reason = 'logout'",
    )
    .execute(&db.pool)
    .await
    .expect("revoke");
    assert!(!valid(token).await);
    // Sign out everywhere.
    let token = session(&core, SessionRequest::web(ada.id)).await;
    sqlx::query("UPDATE auth.users SET auth_epoch = auth_epoch + 1 WHERE id = $1")
        .bind(ada.id)
        .execute(&db.pool)
        .await
        .expect("epoch");
    assert!(!valid(token).await);
    // Expired family.
    let token = session(&core, SessionRequest::web(ada.id)).await;
    sqlx::query("UPDATE auth.session_families SET issued_at = now() - interval '2 hours', expires_at = now() - interval '1 second' WHERE revoked_at IS NULL")
        .execute(&db.pool)
        .await
        .expect("expire");
    assert!(!valid(token).await);
    // Category switched off, then on again.
    let token = session(&core, SessionRequest::web(ada.id)).await;
    core.settings
        .set("user.category.login.enabled", serde_json::json!(false))
        .await
        .expect("off");
    assert!(!valid(token.clone()).await);
    core.settings
        .set("user.category.login.enabled", serde_json::json!(true))
        .await
        .expect("on");
    assert!(valid(token.clone()).await);
    // Another category's switch leaves this account's sessions alone.
    for other in [
        "user.category.guest.enabled",
        "user.category.freeipa.enabled",
    ] {
        core.settings
            .set(other, serde_json::json!(false))
            .await
            .expect("other off");
    }
    assert!(valid(token.clone()).await);
    // Legal terms pending until accepted.
    let pending = session(
        &core,
        SessionRequest {
            legal_pending: true,
            ..SessionRequest::web(ada.id)
        },
    )
    .await;
    assert!(!valid(pending.clone()).await);
    sqlx::query("INSERT INTO auth.legal_acceptances (user_id) VALUES ($1)")
        .bind(ada.id)
        .execute(&db.pool)
        .await
        .expect("accept");
    assert!(valid(pending).await);
    // The signing key revoked: every session it signed ends.
    let kid = k2b_core::identity::jwt::parse(&token).expect("parse").kid;
    core.identity
        .revoke_key(&kid, "compromised")
        .await
        .expect("revoke");
    assert!(!valid(token).await);
}

#[tokio::test]
async fn api_keys_act_as_their_service_account_and_bearer_wins_over_cookies() {
    let db = TestDb::new().await;
    let core = core_for(&db);
    let ada = create_user(&core, "ada", false).await;
    let (token, _) = workload::issue_app_credential(
        &mut db.pool.acquire().await.expect("conn"),
        "reports",
        &["identity:invoke"],
    )
    .await
    .expect("credential");
    let session = session(&core, SessionRequest::web(ada.id)).await;
    let mut headers = cookie("session_token", &session);
    headers.insert(
        header::AUTHORIZATION,
        HeaderValue::from_str(&format!("Bearer {token}")).expect("h"),
    );
    let actor = authenticate(&core, &headers).await.expect("auth");
    let Actor::ServiceAccount(account) = actor else {
        panic!("service account: {actor:?}")
    };
    assert!(workload::is_reserved_workload_credential(
        account.kind,
        &account.scopes
    ));
    headers.insert(
        header::AUTHORIZATION,
        HeaderValue::from_static("Bearer cld_unknown"),
    );
    assert_eq!(
        authenticate(&core, &headers).await.expect("auth"),
        Actor::Anonymous
    );
}

/// Scenario 40 (and approvals §5): the actor an invocation resolves to.
#[tokio::test]
async fn scenario_40_invocation_actor_resolution() {
    let db = TestDb::new().await;
    let core = core_for(&db);
    let admin = create_user(&core, "ada", true).await;
    let claims = |kind: SessionKind, user: Uuid| {
        let authority = InvocationAuthority::for_session(user, kind);
        build_claims(
            "https://cloud.example.test",
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
        .expect("claims")
    };
    let mut conn = db.pool.acquire().await.expect("conn");
    let web = resolve_invocation_actor(
        &mut conn,
        &core.settings,
        &claims(SessionKind::Web, admin.id),
    )
    .await
    .expect("resolve")
    .expect("user");
    assert!(web.person().expect("person").has_role(Role::Admin));
    assert!(!web.is_app_session());
    let app = resolve_invocation_actor(
        &mut conn,
        &core.settings,
        &claims(
            SessionKind::App {
                device_id: Uuid::new_v4(),
            },
            admin.id,
        ),
    )
    .await
    .expect("resolve")
    .expect("user");
    assert!(!app.person().expect("person").has_role(Role::Admin));
    assert!(app.is_app_session());
    assert!(
        resolve_invocation_actor(
            &mut conn,
            &core.settings,
            &claims(SessionKind::Web, Uuid::new_v4())
        )
        .await
        .expect("resolve")
        .is_none(),
        "an unknown user resolves to nobody"
    );
    sqlx::query("UPDATE auth.users SET account_expires = now() - interval '1 day' WHERE id = $1")
        .bind(admin.id)
        .execute(&mut *conn)
        .await
        .expect("expire");
    assert!(
        resolve_invocation_actor(
            &mut conn,
            &core.settings,
            &claims(SessionKind::Web, admin.id)
        )
        .await
        .expect("resolve")
        .is_none(),
        "an expired account resolves to nobody"
    );
}

/// The extractor behind every route: a handler sees the same actor `authenticate` resolves.
#[tokio::test]
async fn the_current_actor_extractor_resolves_through_a_router() {
    use axum::Json;
    use axum::routing::get;
    use k2b_core::access::CurrentActor;
    let db = TestDb::new().await;
    let core = core_for(&db);
    let ada = create_user(&core, "ada", false).await;
    let router = axum::Router::new()
        .route(
            "/whoami",
            get(|CurrentActor(actor): CurrentActor| async move {
                Json(serde_json::json!({
                    "authenticated": actor.is_authenticated(),
                    "uid": actor.person().map(|p| p.uid.clone()),
                }))
            }),
        )
        .with_state(core.clone());
    let base = k2b_tests::serve(router).await;
    let token = session(&core, SessionRequest::web(ada.id)).await;
    let client = reqwest::Client::new();
    let me: serde_json::Value = client
        .get(format!("{base}/whoami"))
        .header("cookie", format!("session_token={token}"))
        .send()
        .await
        .expect("get")
        .json()
        .await
        .expect("json");
    assert_eq!(me, serde_json::json!({"authenticated": true, "uid": "ada"}));
    let anonymous: serde_json::Value = client
        .get(format!("{base}/whoami"))
        .send()
        .await
        .expect("get")
        .json()
        .await
        .expect("json");
    assert_eq!(
        anonymous,
        serde_json::json!({"authenticated": false, "uid": null})
    );
}

/// Key status lists every key by purpose, newest first, without secrets.
#[tokio::test]
async fn key_status_lists_every_key() {
    let db = TestDb::new().await;
    let core = core_for(&db);
    core.identity.initialize().await.expect("initialize");
    let status = k2b_core::identity::ring::status(&core.pool)
        .await
        .expect("status");
    assert_eq!(
        status
            .iter()
            .map(|s| s.purpose.as_str())
            .collect::<Vec<_>>(),
        vec!["invocation", "oauth", "session"]
    );
    assert!(
        status
            .iter()
            .all(|s| s.state == "active" && s.alg == "RS256" && s.revoked_at.is_none())
    );
    let json = serde_json::to_string(&status).expect("json");
    assert!(json.contains("encryptionKeyId") && json.contains("verifyUntil"));
    assert!(!json.contains("encrypted") && !json.contains("\"d\""));
}
